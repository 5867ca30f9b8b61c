"""Faults answered in seconds (issue 38): ``envctl status`` and ``envctl doctor`` on a stalled or absent engine answer
within a few seconds with what the routing table (through the front proxy) and the probes say, naming the engine
that did not answer; and a frozen (paused) copy is not "running" to ``envctl up``: it is replaced.

The stalled engine is a listener that accepts connections and never answers (``DOCKER_HOST`` pointing at it), the
absent one a port nobody listens on: the instance keeps running on the real engine, where nothing else is disturbed
(the drills that stop the real dockerd run alone: tests/test_drills.py). Instance fa1 (reddit + homepage), port
offset 48100.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
import requests

from conftest import busy_ports_after, free_port

pytestmark = [pytest.mark.docker, pytest.mark.mini, pytest.mark.timeout(900)]
INSTANCE, OFFSET = "fa1", 48100
SITES = ["reddit", "homepage"]


def envctl(*args: str, state: Path, timeout: float = 600, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ENVCTL_CATALOG", "ENVCTL_INSTANCE", "DOCKER_HOST")}
    return subprocess.run([sys.executable, "-m", "envctl", *args], capture_output=True, text=True, timeout=timeout,
                          env={**env, "ENVCTL_STATE_DIR": str(state), **extra})


@pytest.fixture(scope="module")
def state(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    state = tmp_path_factory.mktemp("fast-state")
    envctl("down", "-i", INSTANCE, "--volumes", state=state)
    busy_ports_after([4399 + OFFSET, 9999 + OFFSET], 60)
    up = envctl("up", *SITES, "--flavor", "mini", "-i", INSTANCE, "--port-offset", str(OFFSET), "--spares", "0",
                "--no-login", "--json", state=state)
    assert up.returncode == 0, up.stderr[-3000:]
    try:
        yield state
    finally:
        envctl("down", "-i", INSTANCE, "--volumes", state=state)


class Blackhole:
    """A TCP listener that accepts every connection and never says a word: a stalled engine, as its clients see it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()


@pytest.mark.parametrize("engine", ["stalled", "absent"])
def test_status_and_doctor_answer_in_seconds_on_a_stalled_or_absent_engine(state: Path, engine: str) -> None:
    assert envctl("status", "-i", INSTANCE, "--json", state=state).returncode == 0  # the hint to the proxy is fresh
    hole = Blackhole() if engine == "stalled" else None
    host = f"tcp://127.0.0.1:{hole.port if hole else free_port()}"
    try:
        t = time.monotonic()
        p = envctl("status", "-i", INSTANCE, "--json", state=state, DOCKER_HOST=host, ENVCTL_ENGINE_TIMEOUT="120")
        took = time.monotonic() - t
        assert p.returncode == 0, p.stderr[-2000:]
        st = json.loads(p.stdout)
        print(f"\n[fast] status on a {engine} engine answered in {took:.1f}s: {st['engine']}", flush=True)
        assert took < 30 and host in st["engine"] and "did not answer" in st["engine"], (took, st["engine"])
        assert {s["site"] for s in st["sites"]} == set(SITES) and all(s["healthy"] for s in st["sites"]), st
        text = envctl("status", "-i", INSTANCE, state=state, DOCKER_HOST=host)
        assert text.returncode == 0 and "engine:" in text.stdout and "containers not listed" in text.stdout, text.stdout
        t = time.monotonic()
        d = envctl("doctor", "--flavor", "mini", "--json", state=state, DOCKER_HOST=host, ENVCTL_ENGINE_TIMEOUT="120")
        took = time.monotonic() - t
        checks = {c["check"]: c for c in json.loads(d.stdout)["checks"]}
        assert took < 30 and checks["docker engine"]["status"] == "fail", (took, checks.get("docker engine"))
        assert host in checks["docker engine"]["detail"], checks["docker engine"]
    finally:
        if hole:
            hole.close()


def test_a_paused_copy_is_not_running_to_up_it_is_replaced(state: Path) -> None:
    names = subprocess.run(["docker", "ps", "--format", "{{.Names}}", "--filter", f"label=envctl.instance={INSTANCE}",
                            "--filter", "label=envctl.site=homepage"], capture_output=True, text=True).stdout.split()
    assert len(names) == 1, names
    subprocess.run(["docker", "pause", names[0]], check=True, capture_output=True)
    try:
        p = envctl("up", "-i", INSTANCE, "--no-login", "--spares", "0", "--json", state=state)
        assert p.returncode == 0, p.stderr[-3000:]
        res = {s["site"]: s for s in json.loads(p.stdout)["sites"]}
        assert res["homepage"]["action"] == "repaired" and res["reddit"]["action"] == "kept", res
        assert "frozen (paused)" in p.stderr or "frozen (paused)" in p.stdout
        assert requests.get(f"http://127.0.0.1:{4399 + OFFSET}/", timeout=10).status_code == 200
        left = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}", "--filter", f"name=^{names[0]}$"],
                              capture_output=True, text=True).stdout.split()
        assert not left, left  # the frozen copy is gone, not left beside the new one
    finally:
        subprocess.run(["docker", "unpause", names[0]], capture_output=True)
