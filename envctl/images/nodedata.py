"""A site's data on the node that runs its copy (docs/architecture.md, "Data travels with placement").

This module runs **on a swarm node**, inside the node-data helper image (``envctl/images/nodedata/``: Debian's
python3 and python3-requests, and these few modules of envctl: no Docker library, no CLI), started by the
Swarm backend through the node's own engine with the node's data directory mounted at its own path::

    docker run --rm -i -v /root/.local/share/envctl/data:/root/.local/share/envctl/data \\
        -v inst-osm-data:/vol/0 envctl/node-data:<tag> python3 -m envctl.images.nodedata fetch < plan.json

``fetch`` gets each item of the plan onto the node: already there (the pinned size and the SHA-256 marker
``<file>.sha256`` written when it was verified), else downloaded from its sources in order with envctl's own
fetcher (``Range`` resume of ``<file>.partial``, parallel segments, SHA-256 while streaming, checked against the
pin the controller sends: the same pins as ``envctl images get``), then unpacked where its ``extract`` says
(a named volume of the instance is a directory mounted into this container). ``status`` says what a node holds
of a plan; ``receive`` takes one file from stdin at an offset (the controller streams its own verified copy
when the node cannot reach any mirror). Events go to stdout as JSON lines; the last line of ``fetch`` is
``{"event": "end", ...}``.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from envctl.errors import EnvctlError, FetchError
from envctl.images import extract as ex
from envctl.images import fetch

MARKER = ".sha256"  # beside a verified file: its SHA-256 (hex), what 'present' trusts without reading 100 GB again


@dataclass
class Extract:
    """The catalog's ``extract`` of an artifact, as the controller sends it (what :mod:`.extract` reads)."""

    format: str
    strip: int | str = 0
    destination: dict[str, str] | str = ""
    size: int | None = None

    def targets(self) -> dict[str, str]:
        return dict(self.destination) if isinstance(self.destination, dict) else {"": self.destination}


@dataclass
class Item:
    """One data file of a site's flavor, as the node must hold it (envctl.backends.base.DataItem, sent as JSON)."""

    name: str
    dest: str  # absolute path on the node (the same as on the controller: the service's bind-mount source)
    data_root: str  # the data directory ``{data_dir}`` targets are under
    size: int | None = None  # exact (a pin), or None until the first download pins it
    sha256: str | None = None
    sources: list[dict[str, str]] = field(default_factory=list)  # {kind, mirror, url}
    extract: dict[str, Any] | None = None
    instance: str = "default"
    volume_dirs: dict[str, str] = field(default_factory=dict)  # named volume -> where it is mounted here

    @property
    def path(self) -> Path:
        return Path(self.dest)


def say(event: str, item: str = "", **kw: Any) -> None:
    print(json.dumps({"event": event, "item": item, **{k: v for k, v in kw.items() if v is not None}}), flush=True)


def marker(path: Path) -> Path:
    return path.with_name(path.name + MARKER)


def held(item: Item) -> str | None:
    """The verified SHA-256 of the item's file when the node holds it whole, else None."""
    p = item.path
    try:
        sha = marker(p).read_text().strip()
        size = p.stat().st_size
    except OSError:
        return None
    if item.size is not None and size != item.size:
        return None
    if item.sha256 is not None and sha != item.sha256:
        return None
    return sha or None


def _record(item: Item, sha: str) -> None:
    tmp = marker(item.path).with_name(marker(item.path).name + ".tmp")
    tmp.write_text(sha + "\n")
    os.replace(tmp, marker(item.path))


def _unpack(item: Item, sha: str) -> list[str]:
    if not item.extract:
        return []
    spec = Extract(**item.extract)
    res = ex.extract(item.path, spec, sha256=sha, data_root=Path(item.data_root), instance=item.instance,
                     volume_dirs={k: Path(v) for k, v in item.volume_dirs.items()},
                     progress=lambda done, total: say("unpack", item.name, done=done, total=total))
    return list(res.targets)


def fetch_item(item: Item) -> dict[str, Any]:
    """Make the node hold ``item`` (verified, unpacked); what was done, or raises FetchError naming every mirror."""
    began = time.monotonic()
    sha = held(item)
    if sha is not None:
        return {"action": "present", "sha256": sha, "size": item.path.stat().st_size,
                "unpacked": _unpack(item, sha), "seconds": round(time.monotonic() - began, 3)}
    item.path.parent.mkdir(parents=True, exist_ok=True)
    failures = []
    for i, src in enumerate(item.sources):
        last = i == len(item.sources) - 1
        t = fetch.Timeouts(min_rate=0.0 if last else 64 * 1024.0)
        session = fetch.session_for()
        url = src["url"]
        try:
            if src.get("kind") == "gdrive":
                url = fetch.gdrive_direct_url(session, url, t, src.get("mirror", ""))
            elif src.get("kind") == "s3":
                url = fetch.s3_https_url(url)
            last_at = [0.0]

            def progress(done: int, total: int | None) -> None:
                if time.monotonic() - last_at[0] >= 0.5 or (total is not None and done >= total):
                    last_at[0] = time.monotonic()
                    say("progress", item.name, mirror=src.get("mirror"), done=done, total=total)

            got = fetch.download(url, item.path, mirror=src.get("mirror", ""), expected_size=item.size,
                                 expected_sha256=item.sha256, expect=fetch.expect_for(item.name), progress=progress,
                                 timeouts=t, session=session)
        except FetchError as exc:
            failures.append(f"{src.get('kind')}:{src.get('mirror')}: {exc.message}")
            say("mirror-failed", item.name, mirror=src.get("mirror"), message=exc.message)
            continue
        _record(item, got.sha256)
        return {"action": "downloaded", "mirror": src.get("mirror"), "sha256": got.sha256, "size": got.size,
                "unpacked": _unpack(item, got.sha256), "seconds": round(time.monotonic() - began, 3)}
    raise FetchError(f"no source worked for {item.name} on this node: " + (" | ".join(failures) or "it has none"))


def receive(item: Item, offset: int, stream: BinaryIO) -> dict[str, Any]:
    """Take the rest of ``item``'s file from ``stream`` (the controller's copy from ``offset`` on), verify the whole
    file against the pin, and put it in place (then unpack it)."""
    began = time.monotonic()
    part = fetch.partial_path(item.path)
    part.parent.mkdir(parents=True, exist_ok=True)
    with open(part, "ab") as fh:
        fh.truncate(offset)
        fh.seek(offset)
        while True:
            chunk = stream.read(1 << 20)
            if not chunk:
                break
            fh.write(chunk)
    h = hashlib.sha256()
    with open(part, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    size = part.stat().st_size
    if (item.size is not None and size != item.size) or (item.sha256 is not None and h.hexdigest() != item.sha256):
        part.unlink()
        raise FetchError(f"{item.name} streamed from the controller does not match its pin "
                         f"({size} bytes, sha256 {h.hexdigest()[:16]}); the partial copy was removed")
    os.replace(part, item.path)
    _record(item, h.hexdigest())
    return {"action": "received", "sha256": h.hexdigest(), "size": size, "unpacked": _unpack(item, h.hexdigest()),
            "seconds": round(time.monotonic() - began, 3)}


def status(item: Item) -> dict[str, Any]:
    part = fetch.partial_path(item.path)
    return {"held": held(item), "partial": part.stat().st_size if part.is_file() else 0}


def main(argv: list[str]) -> int:
    """``fetch`` (plan on stdin), ``status`` (plan on stdin), ``receive OFFSET ITEM_JSON`` (the file on stdin)."""
    mode = argv[0] if argv else ""
    try:
        if mode == "receive":
            item = Item(**json.loads(argv[2]))
            say("done", item.name, **receive(item, int(argv[1]), sys.stdin.buffer))
            return 0
        plan = [Item(**raw) for raw in json.load(sys.stdin)]
        failed = 0
        for item in plan:
            try:
                say("done" if mode == "fetch" else "status", item.name,
                    **(fetch_item(item) if mode == "fetch" else status(item)))
            except EnvctlError as exc:
                failed += 1
                say("failed", item.name, message=str(exc).splitlines()[0])
        say("end", failed=failed)
        return 1 if failed else 0
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        say("failed", message=f"bad plan for nodedata {mode!r}: {exc}")
        return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
