"""``up`` for one site of an instance: healthy, configured, routed — checked and repaired when it already runs.

A running, healthy copy is kept; a running, unhealthy one is configured again (the steps are idempotent) and
waited for; a copy with a member missing or stopped is replaced. A new copy boots from the site's golden image
when there is one (configured already), else from the flavor's images and is configured here — and then
defines what *pristine* means for the site (its fingerprint, taken before any login).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from envctl.backends.base import Copy, InstanceSettings, Progress
from envctl.catalog import Catalog
from envctl.errors import EnvctlError, ImageMissing
from envctl.healthchecks.fingerprint import Fingerprint
from envctl.healthchecks.wait import Cancelled
from envctl.instance import Instance
from envctl.locks import Busy, locked
from envctl.routing.table import GOLDEN
from envctl.state import capacity, ready, snapshots



@dataclass
class SiteResult:
    site: str
    ok: bool
    action: str  # created | kept | repaired | failed | interrupted
    url: str
    timings: dict[str, float] = field(default_factory=dict)
    error: str = ""
    probes: list[dict[str, Any]] = field(default_factory=list)


def ensure_site(inst: Instance, name: str, *, wait: bool, progress: Progress) -> SiteResult:
    """Bring ``name`` to a healthy, configured, routed copy (see the module's docstring)."""
    site = inst.catalog.site(name)
    url = inst.settings.deployment.url(site) + site.url_path
    timings: dict[str, float] = {}
    action = "created"
    try:
        table = inst.routing.table()
        active = inst.routing.active_copy(name, table)
        if active is None and table.routes.active.get(name):
            action = "repaired"  # routed before, but its members are gone
            progress(name, "repair", "the active copy's members are gone; recreating the site")
        if active is not None and active.running() and not active.frozen \
                and set(active.members) == set(site.services_for(inst.flavor)):
            progress(name, "check", "running; checking health")
            ok, results = inst.checks.probe(name)
            if ok:
                progress(name, "healthy", "already healthy")
                return SiteResult(name, True, "kept", url, timings, probes=[r.to_dict() for r in results])
            action, copy, booted, fresh = "repaired", active, False, False
            inst.copies.configure(copy, progress=progress)  # running but unhealthy: configure again (idempotent) and wait
            inst.routing.route(copy)
            moved = inst.routing.refresh_addresses(copy)  # a copy that ran before, restarted alone, may have a new address
            if moved:
                progress(name, "repair", f"the proxy routes {', '.join(moved)} at its new address")
        else:
            if active is not None:
                action = "repaired"
                why = (f"{', '.join(active.frozen)} frozen (paused)" if active.frozen and active.running()
                       else "a member is missing or stopped")
                progress(name, "repair", f"{why}; recreating the site")
                inst.copies.remove(active)
            copy, fresh = _boot_active(inst, name, progress, timings)
            booted = True
        if not wait:
            return SiteResult(name, True, action, url, timings)
        t = time.monotonic()
        progress(name, "wait", "waiting for health probes")
        results = inst.checks.wait_healthy(copy, public=True)
        timings["healthy"] = time.monotonic() - t
        record_pristine(inst, copy, fresh=fresh, booted=booted)
        if fresh:
            t = time.monotonic()
            if inst.copies.save_inplace(copy, progress):
                timings["save"] = time.monotonic() - t
        progress(name, "healthy", f"healthy at {url}")
        return SiteResult(name, True, action, url, timings, probes=[r.to_dict() for r in results])
    except Cancelled:
        return SiteResult(name, False, "interrupted", url, timings, "interrupted; run 'envctl up' again to finish")
    except EnvctlError as exc:
        progress(name, "failed", str(exc).splitlines()[0])
        return SiteResult(name, False, "failed", url, timings, str(exc))


def _boot_active(inst: Instance, name: str, progress: Progress, timings: dict[str, float]) -> tuple[Copy, bool]:
    """Boot and route a new active copy; (it, whether it was configured here: no golden)."""
    # Leftovers of an interrupted run that never got routed are not worth keeping. Ready copies are kept,
    # and so is one a worker is booting right now: it holds the site's ready lock (and cleans up itself).
    try:
        with locked(inst.ready_lock(name), wait=False):
            ready.remove_strays(inst, name, inst.routing.table())
    except Busy:
        pass
    images, golden = snapshots.golden_images(inst, name)
    with locked(inst.boot_lock(name)):  # a cleanup leaves it alone until it is routed
        copy = inst.copies.boot(name, role="active", images=images, golden=golden, progress=progress, timings=timings)
        inst.routing.route(copy)
    return copy, not golden


def record_pristine(inst: Instance, copy: Copy, *, fresh: bool, booted: bool) -> None:
    """Record what 'pristine' means for ``copy``'s site after 'up' made or repaired it.

    A fresh configured copy (no golden), fingerprinted before any login, defines it. A copy booted from a
    golden image takes the golden's own label. A copy that ran before (repaired in place) may have been
    written to: it never defines pristine, whatever it was booted from."""
    site = copy.site
    fp: Fingerprint | None = None
    if fresh:
        fp = inst.checks.fingerprint(copy)
    elif copy.golden and not copy.golden.startswith("snapshot:"):
        fp = snapshots.golden_fingerprint(inst, site, copy.golden)
        if fp is None and booted and site not in inst.routing.table().pristine:
            fp = inst.checks.fingerprint(copy)  # an unlabelled golden: the copy just booted from it is its state
    if fp is not None:
        inst.routing.set_pristine(site, fp)


def spares_wanted(inst: Instance, names: list[str], spares: int | None) -> tuple[dict[str, int], dict[str, dict[str, Any]]]:
    """Spares per site this 'up' sets: ``--spares K`` for every spare-tier site; without it, what the capacity
    plan grants the sites that have no setting yet, or that it gave fewer than they want (planned again:
    memory may have freed up). The plan counts what copies really use (measured, × a margin, capped by the
    limits), here and in the other instances on the engine. Returns (spares, the plan's outcome for the
    sites it decided: {"wanted", "why"})."""
    spare_sites = [n for n in names if inst.catalog.site(n).reset.tier == "spare"]
    if spares is not None:
        return {n: spares for n in spare_sites}, {}
    table = inst.routing.table()
    fresh = [n for n in spare_sites if GOLDEN not in table.ready.wanted.get(n, {}) or capacity.short(table, n)]
    if not fresh:
        return {}, {}
    up = inst.routing.sites_up(table)
    fixed = {n: table.ready.want(n, GOLDEN) for n in up if n not in fresh}
    p = capacity.plan_spares(inst, up, fixed=fixed, at_least={n: table.ready.want(n, GOLDEN) for n in fresh})
    planned: dict[str, dict[str, Any]] = {}
    capacity.record(planned, p, [n for n in fresh if n in up])
    granted = p.spares()
    return {n: granted.get(n, 0) for n in fresh}, planned


__all__ = ["SiteResult", "ensure_site", "record_pristine", "spares_wanted"]


def choose_flavor(catalog: Catalog, instance: str, sites: list[str]) -> tuple[str, str]:
    """The flavor a new instance of ``sites`` gets when none is given, and why: the full flavor when its images are
    all here, else the first of mini and slim whose images are; the full flavor when none is complete ('up' then
    names what to get)."""
    for f in [f for f in ("full", "mini", "slim") if f in catalog.flavors()]:
        mine = [n for n in sites if f in catalog.site(n).flavors]
        probe = Instance(catalog, InstanceSettings(instance, f, backend=Instance.backend_kind()))
        if mine and not probe.copies.missing_images(mine):
            if f == "full":
                return f, "the full flavor's images are here"
            return f, "its images are here and the full flavor's are not ('envctl images get' fetches them)"
    return "full", "no flavor has all its images here; the full flavor is the benchmark's"


def check_images(inst: Instance, sites: list[str]) -> None:
    """ImageMissing, in one line naming the command that gets or builds them, unless every image of ``sites`` (in
    the instance's flavor) is on the backend. First each site's bind-mount sources are confined to the data directory
    now, before anything is made (a symbolic link put there since the catalog was loaded: one line)."""
    for n in sites:
        inst.copies.spec(n, role="active")
    missing = inst.copies.missing_images(sites)
    if not missing:
        return
    names = ", ".join(f"{img} ({site})" for site, img, _ in missing)
    flavor = f" --flavor {inst.flavor}" if inst.flavor != "full" else ""
    if all(build for _, _, build in missing):
        hint = f"build them with 'envctl images build --flavor {inst.flavor}'"
    else:
        hint = f"get them with 'envctl images get{flavor} " + " ".join(sorted({s for s, _, _ in missing})) + "'"
    raise ImageMissing(f"missing images: {names}", hint)
