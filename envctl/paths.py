"""Where envctl keeps its files: one place for every directory it writes."""
from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

from envctl.errors import DiskSpaceError, UsageError
from envctl.validate import env_value, validate_relative_path, validate_site_name


def data_root() -> Path:
    """envctl's per-user data directory (pins, downloads, data files): $ENVCTL_DATA_DIR or XDG."""
    env = env_value("ENVCTL_DATA_DIR")
    if env:
        return usable_dir(env, "ENVCTL_DATA_DIR", writable=False)
    xdg = env_value("XDG_DATA_HOME")
    root = (Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share") / "envctl"
    return usable_dir(root, "envctl's data directory", writable=False,
                      hint="set ENVCTL_DATA_DIR (or XDG_DATA_HOME) to a directory you can write")


# Flavors whose images bring their own small data (seeded into the data mounts): each has its own data tree.
OWN_DATA_FLAVORS = frozenset({"mini"})


def data_dir(flavor: str = "full") -> Path:
    """Where a flavor's data files live (``{data_dir}`` in catalog templates). The catalog names one place
    for every flavor; the flavors that run upstream's data files (full, slim: the same ZIM and map archives)
    share ``<data root>/data``, what ``images get`` downloads and unpacks, and a flavor of
    ``OWN_DATA_FLAVORS`` has ``<data root>/data-<flavor>``, so the small data a mini image seeds is never
    taken for (or resumed into) a download of the same name."""
    validate_site_name(flavor, "flavor")
    return data_root() / (f"data-{flavor}" if flavor in OWN_DATA_FLAVORS else "data")


def confined(root: Path, rel: str, what: str = "path") -> Path:
    """``root / rel``, refused unless it stays inside ``root`` once resolved (symbolic links
    followed): the catalog's load-time checks, again where the path is used, since ``images get``
    may run as root. ``rel`` must be relative, without '..' or NUL."""
    validate_relative_path(rel, what, under=str(root))
    base = Path(os.path.abspath(root))
    path = base / rel
    try:
        real_base, real = base.resolve(), path.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise UsageError(f"{what} {path} cannot be resolved ({exc})", f"fix or remove the links under {base}") from None
    if real != real_base and real_base not in real.parents:
        raise UsageError(f"{what} {path} leads outside {base} (to {real})",
                         f"remove the symbolic link under {base} that points outside it")
    return path


# -- paths envctl writes to or runs (issue #25): one line naming the path, before anything is created --

def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def usable_dir(path: str | os.PathLike[str], what: str, *, hint: str | None = None, writable: bool = True) -> Path:
    """``path`` as a directory envctl may create and write files in. Refused with one line naming
    the path when it, or a directory above it, exists but is not a directory (a regular file, a
    FIFO), or when the first existing one cannot be written. Creates nothing; returns the path."""
    p = Path(os.path.abspath(Path(path).expanduser()))
    fix = hint or f"point {what} at a directory you can write"
    for q in (p, *p.parents):
        try:
            st = os.stat(q)
        except (FileNotFoundError, NotADirectoryError):
            continue  # not there yet (or under a file: found further up)
        except OSError as exc:
            raise UsageError(f"{what} {p}: cannot inspect {q} ({exc.strerror})", fix) from None
        if not stat.S_ISDIR(st.st_mode):
            where = "is" if q == p else f"cannot be a directory: {q} is"
            raise UsageError(f"{what} {p} {where} {_kind(st.st_mode)}", f"{fix}, or move {q} away")
        if writable and not os.access(q, os.W_OK | os.X_OK):
            where = "is not writable" if q == p else f"cannot be created: {q} is not writable"
            raise UsageError(f"{what} {p} {where}", fix)
        return p
    return p


def output_file(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` as a file envctl will write: refused in one line when it exists as anything but a
    regular file (a directory, a FIFO) or its directory is not usable (:func:`usable_dir`)."""
    p = Path(os.path.abspath(Path(path).expanduser()))
    try:
        st = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as exc:
        raise UsageError(f"{what} {p} cannot be inspected ({exc.strerror})", f"give {what} a file path you can write") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{what} {p} is {_kind(st.st_mode)}, not a file", f"give {what} a file path you can write")
    usable_dir(p.parent, f"{what} {p}: directory", hint=f"give {what} a file path you can write")
    return p


def executable_file(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` as a program to run: it exists, is a regular file (after symbolic links) and is
    executable; else one line naming it."""
    p = Path(path).expanduser()
    fix = f"set {what} to a Chromium executable (e.g. /usr/bin/chromium), or unset it"
    try:
        st = os.stat(p)
    except OSError as exc:
        raise UsageError(f"{what} {p} {'does not exist' if isinstance(exc, FileNotFoundError) else f'cannot be read ({exc.strerror})'}",
                         fix) from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{what} {p} is {_kind(st.st_mode)}, not an executable file", fix)
    if not st.st_mode & 0o111 or not os.access(p, os.X_OK):
        raise UsageError(f"{what} {p} is not executable", f"chmod +x it, or {fix}")
    return p


# -- a full filesystem (issue #32): one line naming where, how much is free and how much was needed --

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the filesystem (or the user's quota on it) is full."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL


def human_bytes(n: int | float) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def mount_point(path: str | os.PathLike[str]) -> Path:
    """The mount point of the filesystem ``path`` is (or would be) on."""
    p = _existing(Path(os.path.abspath(path)))
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def free_space(path: str | os.PathLike[str]) -> int:
    """Bytes free for this user on the filesystem of ``path`` (or of its first existing parent)."""
    try:
        return shutil.disk_usage(_existing(Path(os.path.abspath(path)))).free
    except OSError:
        return 0


def disk_full(path: str | os.PathLike[str], need: int | None = None, *, what: str = "writing",
              hint: str | None = None, kept: str = "nothing half-written was kept") -> DiskSpaceError:
    """The one-line error for a write to ``path`` that found its filesystem full (the caller has removed
    what it had half-written): the filesystem's mount point, what is free there and, when known, what
    the write needed."""
    p = Path(os.path.abspath(path))
    needs = f": it needs {human_bytes(need)}" if need else ""
    return DiskSpaceError(
        f"not enough space on the filesystem at {mount_point(p)} ({human_bytes(free_space(p))} free) {what} {p}{needs}; "
        + kept, hint or "free space there (or move that directory to a bigger disk) and run the command again")
