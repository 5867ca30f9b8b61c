"""Backends: where an instance's copies run, behind one seam (:class:`envctl.backends.base.Backend`, four typed parts).

``local``: containers on one Docker engine (the default). ``swarm``: services on a Docker Swarm, reached
through a manager (``DOCKER_HOST`` or the docker context pointing at one). Which one a command uses is
``$ENVCTL_BACKEND``; an instance remembers its own (its ``envctl.backend`` label).
"""
from __future__ import annotations

import os
from typing import Callable

from envctl.backends.base import Backend
from envctl.errors import UsageError


def _local() -> Backend:
    from envctl.backends.local import local_backend

    return local_backend()


def _swarm() -> Backend:
    from envctl.backends.swarm import Swarm, SwarmPlacement, SwarmProxy
    from envctl.backends.swarm_copies import SwarmCopies, SwarmImages
    from envctl.backends.swarm_data import SwarmData

    swarm = Swarm()
    data = SwarmData(swarm)
    return Backend("swarm", SwarmCopies(swarm), SwarmImages(swarm, data), SwarmProxy(swarm), SwarmPlacement(swarm, data))


KINDS: dict[str, Callable[[], Backend]] = {"local": _local, "swarm": _swarm}
_MADE: dict[str, Backend] = {}


def default_kind() -> str:
    """The backend named by ``$ENVCTL_BACKEND`` (default ``local``)."""
    kind = os.environ.get("ENVCTL_BACKEND", "").strip() or "local"
    if kind not in KINDS:
        raise UsageError(f"unknown backend '{kind}' (ENVCTL_BACKEND)", f"choose one of {', '.join(KINDS)}")
    return kind


def get(kind: str | None = None) -> Backend:
    """The backend of ``kind`` (default: :func:`default_kind`), made once per process."""
    kind = kind or default_kind()
    if kind not in KINDS:
        raise UsageError(f"unknown backend '{kind}'", f"choose one of {', '.join(KINDS)}")
    if kind not in _MADE:
        _MADE[kind] = KINDS[kind]()
    return _MADE[kind]


__all__ = ["Backend", "get", "default_kind", "KINDS"]
