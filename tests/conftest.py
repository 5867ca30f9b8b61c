"""Shared fixtures: the Docker engine, mini-image builds, throwaway containers and a browser.

Real parts only: the engine is made available by scripts/docker-engine.sh (a missing engine is an
error, not a skip), containers publish on 127.0.0.1 and tests reach them only there.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import pytest
import requests

if TYPE_CHECKING:
    from envctl.lab import Lab

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("ENVCTL_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-quic",
]
TEST_LABEL = "envctl.test"


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """A reachable Docker engine with the local base image (started by the project's script if needed)."""
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0 or subprocess.run(
        ["docker", "image", "inspect", "debian:bookworm-slim"], capture_output=True
    ).returncode != 0:
        subprocess.run(["bash", str(ROOT / "scripts" / "docker-engine.sh")], check=True)


_built: set[str] = set()


@pytest.fixture(scope="session")
def mini_image(docker_engine: None) -> Callable[[str], str]:
    """``mini_image("magento")`` builds base + that image once per session and returns its tag."""
    from envctl.images.build import build, mini_builds

    specs = {s.name: s for s in mini_builds()}

    def get(name: str) -> str:
        for dep in ("base", name):
            if dep not in _built:
                build(specs[dep])
                _built.add(dep)
        return specs[name].tag

    return get


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


REGISTRY_BIN = "/usr/bin/docker-registry"


@pytest.fixture(scope="module")
def local_registry(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's ``docker-registry`` (the CNCF distribution registry) on 127.0.0.1:<free port> (Docker talks
    plain HTTP to 127.0.0.0/8), as a registry mirror; deletes enabled, so a test can take a manifest away."""
    if not Path(REGISTRY_BIN).exists():
        pytest.fail(f"{REGISTRY_BIN} is missing: apt-get install docker-registry")
    root = tmp_path_factory.mktemp("registry")
    port = free_port()
    cfg = root / "config.yml"
    cfg.write_text(f"version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: {{rootdirectory: {root / 'data'}}}, "
                   f"delete: {{enabled: true}}}}\nhttp: {{addr: 127.0.0.1:{port}}}\n")
    proc = subprocess.Popen([REGISTRY_BIN, "serve", str(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{port}/v2/", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "docker-registry did not start"
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


class Containers:
    """Start containers for a test and remove them afterwards (labelled so strays can be found)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.networks: list[str] = []

    def network(self) -> str:
        name = f"envctl-test-{uuid.uuid4().hex[:8]}"
        subprocess.run(["docker", "network", "create", "--label", TEST_LABEL, name], check=True, capture_output=True)
        self.networks.append(name)
        return name

    def run(self, image: str, *, ports: dict[int, int] | None = None, env: dict[str, str] | None = None,
            name: str | None = None, network: str | None = None, command: list[str] | None = None,
            aliases: list[str] | None = None, volumes: list[str] | None = None) -> str:
        """Run detached; ``ports`` maps container port -> host port (published on 127.0.0.1 only);
        ``volumes`` are ``docker run -v`` values (``/host/dir:/target[:ro]``)."""
        name = name or f"envctl-test-{uuid.uuid4().hex[:8]}"
        argv = ["docker", "run", "-d", "--name", name, "--label", TEST_LABEL]
        for cport, hport in (ports or {}).items():
            argv += ["-p", f"127.0.0.1:{hport}:{cport}"]
        for v in volumes or []:
            argv += ["-v", v]
        for k, v in (env or {}).items():
            argv += ["-e", f"{k}={v}"]
        if network:
            argv += ["--network", network]
            for a in aliases or []:
                argv += ["--network-alias", a]
        argv.append(image)
        argv += command or []
        self.names.append(name)  # recorded first: a failed run can leave a "Created" container
        subprocess.run(argv, check=True, capture_output=True)
        return name

    def exec(self, name: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "exec", name, *cmd], capture_output=True, text=True, check=check)

    def logs(self, name: str) -> str:
        p = subprocess.run(["docker", "logs", "--tail", "50", name], capture_output=True, text=True)
        return p.stdout + p.stderr

    def cleanup(self) -> None:
        if self.names:
            subprocess.run(["docker", "rm", "-f", "-v", *self.names], capture_output=True)
        for n in self.networks:
            subprocess.run(["docker", "network", "rm", n], capture_output=True)


@pytest.fixture
def containers(docker_engine: None) -> Iterator[Containers]:
    c = Containers()
    yield c
    c.cleanup()


@pytest.fixture(scope="module")
def module_containers(docker_engine: None) -> Iterator[Containers]:
    c = Containers()
    yield c
    c.cleanup()


def wait_http(url: str, *, timeout: float = 90, ok: Callable[[requests.Response], bool] | None = None,
              logs: Callable[[], str] | None = None) -> requests.Response:
    """Poll ``url`` until it answers (and ``ok(resp)``), or fail with the last answer and logs."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            r = requests.get(url, timeout=5, allow_redirects=False)
            if ok(r) if ok else r.status_code < 500:
                return r
            last = f"HTTP {r.status_code}: {r.text[:200]!r}"
        except requests.RequestException as exc:
            last = exc
        time.sleep(0.25)
    pytest.fail(f"{url} not ready after {timeout}s; last: {last}\n{logs() if logs else ''}")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """A headless Debian Chromium driven by Playwright (per module: Playwright's sync API keeps an
    event loop on the main thread while it is open, which other modules' own sessions must not meet)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


# -- login-state helpers (test_auth_mini, test_auth_http) --------------------------------------------

def probe_specs(target: Any, sites: list[str]) -> list[Any]:
    """The expiry probes of ``sites`` where ``target`` (an envctl.auth Target) publishes them."""
    from envctl.auth.check import ProbeSpec

    return [ProbeSpec.of(target.catalog, s, target.deployment) for s in sites]


def browser_probe(target: Any, sites: list[str], state: Any) -> list[str]:
    """The probes' problems with login ``state`` (a storage_state path or dict, or None), in a real Chromium."""
    import asyncio

    from envctl.auth.browser import launch
    from envctl.auth.check import probe_state

    async def run() -> list[str]:
        from playwright.async_api import async_playwright

        async with async_playwright() as pw:
            browser = await launch(pw)
            try:
                return await probe_state(browser, probe_specs(target, sites), state)
            finally:
                await browser.close()

    return asyncio.run(run())


def catalog_copy(tmp_path: Path, edit: Callable[[dict], None]) -> Path:
    """A copy of the built-in catalog with ``edit`` applied to its ``sites`` mapping."""
    import yaml

    from envctl.catalog import BUILTIN

    raw = yaml.safe_load(BUILTIN.read_text())
    edit(raw["sites"])
    p = tmp_path / "sites.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


# -- a mini reddit instance of the lab (the fault and soak tests) -----------------------------------

def remove_instance_images(instance: str) -> None:
    """The golden images and snapshots ``instance`` made (labelled with it): leave nothing behind."""
    for _ in range(3):  # newest first, so children go before their parents; a commit killed mid-way adds some
        ids = subprocess.run(["docker", "images", "-a", "-q", "--filter", f"label=envctl.instance={instance}"],
                             capture_output=True, text=True).stdout.split()
        if not ids:
            return
        for image in dict.fromkeys(ids):
            subprocess.run(["docker", "rmi", "-f", image], capture_output=True)


def up_reddit(instance: str, offset: int, auth_dir: Path) -> "Lab":
    """A lab instance with the mini reddit up (no login state), from a clean slate."""
    from envctl.catalog import load_catalog
    from envctl.images.build import build_for_sites
    from envctl.lab import Lab

    cat = load_catalog()
    build_for_sites(cat, ["reddit"], "mini")
    lab = Lab(cat, instance=instance, auth_dir=auth_dir)
    lab.down(volumes=True)
    res = lab.up(["reddit"], flavor="mini", port_offset=offset, login=False, spares=0)  # spares: each test's own
    assert res.ok, [s.error for s in res.sites if not s.ok]
    return lab


def tear_down(lab: "Lab") -> None:
    """``down --volumes``, then whatever a killed operation may have left: containers, images."""
    from envctl.backends.docker import ENGINE as dk

    lab.down(volumes=True)
    for c in dk.containers(instance=lab.instance):
        dk.remove([c.name])
    remove_instance_images(lab.instance)



# -- engine work shared by several modules (issue 22) ------------------------------------------------
#
# A session fixture below is brought up once for every module that asks for it. The modules that use
# one run next to each other (``pytest_collection_modifyitems``) and the fixture is taken down right
# after its last user (``pytest_runtest_teardown``), so nothing of it is left running under the other
# tests (the fault tests, for one, skip their engine restart while other containers run).

# fixture -> the modules that use it, in the order they run (readers first, writers last)
SHARED_USERS: dict[str, tuple[str, ...]] = {
    "mini_all": ("test_start_pages.py", "test_demo.py", "test_lifecycle.py", "test_auth_mini.py"),
}
_closers: dict[str, Callable[[], None]] = {}  # fixture -> how to take it down early
_last_user: dict[str, str] = {}  # fixture -> nodeid of the last test that needs it


# -- lanes: `make test` runs the suite as three pytest sessions side by side (scripts/test.sh) --------------
#
# ENVCTL_TEST_LANE=a|b|c selects a lane's modules; "alone" selects the tests marked ``alone`` (they stop or restart
# the engine, so nothing else may run), which every lane leaves out. Without the variable, everything runs in one
# session (the tests marked ``alone`` still skip unless ENVCTL_FT_ENGINE_RESTART=1).
# The lanes share the engine, so no module of one lane may publish a port or use an instance name that a
# module of another lane uses (each module's instance and port offset is stated at its top), and every
# module that uses a session fixture of SHARED_USERS is in the same lane as that fixture's other users.
# Lane c: the swarm tests, whose nodes are engines in containers on networks of their own (tests/swarmlab.py's
# default lab: test_swarm, then test_cloud_ansible, which share its names and subnet, so they run one after the
# other in this lane; the swarm data and every-command tests: labs of their own, "data" on 172.31.248.0/24, "all"
# on 172.31.245.0/24); on the host they publish only their registries' push ports (15000-15199, 54500-54899).
# Lane b: the per-site mini image tests and the read-mostly reset tests, webarena-verified's and BrowserGym's
# webarena_verified tests (instances wav2, wav3, wav9 at offsets 52100-52900), and the lease and in-place modules
# with instances and offsets of their own (h1t 44100, h2t 45200, dr 40000, h5k 46000, h5r 46100, fa1 48100);
# `make test` runs the full-flavor rehearsal after it, in the same lane. Lane a: the rest, then the slim rehearsal.
LANE_C = ("test_cloud_ansible.py", "test_swarm.py", "test_swarm_data.py", "test_swarm_all.py")
LANE_B = ("test_mini_*.py", "test_soak.py",
          "test_snapshot_live.py", "test_pristine_and_volumes.py", "test_fetch.py", "test_cloud_ec2.py",
          "test_evaluators.py", "test_webarena_verified.py", "test_browsergym_verified.py",
          "test_inplace_magento.py", "test_inplace_gitlab.py", "test_drills.py", "test_pool_known.py",
          "test_read_leases.py", "test_fast_answers.py")


def module_lane(name: str) -> str:
    import fnmatch

    for lane, patterns in (("c", LANE_C), ("b", LANE_B)):
        if any(fnmatch.fnmatch(name, pat) for pat in patterns):
            return lane
    return "a"


def lane_of(item: pytest.Item) -> str:
    return "alone" if item.get_closest_marker("alone") else module_lane(item.path.name)


assert all(len({module_lane(m) for m in ms}) == 1 for ms in SHARED_USERS.values()), "a shared fixture spans lanes"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the lane's tests (ENVCTL_TEST_LANE); group the modules sharing a session fixture (whole
    modules, their own order kept)."""
    lane = os.environ.get("ENVCTL_TEST_LANE", "")
    if lane:
        if lane not in ("a", "b", "c", "alone"):
            raise pytest.UsageError(f"ENVCTL_TEST_LANE={lane!r}: give a, b, c or alone")
        keep = [i for i in items if lane_of(i) == lane]
        dropped = [i for i in items if lane_of(i) != lane]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    for modules in SHARED_USERS.values():
        groups = {m: [i for i in items if i.path.name == m] for m in modules}
        if sum(1 for g in groups.values() if g) < 2:
            continue
        first = min(items.index(g[0]) for g in groups.values() if g)
        moved = {id(i) for g in groups.values() for i in g}
        rest = [i for i in items if id(i) not in moved]
        at = sum(1 for i in items[:first] if id(i) not in moved)
        items[:] = rest[:at] + [i for m in modules for i in groups[m]] + rest[at:]


def pytest_collection_finish(session: pytest.Session) -> None:
    for name in SHARED_USERS:
        users = [i.nodeid for i in session.items if name in getattr(i, "fixturenames", ())]
        if users:
            _last_user[name] = users[-1]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield  # the test's own (module) fixtures first
    for name, nodeid in _last_user.items():
        if item.nodeid == nodeid and name in _closers:
            _closers.pop(name)()


def _shared(name: str, close: Callable[[], None]) -> Callable[[], None]:
    """Register ``close`` to run after the last user of fixture ``name``; returns the idempotent closer."""
    done: list[bool] = []

    def once() -> None:
        if not done:
            done.append(True)
            close()

    _closers[name] = once
    return once


# -- one mini 'up --all' instance: test_start_pages, test_demo, test_lifecycle's lc1 checks, test_auth_mini --

MINI_ALL, MINI_ALL_OFFSET = "mini-all", 24000


def envctl_cli(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    """``python -m envctl ...`` with the built-in catalog and no default instance from the environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("ENVCTL_CATALOG", "ENVCTL_INSTANCE")}
    return subprocess.run([sys.executable, "-m", "envctl", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def _wait_ports_bindable(offset: int, timeout: float = 90) -> None:
    """Every public mini port of an instance at ``offset`` can be bound (the fixed offsets reach into
    Linux's ephemeral range, where some client socket may hold a port for a while)."""
    from envctl.catalog import load_catalog

    cat = load_catalog()
    ports = [p.public + offset for n in cat.sites for svc in cat.site(n).services_for("mini")
             if (p := cat.site(n).services[svc].ports) is not None]
    busy_ports_after(ports, timeout)  # still busy: 'up' says which port and who holds it


def busy_ports_after(ports: list[int], timeout: float) -> list[int]:
    """Wait (up to ``timeout``) until every port in ``ports`` can be bound on 127.0.0.1; the ports still
    busy then ([] when none). Fixed offsets reach into Linux's ephemeral range, where a client socket of
    another process may hold a port for a while."""
    deadline = time.monotonic() + timeout
    while True:
        busy = []
        for port in ports:
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    busy.append(port)
        if not busy or time.monotonic() > deadline:
            return busy
        time.sleep(0.5)


class MiniAll:
    """The shared instance: ``up`` is its ``envctl up --all --json`` result, ``auth`` its login files."""

    def __init__(self, up: dict, auth: Path) -> None:
        self.instance, self.offset, self.up, self.auth = MINI_ALL, MINI_ALL_OFFSET, up, auth


@pytest.fixture(scope="session")
def mini_all(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniAll]:
    """``envctl images build --flavor mini`` then ``envctl up --all --flavor mini`` (logins recorded,
    no spares), once per session. Tests that only read use it as it is; a test that writes must leave it
    as it found it (through envctl's own reset), or run in the last module of SHARED_USERS["mini_all"]."""
    built = envctl_cli("images", "build", "--flavor", "mini", "--json")
    assert built.returncode == 0, built.stderr[-2000:]
    auth = tmp_path_factory.mktemp("mini-all-auth")
    close = _shared("mini_all", lambda: envctl_cli("down", "-i", MINI_ALL, "--volumes"))
    envctl_cli("down", "-i", MINI_ALL, "--volumes")  # strays of an interrupted run
    _wait_ports_bindable(MINI_ALL_OFFSET)
    try:
        up = envctl_cli("up", "--all", "--flavor", "mini", "-i", MINI_ALL, "--port-offset", str(MINI_ALL_OFFSET),
                        "--auth-dir", str(auth), "--spares", "0", "--json")
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
        yield MiniAll(json.loads(up.stdout), auth)
    finally:
        close()


# -- the cloud tests' lab manifests ---------------------------------------------------------------

@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVCTL_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"
