"""Run a container's processes (database first, then the app) and stop them cleanly.

Usage: ``python3 -m miniweb.supervise -- CMD1 ARGS ;; CMD2 ARGS ...``, or ``supervise(...)``
from a site's start script. On SIGTERM/SIGINT every child gets SIGTERM in reverse start order
and is waited for, so databases shut down properly before ``docker stop`` or ``docker commit``.
If any child exits, the others are stopped and the container exits with its code.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Callable, Sequence


def supervise(steps: Sequence[tuple[str, Sequence[str], Callable[[], None] | None]]) -> int:
    """Start each ``(name, argv, ready)`` in order; ``ready()`` blocks until that step is usable."""
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
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for name, argv, ready in steps:
        if stopping:
            break
        print(f"supervise: starting {name}: {' '.join(argv)}", flush=True)
        children.append((name, subprocess.Popen(list(argv))))
        if ready is not None:
            ready()
    while not stopping:
        for name, proc in children:
            code = proc.poll()
            if code is not None:
                print(f"supervise: {name} exited with {code}", flush=True)
                stop()
                return code or 1
        time.sleep(0.5)
    return 0


if __name__ == "__main__":  # pragma: no cover - thin CLI
    args = sys.argv[1:]
    if args and args[0] == "--":
        args = args[1:]
    groups, cur = [], []
    for a in args:
        if a == ";;":
            groups.append(cur)
            cur = []
        else:
            cur.append(a)
    if cur:
        groups.append(cur)
    sys.exit(supervise([(g[0], g, None) for g in groups]))
