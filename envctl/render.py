"""Output helpers shared by CLI commands: JSON, rich tables, live per-site progress."""
from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, Iterable

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

console = Console(stderr=False, highlight=False)
err_console = Console(stderr=True, highlight=False)


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def table(title: str | None, columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> None:
    t = Table(title=title, show_lines=False, header_style="bold")
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*[("" if v is None else str(v)) for v in r])
    console.print(t)


class SiteProgress:
    """Live table of per-site phases on stderr (or JSON-lines events with ``json_events``)."""

    def __init__(self, enabled: bool = True, json_events: bool = False) -> None:
        self.enabled, self.json_events = enabled and err_console.is_terminal, json_events
        self.rows: dict[str, tuple[str, str, float]] = {}
        self.lock = threading.Lock()
        self.live: Live | None = None
        self.plain = enabled and not err_console.is_terminal and not json_events

    def __enter__(self) -> "SiteProgress":
        if self.enabled and not self.json_events:
            self.live = Live(self._table(), console=err_console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.live.update(self._table())
            self.live.__exit__(*exc)  # type: ignore[arg-type]

    def __call__(self, site: str, phase: str, detail: str) -> None:
        with self.lock:
            self.rows[site] = (phase, detail, time.monotonic())
            if self.json_events:
                sys.stderr.write(json.dumps({"event": "progress", "site": site, "phase": phase, "detail": detail}) + "\n")
            elif self.plain:
                err_console.print(escape(f"[{site}] {phase}: {detail}"))
            if self.live:
                self.live.update(self._table())

    def _table(self) -> Table:
        t = Table(show_header=True, header_style="bold", box=None)
        t.add_column("site")
        t.add_column("phase")
        t.add_column("detail", overflow="ellipsis", no_wrap=True, max_width=90)
        for site, (phase, detail, _) in sorted(self.rows.items()):
            style = {"healthy": "green", "failed": "red"}.get(phase, "yellow")
            t.add_row(site, f"[{style}]{phase}[/]", detail)
        return t


class TransferProgress:
    """Renders image/data transfer events: a rich bar per artifact (bytes, rate, ETA), or JSON lines."""

    def __init__(self, json_events: bool = False) -> None:
        from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                   TransferSpeedColumn)

        self.json_events = json_events
        self.tasks: dict[str, Any] = {}
        self.progress = None if json_events else Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
            TimeRemainingColumn(), console=err_console, transient=False)

    def __enter__(self) -> "TransferProgress":
        if self.progress:
            self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress:
            self.progress.__exit__(*exc)  # type: ignore[arg-type]

    def __call__(self, event: Any) -> None:
        if self.json_events:
            sys.stderr.write(event.to_json() + "\n")
            return
        assert self.progress is not None
        key = f"{event.site or ''}:{event.artifact}"
        label = f"{event.site or ''} {event.artifact}".strip()
        if key not in self.tasks:
            self.tasks[key] = self.progress.add_task(label, total=event.total)
        task = self.tasks[key]
        if event.type in ("progress", "start") and event.done is not None:
            self.progress.update(task, completed=event.done, total=event.total)
        elif event.type in ("mirror-failed", "error", "skip", "done", "plan") and event.message:
            self.progress.console.print(escape(f"{label}: {event.type}: {event.message}"))
