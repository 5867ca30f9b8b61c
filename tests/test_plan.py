"""Capacity plan (issue 15): spares by default where they fit, and 'down' stops the spares' booting.

The arithmetic runs on the real catalog with chosen host sizes; the docker test shows that 'down'
right after 'up --spares 1' (a replenisher booting a spare in the background) leaves nothing behind.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from envctl.catalog import load_catalog
from envctl.plan import BUDGET_SHARE, copy_memory, plan

GIB = 1 << 30
CAT = load_catalog()


def test_copy_memory_sums_the_flavors_limits() -> None:
    assert copy_memory(CAT, "shopping", "full") == 8 * GIB
    assert copy_memory(CAT, "shopping", "mini") == 1 * GIB
    # map: tile 2g + nominatim 4g + 3 x OSRM 1g + db and web without a limit (512 MiB each)
    assert copy_memory(CAT, "map", "full") == 9 * GIB + 2 * (512 << 20)


def test_spares_go_to_the_slowest_recreate_first_while_they_fit() -> None:
    sites = ["shopping", "reddit", "gitlab"]
    actives = (8 + 4 + 16) * GIB
    # room for exactly one 16 GiB gitlab spare: the slowest recreate gets it, nothing else fits after it
    p = plan(CAT, sites, "full", host_bytes=int((actives + 16 * GIB) / BUDGET_SHARE) + 1)
    assert p.spares() == {"shopping": 0, "reddit": 0, "gitlab": 1} and p.fits
    # less room: gitlab's spare does not fit, shopping's and reddit's do
    p = plan(CAT, sites, "full", host_bytes=int((actives + 12 * GIB) / BUDGET_SHARE) + 1)
    assert p.spares() == {"shopping": 1, "reddit": 1, "gitlab": 0}
    assert p.used_bytes <= p.budget_bytes
    # a small host: no spares, and the active copies alone do not fit
    p = plan(CAT, sites, "full", host_bytes=24 * GIB)
    assert p.spares() == {"shopping": 0, "reddit": 0, "gitlab": 0} and not p.fits


def test_sites_without_a_spare_tier_get_none_and_fixed_counts_are_kept() -> None:
    p = plan(CAT, ["wikipedia", "classifieds", "reddit"], "full", host_bytes=512 * GIB)
    assert p.spares() == {"wikipedia": 0, "classifieds": 0, "reddit": 1}  # the catalog's reset.spares
    # reddit already has 3 (an earlier 'up --spares 3'): counted, kept, and it leaves no room for shopping's
    host = int(((8 + 4) * GIB + 3 * 4 * GIB) / BUDGET_SHARE) + 1
    p = plan(CAT, ["shopping", "reddit"], "full", host_bytes=host, fixed={"reddit": 3})
    assert p.spares() == {"shopping": 0, "reddit": 3}


def test_memory_other_instances_hold_is_not_planned_twice() -> None:
    host = int(((8 + 4) * GIB + (8 + 4) * GIB) / BUDGET_SHARE) + 1  # room for one spare of each
    assert plan(CAT, ["shopping", "reddit"], "full", host_bytes=host).spares() == {"shopping": 1, "reddit": 1}
    # another instance on the same engine already holds 8 GiB: only reddit's spare still fits
    p = plan(CAT, ["shopping", "reddit"], "full", host_bytes=host, reserved=8 * GIB)
    assert p.spares() == {"shopping": 0, "reddit": 1}


def envctl(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("ENVCTL_CATALOG", "ENVCTL_INSTANCE")}
    return subprocess.run([sys.executable, "-m", "envctl", *args], capture_output=True, text=True, env=env, timeout=900)


def test_plan_command() -> None:
    p = envctl("plan", "shopping", "reddit", "--memory", "64g", "--json")
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["host_bytes"] == 64 * GIB and got["applied_by_up"] is True
    assert {s["site"]: s["spares"] for s in got["sites"]} == {"shopping": 1, "reddit": 1}
    bad = envctl("plan", "--memory", "lots")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--memory" in bad.stderr
    mini = envctl("plan", "--flavor", "mini")
    assert mini.returncode == 0 and "boots these spares by default" in mini.stdout


@pytest.mark.docker
@pytest.mark.mini
def test_down_stops_a_spare_being_booted(docker_engine, tmp_path) -> None:
    from envctl.state.reset import replenisher_pids

    inst = "pl1"
    envctl("down", "-i", inst, "--volumes")
    up = envctl("up", "reddit", "--flavor", "mini", "-i", inst, "--port-offset", "11000", "--no-login",
                "--spares", "1", "--json")
    assert up.returncode == 0, up.stderr[-2000:]
    assert json.loads(up.stdout)["spares"] == {"reddit": 1}
    deadline = time.monotonic() + 30
    while not replenisher_pids(inst) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert replenisher_pids(inst), "no replenisher is booting the spare"
    down = envctl("down", "-i", inst, "--volumes")
    assert down.returncode == 0, down.stderr
    assert replenisher_pids(inst) == []
    time.sleep(3)  # a replenisher that survived would create its spare's containers now
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=envctl.instance={inst}"],
                          capture_output=True, text=True).stdout.split()
    assert left == [], f"containers of {inst} left after down: {left}"


@pytest.mark.docker
@pytest.mark.mini
def test_default_up_keeps_a_spare_so_resets_between_episodes_never_recreate(docker_engine, tmp_path) -> None:
    """Issue 15's scenario: plain 'up reddit' (no --spares), then resets spaced like episodes (each after
    the spare pool has refilled): every one is a swap, none recreates, and 'status' shows the refilled spare."""
    inst = "pl2"
    auth = str(tmp_path / "auth")
    envctl("down", "-i", inst, "--volumes")
    try:
        up = envctl("up", "reddit", "--flavor", "mini", "-i", inst, "--port-offset", "11100", "--auth-dir", auth,
                    "--json")
        assert up.returncode == 0, up.stderr[-2000:]
        assert json.loads(up.stdout)["spares"] == {"reddit": 1}, "the capacity plan grants reddit one spare here"

        def spares_ready() -> int:
            st = envctl("status", "-i", inst, "--json")
            assert st.returncode == 0, st.stderr
            return next(s["spares_ready"] for s in json.loads(st.stdout)["sites"] if s["site"] == "reddit")

        tiers = []
        for _ in range(3):
            deadline = time.monotonic() + 120  # an episode: at least as long as the pool takes to refill
            while spares_ready() < 1:
                assert time.monotonic() < deadline, "the spare pool did not refill within 120 s"
                time.sleep(0.5)
            r = envctl("reset", "reddit", "-i", inst, "--auth-dir", auth, "--json")
            assert r.returncode == 0, r.stderr[-2000:]
            tiers.append(json.loads(r.stdout)[0]["tier"])
        assert tiers == ["spare"] * 3, tiers
    finally:
        envctl("down", "-i", inst, "--volumes")


@pytest.mark.docker
@pytest.mark.mini
def test_up_repairing_a_site_keeps_the_spare_a_replenisher_is_booting(docker_engine, tmp_path) -> None:
    """'up' repairs a site whose active copy is gone and removes leftovers of interrupted runs, but not
    the spare a background replenisher is booting at that moment (it holds the site's spare lock)."""
    from envctl.provision import proxy
    from envctl.state.reset import replenisher_pids

    inst = "pl3"
    auth = str(tmp_path / "auth")
    envctl("down", "-i", inst, "--volumes")

    def copies() -> dict[str, set[str]]:
        out = subprocess.run(["docker", "ps", "-a", "--filter", f"label=envctl.instance={inst}", "--filter",
                              "label=envctl.site=reddit", "--format", '{{.Label "envctl.slot"}} {{.Label "envctl.role"}}'],
                             capture_output=True, text=True, check=True).stdout.split("\n")
        by_role: dict[str, set[str]] = {}
        for line in filter(None, out):
            slot, role = line.split()
            by_role.setdefault(role, set()).add(slot)
        return by_role

    try:
        up = envctl("up", "reddit", "--flavor", "mini", "-i", inst, "--port-offset", "11200", "--auth-dir", auth,
                    "--no-login", "--spares", "1", "--json")
        assert up.returncode == 0, up.stderr[-2000:]
        deadline = time.monotonic() + 60
        while not copies().get("spare") and time.monotonic() < deadline:  # the replenisher created its copy
            time.sleep(0.1)
        assert replenisher_pids(inst), "the spare was ready before the test could race it; nothing was tested"
        booting = copies()["spare"]
        active = copies()["active"]
        subprocess.run(["docker", "rm", "-f", *[c for c in subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=envctl.instance={inst}", "--filter", "label=envctl.role=active"],
            capture_output=True, text=True).stdout.split()]], check=True, capture_output=True)
        rep = envctl("up", "reddit", "-i", inst, "--auth-dir", auth, "--no-login", "--json")
        assert rep.returncode == 0, rep.stderr[-2000:]
        assert json.loads(rep.stdout)["sites"][0]["action"] == "repaired"
        assert booting <= copies().get("spare", set()), "up removed the spare being booted"
        deadline = time.monotonic() + 120
        while replenisher_pids(inst) and time.monotonic() < deadline:
            time.sleep(0.5)
        st = proxy.read_state(inst)
        assert st is not None and st.spares.get("reddit") and set(st.spares["reddit"]) <= booting, st
        assert st.active["reddit"] not in active, "the repaired site runs on a new copy"
    finally:
        envctl("down", "-i", inst, "--volumes")
