"""Waiting with a deadline and backoff, cancellable (Ctrl-C sets the event)."""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from envctl.errors import UsageError

T = TypeVar("T")


MAX_WAIT_SECONDS = 7 * 86400.0  # no envctl wait is longer (a catalog health timeout is at most a day)


def check_timeout(timeout: object, what: str = "timeout") -> float:
    """``timeout`` as seconds: a finite number between 0 and :data:`MAX_WAIT_SECONDS` (not a boolean)."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
            or not 0 <= timeout <= MAX_WAIT_SECONDS:
        raise UsageError(f"{what} {str(timeout)[:40]!r} is not a number of seconds between 0 and {MAX_WAIT_SECONDS:.0f}",
                         "give a finite timeout in seconds (a catalog health.timeout is at most 86400)")
    return float(timeout)


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
    """Call ``check`` until it returns (True, value) or ``timeout`` passes; returns the last result.
    Every wait is bounded: a timeout that is not a finite number of seconds up to
    :data:`MAX_WAIT_SECONDS` (inf, nan, a boolean, a week and more) is refused before ``check`` runs."""
    check_timeout(timeout)
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
