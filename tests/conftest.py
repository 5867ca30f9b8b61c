"""Shared fixtures: the Docker engine, mini-image builds, throwaway containers and a browser.

Real parts only: the engine is made available by scripts/docker-engine.sh (a missing engine is an
error, not a skip), containers publish on 127.0.0.1 and tests reach them only there.
"""
from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

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
            aliases: list[str] | None = None) -> str:
        """Run detached; ``ports`` maps container port -> host port (published on 127.0.0.1 only)."""
        name = name or f"envctl-test-{uuid.uuid4().hex[:8]}"
        argv = ["docker", "run", "-d", "--name", name, "--label", TEST_LABEL]
        for cport, hport in (ports or {}).items():
            argv += ["-p", f"127.0.0.1:{hport}:{cport}"]
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
    from envctl.provision import docker as dk

    lab.down(volumes=True)
    for c in dk.containers(instance=lab.instance):
        dk.remove([c.name])
    remove_instance_images(lab.instance)

