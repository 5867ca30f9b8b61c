"""Where envctl keeps its files: one place for every directory it writes."""
from __future__ import annotations

import os
from pathlib import Path


def data_root() -> Path:
    """envctl's per-user data directory (pins, downloads, data files): $ENVCTL_DATA_DIR or XDG."""
    env = os.environ.get("ENVCTL_DATA_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share") / "envctl"


def data_dir() -> Path:
    """Where unpacked data files live (``{data_dir}`` in catalog templates)."""
    return data_root() / "data"
