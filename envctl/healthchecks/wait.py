"""Waiting with a deadline and backoff, cancellable (Ctrl-C sets the event)."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, TypeVar

T = TypeVar("T")


class Cancelled(Exception):
    """The wait was cancelled (Ctrl-C); the next command finishes the job."""


@dataclass
class Deadline:
    seconds: float
    start: float = field(default_factory=time.monotonic)

    @property
    def remaining(self) -> float:
        return self.seconds - (time.monotonic() - self.start)

    @property
    def expired(self) -> bool:
        return self.remaining <= 0


def wait_for(check: Callable[[], tuple[bool, T]], *, timeout: float, first: float = 0.1, cap: float = 2.0,
             cancel: threading.Event | None = None) -> tuple[bool, T]:
    """Call ``check`` until it returns (True, value) or ``timeout`` passes; returns the last result."""
    deadline = Deadline(timeout)
    delay = first
    while True:
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        ok, value = check()
        if ok or deadline.expired:
            return ok, value
        pause = min(delay, max(0.0, deadline.remaining))
        if cancel is not None:
            if cancel.wait(pause):
                raise Cancelled()
        else:
            time.sleep(pause)
        delay = min(cap, delay * 1.6)
