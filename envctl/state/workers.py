"""Detached background workers: spawn one, find the running ones, stop them.

A worker is ``python -m envctl <command…> --instance NAME --auth-dir DIR <args…>`` in its own session,
so it outlives the caller (a reset returns while its spare boots). Workers are found again in /proc by
their command marker (an argv element, e.g. ``_ready``) and instance, never from a pid file that
could go stale. Used by the ready-copy worker (:mod:`envctl.state.ready`: spares and warm copies).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from envctl.locks import state_dir


def spawn(command: list[str], instance: str, auth_dir: Path, args: list[str], *, log_name: str,
          catalog_path: str | None = None, nice: int = 0) -> subprocess.Popen[bytes]:
    """Run ``envctl <command…> --instance I --auth-dir D <args…>`` detached; its output goes to
    ``<state dir>/<log_name>-<instance>.log``. ``nice``: run it at that lower CPU priority (``nice -n``,
    which execs it: the pid and the argv that :func:`pids` reads are envctl's)."""
    log = open(state_dir() / f"{log_name}-{instance}.log", "ab")
    argv = [sys.executable, "-m", "envctl", *command, "--instance", instance, "--auth-dir", str(auth_dir), *args]
    if nice and shutil.which("nice"):
        argv = [str(shutil.which("nice")), "-n", str(int(nice)), *argv]
    env = dict(os.environ)
    if catalog_path:
        env["ENVCTL_CATALOG"] = str(catalog_path)
    return subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True, env=env)


def pids(marker: bytes, instance: str, sites: list[str] | None = None) -> list[int]:
    """The running workers whose argv holds ``marker``, of ``instance`` (of any of ``sites``), found in /proc."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in argv and b"--instance" in argv:
            i = argv.index(b"--instance")
            if i + 1 < len(argv) and argv[i + 1] == instance.encode() and (
                    sites is None or any(s.encode() in argv for s in sites)):
                out.append(int(d.name))
    return out


def stop(marker: bytes, instance: str, sites: list[str] | None = None, timeout: float = 20.0) -> list[int]:
    """SIGTERM the workers (each removes what it was booting as it unwinds), SIGKILL those still running
    after ``timeout``; returns the pids signalled."""
    found = pids(marker, instance, sites)
    for pid in found:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and set(found) & set(pids(marker, instance)):
        time.sleep(0.1)
    for pid in set(found) & set(pids(marker, instance)):
        _signal(pid, signal.SIGKILL)
    return found


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
