"""Known, not assumed (issue 38) and lease requests answered in bounded time (issue 37), on a real pool.

The module's pool: ``envctl serve --instance h5k --instances 1 --flavor mini --sites reddit,homepage --spares 0``
(member ``h5k-1``, base offset 46000), as a subprocess the tests restart with other options. Changes are made
*behind the proxy* (``docker exec`` of psql inside the copy), so the proxy's request counts cannot see them: only the
change signal (PostgreSQL's WAL position) or a fingerprint can.

- A: a lease taken and released without touching anything, then a post INSERTed into the free member's reddit
  database: the next lease still starts on a verified state (the row is gone, ``envctl verify`` exits 0 at hand-out);
- B: a free member changed behind the pool's back is re-verified in the background, quarantined (never handed out,
  its row in ``lease list`` says why), rebuilt by recreate and counted (``envctl_quarantined_total``); a busy host
  (load average over ``--reverify-load``) puts the re-verification off;
- C: a request whose candidate's checks hang (the reddit copy frozen with ``docker pause``) answers 503 within its
  wait plus a few seconds, and the checks that end afterwards leave no lease record.
Lane b (tests/conftest.py, LANE_B).
"""
from __future__ import annotations

import re
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from envctl.lab import Lab
from poolserver import PoolServer, cli as _cli, pool_state

pytestmark = [pytest.mark.docker, pytest.mark.mini, pytest.mark.slow]
POOL, MEMBER, BASE_OFFSET = "h5k", "h5k-1", 46000
SITES = ["reddit", "homepage"]
PSQL = ["env", "PGPASSWORD=postmill", "psql", "-h", "localhost", "-U", "postmill", "-d", "postmill", "-At", "-c"]


class Server(PoolServer):
    """``envctl serve --instance h5k --instances 1`` as a subprocess, restartable with other options."""

    def start(self, *extra: str) -> None:
        super().start("--heal-after", "120", *extra)
        self.wait(self.free, 420, "the pool to come up")

    def acquire(self, **body: Any) -> requests.Response:
        return requests.post(f"{self.url}/leases", json={"ttl": 120, **body}, timeout=600)

    def release(self, lease_id: str) -> requests.Response:
        return requests.delete(f"{self.url}/leases/{lease_id}", timeout=60)

    def metric(self, name: str) -> float:
        text = requests.get(f"{self.url}/metrics", timeout=60).text
        found = re.search(rf'^{name}\{{pool="{POOL}"\}} (\S+)$', text, re.M)
        assert found, (name, text[-2000:])
        return float(found.group(1))


@pytest.fixture(scope="module")
def srv(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with pool_state(tmp_path_factory, "known-state", SITES, [MEMBER, POOL]) as env:
        s = Server(POOL, SITES, BASE_OFFSET, env, Path(env["ENVCTL_STATE_DIR"]) / "serve.log")
        try:
            s.start("--reverify-every", "0")  # A and C: no background re-verification, the acquire alone must know
            yield s
        finally:
            s.stop()
            print(s.logs())


def _psql(sql: str) -> str:
    """SQL run inside the member's routed reddit copy (``docker exec``: the front proxy sees nothing of it)."""
    p = subprocess.run(["docker", "exec", Lab(instance=MEMBER).container("reddit"), *PSQL, sql],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def _insert_post(title: str) -> None:
    _psql("INSERT INTO submissions (forum_id, user_id, title, body, created) VALUES ((SELECT min(id) FROM forums), "
          f"(SELECT min(id) FROM users), '{title}', 'written behind the proxy', 0)")
    assert _psql(f"SELECT count(*) FROM submissions WHERE title = '{title}'") == "1"


def test_a_change_behind_the_proxy_is_caught_before_the_next_lease(srv: Server) -> None:
    srv.wait(srv.free, 300, "a free pool")
    first = srv.acquire(holder="touches nothing")
    assert first.status_code == 201, first.text
    assert srv.release(first.json()["id"]).status_code == 200
    srv.wait(srv.free, 300, "the release")
    before = srv.listing()["summary"]
    title = f"behind the proxy {uuid.uuid4().hex[:8]}"
    _insert_post(title)
    assert _cli(srv.env, "verify", "reddit", "-i", MEMBER).returncode == 1  # the row landed: reddit is not pristine
    lease = srv.acquire(holder="the next holder", wait=300)
    assert lease.status_code == 201, lease.text
    try:
        # at hand-out: the state verifies and the row is gone
        got = _cli(srv.env, "verify", "reddit", "-i", MEMBER)
        assert got.returncode == 0, got.stdout + got.stderr
        assert _psql(f"SELECT count(*) FROM submissions WHERE title = '{title}'") == "0"
        after = srv.listing()["summary"]
        assert after["dirty_found"] == before["dirty_found"] + 1, (before, after)
        assert after["signal_reads"] > before["signal_reads"] and after["verifications"] > before["verifications"]
        assert f"{MEMBER} is not pristine (reddit:" in srv.logs()
    finally:
        srv.release(lease.json()["id"])


def test_a_request_answers_in_time_and_checks_that_end_later_leave_no_record(srv: Server) -> None:
    srv.wait(srv.free, 300, "a free pool")
    given_up = srv.metric("envctl_checks_given_up_total")
    frozen = Lab(instance=MEMBER).container("reddit")
    subprocess.run(["docker", "pause", frozen], check=True, capture_output=True)
    try:
        t = time.monotonic()
        r = srv.acquire(holder="in a hurry", wait=2)
        took = time.monotonic() - t
        print(f"\nPOST /leases (wait 2) with the candidate's reddit frozen: {r.status_code} after {took:.1f}s")
        assert r.status_code == 503 and took < 2 + 6, (r.status_code, took, r.text)  # its wait + 4.5 s
        assert "did not end" in r.json()["error"], r.text
        assert srv.metric("envctl_checks_given_up_total") == given_up + 1
        assert srv.row()["state"] == "checking"  # its checks go on in the background: never handed out meanwhile
        assert srv.acquire(holder="meanwhile", wait=0).status_code == 503
    finally:
        time.sleep(3)
        subprocess.run(["docker", "unpause", frozen], capture_output=True)
    # the given-up checks end once the copy answers: the member is free again, and no lease record was written
    srv.wait(srv.free, 180, "the given-up checks to end")
    record = Lab(instance=MEMBER).lease_record()
    assert record.get("state") == "free" and "id" not in record and "readers" not in record, record
    assert srv.listing()["leases"] == []
    nxt = srv.acquire(holder="after the freeze", wait=60)
    assert nxt.status_code == 201, nxt.text
    assert Lab(instance=MEMBER).lease_record()["id"] == nxt.json()["id"]
    assert srv.release(nxt.json()["id"]).status_code == 200


def test_a_free_member_changed_behind_the_pools_back_is_quarantined_and_rebuilt(srv: Server) -> None:
    # a busy host (its load average over the limit) puts the background re-verification off
    srv.start("--reverify-every", "1", "--reverify-load", "0.0001")
    srv.wait(lambda: srv.listing()["summary"]["reverify_deferred"] >= 1, 60, "a re-verification put off")
    assert srv.listing()["summary"]["reverified"] == 0
    # an idle one (any load average counts as idle here: this machine is shared) re-verifies every 3 s
    srv.start("--reverify-every", "3", "--reverify-load", "10000")
    srv.wait(lambda: srv.listing()["summary"]["reverified"] >= 1, 60, "a background re-verification")
    assert srv.metric("envctl_quarantined_total") == 0
    old_copy = Lab(instance=MEMBER).container("reddit")
    title = f"behind the pools back {uuid.uuid4().hex[:8]}"
    _insert_post(title)
    row = srv.wait(lambda: (r := srv.row())["state"] == "quarantined" and r, 60, "the quarantine", every=0.1)
    print(f"\nquarantined: {row['error']}")
    assert row["error"].startswith("quarantined: reddit:") and "background re-verification" in row["error"], row
    assert srv.acquire(holder="not now", wait=0).status_code == 503  # never handed out while quarantined
    srv.wait(srv.free, 240, "the rebuild")
    assert srv.metric("envctl_quarantined_total") == 1
    listed = _cli({**srv.env, "COLUMNS": "400"}, "lease", "list", "-i", POOL)
    assert listed.returncode == 0 and "quarantine" in listed.stdout and "reddit" in listed.stdout, listed.stdout
    assert "quarantined 1" in listed.stdout, listed.stdout
    assert Lab(instance=MEMBER).container("reddit") != old_copy  # reset by recreate
    assert _cli(srv.env, "verify", "reddit", "-i", MEMBER).returncode == 0
    assert _psql(f"SELECT count(*) FROM submissions WHERE title = '{title}'") == "0"
    lease = srv.acquire(holder="after the rebuild", wait=60)
    assert lease.status_code == 201, lease.text
    assert srv.release(lease.json()["id"]).status_code == 200
