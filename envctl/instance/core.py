"""What every part of an :class:`envctl.instance.Instance` works on: its catalog, settings and backend (the seam's
four parts), and the cancel event of the command that made it. The parts (routing, copies, checks, front) are given
this and each other; they never import :mod:`envctl.instance` itself."""
from __future__ import annotations

import threading
from typing import Callable

from envctl.backends.base import Backend, InstanceSettings, Progress, network_name, noop
from envctl.catalog import Catalog




class Core:
    """An instance's catalog, settings (read once from its labels), backend and cancel event."""

    def __init__(self, catalog: Catalog, settings: InstanceSettings, backend: Backend,
                 cancel: threading.Event | None = None) -> None:
        self.catalog = catalog
        self.settings = settings
        self.backend = backend
        self.cancel = cancel or threading.Event()

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def flavor(self) -> str:
        return self.settings.flavor

    @property
    def network(self) -> str:
        return network_name(self.name)


__all__ = ["Core", "Progress", "noop"]
