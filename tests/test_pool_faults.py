"""A pool that cannot come up says why, and a flavor is chosen out loud (issue #33), with the real CLI.

- ``serve --instances`` refuses at start, in one line, a flavor whose images are missing (nothing is started);
- without ``--flavor``, ``up`` and ``serve`` say which flavor they chose and why;
- a member that fails to come up twice puts its error in the 503 of ``POST /leases``, in ``lease list`` and in
  ``/metrics``.

Instances: pf-up (offset 39000), pool pfp (homepage, base offset 38000), pfm. Lane a.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from conftest import catalog_copy, free_port
from envctl.catalog import load_catalog
from envctl.images.build import build_for_sites

pytestmark = [pytest.mark.docker, pytest.mark.mini]


def _env(tmp_path: Path, catalog: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ENVCTL_INSTANCE", "ENVCTL_CATALOG")}
    env["ENVCTL_STATE_DIR"] = str(tmp_path / "state")
    if catalog is not None:
        env["ENVCTL_CATALOG"] = str(catalog)
    return env


def _envctl(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envctl", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def _containers(instance: str) -> list[str]:
    return subprocess.run(["docker", "ps", "-aq", "--filter", f"label=envctl.instance={instance}"],
                          capture_output=True, text=True).stdout.split()


@pytest.fixture(scope="module")
def homepage_image(docker_engine: None) -> None:
    build_for_sites(load_catalog(), ["homepage"], "mini")


def test_serve_refuses_a_flavor_whose_images_are_missing_in_one_line(homepage_image: None, tmp_path: Path) -> None:
    def no_image(sites: dict[str, Any]) -> None:
        for f in ("full", "mini", "slim"):
            sites["homepage"]["services"]["web"]["flavors"][f]["image"] = "envctl-test/no-such-homepage:1"
            sites["homepage"]["services"]["web"]["flavors"][f].pop("build", None)

    env = _env(tmp_path, catalog_copy(tmp_path, no_image))
    got = _envctl(env, "serve", "--instances", "1", "--flavor", "mini", "--sites", "homepage", "-i", "pfm",
                  "--base-offset", "38000", "--port", str(free_port()), timeout=60)
    lines = got.stderr.strip().splitlines()
    assert got.returncode != 0 and len(lines) == 1, got.stderr
    assert "envctl-test/no-such-homepage:1" in lines[0] and "envctl images get --flavor mini" in lines[0]
    assert _containers("pfm-1") == [] and _containers("pfm") == []
    # without --flavor: which flavor was chosen and why, then the same refusal
    got = _envctl(env, "serve", "--instances", "1", "--sites", "homepage", "-i", "pfm", "--base-offset", "38000",
                  "--port", str(free_port()), timeout=60)
    lines = got.stderr.strip().splitlines()
    assert got.returncode != 0 and len(lines) == 2, got.stderr
    assert lines[0].startswith("pool flavor full: no flavor has all its images here"), lines
    assert "missing images" in lines[1]


def test_up_without_flavor_says_which_flavor_and_why(homepage_image: None, tmp_path: Path) -> None:
    def full_missing(sites: dict[str, Any]) -> None:
        sites["homepage"]["services"]["web"]["flavors"]["full"] = {"image": "envctl-test/no-such-full-homepage:1"}

    env = _env(tmp_path, catalog_copy(tmp_path, full_missing))
    try:
        got = _envctl(env, "up", "homepage", "-i", "pf-up", "--port-offset", "39000", "--no-login", "--json")
        assert got.returncode == 0, got.stderr[-2000:]
        res = json.loads(got.stdout)
        assert res["flavor"] == "mini" and "full flavor's are not" in res["flavor_reason"], res
        plain = _envctl(env, "status", "-i", "pf-up")
        assert plain.returncode == 0 and "mini" in plain.stdout
        # an existing instance keeps its flavor: nothing is chosen again
        again = _envctl(env, "up", "homepage", "-i", "pf-up", "--no-login", "--json")
        assert again.returncode == 0 and json.loads(again.stdout)["flavor_reason"] == "", again.stderr
    finally:
        _envctl(env, "down", "-i", "pf-up", "--volumes")


class Serve:
    def __init__(self, env: dict[str, str], log: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "envctl", "serve", *args, "--port", str(self.port)],
                                         stdout=out, stderr=out, env=env, start_new_session=True,
                                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                requests.get(f"{self.url}/leases", timeout=5)
                return
            except requests.RequestException:
                assert self.proc.poll() is None, self.log.read_text()
                time.sleep(0.2)
        pytest.fail(f"serve did not answer: {self.log.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def broken_pool(homepage_image: None, tmp_path: Path) -> Iterator[tuple[Serve, dict[str, str]]]:
    def never_healthy(sites: dict[str, Any]) -> None:
        sites["homepage"]["health"] = {"timeout": 3, "probes": [{"name": "index", "path": "/envctl-no-such-page"}]}

    env = _env(tmp_path, catalog_copy(tmp_path, never_healthy))
    srv = Serve(env, tmp_path / "serve.log", "--instances", "1", "--flavor", "mini", "--sites", "homepage", "-i", "pfp",
                "--base-offset", "38000", "--heal-after", "1")
    try:
        yield srv, env
    finally:
        srv.stop()
        _envctl(env, "down", "-i", "pfp-1", "--volumes")


def test_a_member_failing_twice_puts_its_reason_in_the_503_the_listing_and_metrics(
        broken_pool: tuple[Serve, dict[str, str]]) -> None:
    srv, env = broken_pool
    deadline = time.monotonic() + 240
    while True:
        r = requests.post(f"{srv.url}/leases", json={"ttl": 60}, timeout=60)
        assert r.status_code == 503 and "Retry-After" in r.headers, r.text
        if "failed to come up 2 times" in r.json()["error"]:
            break
        assert time.monotonic() < deadline, f"{r.text}\n{srv.log.read_text()[-3000:]}"
        time.sleep(1)
    body = r.json()
    assert "pfp-1 failed to come up 2 times" in body["error"] and "envctl-no-such-page" in body["error"], body
    assert body["retry_after"] >= 1
    listing = requests.get(f"{srv.url}/leases", timeout=30).json()
    assert "envctl-no-such-page" in listing["summary"]["failing"]["pfp-1"]
    metrics = requests.get(f"{srv.url}/metrics", timeout=30).text
    assert 'envctl_members_failing{' in metrics and 'instance="pfp-1"' in metrics
    failures = [line for line in metrics.splitlines() if line.startswith("envctl_member_failures_total")]
    assert failures and float(failures[0].split()[-1]) >= 2
    cli = _envctl(env, "lease", "list", "--instance", "pfp", "--json")
    assert cli.returncode == 0, cli.stderr
    assert "pfp-1" in json.loads(cli.stdout)["summary"]["failing"]
