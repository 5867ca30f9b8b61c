"""Reset tiers (docs/architecture.md, "Reset tiers"): a registry, and :func:`reset_site`, a loop over the
tiers a site declares until one ends **verified**: every health probe passes through the public URL and
the routed copy's fingerprint equals the site's pristine fingerprint.

A tier is one class here, registered by its catalog word (``sites.yaml``: ``reset.tier``); its ``then``
says which tiers follow it when it fails or does not verify (those the site can use), so a site's chain
is data: ``spare -> inplace -> recreate`` for reddit (it declares in-place steps), ``endpoint ->
recreate`` for classifieds, ``none -> recreate`` for read-only sites. Adding a tier is a class below
plus its word in ``envctl.catalog.Tier``.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar

import requests

from envctl.backends.base import Copy, Progress, noop
from envctl.catalog import Site
from envctl.errors import EnvctlError, ResetFailed, SiteNotUp, UsageError
from envctl.healthchecks.fingerprint import Fingerprint, diff, mismatch
from envctl.healthchecks.probes import ProbeResult
from envctl.healthchecks.wait import attempts
from envctl.instance import Instance
from envctl.locks import locked
from envctl.routing.table import GOLDEN, RoutingTable
from envctl.state import ready
from envctl.state import logins as login_state
from envctl.state.logins import Logins

# A ready copy is verified (probes and fingerprint) when it is listed; one idle for longer than this is
# fingerprinted again when it is routed (its databases do not change on their own, but a copy left alone
# for long is worth one more look), and so is one the proxy passed a request to since.
FRESH_SECONDS = 600.0



@dataclass
class ResetResult:
    site: str
    ok: bool
    tier: str  # the tier that produced the verified state
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)
    escalations: list[str] = field(default_factory=list)
    error: str = ""
    note: str = ""  # e.g. login files not renewed on a machine without a browser
    login: str = ""  # staged: the ready copy's own login file moved into place (no login in the reset)
    restored: str = ""  # in place: what the site's restore steps said they put back ("restored 2 tables: ...")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["seconds"] = round(self.seconds, 4)
        d["phases"] = {k: round(v, 4) for k, v in self.phases.items()}
        return d


@dataclass
class VerifyResult:
    site: str
    ok: bool
    expected: str | None  # pristine digest
    actual: str
    differences: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def verify(inst: Instance, site: str, table: RoutingTable | None = None, copy: Copy | None = None) -> VerifyResult:
    """Compare the routed (or given) copy with the pristine fingerprint."""
    table = table or inst.routing.table()
    copy = copy or inst.routing.active_copy(site, table)
    if copy is None:
        raise SiteNotUp(site, inst.name)
    expected = inst.routing.pristine(site, table)
    actual = inst.checks.fingerprint(copy)
    why = mismatch(expected, actual)
    return VerifyResult(site, not why, expected.digest if expected else None, actual.digest,
                        diff(expected, actual) if expected else [why])


SETTLE_SECONDS = 10.0  # a copy just routed that answers with errors this long has failed


def _timed_out(r: ProbeResult) -> bool:
    return r.status is None and "Timeout" in r.detail.split(":")[0]


def _probes(inst: Instance, site: str) -> str:
    """'' when the site's probes pass through the public URL, else why not. A copy just routed may still be
    starting to answer: errors get a few seconds (``SETTLE_SECONDS``); probes that only time out (a busy host,
    not a broken copy) get the site's health timeout, so a crowded machine does not escalate to a slower tier."""
    ok, results = False, list[ProbeResult]()
    start = time.monotonic()
    for _ in attempts(inst.catalog.site(site).health.timeout, cancel=inst.cancel):
        ok, results = inst.checks.probe(site)
        if ok:
            return ""
        if time.monotonic() - start > SETTLE_SECONDS and not all(_timed_out(r) for r in results if not r.ok):
            break
    bad = next(r for r in results if not r.ok)
    return f"probe '{bad.name}' failed: {bad.detail}"


def verified(inst: Instance, copy: Copy, pristine: Fingerprint | None, phases: dict[str, float], *,
             fingerprint: bool = True) -> str:
    """'' when ``copy`` (routed) passes its probes on the public URL and (``fingerprint``) matches ``pristine``,
    else why not. The fingerprint (queries inside the copy) and the probes (HTTP through the proxy) run side by
    side, so a verification costs the slower of the two."""
    t = time.monotonic()
    try:
        if not fingerprint:
            return _probes(inst, copy.site)
        with ThreadPoolExecutor(max_workers=1) as pool:
            fp = pool.submit(inst.checks.not_pristine, copy, pristine)
            return _probes(inst, copy.site) or fp.result()
    finally:
        phases["verify"] = phases.get("verify", 0.0) + time.monotonic() - t


# -- the tiers --------------------------------------------------------------------------------------

@dataclass
class Routed:
    """What a tier leaves: the copy now routed, the slot it replaced, and how much checking it still needs."""

    copy: Copy
    dirty: str = ""
    fingerprint: bool = True  # False: verified when it became ready and fresh: the probes suffice
    staged: bool = False  # its login files were made before it was routed (moved into place)


@dataclass
class Reset:
    """One reset of one site in progress (what each tier is given)."""

    inst: Instance
    logins: Logins
    site: str
    progress: Progress
    phases: dict[str, float] = field(default_factory=dict)
    restored: str = ""

    @property
    def spec(self) -> Site:
        return self.inst.catalog.site(self.site)

    def active(self) -> Routed:
        table = self.inst.routing.table()
        copy = self.inst.routing.active_copy(self.site, table)
        if copy is None:
            raise SiteNotUp(self.site, self.inst.name)
        return Routed(copy)


class Tier:
    """A way to bring a site back to its pristine state. ``run`` returns what it routed, or a string saying
    why it could not run (an escalation, not an error); ``then``: the tiers tried after it."""

    name: ClassVar[str] = ""
    then: ClassVar[tuple[str, ...]] = ("recreate",)
    renews_login: ClassVar[bool] = False  # its copy needs new login state (a new copy, a restored database)

    def usable(self, site: Site) -> bool:
        return True

    def run(self, r: Reset) -> Routed | str:
        raise NotImplementedError


TIERS: dict[str, Tier] = {}


def register(cls: type[Tier]) -> type[Tier]:
    TIERS[cls.name] = cls()
    return cls


@register
class Spare(Tier):
    """Route the first ready spare (a copy of the golden, verified and logged in when it was listed): a route
    flip; its login files move into place. None ready: a site with in-place steps goes on to that tier (well under
    a second); else, if a worker is booting one, wait for it (sooner than a recreate)."""

    name = "spare"
    then = ("inplace", "recreate")
    renews_login = True

    def run(self, r: Reset) -> Routed | str:
        t = time.monotonic()
        taken = r.inst.routing.take_ready(r.site, GOLDEN)
        r.phases["swap"] = time.monotonic() - t
        booting = taken is None and ready.booting(r.inst, r.site)
        if taken is None and TIERS["inplace"].usable(r.spec):
            return "no spare ready" + (" (the in-place tier is quicker than waiting for the one booting)" if booting else "")
        if booting:
            r.progress(r.site, "wait", "a spare is booting; waiting for it instead of escalating")
            t = time.monotonic()
            taken = ready.wait_and_take(r.inst, r.site, GOLDEN, t + r.spec.health.timeout)
            r.phases["wait_spare"] = time.monotonic() - t
        if taken is None:
            return "no spare ready"
        dirty, copy, pristine, record = taken
        # addressed since it was verified (someone reached it): not to be trusted without a fingerprint
        fresh = (pristine is not None and time.time() - record.verified < FRESH_SECONDS
                 and r.inst.front.addressed(r.site, copy.slot) == record.seen)
        return Routed(copy, dirty, fingerprint=not fresh, staged=login_state.install_staged(r.logins, r.site, copy.slot))


@register
class InPlace(Tier):
    """Restore the pristine state saved inside the running copy (``reset.inplace.restore``); new requests wait in
    the proxy and those in flight end first, so clients see a delay, not an error."""

    name = "inplace"
    renews_login = True

    def usable(self, site: Site) -> bool:
        return site.reset.inplace is not None

    def run(self, r: Reset) -> Routed | str:
        inplace = r.spec.reset.inplace
        if inplace is None:
            raise UsageError(f"{r.site} has no in-place tier", "its catalog entry declares no reset.inplace steps")
        routed = r.active()
        t = time.monotonic()
        with r.inst.front.hold(r.site):
            said = r.inst.copies.run_steps(routed.copy, inplace.restore, "restore", progress=r.progress)
        r.phases["inplace"] = time.monotonic() - t
        r.restored = next((ln.strip() for out in reversed(said) for ln in reversed(out.splitlines())
                           if ln.strip().startswith("restored")), "")
        return routed


@register
class Endpoint(Tier):
    """The site's own reset (classifieds' token-guarded POST), checked by the body (errors come with HTTP 200)."""

    name = "endpoint"

    def usable(self, site: Site) -> bool:
        return bool(site.reset.endpoint)

    def run(self, r: Reset) -> Routed | str:
        spec = r.spec
        t = time.monotonic()
        url = r.inst.settings.deployment.url(spec) + (spec.reset.endpoint or "")
        try:
            resp = requests.post(url, data={"token": spec.settings.get("reset_token", "")}, timeout=60)
        except requests.RequestException as exc:
            raise ResetFailed(f"{r.site}: reset endpoint unreachable: {exc}") from None
        r.phases["endpoint"] = time.monotonic() - t
        if spec.reset.success_text and spec.reset.success_text not in resp.text:
            raise ResetFailed(f"{r.site}: reset endpoint answered {resp.status_code}: "
                              f"{r.inst.checks.mask(r.site, resp.text.strip())[:200]}")
        return r.active()


@register
class Recreate(Tier):
    """A new copy from the golden image (made first if missing), routed: always correct, the slowest."""

    name = "recreate"
    then = ()
    renews_login = True

    def run(self, r: Reset) -> Routed | str:
        # The ready lock keeps cleanups away from this copy while it is neither active nor ready.
        with locked(r.inst.ready_lock(r.site), timeout=r.spec.health.timeout * 2):
            t = time.monotonic()
            copy = ready.boot_pristine(r.inst, r.site, role="active", progress=r.progress)
            r.phases["boot"] = time.monotonic() - t
            t = time.monotonic()
            dirty = r.inst.routing.route(copy)
            r.phases["swap"] = time.monotonic() - t
        return Routed(copy, dirty)


@register
class Nothing(Tier):
    """Read-only sites: nothing to restore, only verified."""

    name = "none"

    def run(self, r: Reset) -> Routed | str:
        return r.active()


BUSY_PRESSURE = 60.0  # % of the last 10 s in which a runnable task waited for a CPU: "short" from here on


def busy() -> bool:
    """Whether this machine's CPUs are short now: the kernel's CPU pressure (``/proc/pressure/cpu``, ``some avg10``:
    the share of the last 10 s in which a runnable task waited for a CPU) at or above :data:`BUSY_PRESSURE`; on a
    kernel without it, the 1-minute load average at or above 1.5 × the CPU count. Not the load average alone: it
    lags a minute and counts what waits on disk, and on a 2-core host a whole WebArena instance's own idle work
    keeps it above the CPU count while tasks wait for a CPU a third of the time (bench/turnaround.py)."""
    try:
        with open("/proc/pressure/cpu") as f:
            some = f.readline().split()
        return float(dict(kv.split("=", 1) for kv in some[1:])["avg10"]) >= BUSY_PRESSURE
    except (OSError, ValueError, KeyError, IndexError):
        pass
    try:
        return os.getloadavg()[0] >= 1.5 * (os.cpu_count() or 1)
    except OSError:
        return False


def chain(site: Site, first: str | None = None, *, cpu_short: bool = False) -> list[str]:
    """The tiers a reset of ``site`` tries, in order: ``first`` (default: the catalog's), then what follows it
    that the site can use. ``cpu_short`` (the host is busy) with the catalog's default: a site that can restore in
    place does so before taking a spare, whose refill would boot a whole copy out of the agents' CPU share (in
    place costs what the episode changed; ``bench/inplace.py`` prints both in core-seconds)."""
    start = first or site.reset.tier
    if first is None and cpu_short and start == "spare" and TIERS["inplace"].usable(site):
        return ["inplace", "spare", "recreate"]
    if start not in TIERS:
        raise UsageError(f"unknown tier '{start}'", f"choose one of {', '.join(TIERS)}")
    out = [start]
    for name in TIERS[start].then:
        if name not in out and TIERS[name].usable(site):
            out.append(name)
    return out


def reset_site(inst: Instance, logins: Logins, site: str, *, tier: str | None = None, wait: bool = True,
               progress: Progress = noop, refill: bool = True, defer_login: bool = False,
               cheapest: bool = False) -> ResetResult:
    """Reset ``site`` through its tiers until one verifies. ``refill``: a detached worker removes the dirty copy
    and boots the ready copies the site keeps (else the dirty copy is removed before returning).
    ``defer_login``: the caller renews the login files (a multi-site reset does it once, after every site has
    its final copy, so files pairing two sites are not made against a copy being replaced)."""
    tiers = chain(inst.catalog.site(site), tier, cpu_short=cheapest and tier is None and busy())
    start = time.monotonic()
    r = Reset(inst, logins, site, progress)
    escalations: list[str] = []
    with locked(inst.reset_lock(site), wait=wait):
        for i, name in enumerate(tiers):
            nxt = tiers[i + 1] if i + 1 < len(tiers) else None
            try:
                routed = TIERS[name].run(r)
                why = routed if isinstance(routed, str) else verified(
                    inst, routed.copy, inst.routing.pristine(site, inst.routing.table()), r.phases, fingerprint=routed.fingerprint)
            except EnvctlError as exc:
                why = str(exc)
            if why:
                escalations.append(f"{name}: {why}")
                progress(site, "escalate", f"{name}: {str(why).splitlines()[0]}" + (f"; trying {nxt}" if nxt else ""))
                continue
            assert not isinstance(routed, str)
            note = ""
            t = time.monotonic()
            if TIERS[name].renews_login and not defer_login:
                lacking = login_state.compose_pairs(inst, logins, [site]) if routed.staged else [site]
                note = login_state.renew_or_note(inst, logins, lacking) if lacking else ""
            r.phases["login"] = time.monotonic() - t
            if refill:
                ready.spawn(inst, logins, [site])
            elif routed.dirty:
                ready.cleanup(inst, logins, site)
            return ResetResult(site, True, name, time.monotonic() - start, r.phases, escalations, note=note,
                               login="staged" if routed.staged else "", restored=r.restored)
    return ResetResult(site, False, tiers[-1], time.monotonic() - start, r.phases, escalations,
                       escalations[-1] if escalations else "no tier worked")


def renews_login(tier: str) -> bool:
    return TIERS[tier].renews_login if tier in TIERS else False


__all__ = ["TIERS", "Tier", "register", "chain", "reset_site", "verify", "ResetResult", "VerifyResult", "renews_login",
           "FRESH_SECONDS"]
