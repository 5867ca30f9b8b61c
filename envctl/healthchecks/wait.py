"""Waiting with a deadline and backoff, cancellable (Ctrl-C sets the event)."""
from __future__ import annotations

import math
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, TypeVar

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


def attempts(timeout: float, *, first: float = 0.1, cap: float = 2.0,
             cancel: threading.Event | None = None) -> Iterator[Deadline]:
    """The attempts of a wait: yields before each (at least once), pausing between them (growing from ``first``
    to ``cap`` seconds), until ``timeout`` passes; the caller breaks out when its check passes::

        for _ in attempts(30, cancel=stop):
            ok, value = check()
            if ok:
                break

    Every wait is bounded: a timeout that is not a finite number of seconds up to :data:`MAX_WAIT_SECONDS`
    (inf, nan, a boolean, a week and more) is refused before the first attempt. Raises :class:`Cancelled`
    when ``cancel`` is set."""
    check_timeout(timeout)
    deadline = Deadline(timeout)
    delay = first
    while True:
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        yield deadline
        if deadline.expired:
            return
        pause = min(delay, max(0.0, deadline.remaining))
        if cancel is not None:
            if cancel.wait(pause):
                raise Cancelled()
        else:
            time.sleep(pause)
        delay = min(cap, delay * 1.6)


def wait_for(check: Callable[[], tuple[bool, T]], *, timeout: float, first: float = 0.1, cap: float = 2.0,
             cancel: threading.Event | None = None) -> tuple[bool, T]:
    """Call ``check`` until it returns (True, value) or ``timeout`` passes; returns the last result (see
    :func:`attempts`, the same wait without a callback)."""
    ok, value = False, None
    for _ in attempts(timeout, first=first, cap=cap, cancel=cancel):
        ok, value = check()
        if ok:
            break
    return ok, value  # type: ignore[return-value]


def gather(futures: Iterable["Future[T]"], cancel: threading.Event) -> list[T]:
    """The futures' results, in order. Ctrl-C or SIGTERM (a KeyboardInterrupt in the waiting main thread) sets
    ``cancel`` first, so the workers stop at their next wait (a copy being booted is removed as they unwind)
    instead of finishing their work while the interrupted caller waits for them."""
    try:
        return [f.result() for f in futures]
    except KeyboardInterrupt:
        cancel.set()
        raise
