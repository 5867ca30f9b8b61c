"""The engine restarted under a running ``envctl serve`` (issue 38): every container of the pool stops and the engine
comes back while the server keeps running. The pool recovers by itself (no new ``serve``): the held lease is told why
it ended (409 with why: its holder's instance was stopped), the instance is brought back, reset and handed out only
verified, and its spares come back too (what a reboot leaves: the engine's containers stopped, none started again).

Marked ``alone``: it restarts dockerd, so nothing else may run (``make test`` runs it after the lanes, with
``ENVCTL_FT_ENGINE_RESTART=1`` as CI sets it). Pool dre (1 instance: reddit + homepage, a reddit spare), base offset
40500.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import requests

from conftest import free_port

pytestmark = [pytest.mark.docker, pytest.mark.mini, pytest.mark.slow, pytest.mark.alone, pytest.mark.timeout(1500)]
ROOT = Path(__file__).resolve().parents[1]
ENGINE_RESTART = os.environ.get("ENVCTL_FT_ENGINE_RESTART") == "1"
POOL, MEMBER, BASE_OFFSET = "dre", "dre-1", 40500
SITES = ["reddit", "homepage"]


class Server:
    def __init__(self, state: Path, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.env = {**{k: v for k, v in os.environ.items() if k not in ("ENVCTL_INSTANCE", "ENVCTL_CATALOG")},
                    "ENVCTL_STATE_DIR": str(state)}
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "envctl", "serve", "--instance", POOL, "--instances", "1", "--flavor", "mini",
                 "--sites", ",".join(SITES), "--spares", "1", "--heal-after", "5", "--base-offset", str(BASE_OFFSET),
                 "--port", str(self.port)], stdout=out, stderr=out, env=self.env, start_new_session=True)

    def wait(self, pred: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                got = pred()
                if got:
                    return got
            except (requests.RequestException, ValueError, KeyError):
                pass
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            time.sleep(1)
        pytest.fail(f"timed out waiting for {what}: {self.log.read_text()[-3000:]}")

    def free(self) -> bool:
        rows = requests.get(f"{self.url}/leases", timeout=30).json()["instances"]
        return len(rows) == 1 and rows[0]["state"] == "free"

    def acquire(self, holder: str) -> dict[str, Any]:
        r = requests.post(f"{self.url}/leases", json={"ttl": 600, "wait": 300, "holder": holder}, timeout=400)
        assert r.status_code == 201, r.text
        return r.json()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def envctl(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if k not in ("ENVCTL_INSTANCE", "ENVCTL_CATALOG")},
           "ENVCTL_STATE_DIR": str(state)}
    return subprocess.run([sys.executable, "-m", "envctl", *args], capture_output=True, text=True, timeout=600, env=env)


def _dockerd() -> int:
    out = subprocess.run(["pgrep", "-x", "dockerd"], capture_output=True, text=True).stdout.split()
    assert out, "no dockerd runs"
    return int(out[0])


def _foreign() -> list[str]:
    """Containers on the engine that are not this test's (the restart must not take someone else's down)."""
    names = subprocess.run(["docker", "ps", "--format", "{{.Names}}"], capture_output=True, text=True).stdout.split()
    return [n for n in names if not n.startswith(f"envctl-{POOL}-")]


@pytest.fixture
def server(docker_engine: None, tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    state = tmp_path / "state"
    envctl("down", "-i", MEMBER, "--volumes", state=state)
    srv = Server(state, tmp_path / "serve.log")
    try:
        yield srv, state
    finally:
        srv.stop()
        envctl("down", "-i", MEMBER, "--volumes", state=state)


def _spares(state: Path) -> int:
    import json

    p = envctl("status", "-i", MEMBER, "--json", state=state)
    rows = json.loads(p.stdout)["sites"] if p.stdout.strip().startswith("{") else []
    return sum(int(r.get("spares_ready") or 0) for r in rows if r["site"] == "reddit")


@pytest.mark.skipif(not ENGINE_RESTART, reason="restarts dockerd: run alone, with ENVCTL_FT_ENGINE_RESTART=1")
def test_the_engine_restarted_under_a_running_serve_the_pool_recovers_and_its_spares_come_back(
        server: tuple[Server, Path]) -> None:
    srv, state = server
    if _foreign():
        pytest.skip(f"other containers run on this engine: {_foreign()[:5]}")
    srv.wait(srv.free, 420, "a free pool")
    srv.wait(lambda: _spares(state) >= 1, 300, "the reddit spare")
    held = srv.acquire("engine restart drill")
    title = f"before the engine restart {uuid.uuid4().hex[:6]}"
    s = requests.Session()
    for c in held["auth"]["reddit_state.json"]["cookies"]:
        s.cookies.set(c["name"], c["value"], domain=c["domain"], path=c["path"])
    assert s.post(f"{held['env']['WA_REDDIT']}/submit", data={"submission[title]": title, "submission[forum]": "books",
                  "submission[url]": "", "submission[body]": "x"}, timeout=60).ok
    # the engine stops its containers and starts again; the server keeps running
    pid = _dockerd()
    t = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.2)
    subprocess.run(["bash", str(ROOT / "scripts" / "docker-engine.sh")], check=True, capture_output=True)
    assert srv.proc.poll() is None, "serve died with the engine"
    r = srv.wait(lambda: (x := requests.post(f"{srv.url}/leases/{held['id']}/heartbeat", json={}, timeout=30))
                 .status_code == 409 and [x], 420, "the held lease to be told")[0]
    told = time.monotonic() - t
    srv.wait(srv.free, 600, "the pool to come back without a new serve")
    back = time.monotonic() - t
    nxt = srv.acquire("after the engine restart")
    assert title not in requests.get(f"{nxt['env']['WA_REDDIT']}/f/books/new", timeout=60).text
    verify = envctl("verify", "reddit", "-i", MEMBER, state=state)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    srv.wait(lambda: _spares(state) >= 1, 420, "the reddit spare back")
    spares_back = time.monotonic() - t
    print(f"\n[engine restart under serve] holder told after {told:.1f}s ({r.json()['error'][:80]}); pool free again "
          f"after {back:.1f}s; the reddit spare back after {spares_back:.1f}s", flush=True)
    requests.delete(f"{srv.url}/leases/{nxt['id']}", timeout=60)
