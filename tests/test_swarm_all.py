"""Every command as on one machine, on a swarm (issue 37): ``envctl up --all --flavor mini`` on a test swarm brings
every site up healthy; ``envctl login`` writes the cookie files and the header file; ``envctl env`` exports URLs that
answer; ``envctl smoke`` passes its bundled mini suite against the swarm instance (a real browser, the benchmark's
evaluators); a snapshot of a site is taken, restored and removed (the lab's registry deletes it).

The swarm is a lab of its own (``SwarmLab(name="all")``: a drained manager and two workers on 172.31.245.0/24), with
the mini images pushed to its registry first (what 'up' would push from the manager's engine: tests/test_swarm_data.py
drives that path). Instance swall, port offset 0 on its node (the lab's own addresses: the one exception to
'127.0.0.1 only').
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from swarmlab import SwarmLab
from envctl.catalog import load_catalog
from envctl.images.build import PROXY_IMAGE, build_for_sites

pytestmark = [pytest.mark.docker, pytest.mark.mini, pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(2400)]
INSTANCE = "swall"


class AllLab:
    def __init__(self, lab: SwarmLab, work: Path) -> None:
        self.lab, self.work = lab, work
        self.auth = work / ".auth" / INSTANCE  # the default auth dir of commands run in work (up, login, smoke)
        self.env = {**os.environ, "DOCKER_HOST": lab.manager_host, "ENVCTL_BACKEND": "swarm",
                    "ENVCTL_SWARM_REGISTRY": lab.registry, "ENVCTL_STATE_DIR": str(work / "state"),
                    "ENVCTL_ENGINE_TIMEOUT": "60", "ENVCTL_CHROMIUM": os.environ.get("ENVCTL_CHROMIUM", "/usr/bin/chromium")}
        for k in ("ENVCTL_INSTANCE", "ENVCTL_CATALOG"):
            self.env.pop(k, None)

    def envctl(self, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "envctl", *args], capture_output=True, text=True, timeout=timeout,
                              env=self.env, cwd=self.work)

    def json(self, *args: str) -> Any:
        p = self.envctl(*args, "--json")
        assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
        return json.loads(p.stdout)


@pytest.fixture(scope="module")
def al(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AllLab]:
    cat = load_catalog()
    build_for_sites(cat, list(cat.sites), "mini")
    lab = SwarmLab(name="all", subnet="172.31.245.0/24", registry_port=54500, verbose=False)
    lab.up()
    work = tmp_path_factory.mktemp("swarm-all")
    try:
        for host, ip in lab.node_ips.items():
            lab.docker("node", "update", "--label-add", f"envctl.engine=tcp://{ip}:2375", host)
        lab.docker("node", "update", "--availability", "drain", "node1")  # the manager only manages
        images = {sf.image for s in cat.sites.values() for svc in s.services.values()
                  for f, sf in svc.flavors.items() if f == "mini"}
        for img in sorted(images | {PROXY_IMAGE, "debian:bookworm-slim"}):
            lab.push(img)
        al = AllLab(lab, work)
        t = time.monotonic()
        up = al.json("up", "--all", "--flavor", "mini", "-i", INSTANCE, "--spares", "0")
        print(f"\n[swarm all] up --all (mini, {len(up['sites'])} sites) on the swarm: {time.monotonic() - t:.1f}s",
              flush=True)
        al.up = up  # type: ignore[attr-defined]
        yield al
        al.envctl("down", "-i", INSTANCE, "--volumes")
    finally:
        lab.down()


def test_up_all_on_a_swarm_brings_every_site_up_healthy_on_a_worker(al: AllLab) -> None:
    up = al.up  # type: ignore[attr-defined]
    cat = load_catalog()
    assert up["ok"] and {s["site"] for s in up["sites"]} == set(cat.sites), up
    st = al.json("status", "-i", INSTANCE)
    node = next(h for h, ip in al.lab.node_ips.items() if ip == st["public_host"])
    assert node in ("node2", "node3") and all(s["healthy"] for s in st["sites"]), st
    health = al.json("health", "-i", INSTANCE)
    assert health["ok"], health


def test_login_writes_the_cookie_files_and_the_header_file(al: AllLab) -> None:
    res = al.json("login", "--all", "-i", INSTANCE)
    assert res["ok"], res
    for name in ("shopping_state.json", "shopping_admin_state.json", "reddit_state.json", "gitlab_state.json",
                 "classifieds_state.json", "extra_headers.json"):
        f = al.auth / name
        assert f.is_file() and stat.S_IMODE(f.stat().st_mode) == 0o600, name
    check = al.envctl("login", "--check", "--all", "-i", INSTANCE)
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]


def test_env_exports_urls_that_answer_from_here(al: AllLab) -> None:
    env = al.json("env", "-i", INSTANCE)  # the shell format, as one flat JSON object
    host = al.json("status", "-i", INSTANCE)["public_host"]
    for var in ("SHOPPING", "REDDIT", "GITLAB", "MAP", "WIKIPEDIA", "HOMEPAGE"):
        url = env[var]
        assert host in url, (var, url)
        assert requests.get(url, timeout=30).status_code == 200, (var, url)


def test_smoke_passes_its_bundled_suite_against_the_swarm_instance(al: AllLab, tmp_path: Path) -> None:
    t = time.monotonic()
    p = al.envctl("smoke", "--tasks", "mini", "-i", INSTANCE, "--report", str(tmp_path), "--json")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads(p.stdout)
    c = res["counts"]
    print(f"\n[swarm all] smoke --tasks mini on the swarm: {c} in {time.monotonic() - t:.0f}s", flush=True)
    assert res["ok"] and c["pass"] > 0 and c["fail"] == 0, c


def test_a_snapshot_is_taken_restored_and_removed_on_the_swarm(al: AllLab) -> None:
    snap = al.json("snapshot", "create", "reddit", "swall1", "-i", INSTANCE)
    host = al.json("status", "-i", INSTANCE)["public_host"]
    base, title = f"http://{host}:9999", "written on the swarm"
    s = requests.Session()
    s.post(f"{base}/login_check", data={"_username": "MarvelsGrantMan136", "_password": "test1234"}, timeout=30)
    assert s.post(f"{base}/submit", data={"submission[title]": title, "submission[forum]": "books",
                                          "submission[url]": "", "submission[body]": "x"}, timeout=30).ok
    assert al.envctl("verify", "reddit", "-i", INSTANCE).returncode == 1  # the fingerprint sees the write
    res = al.json("snapshot", "restore", "reddit", "swall1", "-i", INSTANCE)
    assert res["fingerprint"] == snap["fingerprint"], res
    assert title not in requests.get(f"{base}/f/books/new", timeout=30).text
    assert any(x["name"] == "swall1" for x in al.json("snapshot", "list", "-i", INSTANCE))
    gone = al.envctl("snapshot", "rm", "swall1", "-i", INSTANCE)
    assert gone.returncode == 0, gone.stderr[-2000:]
    tags = requests.get(f"http://{al.lab.registry}/v2/envctl-snap/reddit-web/tags/list", timeout=10).json()
    assert not [t for t in (tags.get("tags") or []) if t.endswith("-swall1")], tags  # deleted from the lab's registry
    assert not any(x["name"] == "swall1" for x in al.json("snapshot", "list", "-i", INSTANCE))
