"""Typed results of a smoke run (what the runner produces and the reports render)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from envctl.smoke.agent import Step


@dataclass
class TaskResult:
    """The outcome of one task: status pass / fail / skip / gap (the flavor's data cannot answer it), why, and
    what happened."""

    task_id: str
    sites: list[str]
    intent: str
    status: str
    reason: str
    score: float | None = None
    elapsed_s: float = 0.0
    answer: str = ""
    final_url: str = ""
    checks: list[dict[str, Any]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list, repr=False)
    negative_control: bool = False
    verified: bool | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["steps"] = [{k: v for k, v in asdict(s).items() if k != "screenshot"} for s in self.steps]
        return d


@dataclass
class SiteSummary:
    site: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    gaps: int = 0  # tasks the flavor's data cannot answer (said, not run)
    elapsed_s: float = 0.0


@dataclass
class SmokeResult:
    """A whole run. ``ok``: no non-skipped task failed and the negative control said no."""

    task_set: str
    tasks: list[TaskResult]
    started_at: str
    wall_s: float
    report_dir: str | None = None

    @property
    def ok(self) -> bool:
        controls = [t for t in self.tasks if t.negative_control]
        return (not any(t.status == "fail" for t in self.tasks)
                and bool(controls) and all(t.status == "pass" for t in controls))

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(t.status == s for t in self.tasks) for s in ("pass", "fail", "skip", "gap")}

    def per_site(self) -> list[SiteSummary]:
        """One row per site; a multi-site task is counted under ``a+b``."""
        rows: dict[str, SiteSummary] = {}
        for t in self.tasks:
            key = "+".join(t.sites) or "-"
            row = rows.setdefault(key, SiteSummary(site=key))
            row.passed += t.status == "pass"
            row.failed += t.status == "fail"
            row.skipped += t.status == "skip"
            row.gaps += t.status == "gap"
            row.elapsed_s = round(row.elapsed_s + t.elapsed_s, 3)
        return [rows[k] for k in sorted(rows)]

    def to_json(self) -> dict[str, Any]:
        return {"task_set": self.task_set, "ok": self.ok, "started_at": self.started_at, "wall_s": self.wall_s,
                "counts": self.counts, "sites": [asdict(s) for s in self.per_site()],
                "report_dir": self.report_dir, "tasks": [t.to_json() for t in self.tasks]}
