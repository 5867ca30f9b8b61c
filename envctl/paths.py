"""Where envctl keeps its files: one place for every directory it writes."""
from __future__ import annotations

import os
from pathlib import Path

from envctl.errors import UsageError
from envctl.validate import env_value, validate_relative_path


def data_root() -> Path:
    """envctl's per-user data directory (pins, downloads, data files): $ENVCTL_DATA_DIR or XDG."""
    env = env_value("ENVCTL_DATA_DIR")
    if env:
        return Path(env).expanduser()
    xdg = env_value("XDG_DATA_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share") / "envctl"


def data_dir() -> Path:
    """Where unpacked data files live (``{data_dir}`` in catalog templates)."""
    return data_root() / "data"


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
