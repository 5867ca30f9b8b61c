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
from envctl.routing.table import ReadyCopies, Routes, RoutingTable
from envctl.plan import BUDGET_SHARE, MARGIN, EngineMemory, Held, copy_memory, counted, plan

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


# -- issue 23: copies counted by what they really use -------------------------------------------------

MIB = 1 << 20


def test_a_container_counts_its_measured_use_times_the_margin_capped_by_its_limit() -> None:
    assert counted(512 * MIB, 80 * MIB) == int(80 * MIB * MARGIN)
    assert counted(512 * MIB, 400 * MIB) == 512 * MIB  # the limit is a cap
    assert counted(512 * MIB, None) == 512 * MIB  # nothing measured: the limit
    assert counted(0, 100 * MIB) == int(100 * MIB * MARGIN)  # no limit: measured x margin, uncapped
    assert counted(0, None) == 512 * MIB  # neither: SERVICE_MEMORY_DEFAULT
    assert counted(512 * MIB, 80 * MIB, margin=2) == 160 * MIB


def test_a_copy_about_to_boot_counts_the_measured_active_copy() -> None:
    p = plan(CAT, ["reddit"], "mini", host_bytes=24 * GIB, measured={"reddit": 80 * MIB})
    r = p.sites[0]
    assert (r.copy_bytes, r.measured_bytes, r.counted_bytes) == (512 * MIB, 80 * MIB, 120 * MIB)
    assert p.used_bytes == 2 * 120 * MIB and p.spares() == {"reddit": 1} and r.why == ""
    # a copy measured above its limits / 1.5 is counted by the limits
    assert plan(CAT, ["reddit"], "mini", host_bytes=24 * GIB, measured={"reddit": 500 * MIB}).sites[0].counted_bytes \
        == 512 * MIB


def mini_instance(name: str, used: int, *, spare: bool = True, wanted: int = 1) -> tuple[list[Held], dict, dict]:
    """A mini instance running reddit (one 512 MiB container using ``used``), its proxy, maybe a spare."""
    cs = [Held(name, "", "", "proxy", "mini", 256 * MIB, 6 * MIB),
          Held(name, "reddit", "a", "active", "mini", 512 * MIB, used)]
    if spare:
        cs.append(Held(name, "reddit", "b", "spare", "mini", 512 * MIB, used))
    return cs, {"reddit": "a"}, {"reddit": wanted}


def engine(*instances: tuple[str, tuple[list[Held], dict, dict]]) -> EngineMemory:
    cs, active, wanted = [], {}, {}
    for name, (c, a, w) in instances:
        cs += c
        active[name], wanted[name] = a, w
    return EngineMemory(tuple(cs), active, wanted, sum(h.measured or 0 for h in cs), "cgroup")


def test_other_instances_are_counted_by_measured_use_not_limits() -> None:
    e = engine(*[(f"o{i}", mini_instance(f"o{i}", 80 * MIB)) for i in range(3)], ("me", mini_instance("me", 80 * MIB)))
    held, others = e.held_by_others("me")
    one = int(6 * MIB * MARGIN) + 2 * int(80 * MIB * MARGIN)  # proxy + active + spare
    assert (held, others) == (3 * one, 3)
    assert e.held_by_others("me", by_limits=True) == (3 * 2 * 512 * MIB, 3)  # the old rule: limits, no proxies
    assert e.active_use("me") == {"reddit": 80 * MIB}
    assert e.site_use("mini", exclude="me") == {"reddit": 80 * MIB}


def test_a_spare_being_refilled_keeps_its_room_and_a_booting_copy_counts_as_the_active_one() -> None:
    # o1's spare was just swapped in and removed: the replenisher is booting the next one
    gone = engine(("o1", mini_instance("o1", 80 * MIB, spare=False)))
    there = engine(("o1", mini_instance("o1", 80 * MIB)))
    assert gone.held_by_others("me") == there.held_by_others("me")
    # a spare still booting uses little so far: it is counted as the active copy
    cs, a, w = mini_instance("o1", 80 * MIB)
    cs[2] = Held("o1", "reddit", "b", "spare", "mini", 512 * MIB, 5 * MIB)
    assert engine(("o1", (cs, a, w))).held_by_others("me") == there.held_by_others("me")
    # a pool's own members are left out by a predicate
    e = engine(("p-1", mini_instance("p-1", 80 * MIB)), ("x", mini_instance("x", 80 * MIB)))
    assert e.held_by_others(lambda n: n.startswith("p-"))[1] == 1


def test_the_issue_23_scenario_three_mini_instances_leave_room_for_a_spare() -> None:
    """Three other mini instances (every site, ~1 GiB used each) on a 24 GB host: by limits they hold
    3 x 9.1 GiB, more than the budget, so 'up reddit' got no spare, silently; by use it gets it."""
    host = 24 * 10 ** 9
    all_limits = sum(copy_memory(CAT, s, "mini") for s in CAT.resolve(None, all_sites=True)
                     if "mini" in CAT.site(s).flavors)
    old = plan(CAT, ["reddit"], "mini", host_bytes=host, reserved=3 * all_limits, others=3)
    assert old.spares() == {"reddit": 0}
    assert old.short()["reddit"].startswith("reddit: 0 of 1 spare: ") and "3 other instances" in old.short()["reddit"]
    new = plan(CAT, ["reddit"], "mini", host_bytes=host, reserved=3 * int(1 * GIB * MARGIN), others=3,
               measured={"reddit": 80 * MIB})
    assert new.spares() == {"reddit": 1} and new.short() == {}


def test_sixteen_mini_reddit_instances_each_get_a_spare_by_measured_use() -> None:
    """The density goal: by limits 15 instances of reddit (proxy, active, spare) leave the 16th no
    spare on a 24 GB host with every site's spares... by use every one of 16 gets its spare."""
    host = 24 * 10 ** 9
    e = engine(*[(f"o{i}", mini_instance(f"o{i}", 80 * MIB)) for i in range(15)], ("me", mini_instance("me", 80 * MIB)))
    reserved, others = e.held_by_others("me")
    assert plan(CAT, ["reddit"], "mini", host_bytes=host, reserved=reserved, others=others,
                measured=e.active_use("me")).spares() == {"reddit": 1}
    big = engine(*[(f"o{i}", mini_instance(f"o{i}", 80 * MIB)) for i in range(30)])
    by_limits, n = big.held_by_others("me", by_limits=True)
    p = plan(CAT, ["reddit"], "mini", host_bytes=host, reserved=by_limits, others=n)
    assert p.spares() == {"reddit": 0} and "30 other instances" in p.sites[0].why


def test_a_replan_never_takes_a_spare_back_and_fixed_counts_stay() -> None:
    p = plan(CAT, ["reddit", "gitlab"], "mini", host_bytes=1 * GIB, at_least={"reddit": 1}, fixed={"gitlab": 0})
    assert p.spares()["reddit"] == 1 and p.spares()["gitlab"] == 0


def tbl(active: dict[str, str] | None = None, wanted: dict[str, int] | None = None,
        planned: dict[str, dict] | None = None) -> RoutingTable:
    """A routing table with these spares wanted (site -> count) and the plan's say."""
    return RoutingTable(Routes(active=active or {}),
                        ReadyCopies(wanted={s: {"golden": n} for s, n in (wanted or {}).items()}, planned=planned or {}))


def test_the_routing_table_keeps_what_the_plan_decided() -> None:
    t = tbl(wanted={"reddit": 0}, planned={"reddit": {"wanted": 1, "why": "reddit: 0 of 1 spare: ..."}})
    back = RoutingTable.from_json(t.to_json())
    assert back.ready.planned == t.ready.planned
    from envctl.state.capacity import short
    assert short(back, "reddit") and not short(tbl(wanted={"reddit": 1}), "reddit")
    back.ready.wanted.setdefault("reddit", {})["golden"] = 1
    assert not short(back, "reddit")



class FakeInstance:
    """What capacity.replan uses of an Instance: name, catalog, flavor, settings, backend.placement.host_memory, and of
    its routing part table(), sites_up(), raise_planned() (the real rule: never lower, only for a site the plan
    decides); this fake is its own routing part."""

    def __init__(self, table: RoutingTable) -> None:
        self.name, self.catalog, self.flavor, self._table = "me", CAT, "mini", table
        self.settings = None
        self.backend = type("NoHost", (), {"placement": type("P", (), {"host_memory": staticmethod(lambda _s: None)})()})()
        self.routing = self

    def table(self) -> RoutingTable:
        return RoutingTable.from_json(self._table.to_json())

    def sites_up(self, table: RoutingTable) -> list[str]:
        return list(table.routes.active)

    def raise_planned(self, site: str, granted: int, planned: dict) -> int | None:
        t = self.table()
        if site not in t.ready.planned:
            return None
        t.ready.planned[site] = planned
        t.ready.wanted.setdefault(site, {})["golden"] = max(t.ready.want(site), granted)
        self._table = t
        return t.ready.want(site)


def test_a_replenisher_replans_a_site_the_plan_cut_and_boots_its_spare_once_it_fits(monkeypatch) -> None:
    from envctl.state import capacity

    monkeypatch.setattr("envctl.plan.host_memory", lambda: 24 * 10 ** 9)
    cut = tbl(active={"reddit": "a"}, wanted={"reddit": 0},
              planned={"reddit": {"wanted": 1, "why": "reddit: 0 of 1 spare: ..."}})
    inst = FakeInstance(cut)
    me = mini_instance("me", 80 * MIB, spare=False, wanted=0)
    full = engine(*[(f"o{i}", mini_instance(f"o{i}", 400 * MIB)) for i in range(30)], ("me", me))
    monkeypatch.setattr(capacity, "engine_or_none", lambda _inst=None: full)
    assert capacity.replan(inst, "reddit") == 0  # still no room: kept at 0, the reason renewed
    assert "30 other instances" in inst.routing.table().ready.planned["reddit"]["why"]
    freed = engine(*[(f"o{i}", mini_instance(f"o{i}", 80 * MIB)) for i in range(3)], ("me", me))
    monkeypatch.setattr(capacity, "engine_or_none", lambda _inst=None: freed)
    assert capacity.replan(inst, "reddit") == 1  # memory freed up: the spare fits now
    t = inst.routing.table()
    assert t.ready.want("reddit") == 1 and t.ready.planned["reddit"]["why"] == "" and not capacity.short(t, "reddit")
    assert capacity.replan(inst, "reddit") is None  # not short any more: nothing to plan
    # '--spares 0' (no 'planned' entry): the plan never overrides it
    explicit = FakeInstance(tbl(active={"reddit": "a"}, wanted={"reddit": 0}))
    assert capacity.replan(explicit, "reddit") is None and explicit.routing.table().ready.wanted == {"reddit": {"golden": 0}}


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
    from envctl.state.ready import worker_pids as replenisher_pids

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
    from envctl.instance import Instance
    from envctl.state.ready import worker_pids as replenisher_pids

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
        st = Instance.get(load_catalog(), inst).routing.table()
        assert st.ready.spares("reddit") and set(st.ready.spares("reddit")) <= booting, st
        assert st.routes.active["reddit"] not in active, "the repaired site runs on a new copy"
    finally:
        envctl("down", "-i", inst, "--volumes")
