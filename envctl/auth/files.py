"""Login-state file names, the upstream pairing rule, and safe file writes.

Upstream (``browser_env/auto_login.py``) writes one ``<sites>_state.json`` per combination:
every login site alone and every pair of one benchmark's login sites, the names sorted
alphabetically and joined with ``.``. Pairs whose cookies collide on one host are skipped; the
catalog says which with ``login.no_pair_with``. The site list is read back from a name with
``name.rsplit("_", 1)[0].split(".")``.
"""
from __future__ import annotations

import itertools
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable

from envctl.catalog import Catalog
from envctl.paths import disk_full, is_disk_full

SUFFIX = "_state.json"


def state_name(combo: Iterable[str]) -> str:
    """``("shopping_admin", "shopping")`` -> ``"shopping.shopping_admin_state.json"``."""
    return ".".join(sorted(combo)) + SUFFIX


def combo_of(name: str) -> tuple[str, ...]:
    """The sites of a state file name, as upstream parses it."""
    return tuple(Path(name).name.rsplit("_", 1)[0].split("."))


def login_sites_of(catalog: Catalog) -> list[str]:
    return [n for n, s in catalog.sites.items() if s.login]


def may_pair(catalog: Catalog, a: str, b: str) -> bool:
    """Two login sites get a shared file when one benchmark has both and neither refuses the other."""
    sa, sb = catalog.site(a), catalog.site(b)
    if not (sa.login and sb.login) or not set(sa.benchmarks) & set(sb.benchmarks):
        return False
    return b not in sa.login.no_pair_with and a not in sb.login.no_pair_with


def login_combos(catalog: Catalog, sites: Iterable[str], partners: Iterable[str] = ()) -> list[tuple[str, ...]]:
    """Every login-state combination (one file each) that touches ``sites``: each site alone, and each
    allowed pair of a site with another of ``sites`` or ``partners`` (the other sites that are up).
    Sorted, deduplicated; singles first, then pairs, in file-name order."""
    wanted = [s for s in dict.fromkeys(sites) if catalog.site(s).login]
    pool = [s for s in dict.fromkeys([*wanted, *partners]) if catalog.site(s).login]
    singles = sorted({(s,) for s in wanted})
    pairs = sorted({tuple(sorted(p)) for p in itertools.combinations(pool, 2)
                    if (p[0] in wanted or p[1] in wanted) and may_pair(catalog, *p)})
    return singles + pairs




def login_order(catalog: Catalog, combo: Iterable[str]) -> list[str]:
    """Sites of a combination in catalog order (shopping before shopping_admin, like upstream)."""
    order = list(catalog.sites)
    return sorted(combo, key=order.index)


def write_private(path: Path, data: Any) -> None:
    """Write JSON atomically with mode 0600: a reader sees the old file or the whole new one."""
    commit(write_temp(path, data), path)


def write_temp(path: Path, data: Any) -> Path:
    """Write JSON to a private temporary file next to ``path`` (for checking before :func:`commit`).
    Nothing is left when it fails; a full filesystem is a DiskSpaceError naming it and the bytes needed."""
    text = json.dumps(data, indent=2).encode()
    try:
        tmp = temp_path(path)
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full(path, len(text), hint=_FULL_HINT) from None
        raise
    try:
        with open(tmp, "wb") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if is_disk_full(exc):
            raise disk_full(path, len(text), hint=_FULL_HINT) from None
        raise
    return tmp


_FULL_HINT = "free space there (or give --auth-dir a folder on a bigger disk) and log in again"


def commit(tmp: Path, path: Path) -> None:
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def temp_path(path: Path) -> Path:
    """A fresh, private, not-yet-used name next to ``path`` (same file system, so rename is atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(name, 0o600)
    return Path(name)


def age(path: Path) -> float | None:
    """Seconds since the file was written, or None if it does not exist."""
    try:
        return max(0.0, time.time() - path.stat().st_mtime)
    except FileNotFoundError:
        return None


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``12h``, ``2d`` -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    t = text.strip().lower()
    try:
        if t and t[-1] in units:
            value = float(t[:-1]) * units[t[-1]]
        else:
            value = float(t)
    except ValueError:
        raise ValueError(f"invalid duration '{text}' (use e.g. 90s, 30m, 12h, 2d)") from None
    if value < 0:
        raise ValueError(f"invalid duration '{text}' (must not be negative)")
    return value
