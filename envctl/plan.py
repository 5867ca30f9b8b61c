"""Capacity planning: how many pristine spares per site fit this machine (issue 15).

A spare turns a reset into a ~1 s route switch instead of a recreate (minutes on the full flavor),
but every spare is a whole second copy of the site. The catalog says what each site wants
(``reset.spares``, for sites whose reset tier is ``spare``) and what a copy may use (the services'
``memory`` limits); this module fits those wants into the machine's memory:

* the budget is ``BUDGET_SHARE`` of the host's total memory (the rest is for the kernel, Docker,
  the browser and the harness);
* every site's active copy is counted first; spares are then granted one at a time, round-robin,
  to the sites whose recreate is slowest (largest health timeout) first, while they fit.

Memory limits are upper bounds, not use, so the plan is conservative. ``envctl up`` applies it by
default on every flavor (``--spares K`` overrides it): with a spare ready, a reset is a route switch
whether a recreate would take 4 s (mini) or minutes (full). ``envctl plan`` prints it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from envctl.catalog import Catalog

BUDGET_SHARE = 0.8
SERVICE_MEMORY_DEFAULT = 512 << 20  # a service without a memory limit is counted as this much


def memory_bytes(text: str | None) -> int:
    """``"512m"`` -> bytes (k, m, g are binary units, as Docker reads them); None -> 0."""
    if not text:
        return 0
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(text[:-1]) * units[text[-1]]


def host_memory() -> int:
    """Total memory of this host in bytes (0 when /proc/meminfo cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            return int(next(line for line in f if line.startswith("MemTotal")).split()[1]) * 1024
    except (OSError, StopIteration, ValueError):
        return 0


def copy_memory(catalog: Catalog, site: str, flavor: str) -> int:
    """What one copy of ``site`` may use in ``flavor``: the sum of its services' memory limits."""
    s = catalog.site(site)
    total = 0
    for name in s.services_for(flavor):
        svc = s.services[name]
        total += memory_bytes(svc.flavors[flavor].memory or svc.memory) or SERVICE_MEMORY_DEFAULT
    return total


@dataclass(frozen=True)
class SitePlan:
    site: str
    copy_bytes: int  # one copy's memory limits
    wanted: int  # the catalog's reset.spares (0 unless the reset tier is 'spare')
    spares: int  # what fits

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Plan:
    flavor: str
    host_bytes: int
    budget_bytes: int
    sites: tuple[SitePlan, ...]

    @property
    def used_bytes(self) -> int:
        return sum(s.copy_bytes * (1 + s.spares) for s in self.sites)

    @property
    def fits(self) -> bool:
        """Whether the active copies alone fit the budget."""
        return sum(s.copy_bytes for s in self.sites) <= self.budget_bytes

    def spares(self) -> dict[str, int]:
        return {s.site: s.spares for s in self.sites}

    def to_dict(self) -> dict[str, Any]:
        return {"flavor": self.flavor, "host_bytes": self.host_bytes, "budget_bytes": self.budget_bytes,
                "used_bytes": self.used_bytes, "fits": self.fits, "sites": [s.to_dict() for s in self.sites]}


def plan(catalog: Catalog, sites: list[str], flavor: str, host_bytes: int | None = None,
         fixed: dict[str, int] | None = None, reserved: int = 0) -> Plan:
    """Fit the catalog's wanted spares for ``sites`` into ``host_bytes`` (default: this host).

    ``fixed``: sites whose spare count is already decided (an earlier ``up``): counted, not changed.
    ``reserved``: memory already promised to other instances on the same engine (their copies' limits)."""
    host = host_memory() if host_bytes is None else host_bytes
    budget = max(0, int(host * BUDGET_SHARE) - reserved)
    fixed = {n: k for n, k in (fixed or {}).items() if n in sites}
    copy = {n: copy_memory(catalog, n, flavor) for n in sites}
    wanted = {n: fixed.get(n, catalog.site(n).reset.spares if catalog.site(n).reset.tier == "spare" else 0)
              for n in sites}
    granted = {n: fixed.get(n, 0) for n in sites}
    used = sum(copy[n] * (1 + granted[n]) for n in sites)
    order = sorted(sites, key=lambda n: -catalog.site(n).health.timeout)  # slowest recreate first
    progress = True
    while progress:
        progress = False
        for n in order:
            if granted[n] < wanted[n] and used + copy[n] <= budget:
                granted[n] += 1
                used += copy[n]
                progress = True
    return Plan(flavor, host, budget, tuple(SitePlan(n, copy[n], wanted[n], granted[n]) for n in sites))


__all__ = ["Plan", "SitePlan", "plan", "copy_memory", "host_memory", "memory_bytes", "SERVICE_MEMORY_DEFAULT"]
