"""A one-member lease pool for tests: ``envctl serve --instance POOL --instances 1 --flavor mini`` as a subprocess.

Shared by the modules that drive a real pool over HTTP (tests/test_pool_known.py, tests/test_read_leases.py,
tests/test_drills.py); each names its pool, member, sites and port offset, and adds the calls it needs::

    with pool_state(tmp_path_factory, "known-state", SITES, [MEMBER, POOL]) as env:
        srv = PoolServer(POOL, SITES, BASE_OFFSET, env, Path(env["ENVCTL_STATE_DIR"]) / "serve.log")
        srv.start("--heal-after", "120"); srv.wait(srv.free, 420, "the pool to come up")
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pytest
import requests

from childproc import signals_default
from conftest import free_port
from envctl.backends.docker import ENGINE as dk
from envctl.catalog import load_catalog
from envctl.images.build import build_for_sites


class PoolServer:
    """The pool's server, restartable with other options (``start(*extra)``); ``wait`` polls a predicate and fails
    with the server's log."""

    def __init__(self, pool: str, sites: Sequence[str], base_offset: int, env: dict[str, str], log: Path, *,
                 port: int | None = None) -> None:
        """``port``: the one every start listens on (a server started again where its clients know it); without
        it, each start takes a free port."""
        self.pool, self.sites, self.base_offset = pool, list(sites), base_offset
        self.env, self.log, self.port = env, log, port
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{port}" if port else ""

    def start(self, *extra: str) -> None:
        self.stop()
        port = self.port or free_port()
        self.url = f"http://127.0.0.1:{port}"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "envctl", "serve", "--instance", self.pool, "--instances", "1", "--flavor", "mini",
                 "--sites", ",".join(self.sites), "--spares", "0", "--base-offset", str(self.base_offset),
                 "--port", str(port), *extra], stdout=out, stderr=out, env=self.env, start_new_session=True,
                preexec_fn=signals_default)
        self.wait(self._answers, 60, "the server to answer")

    def _answers(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.logs()
        try:
            requests.get(f"{self.url}/leases", timeout=5)
            return True
        except requests.RequestException:
            return False

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def logs(self) -> str:
        try:
            return self.log.read_text()[-5000:]
        except OSError:
            return ""

    def wait(self, pred: Callable[[], Any], timeout: float, what: str, every: float = 0.3) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = pred()
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out waiting for {what}\n{self.logs()}"
            time.sleep(every)

    def listing(self) -> dict[str, Any]:
        return requests.get(f"{self.url}/leases", timeout=60).json()

    def row(self) -> dict[str, Any]:
        return self.listing()["instances"][0]

    def free(self) -> bool:
        rows = self.listing()["instances"]
        return len(rows) == 1 and rows[0]["state"] == "free"


def cli(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``envctl ARGS`` in ``env`` (wide output: a table row is not folded)."""
    return subprocess.run([sys.executable, "-m", "envctl", *args], capture_output=True, text=True, timeout=timeout,
                          env={**env, "COLUMNS": "400"}, preexec_fn=signals_default)


def down(env: dict[str, str], names: Sequence[str]) -> None:
    """The pool's instances gone, and any container of theirs a killed run left."""
    for name in names:
        cli(env, "down", "-i", name, "--volumes")
        for c in dk.containers(instance=name):
            dk.remove([c.name])


@contextmanager
def pool_state(tmp_path_factory: pytest.TempPathFactory, prefix: str, sites: Sequence[str],
               names: Sequence[str], **extra_env: str) -> Iterator[dict[str, str]]:
    """A state directory of the module's own (also this process's ``ENVCTL_STATE_DIR`` meanwhile), the sites' mini
    images built, and ``names`` (the pool and its member) down before and after. Yields the servers' environment."""
    state = tmp_path_factory.mktemp(prefix)
    env = {k: v for k, v in os.environ.items() if k not in ("ENVCTL_INSTANCE", "ENVCTL_CATALOG")}
    env.update({"ENVCTL_STATE_DIR": str(state), **extra_env})
    old = os.environ.get("ENVCTL_STATE_DIR")
    os.environ["ENVCTL_STATE_DIR"] = str(state)
    try:
        build_for_sites(load_catalog(), list(sites), "mini")
        down(env, names)
        yield env
    finally:
        down(env, names)
        if old is None:
            os.environ.pop("ENVCTL_STATE_DIR", None)
        else:
            os.environ["ENVCTL_STATE_DIR"] = old
