"""Cross-process locks (fcntl) so two envctl processes never interleave on one instance or site."""
from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from envctl.errors import EnvctlError


def lock_dir() -> Path:
    base = Path(os.environ.get("ENVCTL_STATE_DIR") or (Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp") / f"envctl-{os.getuid()}"))
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    return base


class Busy(EnvctlError):
    pass


@contextmanager
def locked(name: str, *, wait: bool = True, timeout: float = 600) -> Iterator[None]:
    """Hold lock ``name``; wait for it (up to ``timeout``) or raise Busy at once when ``wait`` is False."""
    path = lock_dir() / f"{name}.lock"
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not wait:
                    raise Busy(f"{name.replace('.', ' ')} is busy (another envctl command holds it)",
                               "wait for it to finish, or retry without --no-wait") from None
                if time.monotonic() > deadline:
                    raise Busy(f"timed out after {timeout:.0f}s waiting for {name}") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing releases the lock, also when the process is killed
