"""Reliability drills on a lease pool (issue #32), each fault provoked for real on this machine.

The module's pool: ``envctl serve --instance dr --instances 1 --flavor mini --sites reddit,homepage --spares 0
--heal-after 2`` as a subprocess (member ``dr-1``, base offset 40000). Lane b:

- out of memory: the leased reddit copy driven over its memory limit (a process inside it allocating past the
  limit, with the site's own process made the kernel's victim): the kill is counted in ``/metrics``, shown by
  ``envctl status``, the site is healed, and the holder finds notices on its lease;
- a frozen site (every process of the routed reddit copy stopped with ``docker pause``): the pool replaces it, a
  request that was waiting on it gets an answer (no request waits for ever);
- an instance removed under a held lease (``envctl down`` by someone else): the holder is told at once (409 with
  why) and the pool brings the instance back.

Marked ``alone`` (they stop or restart the engine: ``make test`` runs them after the lanes, with
ENVCTL_FT_ENGINE_RESTART=1): a stalled engine (dockerd stopped with SIGSTOP: heartbeats of a held read lease go on,
lease requests answer within their wait plus a few seconds and leave no record) and a host reboot (every container
of the pool stopped and the server killed, then the engine restarted and ``envctl serve`` started again).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from conftest import ROOT, free_port
from envctl.lab import Lab
from poolserver import PoolServer, pool_state

pytestmark = [pytest.mark.docker, pytest.mark.mini, pytest.mark.slow]
POOL, MEMBER, BASE_OFFSET = "dr", "dr-1", 40000
SITES = ["reddit", "homepage"]
ENGINE_RESTART = os.environ.get("ENVCTL_FT_ENGINE_RESTART") == "1"


def _no_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a child of a backgrounded job inherits an ignored SIGINT


class Pool(PoolServer):
    """The drills' pool: sites healed after 2 s of failing probes, on one port across restarts."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        super().__init__(POOL, SITES, BASE_OFFSET, env, log, port=free_port())
        self.taken: list[str] = []

    def start(self, *extra: str) -> None:
        super().start("--heal-after", "2", "--reverify-every", "0", *extra)

    def acquire(self, **body: Any) -> dict[str, Any]:
        r = requests.post(f"{self.url}/leases", json={"ttl": 300, "wait": 300, **body}, timeout=400)
        assert r.status_code == 201, r.text
        self.taken.append(r.json()["id"])
        return r.json()

    def release_taken(self) -> None:
        """End the leases a test took and left (a failed assertion): the next test must not wait out their ttl."""
        while self.taken:
            try:
                requests.delete(f"{self.url}/leases/{self.taken.pop()}", timeout=60)
            except requests.RequestException:
                pass

    def heartbeat(self, lease_id: str) -> requests.Response:
        return requests.post(f"{self.url}/leases/{lease_id}/heartbeat", json={}, timeout=60)

    def metric(self, name: str, **labels: str) -> float:
        text = requests.get(f"{self.url}/metrics", timeout=60).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total


def _envctl(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envctl", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, preexec_fn=_no_sigint)


@pytest.fixture(scope="module")
def pool(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    with pool_state(tmp_path_factory, "drill-state", SITES, [MEMBER, POOL], ENVCTL_ENGINE_TIMEOUT="15") as env:
        p = Pool(env, Path(env["ENVCTL_STATE_DIR"]) / "serve.log")
        try:
            p.start()
            p.wait(p.free, 420, "the pool to come up")
            yield p
        finally:
            p.stop()
            print(p.logs())


@pytest.fixture(autouse=True)
def _leases_ended(pool: Pool) -> Iterator[None]:
    yield
    pool.release_taken()


def _reddit_container() -> str:
    return Lab(instance=MEMBER).container("reddit")


def test_out_of_memory_is_counted_shown_healed_and_told_to_the_holder(pool: Pool) -> None:
    pool.wait(pool.free, 300, "a free pool")
    lease = pool.acquire(sites=["reddit"], holder="oom drill")
    victim = _reddit_container()
    kills, heals = pool.metric("envctl_oom_kills_total", site="reddit"), pool.metric("envctl_heals_total", site="reddit")
    # the site's own process first in the kernel's line, then a process inside the copy allocates past its limit
    subprocess.run(["docker", "exec", victim, "sh", "-c", "echo 1000 > /proc/1/oom_score_adj; "
                    "exec python3 -c 'b = bytes([120]) * (3 << 30); import time; time.sleep(30)'"],
                   capture_output=True, timeout=120)
    pool.wait(lambda: pool.metric("envctl_oom_kills_total", site="reddit") > kills, 120, "the OOM kill to be counted")
    pool.wait(lambda: pool.metric("envctl_heals_total", site="reddit") > heals, 180, "the site to be healed")
    assert requests.get(lease["env"]["WA_REDDIT"], timeout=30).status_code == 200
    row = pool.heartbeat(lease["id"])
    assert row.status_code == 200, row.text  # the lease goes on ...
    notices = " | ".join(n["what"] for n in row.json().get("notices", []))
    assert "killed by its memory limit (out of memory)" in notices, row.json()  # ... and its holder is told
    assert "replaced by a pristine copy" in notices
    # the engine keeps its last 256 events only: a busy engine pushes the OOM event out (here 100 execs, 300 events)
    subprocess.run(["sh", "-c", f"for i in $(seq 100); do docker exec {_reddit_container()} true; done"],
                   check=True, capture_output=True, timeout=300)
    st = _envctl(pool.env, "status", "-i", MEMBER)
    assert re.search(r"reddit: .*killed by its memory limit \(out of memory\)", st.stdout), st.stdout
    assert json.loads(_envctl(pool.env, "status", "-i", MEMBER, "--json").stdout)["sites"][0]["oom_kills"]
    assert requests.delete(f"{pool.url}/leases/{lease['id']}", timeout=60).status_code == 200


def test_a_frozen_site_is_replaced_and_no_request_waits_for_ever(pool: Pool) -> None:
    pool.wait(pool.free, 300, "a free pool")
    base = Lab(instance=MEMBER).env("webarena")["REDDIT"]
    victim = _reddit_container()
    heals = pool.metric("envctl_heals_total", site="reddit")
    subprocess.run(["docker", "pause", victim], check=True, capture_output=True)
    answer: dict[str, Any] = {}

    def waiting_client() -> None:  # a request made while the copy is frozen
        try:
            answer["status"] = requests.get(f"{base}/forums/all", timeout=600).status_code
        except requests.RequestException as exc:
            answer["error"] = type(exc).__name__

    th = threading.Thread(target=waiting_client)
    th.start()
    try:
        pool.wait(lambda: pool.metric("envctl_heals_total", site="reddit") > heals, 240, "the frozen site to be replaced")
        pool.wait(lambda: requests.get(base, timeout=30).status_code == 200, 60, "the site to answer again")
        th.join(300)
        assert not th.is_alive(), "a request made while the site was frozen is still waiting"
        assert "status" in answer, answer  # an HTTP answer (the proxy's 5xx, or the site's), not a hung client
        assert _reddit_container() != victim
    finally:
        subprocess.run(["docker", "unpause", victim], capture_output=True)
        th.join(30)


def test_an_instance_removed_under_a_lease_is_told_at_once_and_comes_back(pool: Pool) -> None:
    pool.wait(pool.free, 300, "a free pool")
    lease = pool.acquire(holder="removed drill")
    gone = _envctl(pool.env, "down", "-i", MEMBER)  # another user's 'envctl down'
    assert gone.returncode == 0, gone.stderr

    def told() -> str:
        r = pool.heartbeat(lease["id"])
        return r.json().get("error", "") if r.status_code == 409 else ""

    why = pool.wait(told, 60, "the holder to be told")
    assert why.startswith("lost:") and ("removed" in why or "proxy gone" in why), why
    pool.wait(pool.free, 420, "the instance to come back")
    again = pool.acquire(holder="after the removal")
    assert all(Lab(instance=MEMBER).verify(s).ok for s in SITES)
    assert requests.delete(f"{pool.url}/leases/{again['id']}", timeout=60).status_code == 200


# -- what stops or restarts the engine: alone, after the lanes ---------------------------------------------------

def _dockerd() -> int:
    pid = subprocess.run(["pgrep", "-x", "dockerd"], capture_output=True, text=True).stdout.split()
    assert len(pid) == 1, pid
    return int(pid[0])


def _foreign() -> list[str]:
    names = subprocess.run(["docker", "ps", "--format", "{{.Names}}"], capture_output=True, text=True).stdout.split()
    return [n for n in names if f"-{POOL}-" not in n and not n.startswith(f"envctl-{POOL}")]


def _post_leases(pool: Pool, **body: Any) -> tuple[requests.Response, float]:
    t = time.monotonic()
    r = requests.post(f"{pool.url}/leases", json={"ttl": 60, **body}, timeout=120)
    return r, time.monotonic() - t


@pytest.mark.alone
@pytest.mark.skipif(not ENGINE_RESTART, reason="stops dockerd: run alone, with ENVCTL_FT_ENGINE_RESTART=1")
def test_a_stalled_engine_is_named_in_one_line_and_the_pool_answers_meanwhile(pool: Pool) -> None:
    """dockerd stopped (SIGSTOP) twice: under a held (read) lease, then with the member free. Every lease request
    answers within its wait plus a few seconds (the checks of a candidate are given up when they need the engine),
    heartbeats go through the proxy, and no request leaves a lease record behind once the engine answers again."""
    if _foreign():
        pytest.skip(f"other containers run on this engine: {_foreign()[:5]}")
    pool.wait(pool.free, 300, "a free pool")
    held = pool.acquire(holder="stalled drill", access="read")
    pid = _dockerd()
    os.kill(pid, signal.SIGSTOP)
    try:
        t = time.monotonic()
        st = _envctl({**pool.env, "ENVCTL_ENGINE_TIMEOUT": "5"}, "status", "-i", MEMBER, timeout=120)
        took = time.monotonic() - t
        # what it knows, in seconds: the sites as the proxy and the probes see them (healthy: exit 0), and the engine named
        engine = [ln for ln in st.stdout.splitlines() if ln.startswith("engine:")]
        assert st.returncode == 0 and took < 30 and len(engine) == 1, (took, st.stdout, st.stderr)
        assert "did not answer" in engine[0] and "stalled" in engine[0], engine
        print(f"\nenvctl status against a stalled engine answered after {took:.1f}s: {engine[0]}")
        assert pool.heartbeat(held["id"]).status_code == 200  # its record is in the proxy's table, reached over HTTP
        # a reader joining the shared member needs a reading of its change signals (docker exec): given up in time
        r, took = _post_leases(pool, access="read", wait=5, holder="joins during the stall")
        print(f"a read lease asked during the stall (wait 5): {r.status_code} after {took:.1f}s")
        assert r.status_code == 503 and took < 5 + 5, (took, r.text)
        # a writer: the one member is shared, so none is free: 503 after its wait
        r, took = _post_leases(pool, wait=2, holder="writes during the stall")
        assert r.status_code == 503 and took < 2 + 5, (took, r.text)
        assert pool.heartbeat(held["id"]).status_code == 200
    finally:
        os.kill(pid, signal.SIGCONT)
    time.sleep(20)  # the given-up reading ends (ENVCTL_ENGINE_TIMEOUT is 15 s for this pool)
    record = Lab(instance=MEMBER).lease_record()
    assert record.get("state") == "shared" and list(record.get("readers") or {}) == [held["id"]], record
    assert pool.heartbeat(held["id"]).status_code == 200
    assert requests.delete(f"{pool.url}/leases/{held['id']}", timeout=60).status_code == 200
    pool.wait(pool.free, 300, "the pool to recover")
    # the member free: a write lease's checks need the engine (the change signals): given up, no record
    os.kill(pid, signal.SIGSTOP)
    try:
        r, took = _post_leases(pool, wait=5, holder="leases during the stall")
        print(f"a write lease asked during the stall (wait 5, the member free): {r.status_code} after {took:.1f}s")
        assert r.status_code == 503 and took < 5 + 5, (took, r.text)
    finally:
        os.kill(pid, signal.SIGCONT)
    pool.wait(pool.free, 300, "the given-up checks to end")
    record = Lab(instance=MEMBER).lease_record()
    assert record.get("state") == "free" and "id" not in record, record
    nxt = pool.acquire(holder="after the stall")
    assert all(Lab(instance=MEMBER).verify(s).ok for s in SITES)
    requests.delete(f"{pool.url}/leases/{nxt['id']}", timeout=60)


@pytest.mark.alone
@pytest.mark.skipif(not ENGINE_RESTART, reason="restarts dockerd: run alone, with ENVCTL_FT_ENGINE_RESTART=1")
def test_a_host_reboot_brings_the_pool_back_and_ends_held_leases_with_why(pool: Pool) -> None:
    if _foreign():
        pytest.skip(f"other containers run on this engine: {_foreign()[:5]}")
    pool.wait(pool.free, 300, "a free pool")
    held = pool.acquire(holder="reboot drill")
    title = f"before the reboot {uuid.uuid4().hex[:6]}"
    s = requests.Session()
    for c in held["auth"]["reddit_state.json"]["cookies"]:
        s.cookies.set(c["name"], c["value"], domain=c["domain"], path=c["path"])
    assert s.post(f"{held['env']['WA_REDDIT']}/submit", data={"submission[title]": title, "submission[forum]": "books",
                  "submission[url]": "", "submission[body]": "x"}, timeout=60).ok
    # a reboot: the server dies with the machine, every container stops, the engine starts again
    pool.stop(signal.SIGKILL)
    pid = _dockerd()
    os.kill(pid, signal.SIGTERM)  # dockerd stops its containers as a shutdown does
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.2)
    subprocess.run(["bash", str(ROOT / "scripts" / "docker-engine.sh")], check=True, capture_output=True)
    running = subprocess.run(["docker", "ps", "-q", "--filter", f"label=envctl.instance={MEMBER}"],
                             capture_output=True, text=True).stdout.split()
    assert running == []  # nothing of it came back by itself
    t = time.monotonic()
    pool.start()
    # (a 409 Response is falsy: wait on a list holding it)
    r = pool.wait(lambda: (x := pool.heartbeat(held["id"])).status_code == 409 and [x], 420, "the held lease to end")[0]
    print(f"\nthe held lease ended {time.monotonic() - t:.1f}s after the server started again: {r.json()['error']}")
    assert "host restarted" in r.json()["error"], r.text
    pool.wait(pool.free, 420, "the pool to come back")
    # brought back on the first try: the proxy, started before the copies, takes their addresses once they run
    assert "failed to come up" not in pool.logs(), pool.logs()
    nxt = pool.acquire(holder="after the reboot")
    lab = Lab(instance=MEMBER)
    assert all(lab.verify(site).ok for site in SITES)  # reset before anyone had it
    assert title not in requests.get(f"{nxt['env']['WA_REDDIT']}/f/books/new", timeout=60).text
    requests.delete(f"{pool.url}/leases/{nxt['id']}", timeout=60)
