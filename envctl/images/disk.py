"""Disk pre-check: will the selected artifacts fit, on the Docker data root and the download dir?

Needs on the same filesystem are added up (the data root and the download dir are often one
disk). ``ENVCTL_DISK_BUDGET_BYTES`` caps the free space every filesystem is assumed to have
(for tests, or to keep headroom for other work).
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from envctl.errors import DiskSpaceError
from envctl.paths import human_bytes

BUDGET_ENV = "ENVCTL_DISK_BUDGET_BYTES"


@dataclass(frozen=True)
class Need:
    path: Path  # where the bytes will land (need not exist yet)
    bytes: int
    what: str  # e.g. "load shopping_final_0712.tar"


@dataclass(frozen=True)
class SpaceCheck:
    path: Path  # first path seen on this filesystem
    free: int
    need: int
    what: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.need <= self.free


def docker_root() -> Path:
    """The engine's data root (``docker info`` DockerRootDir); /var/lib/docker when it cannot be asked."""
    from envctl.backends.docker import ENGINE as dk

    root = dk.root_dir()
    return Path(root) if root else Path("/var/lib/docker")


def _existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def budget() -> int | None:
    from envctl.validate import env_value

    return env_value(BUDGET_ENV)  # a whole number of bytes, or one line naming the variable


def free_bytes(path: Path) -> int:
    free = shutil.disk_usage(_existing(path)).free
    cap = budget()
    return free if cap is None else min(free, cap)


def plan_space(needs: list[Need]) -> list[SpaceCheck]:
    """Group needs by filesystem and compare with its free space."""
    groups: dict[int, list[Need]] = {}
    for n in needs:
        if n.bytes > 0:
            groups.setdefault(os.stat(_existing(n.path)).st_dev, []).append(n)
    return [SpaceCheck(ns[0].path, free_bytes(ns[0].path), sum(n.bytes for n in ns), tuple(n.what for n in ns))
            for ns in groups.values()]


def check_space(needs: list[Need]) -> list[SpaceCheck]:
    """Return the per-filesystem checks, or raise DiskSpaceError with the numbers when one does not fit."""
    checks = plan_space(needs)
    short = [c for c in checks if not c.ok]
    if short:
        lines = "; ".join(f"{c.path} needs {human(c.need)} ({', '.join(c.what)}) but has {human(c.free)} free" for c in short)
        capped = f" (capped by {BUDGET_ENV})" if budget() is not None else ""
        raise DiskSpaceError(f"not enough disk space{capped}: {lines}",
                             "free space, move the Docker data root / ENVCTL_DATA_DIR to a bigger disk, or fetch fewer sites")
    return checks


def human(n: int) -> str:
    return human_bytes(n)
