"""Readers share, writers own (issue 40), on a real pool behind the real ``envctl serve`` process.

The module's pool: ``envctl serve --instance h5r --instances 1 --flavor mini --sites reddit,homepage --spares 0
--readers 3 --reverify-every 0`` (member ``h5r-1``, base offset 46100). Every lease is asked for over HTTP, through
``envctl.leases.lease`` or with ``envctl lease acquire``; pristine is checked with envctl's own fingerprints.

- two read leases share the one instance (its row says so); a write lease waits until both readers are gone and the
  instance verified, and a reader asking meanwhile is refused (a waiting writer closes the share to new readers);
- a reader that writes through the UI (a reddit post over HTTP) taints every read lease that overlapped the change
  (the heartbeat's notice, the release's answer, ``lease list``, ``envctl_tainted_leases_total``), a reader released
  before it is not tainted, and the next lease starts pristine (the post is gone).
Lane a.
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
from typing import Any, Callable, Iterator

import pytest
import requests

from childproc import signals_default
from conftest import free_port
from envctl.backends.docker import ENGINE as dk
from envctl.catalog import load_catalog
from envctl.images.build import build_for_sites
from envctl.lab import Lab
from envctl.leases import lease as lease_of

pytestmark = [pytest.mark.docker, pytest.mark.mini, pytest.mark.slow]
POOL, MEMBER, BASE_OFFSET, READERS = "h5r", "h5r-1", 46100, 3
SITES = ["reddit", "homepage"]


class Server:
    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "envctl", "serve", "--instance", POOL, "--instances", "1", "--flavor", "mini",
                 "--sites", ",".join(SITES), "--spares", "0", "--readers", str(READERS), "--reverify-every", "0",
                 "--base-offset", str(BASE_OFFSET), "--port", str(port)], stdout=out, stderr=out, env=env,
                start_new_session=True, preexec_fn=signals_default)
        self.wait(self._answers, 60, "the server to answer")

    def _answers(self) -> bool:
        assert self.proc.poll() is None, self.logs()
        try:
            requests.get(f"{self.url}/leases", timeout=5)
            return True
        except requests.RequestException:
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def logs(self) -> str:
        try:
            return self.log.read_text()[-5000:]
        except OSError:
            return ""

    def wait(self, pred: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = pred()
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out waiting for {what}\n{self.logs()}"
            time.sleep(0.3)

    def listing(self) -> dict[str, Any]:
        return requests.get(f"{self.url}/leases", timeout=60).json()

    def row(self) -> dict[str, Any]:
        return self.listing()["instances"][0]

    def free(self) -> bool:
        rows = self.listing()["instances"]
        return len(rows) == 1 and rows[0]["state"] == "free"

    def acquire(self, **body: Any) -> requests.Response:
        return requests.post(f"{self.url}/leases", json={"ttl": 120, **body}, timeout=600)

    def read(self, holder: str, **body: Any) -> dict[str, Any]:
        r = self.acquire(access="read", holder=holder, **body)
        assert r.status_code == 201, r.text
        return r.json()

    def heartbeat(self, lease_id: str) -> dict[str, Any]:
        r = requests.post(f"{self.url}/leases/{lease_id}/heartbeat", json={}, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()

    def release(self, lease_id: str) -> dict[str, Any]:
        r = requests.delete(f"{self.url}/leases/{lease_id}", timeout=60)
        assert r.status_code == 200, r.text
        return r.json()


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envctl", *args], capture_output=True, text=True, timeout=300,
                          env={**env, "COLUMNS": "400"}, preexec_fn=signals_default)


def _down(env: dict[str, str]) -> None:
    for name in (MEMBER, POOL):
        _cli(env, "down", "-i", name, "--volumes")
        for c in dk.containers(instance=name):
            dk.remove([c.name])


@pytest.fixture(scope="module")
def srv(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    state = tmp_path_factory.mktemp("read-state")
    env = {k: v for k, v in os.environ.items() if k not in ("ENVCTL_INSTANCE", "ENVCTL_CATALOG")}
    env["ENVCTL_STATE_DIR"] = str(state)
    old = os.environ.get("ENVCTL_STATE_DIR")
    os.environ["ENVCTL_STATE_DIR"] = str(state)
    build_for_sites(load_catalog(), SITES, "mini")
    _down(env)
    s = Server(env, state / "serve.log")
    try:
        s.wait(s.free, 420, "the pool to come up")
        yield s
    finally:
        s.stop()
        _down(env)
        print(s.logs())
        if old is None:
            os.environ.pop("ENVCTL_STATE_DIR", None)
        else:
            os.environ["ENVCTL_STATE_DIR"] = old


def _post(base: str, auth: dict[str, Any], title: str) -> None:
    """A post on reddit through its UI (HTTP), logged in with the lease's storage_state."""
    s = requests.Session()
    for c in auth["cookies"]:
        s.cookies.set(c["name"], c["value"], domain=c["domain"], path=c["path"])
    r = s.post(f"{base}/submit", data={"submission[title]": title, "submission[forum]": "books", "submission[url]": "",
                                       "submission[body]": "written by a read lease"}, timeout=60)
    assert r.ok and title in r.text, r.text[:300]


def test_readers_share_one_instance_and_a_writer_waits_until_they_are_gone(srv: Server) -> None:
    srv.wait(srv.free, 300, "a free pool")
    a = srv.read("reader a")
    with lease_of(server=srv.url, access="read", ttl=60, holder="reader b (python)") as b:  # the Python API
        assert b.access == "read" and a["access"] == "read"
        assert a["instance"] == b.instance == MEMBER  # one instance, shared
        row = srv.row()
        assert row["state"] == "shared" and len(row["readers"]) == 2 and row["limit"] == READERS, row
        assert {x["holder"] for x in srv.listing()["leases"]} == {"reader a", "reader b (python)"}
        listed = _cli(srv.env, "lease", "list", "-i", POOL)
        assert listed.returncode == 0 and "shared (2/3 readers)" in listed.stdout, listed.stdout
        status = json.loads(_cli(srv.env, "status", "-i", MEMBER, "--json").stdout)
        assert status["lease"]["state"] == "shared" and "2 readers" in status["lease"]["holder"], status["lease"]
        # a writer waits: the share takes no more readers meanwhile (readers do not starve writers)
        got: dict[str, Any] = {}

        def writer() -> None:
            r = srv.acquire(holder="writer", wait=240)
            got.update({"code": r.status_code, "body": r.json(), "at": time.monotonic()})

        w = threading.Thread(target=writer)
        w.start()
        srv.wait(lambda: srv.row().get("closed", "").startswith("a write lease waits"), 30, "the share to close")
        refused = srv.acquire(access="read", holder="reader c", wait=0)
        assert refused.status_code == 503 and "shared by readers" in refused.json()["error"], refused.text
        released = srv.release(a["id"])
        assert released["access"] == "read" and released["tainted"] is None, released
        time.sleep(3)
        assert w.is_alive(), got  # reader b still holds it
    gone = time.monotonic()  # b released by the with block
    w.join(240)
    assert got.get("code") == 201, got
    print(f"\nthe write lease was granted {got['at'] - gone:.1f}s after the last reader left")
    lease = got["body"]
    try:
        assert lease["instance"] == MEMBER and lease["access"] == "write"
        assert all(Lab(instance=MEMBER).verify(s).ok for s in SITES)  # verified before the writer got it
        assert srv.row()["state"] == "leased"
        assert srv.acquire(access="read", holder="reader d", wait=0).status_code == 503  # a writer never shares
    finally:
        srv.release(lease["id"])
    # the CLI takes a read lease too
    srv.wait(srv.free, 300, "a free pool")
    out = _cli(srv.env, "lease", "acquire", "--access", "read", "--json", "-i", POOL)
    assert out.returncode == 0, out.stderr
    cli_lease = json.loads(out.stdout)
    assert cli_lease["access"] == "read"
    rel = _cli(srv.env, "lease", "release", cli_lease["id"], "-i", POOL)
    assert rel.returncode == 0 and "not tainted" in rel.stdout, rel.stdout + rel.stderr


def test_a_reader_that_writes_taints_every_overlapping_read_lease_and_the_next_lease_is_pristine(srv: Server) -> None:
    srv.wait(srv.free, 300, "a free pool")
    tainted_before = float(re.search(r'envctl_tainted_leases_total\{pool="h5r"\} (\S+)',
                                     requests.get(f"{srv.url}/metrics", timeout=30).text).group(1))  # type: ignore[union-attr]
    early = srv.read("reader before the change")
    a = srv.read("reader that writes")
    b = srv.read("reader that only reads")
    assert srv.release(early["id"])["tainted"] is None  # it left before anyone wrote
    title = f"a reader wrote {uuid.uuid4().hex[:8]}"
    _post(a["env"]["WA_REDDIT"], a["auth"]["reddit_state.json"], title)

    def told() -> str:
        return str(srv.heartbeat(b["id"]).get("tainted") or "")

    t = time.monotonic()
    why = srv.wait(told, 60, "the overlapping reader to be told")
    print(f"\nread lease tainted {time.monotonic() - t:.1f}s after the write: {why}")
    assert why.startswith("reddit:"), why
    notices = srv.heartbeat(b["id"]).get("notices") or []
    assert any(n["what"].startswith("tainted: reddit") for n in notices), notices
    listed = _cli(srv.env, "lease", "list", "-i", POOL)
    assert "tainted" in listed.stdout and "reader that only reads" in listed.stdout, listed.stdout
    # the instance takes no more readers once changed
    assert srv.acquire(access="read", holder="too late", wait=0).status_code == 503
    for x in (a, b):
        released = srv.release(x["id"])
        assert str(released.get("tainted", "")).startswith("reddit:"), released
    r = requests.post(f"{srv.url}/leases/{early['id']}/heartbeat", json={}, timeout=30)
    assert r.status_code == 409 and "tainted" not in r.json()["error"], r.text  # not the early reader's change
    metrics = requests.get(f"{srv.url}/metrics", timeout=30).text
    assert f'envctl_tainted_leases_total{{pool="h5r"}} {int(tainted_before) + 2}' in metrics, metrics
    nxt = srv.acquire(holder="the next holder", wait=300)
    assert nxt.status_code == 201, nxt.text
    try:
        assert all(Lab(instance=MEMBER).verify(s).ok for s in SITES)
        assert title not in requests.get(f"{nxt.json()['env']['WA_REDDIT']}/f/books/new", timeout=60).text
    finally:
        srv.release(nxt.json()["id"])
