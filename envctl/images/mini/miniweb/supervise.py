"""Run a container's processes (database first, then the app) and stop them cleanly.

Usage: ``python3 -m miniweb.supervise -- CMD1 ARGS ;; CMD2 ARGS ...``, or ``supervise(...)``
from a site's start script. On SIGTERM/SIGINT every child gets SIGTERM in reverse start order
and is waited for, so databases shut down properly before ``docker stop`` or ``docker commit``.
If any child exits, the others are stopped and the container exits with its code.

Once every step is started and ready, the supervisor replaces itself (``execv``, same pid, so the
children stay its children) by this file run alone with only the standard library: the site's start
script imported the web framework and a database driver to start and wait, ~20 MB that the rest of
the container's life does not need (issue 23: mini instances are counted by what they use). SIGTERM and
SIGINT are blocked across the ``execv`` and unblocked once the watcher's handlers are set, so a stop
that arrives in between is delivered, not lost (PID 1 ignores a signal it has no handler for).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Callable, Sequence

STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
STOP_WAIT = 60.0  # seconds a child gets after SIGTERM before SIGKILL


class Children:
    """The started children (pid, name), in start order, and how each ended: one stop rule for the
    supervisor while it starts them and for the watcher it becomes."""

    def __init__(self, children: Sequence[tuple[int, str]] = ()) -> None:
        self.children = list(children)
        self.exited: dict[int, int] = {}
        self.stopping = False

    def reap(self) -> None:
        """Collect every child that ended (orphans adopted as PID 1 included)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.exited[pid] = os.waitstatus_to_exitcode(status)

    def ended(self) -> tuple[str, int] | None:
        """(name, exit code) of the first child that ended, if any."""
        self.reap()
        return next(((name, self.exited[pid]) for pid, name in self.children if pid in self.exited), None)

    def stop(self, *_: object) -> None:
        """SIGTERM to each child in reverse start order, waiting for each (SIGKILL after STOP_WAIT)."""
        if self.stopping:
            return
        self.stopping = True
        for pid, name in reversed(self.children):
            self.reap()
            if pid in self.exited:
                continue
            print(f"supervise: stopping {name}", flush=True)
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + STOP_WAIT
            while pid not in self.exited and time.monotonic() < deadline:
                time.sleep(0.05)
                self.reap()
            if pid not in self.exited:
                os.kill(pid, signal.SIGKILL)

    def stop_on_signals(self) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, self.stop)

    def exit_code_after(self, name: str, code: int) -> int:
        print(f"supervise: {name} exited with {code}", flush=True)
        self.stop()
        return code or 1


def supervise(steps: Sequence[tuple[str, Sequence[str], Callable[[], None] | None]]) -> int:
    """Start each ``(name, argv, ready)`` in order; ``ready()`` blocks until that step is usable. Then
    watch them from a process that holds nothing else (see the module's doc)."""
    kids = Children()
    kids.stop_on_signals()
    # Kept referenced: a dropped Popen that is still running is polled (and reaped) by the subprocess
    # module on the next Popen, and its exit would be lost to Children.reap.
    procs: list[subprocess.Popen] = []
    for name, argv, ready in steps:
        if kids.stopping:
            break
        print(f"supervise: starting {name}: {' '.join(argv)}", flush=True)
        procs.append(subprocess.Popen(list(argv)))
        kids.children.append((procs[-1].pid, name))
        if ready is not None:
            ready()
        ended = kids.ended()
        if ended is not None:
            return kids.exit_code_after(*ended)
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    if kids.stopping:
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-S", "-E", os.path.abspath(__file__), "--watch",
                              *(f"{pid}:{name}" for pid, name in kids.children)])
    return 1  # not reached


def watch(children: list[tuple[int, str]]) -> int:
    """Watch already-started children (pid, name) with the same stop order and exit rule as ``supervise``."""
    kids = Children(children)
    kids.stop_on_signals()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # a stop that came during execv arrives here
    while not kids.stopping:
        ended = kids.ended()
        if ended is not None:
            return kids.exit_code_after(*ended)
        time.sleep(0.5)
    kids.reap()
    return 0


def main(args: list[str]) -> int:
    if args[:1] == ["--watch"]:
        return watch([(int(pid), name) for pid, _, name in (a.partition(":") for a in args[1:])])
    if args[:1] == ["--"]:
        args = args[1:]
    groups: list[list[str]] = []
    cur: list[str] = []
    for a in args:
        if a == ";;":
            groups.append(cur)
            cur = []
        else:
            cur.append(a)
    if cur:
        groups.append(cur)
    return supervise([(g[0], g, None) for g in groups])


if __name__ == "__main__":  # pragma: no cover - thin CLI
    sys.exit(main(sys.argv[1:]))
