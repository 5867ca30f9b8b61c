"""How many instances a pool can have on this backend: ``serve --instances auto`` (the capacity plan, issue 23)."""
from __future__ import annotations

from typing import Any

from envctl.catalog import Catalog
from envctl.errors import EnvctlError
from envctl.plan import BUDGET_SHARE, EngineMemory, gib, host_memory
from envctl.plan import plan as capacity_plan


def auto_size(catalog: Catalog, sites: list[str], flavor: str, spares: int | None, pool: str,
              host_bytes: int | None = None, limit: int = 64, engine: EngineMemory | None = None,
              measure: Any = None) -> tuple[int, str]:
    """How many instances of ``sites`` (each with the spares the plan grants it, or ``spares``) fit this
    host's memory budget, counting what other instances on the engine hold (the pool's own members
    are not counted: a restarted pool reuses them). Copies are counted as the capacity plan counts
    them (issue 23): a running active copy of the same site and flavor on the engine (the pool's own
    members included) measured × the margin, capped by the limits; the limits when none runs. Other
    instances are measured the same way. Returns (count, why)."""
    host = host_memory() if host_bytes is None else host_bytes
    if engine is None and measure is not None:
        try:
            engine = measure()  # envctl.instance.measure, given by the caller (leases import no engine module)
        except EnvctlError:
            engine = None  # counted by the limits, as before
    measured = engine.site_use(flavor) if engine is not None else {}
    fixed = None if spares is None else {s: (spares if catalog.site(s).reset.tier == "spare" else 0) for s in sites}
    one_plan = capacity_plan(catalog, sites, flavor, host_bytes=host, fixed=fixed, measured=measured)
    granted = one_plan.spares()
    one = one_plan.used_bytes
    held, others = engine.held_by_others(lambda n: n.startswith(pool + "-")) if engine is not None else (0, 0)
    budget = int(host * BUDGET_SHARE) - held
    count = max(0, min(limit, budget // one if one else limit))
    how = (f"measured x{one_plan.margin:g}, capped by the limits: "
           + ", ".join(f"{s.site} {s.counted_bytes >> 20} MiB" + ("" if s.measured_bytes is not None else " (limits)")
                       for s in one_plan.sites)) if measured else "memory limits: nothing of theirs runs to measure"
    why = (f"{count} instance(s): one needs {gib(one)} ({how}; spares {granted}), "
           f"budget {gib(budget)} of {gib(host)} ({gib(held)} held by {others} other instance(s))")
    return count, why


__all__ = ["auto_size"]
