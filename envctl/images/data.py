"""What a site's copies mount from the data directory, as :class:`envctl.backends.base.DataItem` (docs/architecture.md,
"Data travels with placement"): its flavor's data artifacts, where they go, and the pins ``envctl images get``
verifies them against (``images.lock``, or the catalog's own sha256). The backend makes them be where a copy boots:
checked on this machine, fetched on a swarm node."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from envctl.backends.base import DataItem
from envctl.images.extract import render
from envctl.images.lock import LockFile, Pin
from envctl.paths import confined


def items(catalog: Any, sites: Iterable[str], flavor: str, data_root: str, instance: str,
          lock: LockFile | None = None) -> tuple[DataItem, ...]:
    """The data items of ``sites`` in ``flavor`` (none for a flavor whose images bring their own data: mini)."""
    lock = lock or LockFile()
    out = []
    for site in sites:
        f = catalog.site(site).flavors.get(flavor)
        for art in (f.artifacts if f else ()):
            if art.kind != "data" or not art.dest:
                continue
            pin = lock.get(art.name)
            vols: tuple[str, ...] = ()
            extract = None
            if art.extract is not None:
                extract = art.extract.model_dump()
                vols = tuple(sorted({where for kind, where in (render(t, Path(data_root), instance)
                                                                for t in art.extract.targets().values())
                                     if kind == "volume"}))
            out.append(DataItem(art.name, site, str(confined(Path(data_root), art.dest, f"{art.name}: dest")), data_root,
                                pin.size if pin and pin.size else None, art.size,
                                art.sha256 or (pin.sha256 if pin else None),
                                tuple((s.kind, s.mirror, s.url) for s in art.sources), extract, vols))
    return tuple(out)


def pin_unpinned(placed: Iterable[DataItem], fetched: dict[str, tuple[str, int]], lock: LockFile | None = None) -> None:
    """Pin what a node fetched of items not pinned yet (its first download anywhere), as 'images get' pins."""
    lock = lock or LockFile()
    for item in placed:
        if item.sha256 is None and item.name in fetched:
            sha, size = fetched[item.name]
            lock.record(Pin(item.name, size=size or None, sha256=sha, mirror="a swarm node"))


__all__ = ["items", "pin_unpinned"]
