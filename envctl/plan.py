"""Capacity planning: how many pristine spares per site fit this machine (issues 15, 23).

A spare turns a reset into a ~1 s route switch instead of a recreate (minutes on the full flavor),
but every spare is a whole second copy of the site. The catalog says what each site wants
(``reset.spares``, for sites whose reset tier is ``spare``) and what a copy may use (the services'
``memory`` limits); this module fits those wants into the machine's memory:

* the budget is ``BUDGET_SHARE`` of the host's total memory (the rest is for the kernel, Docker,
  the browser and the harness);
* a copy is counted by what it **really uses**: the measured resident memory of the site's running
  active copy × ``MARGIN`` (room to grow), never more than its memory limits; a site with nothing
  measured yet (a first ``up``, ``envctl plan`` on an empty engine) is counted by its limits;
* what other instances on the same engine hold is measured the same way, per container
  (``min(limit, measured × MARGIN)``), plus the spares they want that are not there right now (a
  replenisher is booting them back), so a spare that is being refilled keeps its room;
* every site's active copy is counted first; spares are then granted one at a time, round-robin,
  to the sites whose recreate is slowest (largest health timeout) first, while they fit.

A site that gets fewer spares than it wants is told why (``SitePlan.why``); ``up`` and ``status``
show it, and a replenisher re-plans such a site (``envctl.state.capacity``) whenever it runs, so the
spare is booted once memory frees up. ``plan()`` is pure: the measurements (``EngineMemory``, read
by ``envctl.instance.measure``) are passed in. ``envctl up`` applies it by default on every flavor
(``--spares K`` overrides it); ``envctl plan`` prints it, measured use beside the limits.
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


MARGIN = 1.5  # measured use x this = what a copy is counted as (room for caches and load), capped by the limits
GIB = 1 << 30


def gib(n: int | float) -> str:
    return f"{n / GIB:.1f} GiB"


def counted(limit: int, measured: int | None, margin: float = MARGIN) -> int:
    """What one container (or copy) is counted as: ``measured × margin``, capped by ``limit`` (0: none);
    its limit (or ``SERVICE_MEMORY_DEFAULT`` without one) when nothing is measured."""
    if measured is None:
        return limit or SERVICE_MEMORY_DEFAULT
    grown = int(measured * margin)
    return min(limit, grown) if limit else grown


@dataclass(frozen=True)
class SitePlan:
    site: str
    copy_bytes: int  # one copy's memory limits
    wanted: int  # the catalog's reset.spares (0 unless the reset tier is 'spare')
    spares: int  # what fits
    counted_bytes: int = 0  # what the plan counts one copy as (measured x margin, capped by copy_bytes)
    measured_bytes: int | None = None  # the running active copy's measured use (None: nothing measured)
    why: str = ""  # when spares < wanted: why (one line, naming the site)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Plan:
    flavor: str
    host_bytes: int
    budget_bytes: int  # what is left for this instance: the budget less what other instances hold
    sites: tuple[SitePlan, ...]
    reserved_bytes: int = 0  # what other instances on the engine hold (measured, or limits)
    others: int = 0  # how many other instances that is
    margin: float = MARGIN

    @property
    def used_bytes(self) -> int:
        return sum((s.counted_bytes or s.copy_bytes) * (1 + s.spares) for s in self.sites)

    @property
    def fits(self) -> bool:
        """Whether the active copies alone fit the budget."""
        return sum(s.counted_bytes or s.copy_bytes for s in self.sites) <= self.budget_bytes

    @property
    def in_place_bytes(self) -> int:
        """What one instance of these sites takes with no spare (every writable site reset in place)."""
        return sum(s.counted_bytes or s.copy_bytes for s in self.sites)

    def instances(self) -> tuple[int, int]:
        """How many instances of these sites the whole budget holds: (with the spares planned, in place only)."""
        whole = int(self.host_bytes * BUDGET_SHARE)
        return (whole // self.used_bytes if self.used_bytes else 0,
                whole // self.in_place_bytes if self.in_place_bytes else 0)

    def spares(self) -> dict[str, int]:
        return {s.site: s.spares for s in self.sites}

    def short(self) -> dict[str, str]:
        """Sites that get fewer spares than they want -> why."""
        return {s.site: s.why for s in self.sites if s.spares < s.wanted}

    def to_dict(self) -> dict[str, Any]:
        return {"flavor": self.flavor, "host_bytes": self.host_bytes, "budget_bytes": self.budget_bytes,
                "reserved_bytes": self.reserved_bytes, "others": self.others, "margin": self.margin,
                "used_bytes": self.used_bytes, "in_place_bytes": self.in_place_bytes, "fits": self.fits,
                "instances": dict(zip(("with_spares", "in_place_only"), self.instances())),
                "sites": [s.to_dict() for s in self.sites], "short": self.short()}


def plan(catalog: Catalog, sites: list[str], flavor: str, host_bytes: int | None = None,
         fixed: dict[str, int] | None = None, reserved: int = 0, *, measured: dict[str, int] | None = None,
         others: int = 0, margin: float = MARGIN, at_least: dict[str, int] | None = None) -> Plan:
    """Fit the catalog's wanted spares for ``sites`` into ``host_bytes`` (default: this host).

    ``fixed``: sites whose spare count is already decided (an earlier ``up``, ``--spares K``): counted,
    not changed. ``at_least``: sites the plan decides that already have this many (a re-plan never
    takes a granted spare back). ``reserved``: memory other instances on the same engine hold (``others``
    of them; see ``EngineMemory.held_by_others``). ``measured``: site -> measured use of its running
    active copy; such a copy counts ``measured × margin``, capped by its limits (else the limits)."""
    host = host_memory() if host_bytes is None else host_bytes
    whole = int(host * BUDGET_SHARE)
    budget = max(0, whole - reserved)
    fixed = {n: k for n, k in (fixed or {}).items() if n in sites}
    measured = {n: b for n, b in (measured or {}).items() if n in sites}
    limit = {n: copy_memory(catalog, n, flavor) for n in sites}
    copy = {n: min(limit[n], counted(limit[n], measured[n], margin)) if n in measured else limit[n] for n in sites}
    wanted = {n: fixed.get(n, catalog.site(n).reset.spares if catalog.site(n).reset.tier == "spare" else 0)
              for n in sites}
    granted = {n: fixed.get(n, min(wanted[n], (at_least or {}).get(n, 0))) for n in sites}
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

    def why(n: str) -> str:
        if granted[n] >= wanted[n]:
            return ""
        held = (f"{gib(reserved)} of the {gib(whole)} budget is used by {others} other instance"
                f"{'s' if others != 1 else ''}" if reserved else f"the budget is {gib(whole)}")
        return (f"{n}: {granted[n]} of {wanted[n]} spare{'s' if wanted[n] != 1 else ''}: {held}, "
                f"this instance's copies take {gib(used)} and one more copy needs {gib(copy[n])}")

    return Plan(flavor, host, budget, tuple(SitePlan(n, limit[n], wanted[n], granted[n], copy[n], measured.get(n),
                                                     why(n)) for n in sites),
                reserved, others, margin)


# -- what the engine's containers really use (the measurements plan() is given) ----------------------

@dataclass(frozen=True)
class Held:
    """One envctl container on the engine: whose it is, its memory limit and what it uses now."""

    instance: str
    site: str  # "" for a proxy
    slot: str
    role: str  # its label: active | spare | warm | proxy
    flavor: str
    limit: int  # bytes; 0: no limit
    measured: int | None  # resident bytes now (None: not measured, e.g. not running)


@dataclass(frozen=True)
class EngineMemory:
    """Every envctl container's limit and measured use, and each instance's routing (which slot is
    active, how many spares it wants): what ``plan()``'s ``reserved`` and ``measured`` are made from."""

    containers: tuple[Held, ...] = ()
    active: dict[str, dict[str, str]] | None = None  # instance -> site -> active slot
    wanted: dict[str, dict[str, int]] | None = None  # instance -> site -> spares it keeps
    used_bytes: int = 0  # what every container on the engine uses now (envctl's or not)
    source: str = ""  # cgroup | stats | "" (nothing measured)

    def instances(self) -> list[str]:
        return sorted({c.instance for c in self.containers})

    def _copies(self, instance: str) -> dict[str, dict[str, list[Held]]]:
        out: dict[str, dict[str, list[Held]]] = {}
        for c in self.containers:
            if c.instance == instance and c.site:
                out.setdefault(c.site, {}).setdefault(c.slot, []).append(c)
        return out

    def active_use(self, instance: str) -> dict[str, int]:
        """Site -> measured use of ``instance``'s active copy (every container measured), for ``plan()``."""
        out = {}
        for site, slots in self._copies(instance).items():
            slot = (self.active or {}).get(instance, {}).get(site)
            cs = slots.get(slot or "", [])
            if cs and all(c.measured is not None for c in cs):
                out[site] = sum(c.measured or 0 for c in cs)
        return out

    def site_use(self, flavor: str, exclude: str = "") -> dict[str, int]:
        """Site -> the largest measured active copy of it on the engine in ``flavor`` (any instance but
        ``exclude``): what a copy of a new instance is counted by (``serve --instances auto``)."""
        out: dict[str, int] = {}
        for inst in self.instances():
            if inst == exclude or not any(c.flavor == flavor for c in self.containers if c.instance == inst):
                continue
            for site, b in self.active_use(inst).items():
                out[site] = max(out.get(site, 0), b)
        return out

    def held(self, instance: str, *, margin: float = MARGIN, by_limits: bool = False) -> int:
        """What ``instance``'s containers are counted as holding.

        ``by_limits`` (the plan before issue 23): every container's limit, proxies left out. Else each
        container ``min(limit, measured × margin)``; a spare or a copy still booting at least its site's
        active copy; and each spare it wants that is not there (being refilled) as one active copy."""
        if by_limits:
            return sum(c.limit or SERVICE_MEMORY_DEFAULT for c in self.containers
                       if c.instance == instance and c.role != "proxy")
        total = sum(counted(c.limit, c.measured, margin) for c in self.containers
                    if c.instance == instance and c.role == "proxy" and c.measured is not None)
        for site, slots in self._copies(instance).items():
            figure = {slot: sum(counted(c.limit, c.measured, margin) for c in cs) for slot, cs in slots.items()}
            active = (self.active or {}).get(instance, {}).get(site)
            ref = figure.get(active or "", max(figure.values()))
            total += sum(f if slot == active else max(f, ref) for slot, f in figure.items())
            want = (self.wanted or {}).get(instance, {}).get(site, 0)
            copies = [slot for slot, cs in slots.items() if slot == active or cs[0].role != "warm"]
            total += max(0, 1 + want - len(copies)) * ref
        return total

    def held_by_others(self, instance: str | Any, *, margin: float = MARGIN,
                       by_limits: bool = False) -> tuple[int, int]:
        """(bytes, instances) held by every instance but ``instance`` (a name, or a predicate that says
        which instances to leave out, e.g. a pool's own members)."""
        skip = instance if callable(instance) else (lambda n: n == instance)
        others = [n for n in self.instances() if not skip(n)]
        return sum(self.held(n, margin=margin, by_limits=by_limits) for n in others), len(others)


__all__ = ["Plan", "SitePlan", "plan", "copy_memory", "host_memory", "memory_bytes", "SERVICE_MEMORY_DEFAULT",
           "MARGIN", "counted", "Held", "EngineMemory"]
