"""envctl: provision, reset and verify the self-hosted WebArena / VisualWebArena sites."""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["Lab", "lease", "__version__"]


def __getattr__(name: str):  # lazy, so `envctl --help` does not import Docker wrappers
    if name == "Lab":
        from envctl.lab import Lab

        return Lab
    if name == "lease":
        from envctl.leases import lease

        return lease
    raise AttributeError(name)
