"""Leases on isolated instances (issue #16): a real pool of two mini instances behind a real serve.

One pool (``ls-1``, ``ls-2``: reddit + homepage) is shared by every test of the module; clients speak
plain HTTP to the server, as a harness would.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import uuid
from typing import Any, Iterator

import pytest
import requests

from envctl.catalog import load_catalog
from envctl.images.build import build_for_sites
from envctl.lab import Lab
from envctl.leases import auth_dir
from envctl.provision import docker as dk
from envctl.serve import make_pool, serve

pytestmark = [pytest.mark.docker, pytest.mark.mini, pytest.mark.slow]
POOL, SIZE, BASE_OFFSET = "ls", 2, 31000
SITES = ["reddit", "homepage"]
MEMBERS = [f"{POOL}-{i}" for i in range(1, SIZE + 1)]


class Server:
    """A serve with a lease pool, in this process (so a test can stop and restart it)."""

    def __init__(self, cat: Any) -> None:
        self.cat = cat
        self.logs: list[str] = []
        self.start()

    def start(self) -> None:
        lab = Lab(self.cat, instance=POOL)
        self.pool = make_pool(lab, SIZE, flavor="mini", sites=SITES, spares=0, heal_after=3.0,
                              base_offset=BASE_OFFSET, say=self.logs.append)
        self.server = serve(lab, "127.0.0.1", 0, say=lambda _m: None, pool=self.pool)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.pool.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.pool.stop()

    def rows(self) -> list[dict[str, Any]]:
        return requests.get(f"{self.url}/leases", timeout=30).json()["instances"]

    def wait(self, pred: Any, timeout: float = 240, what: str = "") -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = pred()
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {self.rows()} {self.logs[-5:]}"
            time.sleep(0.5)

    def all_free(self) -> bool:
        rows = self.rows()
        return len(rows) == SIZE and all(r["state"] == "free" for r in rows)

    def acquire(self, **body: Any) -> requests.Response:
        return requests.post(f"{self.url}/leases", json=body, timeout=300)


def _down() -> None:
    for name in MEMBERS + [POOL]:
        Lab(instance=name).down()
        for c in dk.containers(instance=name):
            dk.remove([c.name])


@pytest.fixture(scope="module")
def srv(docker_engine: None, tmp_path_factory: Any) -> Iterator[Server]:
    old = os.environ.get("ENVCTL_STATE_DIR")
    os.environ["ENVCTL_STATE_DIR"] = str(tmp_path_factory.mktemp("state"))
    cat = load_catalog()
    build_for_sites(cat, SITES, "mini")
    _down()
    s = Server(cat)
    try:
        s.wait(s.all_free, what="the pool to come up")
        yield s
    finally:
        s.stop()
        _down()
        print("\n".join(s.logs[-60:]))
        if old is None:
            os.environ.pop("ENVCTL_STATE_DIR", None)
        else:
            os.environ["ENVCTL_STATE_DIR"] = old


def post_on_reddit(base: str, title: str, auth: dict[str, Any] | None = None) -> None:
    s = requests.Session()
    if auth:  # the lease's storage_state: its cookies log us in
        for c in auth["cookies"]:
            s.cookies.set(c["name"], c["value"], domain=c["domain"], path=c["path"])
    else:
        r = s.post(f"{base}/login_check", data={"_username": "MarvelsGrantMan136", "_password": "test1234"})
        assert r.ok
    r = s.post(f"{base}/submit", data={"submission[title]": title, "submission[forum]": "books",
                                       "submission[url]": "", "submission[body]": "written by a lease test"})
    assert r.ok and title in r.text, r.text[:300]


def test_concurrent_clients_get_isolated_pristine_instances(srv: Server) -> None:
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
                    title = f"lease w{w} e{ep} {uuid.uuid4().hex[:6]}"
                    post_on_reddit(base, title, lease["auth"]["reddit_state.json"])
                    assert not Lab(instance=inst).verify("reddit").ok  # the write landed on our instance
                finally:
                    with lock:
                        held.discard(inst)
                    assert requests.delete(f"{srv.url}/leases/{lease['id']}", timeout=60).status_code == 200
        except BaseException as exc:  # noqa: BLE001
            errors.append(f"worker {w}: {exc!r}")

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, (errors, srv.logs[-30:])
    assert len(seen) == 6 and set(seen) == set(MEMBERS)
    srv.wait(srv.all_free, what="every instance reset")
    for m in MEMBERS:
        assert Lab(instance=m).verify("reddit").ok


def test_pool_exhausted_answers_503_with_retry_after(srv: Server) -> None:
    srv.wait(srv.all_free, what="a free pool")
    leases = [srv.acquire(ttl=60).json() for _ in range(SIZE)]
    assert len({x["instance"] for x in leases}) == SIZE
    r = srv.acquire(ttl=60)
    assert r.status_code == 503 and int(r.headers["Retry-After"]) > 0
    listed = requests.get(f"{srv.url}/leases", timeout=30).json()
    assert {x["id"] for x in listed["leases"]} == {x["id"] for x in leases}
    for x in leases:
        assert requests.delete(f"{srv.url}/leases/{x['id']}", timeout=60).status_code == 200
    assert requests.delete(f"{srv.url}/leases/{leases[0]['id']}", timeout=60).status_code == 404


def test_heartbeat_extends_and_silence_expires(srv: Server) -> None:
    srv.wait(srv.all_free, what="a free pool")
    kept = srv.acquire(sites=["homepage"], ttl=3).json()
    lost = srv.acquire(sites=["homepage"], ttl=2).json()
    for _ in range(4):
        time.sleep(1)
        assert requests.post(f"{srv.url}/leases/{kept['id']}/heartbeat", json={}, timeout=30).status_code == 200

    def lost_reclaimed() -> bool:
        return all(r.get("id") != lost["id"] for r in srv.rows())

    srv.wait(lost_reclaimed, timeout=60, what="the silent lease to expire")
    ids = {x["id"] for x in requests.get(f"{srv.url}/leases", timeout=30).json()["leases"]}
    assert kept["id"] in ids and lost["id"] not in ids
    assert requests.post(f"{srv.url}/leases/{lost['id']}/heartbeat", json={}, timeout=30).status_code == 404
    assert srv.pool.stats.expired >= 1
    requests.delete(f"{srv.url}/leases/{kept['id']}", timeout=60)


def test_killed_site_is_healed_under_its_lease(srv: Server) -> None:
    srv.wait(srv.all_free, what="a free pool")
    lease = srv.acquire(sites=["reddit"], ttl=300).json()
    base = lease["env"]["WA_REDDIT"]
    lab = Lab(instance=lease["instance"])
    victim = lab.container("reddit")
    dk.remove([victim])  # docker rm -f of the active copy
    heals = sum(srv.pool.stats.heals.values())

    def healed() -> bool:
        if sum(srv.pool.stats.heals.values()) <= heals:
            return False
        r = requests.get(f"{base}/forums/all", timeout=10)
        return r.status_code == 200 and "Log in" in r.text

    srv.wait(healed, timeout=120, what="the killed site to heal")
    assert lab.container("reddit") != victim
    assert any("healed" in line and lease["instance"] in line for line in srv.logs)
    metrics = requests.get(f"{srv.url}/metrics", timeout=30).text
    assert re.search(r'envctl_heals_total\{pool="ls",site="reddit"\} [1-9]', metrics), metrics
    assert requests.post(f"{srv.url}/leases/{lease['id']}/heartbeat", json={}, timeout=30).status_code == 200
    requests.delete(f"{srv.url}/leases/{lease['id']}", timeout=60)


def test_a_restarted_serve_keeps_its_leases(srv: Server) -> None:
    srv.wait(srv.all_free, what="a free pool")
    lease = srv.acquire(sites=["homepage"], ttl=300).json()
    srv.stop()
    srv.start()  # a new server and pool: everything it knows comes from the routing tables

    def back() -> bool:
        rows = srv.rows()
        return len(rows) == SIZE and all(r["state"] in ("free", "leased") for r in rows)

    srv.wait(back, timeout=60, what="the pool to load")
    listed = requests.get(f"{srv.url}/leases", timeout=30).json()["leases"]
    assert [x["id"] for x in listed] == [lease["id"]] and listed[0]["instance"] == lease["instance"]
    assert requests.post(f"{srv.url}/leases/{lease['id']}/heartbeat", json={"ttl": 60}, timeout=30).status_code == 200
    assert requests.delete(f"{srv.url}/leases/{lease['id']}", timeout=60).status_code == 200


def test_python_api_and_cli(srv: Server) -> None:
    srv.wait(srv.all_free, what="a free pool")
    with Lab.lease(sites=["homepage"], server=srv.url, ttl=30, holder="api") as lease:
        assert lease.instance in MEMBERS and lease.env["WA_HOMEPAGE"].startswith("http://127.0.0.1:")
        assert requests.get(lease.env["HOMEPAGE"], timeout=10).ok
        assert [x["holder"] for x in srv.pool.leases()] == ["api"]
    srv.wait(lambda: not srv.pool.leases(), timeout=30, what="the API lease to be released")
    srv.wait(srv.all_free, what="a free pool")
    env = dict(os.environ)

    def cli(*args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "envctl", "lease", *args, "--instance", POOL],
                           capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        return r.stdout

    out = cli("acquire", "--sites", "reddit,homepage", "--format", "browsergym", "--ttl", "60")
    assert "export WA_REDDIT=" in out and "export WA_FULL_RESET=" in out
    lease_id = re.search(r"export ENVCTL_LEASE=(\w+)", out).group(1)  # type: ignore[union-attr]
    assert lease_id in cli("list", "--json") and "leases active 1" in cli("list")
    cli("release", lease_id)
    assert (auth_dir(MEMBERS[0]) / "reddit_state.json").exists()


PROM_LINE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? '
                       r'(-?[0-9.e+-]+|NaN|\+Inf|-Inf)$')


def test_metrics_parse_as_prometheus_text(srv: Server) -> None:
    # one lease cycle of this server's own, so that its counters (which start at zero) have a reset
    srv.wait(srv.all_free, what="a free pool")
    r = srv.acquire(ttl=60)
    assert r.status_code == 201, r.text
    assert requests.delete(f"{srv.url}/leases/{r.json()['id']}", timeout=30).status_code in (200, 202, 204)
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
    assert re.search(r'envctl_resets_total\{pool="ls",tier="[a-z]+",ok="true"\} [1-9]', text), text
    assert 'envctl_leases_free{pool="ls"}' in text
    assert requests.get(f"{srv.url}/metrics", headers={"Sec-Fetch-Site": "cross-site"}, timeout=30).status_code == 200
