"""Spares by the capacity plan (``envctl.plan``), measured on the live engine (issue 23).

``plan_spares`` is what ``up`` runs for the spare-tier sites that have no setting yet (or that the plan
cut before); ``replan`` is what a replenisher runs first: a site the plan gave fewer spares than the
catalog wants is planned again with what the engine uses now, and gets its spare once it fits. The
routing table's ``planned`` says which sites the plan decides (``--spares K`` takes a site out of it)
and why one got fewer; ``status`` shows it.
"""
from __future__ import annotations

from envctl.errors import EnvctlError
from envctl.instance import Instance, measure
from envctl.plan import EngineMemory, Plan, plan
from envctl.routing.table import GOLDEN, RoutingTable


def engine_or_none(inst: Instance | None = None) -> EngineMemory | None:
    try:
        return measure(inst.backend if inst is not None else None)
    except EnvctlError:
        return None  # the plan falls back to the limits (as before issue 23)


def plan_spares(inst: Instance, sites: list[str], *, fixed: dict[str, int], at_least: dict[str, int] | None = None,
                engine: EngineMemory | None = None, host_bytes: int | None = None) -> Plan:
    """The plan for ``inst``'s ``sites``: what its own active copies use, and what the other instances
    on the engine hold (both measured, × the margin, capped by the limits)."""
    engine = engine if engine is not None else engine_or_none(inst)
    host_bytes = host_bytes if host_bytes is not None else inst.backend.placement.host_memory(inst.settings)
    if engine is None:
        return plan(inst.catalog, sites, inst.flavor, host_bytes, fixed=fixed, at_least=at_least)
    reserved, others = engine.held_by_others(inst.name)
    return plan(inst.catalog, sites, inst.flavor, host_bytes, fixed=fixed, at_least=at_least, reserved=reserved,
                others=others, measured=engine.active_use(inst.name))


def record(table_planned: dict[str, dict], p: Plan, sites: list[str]) -> None:
    """Write ``sites``' outcome of ``p`` into a routing table's ``planned``."""
    for s in p.sites:
        if s.site in sites:
            table_planned[s.site] = {"wanted": s.wanted, "why": s.why}


def short(table: RoutingTable, site: str) -> bool:
    """Whether the plan gave ``site`` fewer spares than the catalog wants (so a re-plan may add one)."""
    entry = table.ready.planned.get(site)
    return entry is not None and table.ready.want(site, GOLDEN) < int(entry.get("wanted", 0))


def replan(inst: Instance, site: str) -> int | None:
    """Plan ``site`` again if the plan cut it; raise its ``wanted`` when more spares fit now (never lower
    it). Returns the new count, or None when the site is not short (or it cannot be planned now)."""
    try:
        return _replan(inst, site)
    except EnvctlError:
        return None  # a refill goes on with the count it has


def _replan(inst: Instance, site: str) -> int | None:
    table = inst.routing.table()
    if not short(table, site):
        return None
    up = inst.routing.sites_up(table)
    if site not in up:
        return None
    have = table.ready.want(site, GOLDEN)
    p = plan_spares(inst, up, fixed={n: table.ready.want(n, GOLDEN) for n in up if n != site}, at_least={site: have})
    granted = p.spares().get(site, have)
    outcome: dict[str, dict] = {}
    record(outcome, p, [site])
    return inst.routing.raise_planned(site, granted, outcome.get(site, {"wanted": granted, "why": ""}))


__all__ = ["plan_spares", "replan", "record", "short", "engine_or_none"]
