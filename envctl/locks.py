"""Cross-process locks (fcntl) so two envctl processes never interleave on one instance or site."""
from __future__ import annotations

import fcntl
import os
import stat
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from envctl.errors import EnvctlError
from envctl.paths import (disk_full, free_space, human_bytes, is_disk_full,  # noqa: F401 - also the CLI's (it imports
                          mount_point, output_file, usable_dir)  # no paths): path checks, a full filesystem


class UnsafeStateDir(EnvctlError):
    """The state directory is not safely ours (another user's, or a symlink in a shared /tmp)."""


def state_dir() -> Path:
    """envctl's per-user state directory: locks, reset-server records and tokens, the debug log.

    ``$ENVCTL_STATE_DIR``, else ``$XDG_RUNTIME_DIR/envctl-<uid>``, else ``/tmp/envctl-<uid>``. A
    directory there that another user owns (e.g. made in /tmp before us) is refused: whoever owns it
    could read our tokens or swap our files."""
    from envctl.validate import env_value

    explicit = env_value("ENVCTL_STATE_DIR")
    base = Path(explicit or (Path(env_value("XDG_RUNTIME_DIR") or "/tmp") / f"envctl-{os.getuid()}"))
    what = "ENVCTL_STATE_DIR" if explicit else "envctl's state directory"
    fix = "set ENVCTL_STATE_DIR to a directory you own and can write (e.g. ~/.local/state/envctl)"
    base = usable_dir(base, what, hint=fix)  # a regular file there (or above it), or read-only: one line
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise UnsafeStateDir(f"{what} {base} cannot be created ({exc.strerror})", fix) from None
    st = os.stat(base) if explicit else os.lstat(base)
    if not explicit and stat.S_ISLNK(st.st_mode):
        raise UnsafeStateDir(f"envctl's state directory {base} is a symbolic link",
                             f"remove it (rm {base}) or set ENVCTL_STATE_DIR to a directory you own")
    if st.st_uid != os.getuid():
        raise UnsafeStateDir(f"envctl's state directory {base} belongs to uid {st.st_uid}, not to you (uid {os.getuid()})",
                             "remove it, or set ENVCTL_STATE_DIR to a directory you own (e.g. ~/.local/state/envctl)")
    if not explicit and stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(base, 0o700)  # ours, but readable by others: tighten it
    return base


def check_environment() -> None:
    """Before a command does anything: every ``ENVCTL_*`` variable that is set is valid (like the
    option it mirrors; one line naming the variable), and an explicit ``ENVCTL_STATE_DIR`` /
    ``ENVCTL_DATA_DIR`` is a directory that can be written (or created), not a file or under one.
    Reads only; creates nothing."""
    from envctl.validate import ENV_VARS, env_value

    for var in ENV_VARS:
        if var.name.startswith("ENVCTL_"):
            env_value(var.name)
    for name in ("ENVCTL_STATE_DIR", "ENVCTL_DATA_DIR"):
        value = env_value(name)
        if value:
            usable_dir(value, name)


def open_private(path: Path, *, append: bool = False) -> int:
    """Open ``path`` for writing as a file only this user can read (0600), never through a symlink.

    Returns the fd (wrap it with ``os.fdopen``). An existing file keeps its content when
    ``append``, else it is truncated; its mode is tightened to 0600 either way."""
    flags = os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)
    except OSError:
        os.close(fd)
        raise
    return fd


def write_private(path: Path, text: str) -> Path:
    """Replace ``path`` atomically with ``text``, mode 0600 (a temporary file beside it, then rename).
    A failed write leaves the old file and no temporary one; a full filesystem is a
    :class:`~envctl.errors.DiskSpaceError` naming it, what is free and what was needed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = text.encode()
    try:
        with os.fdopen(open_private(tmp), "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if is_disk_full(exc):
            raise disk_full(path, len(data), hint=_full_hint(path)) from None
        raise
    return path


def _full_hint(path: Path) -> str | None:
    """How to get room for a file of envctl's state directory (None: the generic advice)."""
    try:
        inside = state_dir() in Path(os.path.abspath(path)).parents
    except EnvctlError:
        inside = False
    return ("free space there, or set ENVCTL_STATE_DIR to a directory on a bigger disk, and run the command again"
            if inside else None)


def write_debug_log(text: str) -> Path | None:
    """Append a traceback to ``<state dir>/debug.log`` (0600); None when it cannot be written."""
    try:
        path = state_dir() / "debug.log"
        with os.fdopen(open_private(path, append=True), "a") as fh:
            fh.write(text if text.endswith("\n") else text + "\n")
        return path
    except (OSError, EnvctlError):
        return None


class Busy(EnvctlError):
    pass


@contextmanager
def locked(name: str, *, wait: bool = True, timeout: float = 600) -> Iterator[None]:
    """Hold lock ``name``; wait for it (up to ``timeout``) or raise Busy at once when ``wait`` is False."""
    path = state_dir() / f"{name}.lock"
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        if is_disk_full(exc):  # no inode left for the lock file
            raise disk_full(path, what="creating the lock file", hint=_full_hint(path)) from None
        raise
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


@contextmanager
def one_of(name: str, slots: int, *, timeout: float = 600,
           on_wait: Callable[[], None] | None = None) -> Iterator[int]:
    """Hold one of ``slots`` locks ``name.0`` .. ``name.<slots-1>`` (the first free one; waits up to
    ``timeout``, calling ``on_wait`` once if it has to): at most ``slots`` holders at once on this
    machine. Yields the slot's number."""
    deadline = time.monotonic() + timeout
    first = True
    while True:
        if not first and on_wait is not None:
            on_wait()
            on_wait = None
        first = False
        for i in range(max(1, slots)):
            held = locked(f"{name}.{i}", wait=False)
            try:
                held.__enter__()
            except Busy:
                continue
            try:
                yield i
            finally:
                held.__exit__(None, None, None)
            return
        if time.monotonic() > deadline:
            raise Busy(f"timed out after {timeout:.0f}s waiting for one of {slots} {name} slots")
        time.sleep(0.1)
