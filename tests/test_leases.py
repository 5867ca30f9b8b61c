"""Leases you can trust: a real pool of two mini instances behind the real ``envctl serve`` command.

The module's pool (``lq-1``, ``lq-2``: reddit + homepage) is started as a user would, with
``envctl serve --instances 2 --flavor mini``, stopped (SIGINT) while it brings its members up, and
started again: the second start must finish what the first left, answering 503 + Retry-After (never a
4xx) meanwhile. Every test then speaks plain HTTP to it (or the CLI, or ``envctl.leases.lease``), as a harness
would; the pristine promise is checked with envctl's own fingerprints.
"""
from __future__ import annotations

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

from childproc import signals_default
from conftest import free_port
from envctl.catalog import load_catalog
from envctl.images.build import build_for_sites
from envctl.lab import Lab
from envctl.leases.client import LeaseLost
from envctl.leases import lease as lease_of
from envctl.leases.members import auth_dir
from envctl.backends.docker import ENGINE as dk

pytestmark = [pytest.mark.docker, pytest.mark.mini, pytest.mark.slow]
POOL, SIZE, BASE_OFFSET, MAX_LEASE = "lq", 2, 12000, 150
SITES = ["reddit", "homepage"]
MEMBERS = [f"{POOL}-{i}" for i in range(1, SIZE + 1)]


class Server:
    """``envctl serve --instances 2 --flavor mini`` as a subprocess (so a test can stop and restart it)."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log_path = env, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "envctl", "serve", "--instance", POOL, "--instances", str(SIZE), "--flavor", "mini",
             "--sites", ",".join(SITES), "--spares", "0", "--heal-after", "3", "--max-lease", str(MAX_LEASE),
             "--base-offset", str(BASE_OFFSET), "--port", str(self.port),
             "--reverify-every", "0"],  # no background re-verification here: tests/test_pool_known.py has its own
            stdout=log, stderr=log, env=self.env, start_new_session=True,
            preexec_fn=signals_default)  # stop(SIGINT) must reach it under a backgrounded 'make test' too
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                requests.get(f"{self.url}/leases", timeout=5)
                return
            except requests.RequestException:
                assert self.proc.poll() is None, self.logs()
                time.sleep(0.2)
        pytest.fail(f"serve did not answer: {self.logs()}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def logs(self) -> str:
        try:
            return self.log_path.read_text()[-4000:]
        except OSError:
            return ""

    def listing(self) -> dict[str, Any]:
        return requests.get(f"{self.url}/leases", timeout=30).json()

    def rows(self) -> list[dict[str, Any]]:
        return self.listing()["instances"]

    def summary(self) -> dict[str, Any]:
        return self.listing()["summary"]

    def wait(self, pred: Any, timeout: float = 240, what: str = "") -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = pred()
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {self.rows()}\n{self.logs()}"
            time.sleep(0.3)

    def all_free(self) -> bool:
        rows = self.rows()
        return len(rows) == SIZE and all(r["state"] == "free" for r in rows)

    def acquire(self, **body: Any) -> requests.Response:
        return requests.post(f"{self.url}/leases", json=body, timeout=300)

    def release(self, lease_id: str) -> requests.Response:
        return requests.delete(f"{self.url}/leases/{lease_id}", timeout=60)


def _down() -> None:
    for name in MEMBERS + [POOL]:
        Lab(instance=name).down()
        for c in dk.containers(instance=name):
            dk.remove([c.name])


@pytest.fixture(scope="module")
def srv(docker_engine: None, tmp_path_factory: Any) -> Iterator[Server]:
    state = tmp_path_factory.mktemp("state")
    env = {**os.environ, "ENVCTL_STATE_DIR": str(state)}
    old = os.environ.get("ENVCTL_STATE_DIR")
    os.environ["ENVCTL_STATE_DIR"] = str(state)  # this process's Labs and CLI calls find the same records
    build_for_sites(load_catalog(), SITES, "mini")
    _down()
    s = Server(env, state / "serve.log")
    try:
        # The first start is stopped (Ctrl-C) while it brings its members up ...
        s.start()
        s.wait(lambda: any(dk.containers(instance=m) for m in MEMBERS), timeout=120, what="a member to be made")
        s.early = s.acquire(sites=["reddit"], ttl=60)  # type: ignore[attr-defined]
        time.sleep(2)
        s.stop(signal.SIGINT)
        # ... and the next start must finish it.
        s.start()
        s.starting = s.acquire(sites=["reddit"], ttl=60)  # type: ignore[attr-defined]
        s.wait(s.all_free, timeout=420, what="the pool to come up")
        yield s
    finally:
        s.stop()
        _down()
        print(s.logs())
        if old is None:
            os.environ.pop("ENVCTL_STATE_DIR", None)
        else:
            os.environ["ENVCTL_STATE_DIR"] = old


def login_session(base: str, auth: dict[str, Any] | None = None) -> requests.Session:
    s = requests.Session()
    if auth:  # the lease's storage_state: its cookies log us in
        for c in auth["cookies"]:
            s.cookies.set(c["name"], c["value"], domain=c["domain"], path=c["path"])
    else:
        r = s.post(f"{base}/login_check", data={"_username": "MarvelsGrantMan136", "_password": "test1234"})
        assert r.ok
    return s


def post_on_reddit(base: str, title: str, auth: dict[str, Any] | None = None) -> None:
    r = login_session(base, auth).post(f"{base}/submit", data={
        "submission[title]": title, "submission[forum]": "books", "submission[url]": "",
        "submission[body]": "written by a lease test"})
    assert r.ok and title in r.text, r.text[:300]


def test_a_pool_stopped_mid_start_comes_up_on_the_next_start(srv: Server) -> None:
    for r in (srv.early, srv.starting):  # type: ignore[attr-defined]
        assert r.status_code == 503, (r.status_code, r.text)  # a client that follows the protocol retries
        assert int(r.headers["Retry-After"]) > 0 and "starting" in r.json()["error"]
    rows = srv.rows()
    assert sorted(r["instance"] for r in rows) == MEMBERS
    assert all(sorted(r["sites"]) == sorted(SITES) for r in rows), rows
    r = srv.acquire(sites=["reddit"], ttl=60)
    assert r.status_code == 201, r.text
    assert srv.release(r.json()["id"]).status_code == 200


def test_concurrent_clients_get_isolated_pristine_instances(srv: Server) -> None:
    srv.wait(srv.all_free, what="a free pool")
    held: set[str] = set()
    lock = threading.Lock()
    seen: list[str] = []
    errors: list[str] = []

    def worker(w: int) -> None:
        try:
            for ep in range(2):
                r = srv.acquire(sites=["reddit"], ttl=120, holder=f"w{w}", wait=240)
                assert r.status_code == 201, r.text
                lease = r.json()
                inst = lease["instance"]
                with lock:
                    assert inst not in held, f"{inst} leased twice"
                    held.add(inst)
                    seen.append(inst)
                assert Lab(instance=inst).verify("reddit").ok  # pristine before this holder writes
                base = lease["env"]["WA_REDDIT"]
                assert lease["env"]["REDDIT"] == base and "WA_FULL_RESET" in lease["env"]
                try:
                    post_on_reddit(base, f"lease w{w} e{ep} {uuid.uuid4().hex[:6]}", lease["auth"]["reddit_state.json"])
                    assert not Lab(instance=inst).verify("reddit").ok  # the write landed on our instance
                finally:
                    with lock:
                        held.discard(inst)
                    assert srv.release(lease["id"]).status_code == 200
        except BaseException as exc:  # noqa: BLE001
            errors.append(f"worker {w}: {exc!r}")

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, (errors, srv.logs())
    assert len(seen) == 6 and set(seen) == set(MEMBERS)
    srv.wait(srv.all_free, what="every instance reset")
    for m in MEMBERS:
        assert Lab(instance=m).verify("reddit").ok


def test_a_one_site_lease_cannot_leave_another_site_dirty(srv: Server) -> None:
    """A holder of a homepage lease writes to its instance's reddit; the next holder finds reddit pristine."""
    srv.wait(srv.all_free, what="a free pool")
    lease = srv.acquire(sites=["homepage"], ttl=120, holder="homepage only").json()
    assert "WA_REDDIT" not in lease["env"]
    inst = lease["instance"]
    reddit = Lab(instance=inst).env("webarena")["REDDIT"]  # not in the lease, but reachable
    post_on_reddit(reddit, f"outside the lease {uuid.uuid4().hex[:6]}")
    assert not Lab(instance=inst).verify("reddit").ok
    assert srv.release(lease["id"]).status_code == 200
    srv.wait(srv.all_free, what="the release")
    nxt = [srv.acquire(sites=["reddit"], ttl=60).json() for _ in range(SIZE)]  # both: one is that instance
    try:
        assert inst in {x["instance"] for x in nxt}
        assert Lab(instance=inst).verify("reddit").ok
    finally:
        for x in nxt:
            srv.release(x["id"])
    assert f"{inst}: reddit not pristine either" in srv.logs()


def test_an_instance_tampered_while_free_is_not_handed_out_until_it_verifies(srv: Server) -> None:
    srv.wait(srv.all_free, what="a free pool")
    dirty_before = srv.summary()["dirty_found"]
    victim = MEMBERS[0]
    post_on_reddit(Lab(instance=victim).env("webarena")["REDDIT"], f"tampered while free {uuid.uuid4().hex[:6]}")
    got = []
    for _ in range(SIZE):
        r = srv.acquire(sites=["reddit"], ttl=60, wait=120)
        assert r.status_code == 201, r.text
        lease = r.json()
        assert Lab(instance=lease["instance"]).verify("reddit").ok, lease["instance"]  # at hand-out time
        got.append(lease)
    try:
        assert {x["instance"] for x in got} == set(MEMBERS)
        assert srv.summary()["dirty_found"] == dirty_before + 1
    finally:
        for x in got:
            srv.release(x["id"])


def test_a_release_then_acquire_fingerprints_only_what_changed(srv: Server) -> None:
    """A whole-instance lease that wrote on reddit: its release resets reddit and, once the new state's change signal
    is read, fingerprints it (homepage, untouched and without a fingerprint, is not checked again); the next acquire
    reads the signals and fingerprints nothing whose signal stayed put. The fingerprints the server computed are
    counted, not assumed."""
    srv.wait(srv.all_free, what="a free pool")
    first = [srv.acquire(ttl=120, holder=f"w{i}").json() for i in range(SIZE)]  # every member: one is ours
    mine, other = first[0], first[1]
    inst = mine["instance"]
    try:
        post_on_reddit(mine["env"]["WA_REDDIT"], f"once {uuid.uuid4().hex[:6]}", mine["auth"].get("reddit_state.json"))
        s0 = srv.summary()
        assert srv.release(mine["id"]).status_code == 200
        srv.wait(lambda: next(r for r in srv.rows() if r["instance"] == inst)["state"] == "free", what="the release")
        s1 = srv.summary()
        again = srv.acquire(ttl=60, holder="next").json()
        s2 = srv.summary()
        try:
            assert again["instance"] == inst  # the only free member
            at_release, at_acquire = s1["fingerprints"] - s0["fingerprints"], s2["fingerprints"] - s1["fingerprints"]
            print(f"\nfingerprints: release {at_release}, acquire {at_acquire}; skipped at acquire "
                  f"{s2['verifications_skipped'] - s1['verifications_skipped']}")
            # the in-place reset's own, then the pool's on the reset copy after reading its signal
            assert at_release == 2 and s1["verifications"] - s0["verifications"] == 1, (s0, s1)
            assert s2["signal_reads"] > s1["signal_reads"]
            # none unless PostgreSQL's own housekeeping (a checkpoint after the restore) moved the WAL meanwhile
            assert at_acquire <= 1 and s2["verifications"] - s1["verifications"] == at_acquire, (s1, s2)
            assert s2["verifications_skipped"] - s1["verifications_skipped"] == len(SITES) - at_acquire
            assert all(Lab(instance=inst).verify(site).ok for site in SITES)  # and it is pristine indeed
        finally:
            srv.release(again["id"])
    finally:
        srv.release(other["id"])


def test_browsergym_full_reset_through_a_lease_is_ready_on_the_first_status(srv: Server) -> None:
    srv.wait(srv.all_free, what="a free pool")
    lease = srv.acquire(sites=["reddit"], ttl=120).json()
    try:
        inst, full_reset = lease["instance"], lease["env"]["WA_FULL_RESET"]
        assert full_reset == lease["full_reset"] and full_reset.startswith(srv.url)
        post_on_reddit(lease["env"]["WA_REDDIT"], f"before full_reset {uuid.uuid4().hex[:6]}", lease["auth"]["reddit_state.json"])
        # BrowserGym's full_reset(): GET /reset (waits for the answer), then GET /status at once.
        r = requests.get(f"{full_reset}/reset", timeout=600)
        assert r.status_code == 200, r.text
        assert requests.get(f"{full_reset}/status", timeout=30).text == "Ready for duty!"
        assert Lab(instance=inst).verify("reddit").ok
        # the reset renewed the login files: the lease's login state as it is now logs in to the new state
        fresh = requests.get(f"{srv.url}/leases/{lease['id']}?auth=1", timeout=120).json()["auth"]
        post_on_reddit(lease["env"]["WA_REDDIT"], f"after full_reset {uuid.uuid4().hex[:6]}", fresh["reddit_state.json"])
        # ?wait=0 answers at once; the status says so until it has ended
        assert requests.get(f"{full_reset}/reset?wait=0", timeout=30).status_code == 200
        assert requests.get(f"{full_reset}/reset", timeout=30).status_code == 418
        srv.wait(lambda: requests.get(f"{full_reset}/status", timeout=30).text == "Ready for duty!", timeout=120,
                 what="the background reset")
    finally:
        srv.release(lease["id"])
    assert requests.get(f"{full_reset}/status", timeout=30).status_code == 409  # the lease has ended


def test_lab_lease_raises_lease_lost_when_reclaimed_under_it(srv: Server) -> None:
    srv.wait(srv.all_free, what="a free pool")
    with pytest.raises(LeaseLost, match="reclaimed"):
        with lease_of(sites=["homepage"], server=srv.url, ttl=3, max_seconds=2, holder="hung episode") as lease:
            deadline = time.monotonic() + 30
            while not lease.lost and time.monotonic() < deadline:
                time.sleep(0.2)
            assert lease.lost, "the heartbeat thread did not notice"
            with pytest.raises(LeaseLost):
                lease.check()
    assert srv.summary()["reclaimed"] >= 1


def test_a_lease_past_max_lease_is_reclaimed_and_counted(srv: Server) -> None:
    srv.wait(srv.all_free, what="a free pool")
    capped = srv.acquire(sites=["homepage"], ttl=60, max_seconds=10 ** 5).json()
    assert capped["max_seconds"] == MAX_LEASE  # serve --max-lease caps what a client asks
    srv.release(capped["id"])
    lease = srv.acquire(sites=["homepage"], ttl=60, max_seconds=2).json()
    hb = f"{srv.url}/leases/{lease['id']}/heartbeat"

    def reclaimed() -> bool:
        return requests.post(hb, json={}, timeout=30).status_code == 409  # it heartbeats, and still loses it

    srv.wait(reclaimed, timeout=30, what="the watchdog")
    r = requests.post(hb, json={}, timeout=30)
    assert "reclaimed" in r.json()["error"] and "max" in r.json()["error"]
    assert re.search(r'envctl_leases_reclaimed_total\{pool="lq"\} [1-9]', requests.get(f"{srv.url}/metrics", timeout=30).text)


def test_pool_exhausted_answers_503_with_retry_after(srv: Server) -> None:
    srv.wait(srv.all_free, what="a free pool")
    leases = [srv.acquire(ttl=60).json() for _ in range(SIZE)]
    assert len({x["instance"] for x in leases}) == SIZE
    r = srv.acquire(ttl=60)
    assert r.status_code == 503 and int(r.headers["Retry-After"]) > 0
    assert {x["id"] for x in srv.listing()["leases"]} == {x["id"] for x in leases}
    for x in leases:
        assert srv.release(x["id"]).status_code == 200
    again = srv.release(leases[0]["id"])
    assert again.status_code == 409 and again.json()["error"] == "released"


def test_heartbeat_extends_and_silence_expires(srv: Server) -> None:
    srv.wait(srv.all_free, what="a free pool")
    lost = srv.acquire(sites=["homepage"], ttl=2).json()
    kept = srv.acquire(sites=["homepage"], ttl=6).json()  # second: acquiring may take seconds on a busy host
    for _ in range(8):  # heartbeats carry it past its ttl
        time.sleep(1)
        assert requests.post(f"{srv.url}/leases/{kept['id']}/heartbeat", json={}, timeout=30).status_code == 200

    def lost_reclaimed() -> bool:
        return all(r.get("id") != lost["id"] for r in srv.rows())

    srv.wait(lost_reclaimed, timeout=60, what="the silent lease to expire")
    ids = {x["id"] for x in srv.listing()["leases"]}
    assert kept["id"] in ids and lost["id"] not in ids
    r = requests.post(f"{srv.url}/leases/{lost['id']}/heartbeat", json={}, timeout=30)
    assert r.status_code == 409 and "expired" in r.json()["error"]
    assert srv.summary()["expired"] >= 1
    srv.release(kept["id"])


def test_killed_site_is_healed_under_its_lease(srv: Server) -> None:
    srv.wait(srv.all_free, what="a free pool")
    lease = srv.acquire(sites=["reddit"], ttl=300).json()
    base = lease["env"]["WA_REDDIT"]
    lab = Lab(instance=lease["instance"])
    victim = lab.container("reddit")
    heals = sum(srv.summary()["heals"].values())
    dk.remove([victim])  # docker rm -f of the active copy

    def healed() -> bool:
        if sum(srv.summary()["heals"].values()) <= heals:
            return False
        r = requests.get(f"{base}/forums/all", timeout=10)
        return r.status_code == 200 and "Log in" in r.text

    srv.wait(healed, timeout=120, what="the killed site to heal")
    assert lab.container("reddit") != victim
    assert f"healed {lease['instance']}/reddit" in srv.logs()
    metrics = requests.get(f"{srv.url}/metrics", timeout=30).text
    assert re.search(r'envctl_heals_total\{pool="lq",site="reddit"\} [1-9]', metrics), metrics
    assert requests.post(f"{srv.url}/leases/{lease['id']}/heartbeat", json={}, timeout=30).status_code == 200
    srv.release(lease["id"])


def test_a_restarted_serve_keeps_its_leases(srv: Server) -> None:
    srv.wait(srv.all_free, what="a free pool")
    lease = srv.acquire(sites=["homepage"], ttl=300).json()
    srv.stop()
    srv.start()  # a new server and pool: everything it knows comes from the routing tables

    def back() -> bool:
        rows = srv.rows()
        return len(rows) == SIZE and all(r["state"] in ("free", "leased") for r in rows)

    srv.wait(back, timeout=120, what="the pool to load")
    listed = srv.listing()["leases"]
    assert [x["id"] for x in listed] == [lease["id"]] and listed[0]["instance"] == lease["instance"]
    assert requests.post(f"{srv.url}/leases/{lease['id']}/heartbeat", json={"ttl": 60}, timeout=30).status_code == 200
    assert srv.release(lease["id"]).status_code == 200


def _cli(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "envctl", *args], capture_output=True, text=True, timeout=300)
    if ok:
        assert r.returncode == 0, r.stderr
    return r


def test_python_api_cli_and_status(srv: Server, tmp_path: Path) -> None:
    srv.wait(srv.all_free, what="a free pool")
    with lease_of(sites=["homepage"], pool=POOL, ttl=30, holder="api") as lease:  # found from the serve record
        assert lease.instance in MEMBERS and lease.env["WA_HOMEPAGE"].startswith("http://127.0.0.1:")
        assert requests.get(lease.env["HOMEPAGE"], timeout=10).ok
        assert [x["holder"] for x in srv.listing()["leases"]] == ["api"]
        status = _cli("status", "--instance", lease.instance, "--json").stdout
        assert '"holder": "api"' in status and '"state": "leased"' in status
        assert "api" in _cli("status", "--instance", POOL).stdout  # the pool's name: its leases
    srv.wait(lambda: not srv.listing()["leases"], timeout=30, what="the API lease to be released")
    srv.wait(srv.all_free, what="a free pool")

    out = _cli("lease", "acquire", "--sites", "reddit,homepage", "--format", "browsergym", "--ttl", "60",
               "--instance", POOL).stdout
    assert "export WA_REDDIT=" in out and "export WA_FULL_RESET=" in out
    lease_id = re.search(r"export ENVCTL_LEASE=(\w+)", out).group(1)  # type: ignore[union-attr]
    assert lease_id in _cli("lease", "list", "--json", "--instance", POOL).stdout
    assert "leases active 1" in _cli("lease", "list", "--instance", POOL).stdout
    assert "expires in" in _cli("lease", "heartbeat", lease_id, "--instance", POOL).stdout
    _cli("lease", "release", lease_id, "--instance", POOL)
    gone = _cli("lease", "heartbeat", lease_id, "--instance", POOL, ok=False)
    assert gone.returncode == 1 and len(gone.stderr.strip().splitlines()) == 1 and "released" in gone.stderr
    assert (auth_dir(MEMBERS[0]) / "reddit_state.json").exists()

    # An --out that cannot be a folder is refused before the server is asked: no lease is taken.
    srv.wait(srv.all_free, what="a free pool")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    bad = _cli("lease", "acquire", "--sites", "reddit", "--out", str(blocker / "auth"), "--instance", POOL, ok=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--out" in bad.stderr, bad.stderr
    assert srv.listing()["leases"] == []
    # A command that fails after the lease was granted (the state file's name is taken by a folder) gives
    # it back and says so.
    out = tmp_path / "out"
    (out / "reddit_state.json").mkdir(parents=True)
    bad = _cli("lease", "acquire", "--sites", "reddit", "--out", str(out), "--instance", POOL, ok=False)
    assert bad.returncode == 1 and "given back" in bad.stderr, bad.stderr
    assert srv.listing()["leases"] == []


@pytest.mark.parametrize("method,path,body,code", [
    ("POST", "/leases", b"{not json", 400),
    ("POST", "/leases", b"[1, 2]", 400),
    ("POST", "/leases", b'{"sites": "nosuchsite"}', 400),
    ("POST", "/leases", b'{"sites": [1]}', 400),
    ("POST", "/leases", b'{"ttl": true}', 400),
    ("POST", "/leases", b'{"ttl": "NaN"}', 400),
    ("POST", "/leases", b'{"ttl": -5}', 400),
    ("POST", "/leases", b'{"wait": 1e9}', 400),
    ("POST", "/leases", b'{"max_seconds": 0}', 400),
    ("POST", "/leases", b'{"holder": {"a": 1}}', 400),
    ("POST", "/leases", b'{"colour": "blue"}', 400),
    ("POST", "/leases", b'{"access": "admin"}', 400),
    ("POST", "/leases", b'{"access": ["read"]}', 400),
    ("POST", "/leases", b'{"sites": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400),
    ("POST", "/leases/nosuchid/heartbeat", b"{}", 404),
    ("POST", "/leases/nosuchid/heartbeat", b'{"ttl": "x"}', 400),
    ("DELETE", "/leases/nosuchid", b"", 404),
    ("GET", "/leases/nosuchid", b"", 404),
    ("GET", "/leases/nosuchid/reset", b"", 404),
    ("GET", "/leases/nosuchid/status", b"", 404),
    ("GET", "/leases/a/b/c", b"", 404),
    ("DELETE", "/leases", b"", 405),
])
def test_bad_input_to_every_lease_endpoint(srv: Server, method: str, path: str, body: bytes, code: int) -> None:
    before = srv.summary()["leases_active"]
    r = requests.request(method, f"{srv.url}{path}", data=body, timeout=30,
                         headers={"Content-Type": "application/json"})
    assert r.status_code == code, (r.status_code, r.text)
    if r.headers.get("Content-Type", "").startswith("application/json"):
        error = r.json()["error"]
        assert error and "\n" not in error and "Traceback" not in error
    assert srv.summary()["leases_active"] == before  # nothing leaked


PROM_LINE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? '
                       r'(-?[0-9.e+-]+|NaN|\+Inf|-Inf)$')


def test_metrics_parse_as_prometheus_text(srv: Server) -> None:
    srv.wait(srv.all_free, what="a free pool")
    r = srv.acquire(ttl=60)
    assert r.status_code == 201, r.text
    assert srv.release(r.json()["id"]).status_code == 200
    srv.wait(srv.all_free, what="the released instance to be reset")
    text = requests.get(f"{srv.url}/metrics", timeout=30).text
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line.startswith("# HELP "):
            continue
        else:
            assert PROM_LINE.match(line), line
            name = re.split(r"[{ ]", line)[0]
            assert re.sub(r"_(bucket|sum|count)$", "", name) in types or name in types, line
    assert types["envctl_leases_active"] == "gauge" and types["envctl_reset_seconds"] == "histogram"
    assert re.search(r'envctl_resets_total\{pool="lq",tier="[a-z]+",ok="true"\} [1-9]', text), text
    assert 'envctl_leases_free{pool="lq"}' in text
    turn = srv.summary()["turnaround"]
    assert turn["count"] >= 1 and turn["p50_s"] is not None
    assert requests.get(f"{srv.url}/metrics", headers={"Sec-Fetch-Site": "cross-site"}, timeout=30).status_code == 200
