"""Readers share, writers own (issue 40), on a real pool behind the real ``envctl serve`` process.

The module's pool: ``envctl serve --instance h5r --instances 1 --flavor mini --sites reddit,homepage --spares 0
--readers 3 --reverify-every 0`` (member ``h5r-1``, base offset 46100). Every lease is asked for over HTTP, through
``envctl.leases.lease`` or with ``envctl lease acquire``; pristine is checked with envctl's own fingerprints.

- two read leases share the one instance (its row says so); a write lease waits until both readers are gone and the
  instance verified, and a reader asking meanwhile is refused (a waiting writer closes the share to new readers);
- a reader that writes through the UI (a reddit post over HTTP) taints every read lease that overlapped the change
  (the heartbeat's notice, the release's answer, ``lease list``, ``envctl_tainted_leases_total``), a reader released
  before it is not tainted, and the next lease starts pristine (the post is gone).
Lane b (tests/conftest.py, LANE_B).
"""
from __future__ import annotations

import json
import re
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from envctl.lab import Lab
from envctl.leases import lease as lease_of
from poolserver import PoolServer, cli as _cli, pool_state

pytestmark = [pytest.mark.docker, pytest.mark.mini, pytest.mark.slow]
POOL, MEMBER, BASE_OFFSET, READERS = "h5r", "h5r-1", 46100, 3
SITES = ["reddit", "homepage"]


class Server(PoolServer):
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


@pytest.fixture(scope="module")
def srv(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with pool_state(tmp_path_factory, "read-state", SITES, [MEMBER, POOL]) as env:
        s = Server(POOL, SITES, BASE_OFFSET, env, Path(env["ENVCTL_STATE_DIR"]) / "serve.log")
        try:
            s.start("--readers", str(READERS), "--reverify-every", "0")
            s.wait(s.free, 420, "the pool to come up")
            yield s
        finally:
            s.stop()
            print(s.logs())


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
