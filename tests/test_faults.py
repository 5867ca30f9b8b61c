"""Faults (issue #14): envctl killed with SIGKILL mid-phase, then the next command repairs; the front
proxy never lets a client hang on a removed backend; the engine restarted mid-reset.

Every kill is aimed at a phase seen in the process's own output (``--json`` progress events on
stderr, or the Docker objects it is creating), and the test checks that the phase was hit before it
asserts anything. After each kill: never two active copies, never a listed spare that fails
``verify`` (fingerprint) or is not running, never a partial file or extract taken as complete.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import requests
import yaml

from envctl.catalog import BUILTIN
from envctl.lab import Lab
from envctl.backends.docker import ENGINE as dk
from envctl.images.build import PROXY_IMAGE, build, proxy_build
from envctl.backends.base import Copy, InstanceSettings, Member
from envctl.catalog import load_catalog
from envctl.instance import Instance
from envctl.routing import proxy
from envctl.routing.table import RoutingTable

from conftest import tear_down, up_reddit
from fetch_server import FaultServer

pytestmark = [pytest.mark.docker, pytest.mark.mini, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]


# -- helpers -------------------------------------------------------------------------------------------

class Killed:
    """A CLI subprocess (own process group) whose stderr lines are collected as they come."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.p = subprocess.Popen([sys.executable, "-m", "envctl", *args], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=str(ROOT),
                                  env={**os.environ, **(env or {})})
        self.lines: list[str] = []
        self.out: list[str] = []
        threading.Thread(target=self._read, args=(self.p.stderr, self.lines), daemon=True).start()
        threading.Thread(target=self._read, args=(self.p.stdout, self.out), daemon=True).start()

    @staticmethod
    def _read(stream: Any, into: list[str]) -> None:
        for line in stream:
            into.append(line)

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in list(self.lines):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def wait_for(self, cond: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return True
            if self.p.poll() is not None:
                return cond()
            time.sleep(0.02)
        return False

    def kill(self) -> None:
        """SIGKILL the whole process group (envctl and the docker clients it runs)."""
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait(timeout=30)


def envctl(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envctl", *args], capture_output=True, text=True, cwd=str(ROOT),
                          env={**os.environ, **(env or {})}, timeout=timeout)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# -- a reddit instance with spares ---------------------------------------------------------------------

INSTANCE, OFFSET = "ftfault", 43000


@pytest.fixture(scope="module")
def lab(docker_engine, tmp_path_factory) -> Iterator[Lab]:
    lab = up_reddit(INSTANCE, OFFSET, tmp_path_factory.mktemp("auth"))
    yield lab
    tear_down(lab)


def table(lab: Lab) -> RoutingTable:
    st = lab.running().front.read()
    assert st is not None
    return st


def slots(lab: Lab) -> set[str]:
    return {slot for (_, slot) in lab.running().copies.of("reddit")}


def assert_sound(lab: Lab) -> None:
    """One active copy, running and pristine-or-dirty but routed; every listed spare running and pristine."""
    st = table(lab)
    inst = lab.running()
    copies = inst.copies.of("reddit")
    active = st.routes.active["reddit"]
    assert (("reddit", active) in copies and copies[("reddit", active)].running()), (active, list(copies))
    routed = {r.backend for r in st.routes.by_port.values()}
    names = [getattr(n, "name", n) for c in copies.values() for n in c.members.values()]
    assert sum(1 for n in names if n in routed) == 1, (routed, names)
    for slot in st.ready.spares("reddit"):
        assert slot != active, f"spare {slot} is also the active copy"
        c = copies.get(("reddit", slot))
        assert c is not None and c.running(), f"listed spare {slot} is not running"
        fp = inst.checks.fingerprint(c)
        assert not inst.checks.not_pristine(c, inst.routing.pristine("reddit", st)), f"listed spare {slot} is dirty ({fp.digest})"


def repaired(lab: Lab) -> None:
    """The next commands after a kill: a reset (no waiting for background work) and a replenish."""
    [r] = lab.reset(["reddit"], refill=False)
    assert r.ok, r
    lab.replenish("reddit")
    assert_sound(lab)
    st = table(lab)
    assert slots(lab) == {st.routes.active["reddit"], *st.ready.spares("reddit")}, "stray copies survived the repair"


def post(lab: Lab, title: str) -> None:
    base = lab.settings().deployment.url(lab.catalog.site("reddit"))
    s = requests.Session()
    assert s.post(f"{base}/login_check", data={"_username": "MarvelsGrantMan136", "_password": "test1234"}).ok
    r = s.post(f"{base}/submit", data={"submission[title]": title, "submission[forum]": "books",
                                       "submission[url]": "", "submission[body]": "fault test"})
    assert r.ok


# -- the front proxy and a removed backend ---------------------------------------------------------

SLOW_APP = r"""
import http.server, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/slow"):
            time.sleep(600)
        body = b"ok\n"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8000), H).serve_forever()
"""
PROXY_INSTANCE, PROXY_PORT = "ftproxy", 44871
BOUND = 12.0  # seconds a client may wait on a removed backend


@pytest.fixture
def bare_proxy(docker_engine) -> Iterator[Callable[[], str]]:
    """A front proxy of instance 'ftproxy' on 127.0.0.1:44871 routed to a fresh slow backend."""
    net = f"envctl-{PROXY_INSTANCE}"
    made: list[str] = []
    inst, _ = Instance.create(load_catalog(), InstanceSettings(PROXY_INSTANCE, "mini"))
    build(proxy_build())  # the proxy's image is the caller's to provide (envctl.lab builds it)
    inst.front.ensure([PROXY_PORT], PROXY_IMAGE)

    def backend() -> str:
        name = f"envctl-{PROXY_INSTANCE}-slow-{uuid.uuid4().hex[:6]}"
        subprocess.run(["docker", "run", "-d", "--name", name, "--label", f"envctl.instance={PROXY_INSTANCE}",
                        "--network", net, "envctl-mini/base:1", "python3", "-c", SLOW_APP],
                       check=True, capture_output=True)
        made.append(name)
        with inst.routing._routing() as st:
            st.routes.by_port[str(PROXY_PORT)] = proxy.Route(name, 8000)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if requests.get(f"http://127.0.0.1:{PROXY_PORT}/", timeout=2).status_code == 200:
                    return name
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise AssertionError("slow backend never answered through the proxy")

    yield backend
    subprocess.run(["docker", "rm", "-f", *made, proxy.proxy_name(PROXY_INSTANCE)], capture_output=True)
    subprocess.run(["docker", "network", "rm", net], capture_output=True)


def _timed_get(url: str, into: dict[str, Any]) -> None:
    t = time.monotonic()
    try:
        into["status"] = requests.get(url, timeout=120).status_code
    except requests.RequestException as exc:
        into["status"] = f"{type(exc).__name__}"
    into["seconds"] = time.monotonic() - t


@pytest.mark.parametrize("how", ["rm", "pause-then-rm", "disconnect"])
def test_request_to_a_removed_backend_ends(bare_proxy, how):
    """In flight when the backend goes (removed, frozen then removed, or cut off the network): the client
    gets 502/503/504 within BOUND seconds, and so does the next request."""
    name = bare_proxy()
    got: dict[str, Any] = {}
    t = threading.Thread(target=_timed_get, args=(f"http://127.0.0.1:{PROXY_PORT}/slow", got))
    t.start()
    time.sleep(1.0)  # the request is now waiting on the backend
    assert t.is_alive()
    removed_at = time.monotonic()
    if how == "pause-then-rm":
        subprocess.run(["docker", "pause", name], check=True, capture_output=True)
        time.sleep(0.5)
    if how == "disconnect":
        subprocess.run(["docker", "network", "disconnect", "-f", f"envctl-{PROXY_INSTANCE}", name], check=True,
                       capture_output=True)
    else:
        subprocess.run(["docker", "rm", "-f", name], check=True, capture_output=True)
    t.join(BOUND + 5)
    waited = time.monotonic() - removed_at
    assert not t.is_alive(), f"in-flight request still hanging {waited:.1f}s after the backend was removed ({how})"
    assert got["status"] in (502, 503, 504), got
    assert waited <= BOUND, got
    after: dict[str, Any] = {}
    _timed_get(f"http://127.0.0.1:{PROXY_PORT}/", after)
    assert after["status"] in (502, 503, 504) and after["seconds"] <= BOUND, after
    print(f"\n[{how}] in-flight request ended {got['status']} after {waited:.2f}s; next request "
          f"{after['status']} in {after['seconds']:.2f}s")


def test_a_backend_restarted_alone_is_routed_at_its_new_address(bare_proxy):
    """A routed backend restarted alone comes back with another address (one taken meanwhile): the proxy
    still points at the old one until ``proxy.refresh`` (what 'up' runs when it repairs a running copy)
    looks it up again, in one write to the runtime API."""
    name = bare_proxy()
    squat = f"envctl-{PROXY_INSTANCE}-squat-{uuid.uuid4().hex[:6]}"
    inst = Instance.get(load_catalog(), PROXY_INSTANCE)
    copy = Copy("slow", "x", {"web": Member("web", name, "", {}, "running")})
    old = inst.backend.proxy.address(PROXY_INSTANCE, name)
    try:
        subprocess.run(["docker", "stop", "-t", "0", name], check=True, capture_output=True)
        subprocess.run(["docker", "run", "-d", "--name", squat, "--label", f"envctl.instance={PROXY_INSTANCE}",
                        "--network", f"envctl-{PROXY_INSTANCE}", "envctl-mini/base:1", "sleep", "600"],
                       check=True, capture_output=True)  # takes the freed address (it serves nothing)
        subprocess.run(["docker", "start", name], check=True, capture_output=True)
        new = inst.backend.proxy.address(PROXY_INSTANCE, name)
        assert new and new != old, (old, new)
        assert inst.routing.refresh_addresses(copy) == [name]
        assert inst.routing.table().routes.addrs[name] == new
        deadline, status = time.monotonic() + 30, None
        while time.monotonic() < deadline:
            try:
                status = requests.get(f"http://127.0.0.1:{PROXY_PORT}/", timeout=5).status_code
            except requests.RequestException as exc:
                status = type(exc).__name__
            if status == 200:
                break
            time.sleep(0.2)
        assert status == 200, status
        assert inst.routing.refresh_addresses(copy) == []  # nothing moved since
    finally:
        subprocess.run(["docker", "rm", "-f", squat], capture_output=True)


def test_the_control_service_answers_only_its_token(bare_proxy):
    """The proxy's control path shares the public port with the site: a request with the proxy's token
    reaches the control service, one with any other token is refused before the site sees it, one with
    none is the site's; the service names no file outside its own few."""
    bare_proxy()
    url = f"http://127.0.0.1:{PROXY_PORT}"
    token = dk.container(proxy.proxy_name(PROXY_INSTANCE)).label("control")
    assert len(token) >= 40
    ok = requests.get(f"{url}/.envctl/ping", headers={proxy.CONTROL_HEADER: token}, timeout=5)
    assert ok.status_code == 200 and ok.text.startswith("envctl-proxy")
    table = requests.get(f"{url}/.envctl/file/state.json", headers={proxy.CONTROL_HEADER: token}, timeout=5)
    assert json.loads(table.text)["routes"][str(PROXY_PORT)]["port"] == 8000
    for wrong in ("x" * 43, token[:-1], ""):
        r = requests.post(f"{url}/.envctl/cmd", data="show info", headers={proxy.CONTROL_HEADER: wrong}, timeout=5)
        assert r.status_code == 403, (wrong, r.status_code, r.text[:200])
    site = requests.get(f"{url}/.envctl/ping", timeout=5)  # no token: the site's own path
    assert "envctl-proxy" not in site.text
    for bad in ("file/..%2F..%2Fetc%2Fpasswd", "file/passwd", "file/.state.json.tmp", "nope"):
        r = requests.get(f"{url}/.envctl/{bad}", headers={proxy.CONTROL_HEADER: token}, timeout=5)
        assert r.status_code == 404 and "root:" not in r.text, (bad, r.status_code)
    # the cached hint is private to this user
    assert proxy.control_cache(PROXY_INSTANCE).stat().st_mode & 0o077 == 0


# -- downloads and extracts ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Any]:
    """A 24 MB data file (slow download), a ~160 MB tar of 1 MB files (long extract), a saved small image."""
    d = tmp_path_factory.mktemp("artifacts")
    blob = d / "ftblob.bin"
    blob.write_bytes(os.urandom(24 << 20))
    tarpath = d / "ftdata.tar"
    with tarfile.open(tarpath, "w") as tar:
        for i in range(160):
            data = os.urandom(1 << 20)
            info = tarfile.TarInfo(f"data/part-{i:03d}.bin")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    ctx = d / "img"
    ctx.mkdir()
    (ctx / "payload").write_bytes(os.urandom(16 << 20))
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY payload /payload\n")
    tag = "envctl-ft/faultimg:1"
    subprocess.run(["docker", "build", "-q", "-t", tag, str(ctx)], check=True, capture_output=True)
    image_id = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", tag], check=True, capture_output=True,
                              text=True).stdout.strip()
    saved = d / "ftimg.tar"
    subprocess.run(["docker", "save", "-o", str(saved), tag], check=True, capture_output=True)
    subprocess.run(["docker", "rmi", tag], check=True, capture_output=True)
    yield {"blob": blob, "tar": tarpath, "image": saved, "tag": tag, "image_id": image_id}
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)


def catalog_with(tmp: Path, artifacts: list[dict[str, Any]]) -> Path:
    raw = yaml.safe_load(BUILTIN.read_text())
    raw["sites"]["homepage"]["flavors"]["full"]["artifacts"] = artifacts
    f = tmp / "sites.yaml"
    f.write_text(yaml.safe_dump(raw, sort_keys=False))
    return f


def data_artifact(server: FaultServer, path: Path, mode: str, extract: bool) -> dict[str, Any]:
    server.paths[path.name] = str(path)
    art = {"name": path.name, "kind": "data", "dest": f"ft/{path.name}", "size": path.stat().st_size,
           "sha256": sha256(path), "sources": [{"kind": "http", "mirror": "local", "url": server.url(mode, path.name)}]}
    if extract:
        art["extract"] = {"format": "tar", "strip": 1, "destination": "{data_dir}/ft/unpacked"}
    return art


def get_env(tmp: Path) -> dict[str, str]:
    return {"ENVCTL_DATA_DIR": str(tmp / "data"), "ENVCTL_STATE_DIR": str(tmp / "state"), "ENVCTL_MIN_RATE": "1000"}


def kill_at(args: list[str], env: dict[str, str], cond: Callable[[list[dict[str, Any]]], bool], what: str,
            timeout: float = 120) -> list[dict[str, Any]]:
    k = Killed(args, env)
    try:
        hit = k.wait_for(lambda: cond(k.events()), timeout)
    finally:
        k.kill()
    assert hit, f"never saw {what} (exit {k.p.returncode}): {''.join(k.lines)[-800:]}"
    return k.events()


def test_sigkill_mid_download_leaves_only_a_partial_then_get_resumes(files, tmp_path):
    with FaultServer() as server:
        server.slow_rate = 1_000_000
        blob = files["blob"]
        cat = catalog_with(tmp_path, [data_artifact(server, blob, "slow", extract=False)])
        env = get_env(tmp_path)
        args = ["--catalog", str(cat), "images", "get", "homepage", "--json"]
        size = blob.stat().st_size
        events = kill_at(args, env, lambda evs: any(e.get("type") == "progress" and (e.get("done") or 0) > size // 4
                                                    for e in evs), "a quarter of the download")
        done = max(e.get("done") or 0 for e in events if e.get("type") == "progress")
        assert done < size, "the download finished before the kill"
        dest = tmp_path / "data" / "data" / "ft" / blob.name
        assert not dest.exists(), "a half-written download sits where the complete file goes"
        ok = envctl(*args, env=env)
        assert ok.returncode == 0, ok.stderr[-800:]
        assert sha256(dest) == sha256(blob)
        assert any(r for r in server.ranges(blob.name) if r), "the second run did not resume with Range"
        assert envctl("--catalog", str(cat), "images", "verify", "homepage", env=env).returncode == 0


def test_sigkill_mid_extract_is_redone_never_taken_as_complete(files, tmp_path):
    with FaultServer() as server:
        tar = files["tar"]
        cat = catalog_with(tmp_path, [data_artifact(server, tar, "ok", extract=True)])
        env = get_env(tmp_path)
        args = ["--catalog", str(cat), "images", "get", "homepage", "--json"]
        events = kill_at(args, env, lambda evs: any(e.get("type") == "progress" and e.get("mirror") == "extract"
                                                    and 0 < (e.get("done") or 0) < (e.get("total") or 1) // 2
                                                    for e in evs), "the extract under way", timeout=180)
        assert not any(e.get("type") == "done" and e.get("mirror") == "extract" for e in events)
        target = tmp_path / "data" / "data" / "ft" / "unpacked"
        assert not (target / ".envctl-extract.json").exists(), "an interrupted extract looks complete"
        ok = envctl(*args, env=env)
        assert ok.returncode == 0, ok.stderr[-800:]
        assert (target / ".envctl-extract.json").exists()
        got = sorted(p.name for p in target.iterdir() if not p.name.startswith("."))
        assert got == [f"part-{i:03d}.bin" for i in range(160)]
        with tarfile.open(tar) as t:
            member = t.extractfile("data/part-159.bin")
            assert member is not None and (target / "part-159.bin").read_bytes() == member.read()
        assert not list(target.parent.glob("*.extracting*")), "the partial extract directory was left behind"


def test_sigkill_mid_streamed_image_load_loads_nothing_then_get_loads_it(files, tmp_path):
    with FaultServer() as server:
        server.slow_rate = 1_000_000
        saved = files["image"]
        server.paths[saved.name] = str(saved)
        art = {"name": saved.name, "kind": "image", "image": files["tag"], "size": saved.stat().st_size,
               "sha256": sha256(saved),
               "sources": [{"kind": "http", "mirror": "local", "url": server.url("slow", saved.name)}]}
        cat = catalog_with(tmp_path, [art])
        env = get_env(tmp_path)
        args = ["--catalog", str(cat), "images", "get", "homepage", "--json"]
        size = saved.stat().st_size
        kill_at(args, env, lambda evs: any(e.get("type") == "progress" and (e.get("done") or 0) > size // 3
                                           for e in evs), "a third of the image stream")
        time.sleep(1)
        gone = subprocess.run(["docker", "image", "inspect", files["tag"]], capture_output=True)
        assert gone.returncode != 0, "a half-streamed image was tagged"
        ok = envctl(*args, env=env)
        assert ok.returncode == 0, ok.stderr[-800:]
        image_id = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", files["tag"]], capture_output=True,
                                  text=True).stdout.strip()
        assert image_id == files["image_id"]


# -- resets, spares, snapshots on a live instance --------------------------------------------------------

UNBUFFERED = {"PYTHONUNBUFFERED": "1"}


def group_children(pgid: int) -> list[str]:
    """Command lines of the processes in a process group (envctl's docker clients)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if os.getpgid(int(d.name)) != pgid:
                continue
            out.append((d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except (OSError, ProcessLookupError):
            continue
    return out


def cli_args(lab: Lab, *args: str) -> list[str]:
    return [*args, "--instance", INSTANCE]


def test_sigkill_mid_swap_keeps_one_routed_copy(lab):
    """Killed as it writes the routing table (the table in the proxy changes, read through its control
    service; the runtime flip follows): the table is the old one or the new one, never half of each, the
    live proxy routes what it says or is repaired by the next write; the next reset repairs."""
    lab.replenish("reddit", 1)
    post(lab, f"dirty {uuid.uuid4().hex[:6]}")
    before = table(lab)
    written = before.to_json()
    k = Killed(cli_args(lab, "reset", "reddit", "--json", "--auth-dir", str(lab.auth_dir)), UNBUFFERED)
    try:
        hit = k.wait_for(lambda: table(lab).to_json() != written, 60)
    finally:
        k.kill()
    assert hit, f"never saw the routing-table write: {''.join(k.lines)[-500:]}"
    time.sleep(0.5)
    after = table(lab)
    swapped = after.routes.active["reddit"] != before.routes.active["reddit"]
    if swapped:
        assert after.routes.active["reddit"] == before.ready.spares("reddit")[0]
        assert after.routes.active["reddit"] not in after.ready.spares("reddit")
    else:
        assert after.ready.spares("reddit") == before.ready.spares("reddit")
    print(f"\nkilled mid-swap: the routing table is the {'new' if swapped else 'old'} one")
    assert_sound(lab)
    repaired(lab)


@pytest.mark.parametrize("phase", ["create", "wait"])
def test_sigkill_mid_spare_boot_never_lists_it(lab, phase):
    """'envctl _replenish' killed while it boots a spare: the half-booted copy is never listed as ready;
    the next reset/replenish removes it."""
    with lab.running().routing._routing() as st:
        st.ready.wanted.setdefault("reddit", {})["golden"] = len(st.ready.spares("reddit")) + 1
    before = table(lab)
    k = Killed(cli_args(lab, "_ready", "reddit", "--auth-dir", str(lab.auth_dir)), UNBUFFERED)
    try:
        hit = k.wait_for(lambda: any(f"] {phase}:" in line for line in k.out), 120)
    finally:
        k.kill()
    assert hit, f"never saw phase {phase}: {''.join(k.out)[-500:]} {''.join(k.lines)[-500:]}"
    after = table(lab)
    assert after.ready.spares("reddit") == before.ready.spares("reddit"), "a spare got listed mid-boot"
    strays = slots(lab) - {after.routes.active["reddit"], *after.ready.spares("reddit")}
    assert_sound(lab)
    with lab.running().routing._routing() as st:
        st.ready.wanted.setdefault("reddit", {})["golden"] = 1
    repaired(lab)
    print(f"\nkilled mid-{phase}: {len(strays)} stray copy(ies) left, removed by the next reset/replenish")


def test_sigkill_mid_golden_commit_then_up_repairs(lab):
    """'snapshot create' (golden) killed while the active copy is stopped for its commit: the next 'up'
    starts it again; a golden image is either complete (labelled with its fingerprint) or absent, and spares
    booted from it are pristine."""
    lab.replenish("reddit", 1)
    inst = lab.running()
    active = inst.routing.active_copy("reddit", inst.routing.table())
    assert active is not None
    name = getattr(next(iter(active.members.values())), "name")
    k = Killed(cli_args(lab, "snapshot", "create", "reddit", "--json"), UNBUFFERED)
    try:
        hit = k.wait_for(lambda: (dk.container(name) is not None and not dk.container(name).running)
                         or any(" commit " in c for c in group_children(k.p.pid)), 120)
    finally:
        k.kill()
    assert hit, f"never saw the clean stop / commit: {''.join(k.lines)[-500:]}"
    time.sleep(1)
    from envctl.state import snapshots

    for tag in snapshots.golden_tags(inst, "reddit").values():
        if dk.image_exists(tag):
            labels = subprocess.run(["docker", "image", "inspect", "-f", "{{json .Config.Labels}}", tag],
                                    capture_output=True, text=True).stdout
            assert "envctl.fingerprint" in labels, f"golden {tag} has no fingerprint: a half-made golden"
    r = envctl(*cli_args(lab, "up", "reddit", "--flavor", "mini", "--no-login"))
    assert r.returncode == 0, r.stderr[-800:]
    assert_sound(lab)  # the stopped copy was started again (or replaced), and routed
    repaired(lab)


def test_sigkill_mid_snapshot_restore_then_restore_again(lab):
    post(lab, "kept in snapshot ftsnap")
    lab.snapshot_create("reddit", "ftsnap")
    kept = lab.verify("reddit").actual
    [r] = lab.reset(["reddit"], refill=False)
    assert r.ok
    n0 = slots(lab)
    k = Killed(cli_args(lab, "snapshot", "restore", "reddit", "ftsnap", "--json"), UNBUFFERED)
    try:
        hit = k.wait_for(lambda: len(slots(lab) - n0) > 0, 120)
    finally:
        k.kill()
    try:
        assert hit, f"never saw the restored copy boot: {''.join(k.lines)[-500:]}"
        after = table(lab)
        assert after.routes.active["reddit"] in n0, "a copy still booting was routed"
        assert_sound(lab)
        res = envctl(*cli_args(lab, "snapshot", "restore", "reddit", "ftsnap"))
        assert res.returncode == 0, res.stderr[-800:]
        assert lab.verify("reddit").actual == kept
    finally:
        lab.snapshot_remove("ftsnap", "reddit")
    repaired(lab)


# -- the engine restarted mid-reset --------------------------------------------------------------------

def foreign_containers() -> list[str]:
    names = subprocess.run(["docker", "ps", "--format", "{{.Names}}"], capture_output=True, text=True).stdout.split()
    return [n for n in names if not n.startswith("envctl-ft")]


def restart_engine() -> None:
    pid = subprocess.run(["pgrep", "-x", "dockerd"], capture_output=True, text=True).stdout.split()
    assert len(pid) == 1, pid
    os.kill(int(pid[0]), signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and Path(f"/proc/{pid[0]}").exists():
        time.sleep(0.2)
    subprocess.run(["bash", str(ROOT / "scripts" / "docker-engine.sh")], check=True, capture_output=True)


@pytest.mark.alone
@pytest.mark.skipif(os.environ.get("ENVCTL_FT_ENGINE_RESTART") != "1",
                    reason="restarts dockerd: run alone, with ENVCTL_FT_ENGINE_RESTART=1")
def test_engine_restart_mid_reset_then_up_and_reset_repair(lab):
    foreign = foreign_containers()
    if foreign:
        pytest.skip(f"other containers run on this engine: {foreign[:5]}")
    lab.replenish("reddit", 1)
    post(lab, "before the engine restart")
    n0 = slots(lab)
    k = Killed(cli_args(lab, "reset", "reddit", "--tier", "recreate", "--json", "--auth-dir", str(lab.auth_dir)),
               UNBUFFERED)
    try:
        hit = k.wait_for(lambda: len(slots(lab) - n0) > 0, 120)
        assert hit, "never saw the recreate's copy boot"
        if foreign_containers():  # checked again right before: never restart under another suite
            pytest.skip(f"other containers started on this engine: {foreign_containers()[:5]}")
        restart_engine()
        k.p.wait(timeout=300)
    finally:
        k.kill()
    print(f"\nreset during the engine restart exited {k.p.returncode}: {''.join(k.lines)[-300:]}")
    r = envctl(*cli_args(lab, "up", "reddit", "--flavor", "mini", "--no-login"))
    assert r.returncode == 0, r.stderr[-800:]
    repaired(lab)
