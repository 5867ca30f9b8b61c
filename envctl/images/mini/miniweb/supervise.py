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


def supervise(steps: Sequence[tuple[str, Sequence[str], Callable[[], None] | None]]) -> int:
    """Start each ``(name, argv, ready)`` in order; ``ready()`` blocks until that step is usable. Then
    watch them from a process that holds nothing else (see the module's doc)."""
    children: list[tuple[str, subprocess.Popen]] = []
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        for name, proc in reversed(children):
            if proc.poll() is None:
                print(f"supervise: stopping {name}", flush=True)
                proc.terminate()
                try:
                    proc.wait(timeout=STOP_WAIT)
                except subprocess.TimeoutExpired:
                    proc.kill()

    for sig in STOP_SIGNALS:
        signal.signal(sig, stop)
    for name, argv, ready in steps:
        if stopping:
            break
        print(f"supervise: starting {name}: {' '.join(argv)}", flush=True)
        children.append((name, subprocess.Popen(list(argv))))
        if ready is not None:
            ready()
        code = children[-1][1].poll()
        if code is not None:
            print(f"supervise: {name} exited with {code}", flush=True)
            stop()
            return code or 1
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    if stopping:
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-S", "-E", os.path.abspath(__file__), "--watch",
                              *(f"{proc.pid}:{name}" for name, proc in children)])
    return 1  # not reached


def watch(children: list[tuple[int, str]]) -> int:
    """Watch already-started children (pid, name): the same stop order and exit rule as ``supervise``.
    Reaps every child, orphans adopted as PID 1 included."""
    exited: dict[int, int] = {}
    stopping = False

    def reap() -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            exited[pid] = os.waitstatus_to_exitcode(status)

    def stop(*_: object) -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        for pid, name in reversed(children):
            reap()
            if pid in exited:
                continue
            print(f"supervise: stopping {name}", flush=True)
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + STOP_WAIT
            while pid not in exited and time.monotonic() < deadline:
                time.sleep(0.05)
                reap()
            if pid not in exited:
                os.kill(pid, signal.SIGKILL)

    for sig in STOP_SIGNALS:
        signal.signal(sig, stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # a stop that came during execv arrives here
    while not stopping:
        reap()
        for pid, name in children:
            if pid in exited:
                print(f"supervise: {name} exited with {exited[pid]}", flush=True)
                stop()
                return exited[pid] or 1
        time.sleep(0.5)
    reap()
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
