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


class TargetDied(Exception):
    """What was awaited is gone (a container stopped); waiting longer cannot help."""


def wait_ready(check: Callable[[], tuple[bool, T]], *, timeout: float, died: Callable[[], str] | None = None,
               cancel: threading.Event | None = None) -> tuple[bool, T]:
    """Wait until ``check`` passes, failing fast when ``died()`` names a reason the target is gone.

    The one wait-until-healthy-or-died strategy: copies booting, sites coming up, spares.
    """

    def guarded() -> tuple[bool, T]:
        why = died() if died is not None else ""
        if why:
            raise TargetDied(why)
        return check()

    return wait_for(guarded, timeout=timeout, cancel=cancel)
