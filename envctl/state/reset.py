"""Reset tiers (docs/architecture.md, "Reset tiers"): spare swap, in place, app endpoint, recreate,
none — each ends verified.

*Verified* means: every health probe passes through the public URL, and the copy's fingerprint
equals the site's pristine fingerprint. On a mismatch a reset escalates to the next tier
(spare -> inplace, where the site declares it -> recreate; endpoint/none -> recreate) and says so.

Spares are whole site copies booted from the golden image, verified through the front proxy
(``X-Envctl-Backend`` addresses one copy on the real public port, Host header and all), logged in,
and only then listed as ready in the routing table. A swap only rewrites the routing table and
moves the spare's pre-made login files into place; the dirty copy is removed and a new spare
booted by a detached ``envctl _replenish`` process, so the caller does not wait for it.

Everything here works on an :class:`~envctl.instance.Instance` and a :class:`Logins` (where login
state goes); nothing reaches back into ``Lab``.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, get_args

import requests

from envctl.auth import Target, login_sites
from envctl.catalog import Tier
from envctl.errors import EnvctlError, NoBrowser, ResetFailed, SiteNotUp, UsageError
from envctl.healthchecks.fingerprint import Fingerprint, diff, mismatch
from envctl.healthchecks.wait import wait_for
from envctl.instance import Instance
from envctl.locks import locked, one_of
from envctl.provision.local import Copy, mask
from envctl.provision import proxy
from envctl.provision.proxy import ProxyState, Route
from envctl.state import capacity, snapshots, workers

TIERS: tuple[str, ...] = get_args(Tier)  # fastest first; the catalog names them
# A spare is verified (probes and fingerprint) when it becomes ready; one idle for longer than this is
# fingerprinted again when it is swapped in (the golden's databases do not change on their own, but a
# copy left alone for long is worth one more look).
SPARE_FRESH_SECONDS = 600.0
Progress = Callable[[str, str, str], None]


def _noop(*_: str) -> None:
    pass


@dataclass(frozen=True)
class Logins:
    """Where resets write login state, and the catalog a detached replenisher must load."""

    auth_dir: Path
    catalog_path: str | None = None

    def staged(self, site: str, slot: str) -> Path:
        """Pre-made login files of a spare, moved into ``auth_dir`` when it is swapped in."""
        return self.auth_dir / ".spares" / f"{site}-{slot}"


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


# -- verifying ---------------------------------------------------------------------------------

def verify(inst: Instance, site: str, table: ProxyState | None = None, copy: Copy | None = None) -> VerifyResult:
    """Compare the live (or given) copy with the pristine fingerprint."""
    table = table or inst.table()
    copy = copy or inst.active_copy(site, table)
    if copy is None:
        raise SiteNotUp(site, inst.name)
    expected = inst.pristine(site, table)
    actual = inst.fingerprint(copy)
    why = mismatch(expected, actual)
    return VerifyResult(site, not why, expected.digest if expected else None, actual.digest,
                        diff(expected, actual) if expected else [why])


def _verified(inst: Instance, copy: Copy, pristine: Fingerprint | None, phases: dict[str, float]) -> str:
    """'' when ``copy`` (routed) passes its probes on the public URL and matches ``pristine``, else why not."""
    t = time.monotonic()
    # The fingerprint (queries inside the copy) and the probes (HTTP through the public URL) are
    # independent: run them side by side, so a verification costs the slower of the two, not the sum.
    with ThreadPoolExecutor(max_workers=1) as pool:
        fingerprint = pool.submit(inst.not_pristine, copy, pristine)
        try:
            # A copy just routed may still be starting to answer (a recreate): give it a few seconds
            # before failing.
            ok, results = wait_for(lambda: inst.probe(copy.site), timeout=10, cancel=inst.cancel)
            if not ok:
                bad = next(r for r in results if not r.ok)
                return f"probe '{bad.name}' failed: {bad.detail}"
            return fingerprint.result()
        finally:
            phases["verify"] = time.monotonic() - t


def _probed(inst: Instance, site: str, phases: dict[str, float]) -> str:
    """'' when the site's probes pass through the public URL (a spare verified when it became ready, just
    routed: the flip is in force when it returns, so one pass normally suffices), else why not."""
    t = time.monotonic()
    try:
        ok, results = wait_for(lambda: inst.probe(site), timeout=10, cancel=inst.cancel)
        if not ok:
            bad = next(r for r in results if not r.ok)
            return f"probe '{bad.name}' failed: {bad.detail}"
        return ""
    finally:
        phases["verify"] = time.monotonic() - t


# -- login state -------------------------------------------------------------------------------

def login(inst: Instance, logins: Logins, sites: list[str], *, out_dir: Path | None = None,
          headers: dict[str, str] | None = None, table: ProxyState | None = None) -> None:
    """Renew login state files for ``sites`` (into ``out_dir``, through ``headers``).

    Sites whose login is a plain form post (catalog ``login.http``) are renewed over HTTP, with no
    browser; Chromium is started only for files touching a site that needs it."""
    with_login = [s for s in sites if inst.catalog.site(s).login]
    if not with_login:
        return
    table = table or inst.table()
    up = tuple(s for s in inst.sites_up(table) if inst.catalog.site(s).login)
    target = Target(inst.catalog, inst.settings.deployment, Path(out_dir or logins.auth_dir), inst.flavor, up,
                    tuple(sorted((headers or {}).items())))
    login_sites(target, with_login, http=True)


def _install_staged(logins: Logins, site: str, slot: str) -> bool:
    """Move a spare's pre-made login files into the auth dir (atomic renames); False if none."""
    staged = logins.staged(site, slot)
    files = sorted(staged.glob("*_state.json")) if staged.is_dir() else []
    for f in files:
        os.replace(f, logins.auth_dir / f.name)
    shutil.rmtree(staged, ignore_errors=True)
    return bool(files)


# -- booting verified copies ---------------------------------------------------------------------

def boot_pristine(inst: Instance, site: str, *, role: str, progress: Progress = _noop) -> Copy:
    """A new, healthy, verified-pristine copy of ``site``, not routed. Makes the golden image if missing."""
    images, key = snapshots.golden_images(inst, site)
    copy = inst.boot_copy(site, role=role, images=images, golden=key, progress=progress)
    try:
        inst.wait_healthy(copy, progress)
        fp = inst.fingerprint(copy)
        expected = inst.pristine(site, inst.table())
        why = mismatch(expected, fp) if expected is not None else ""
        if why:
            raise ResetFailed(f"{site}: a fresh copy is not pristine: {why}",
                              "the golden image is stale: 'envctl snapshot rm golden' and reset again")
        if not images:
            inst.save_inplace(copy, progress)  # pristine now: the golden carries the saved state
            progress(site, "golden", "committing the golden image (clean stop, commit, start)")
            snapshots.commit_golden(inst, copy, fp)
            copy = inst.backend.copies(site)[(site, copy.slot)]
            inst.wait_healthy(copy, progress)
        if expected is None:
            with inst.routing() as table:
                table.pristine.setdefault(site, fp.to_json())
        return copy
    except BaseException:
        inst.backend.remove_copy(copy)
        raise


def cleanup_strays(inst: Instance, logins: Logins, site: str) -> list[str]:
    """Remove copies that are neither active nor ready spares (dirty ones, leftovers of a killed boot)."""
    table = inst.table()
    if not table.active and not table.routes:
        return []  # no live routing table: nothing can be told apart
    removed = inst.remove_strays(site, table)
    for c in removed:
        shutil.rmtree(logins.staged(site, c.slot), ignore_errors=True)
    return [c.slot for c in removed]


BOOT_SLOTS = max(2, 2 * (os.cpu_count() or 1))  # spares booting at once on this machine, every instance's


@contextmanager
def boot_slot(progress: Progress, site: str) -> Iterator[None]:
    """Hold one of the machine's spare-boot slots while a spare boots and logs in. Spares are background
    work: when many resets end at once (16 instances resetting side by side, bench/density.py) their
    replenishers queue here instead of starving the resets in progress (and each other) of CPU, which
    made probes time out and resets escalate to slower tiers."""
    note = f"waiting for one of the {BOOT_SLOTS} spare-boot slots of this machine"
    with one_of("spare-boot", BOOT_SLOTS, timeout=1800, on_wait=lambda: progress(site, "wait", note)):
        yield


def _boot_spare(inst: Instance, logins: Logins, site: str, progress: Progress) -> Copy:
    """Boot a pristine spare, log it in (files staged for its swap), verify it and list it as ready."""
    copy = boot_pristine(inst, site, role="spare", progress=progress)
    staged = logins.staged(site, copy.slot)
    staged.mkdir(parents=True, exist_ok=True, mode=0o700)
    if inst.catalog.site(site).login:
        try:
            login(inst, logins, [site], out_dir=staged, headers=inst.backend_header(copy, inst.catalog.site(site).entry))
        except NoBrowser:
            pass  # a machine without a browser (a lab host): the spare is pristine, without login files
    # Verified once more now that it is logged in (the login wrote its sessions), so that the swap
    # need not fingerprint it; its addresses are recorded so that routing it needs no engine call.
    why = inst.not_pristine(copy, inst.pristine(site, inst.table()))
    if why:
        inst.backend.remove_copy(copy)
        raise ResetFailed(f"{site}: spare {copy.slot} is not pristine after its login: {why}")
    addrs = {c.name: proxy.lookup_addr(inst.name, c.name) for c in copy.containers.values()}
    seen = proxy.addressed(inst.name, _backend_keys(inst, site, copy.slot))
    with inst.routing() as table:
        table.spares.setdefault(site, []).append(copy.slot)
        table.verified[copy.slot] = [time.time(), seen]
        table.addrs.update({k: v for k, v in addrs.items() if v})
    return copy


def replenish(inst: Instance, logins: Logins, site: str, want: int | None = None,
              progress: Progress = _noop, *, wait: bool = False) -> list[str]:
    """Remove dirty copies and boot spares until ``want`` (default: the instance's setting) are ready.

    Holds the site's spare lock. If another process holds it (a background replenisher) this returns
    at once (it is doing the job), or, with ``wait``, waits for it and then makes its own pass, so that
    on return the spares are ready and no stray copy is left.
    """
    if want is not None:  # an explicit number is the new setting: background refills keep it
        with inst.routing() as table:
            table.wanted[site] = want
            table.planned.pop(site, None)  # no longer the capacity plan's to decide
    try:
        ctx = locked(f"spare.{inst.name}.{site}", wait=wait, timeout=inst.catalog.site(site).health.timeout * 4)
        ctx.__enter__()
    except EnvctlError:
        return []
    try:
        cleanup_strays(inst, logins, site)
        if want is None:  # the instance's setting ('up --spares K', or the capacity plan's)
            capacity.replan(inst, site)  # a site the plan cut gets its spare back once it fits (issue 23)
            want = inst.table().wanted.get(site, 0)
        booted = []
        while len(inst.table().spares.get(site, [])) < want:
            cleanup_strays(inst, logins, site)  # resets since the last pass left dirty copies
            with boot_slot(progress, site):
                copy = _boot_spare(inst, logins, site, progress)
            progress(site, "spare", f"spare {copy.slot} ready")
            booted.append(copy.slot)
        cleanup_strays(inst, logins, site)
        return booted
    finally:
        ctx.__exit__(None, None, None)


REPLENISH_CMD = b"_replenish"  # argv marker of the detached spare replenisher


def spawn_replenish(inst: Instance, logins: Logins, sites: list[str]) -> subprocess.Popen[bytes] | None:
    """Replenish in a detached process that outlives the caller (its log: <lock dir>/replenish-<inst>.log)."""
    if not sites:
        return None
    return workers.spawn([REPLENISH_CMD.decode()], inst.name, logins.auth_dir, sites, log_name="replenish",
                         catalog_path=logins.catalog_path, nice=10)  # background work: episodes come first


def replenisher_pids(instance: str, sites: list[str] | None = None) -> list[int]:
    """The running replenisher processes of ``instance`` (of any of ``sites``), found in /proc."""
    return workers.pids(REPLENISH_CMD, instance, sites)


def stop_replenishers(instance: str, sites: list[str] | None = None, timeout: float = 20.0) -> list[int]:
    """Stop ``instance``'s replenishers (SIGTERM: a spare being booted is removed), SIGKILL after ``timeout``.

    'down' calls this first, so no spare appears after it has listed what to remove."""
    return workers.stop(REPLENISH_CMD, instance, sites, timeout)


# -- the tiers ---------------------------------------------------------------------------------

def _backend_keys(inst: Instance, site: str, slot: str) -> dict[str, str]:
    """Public port -> the X-Envctl-Backend value that addresses this copy there."""
    spec = inst.catalog.site(site)
    d = inst.settings.deployment
    keys = {}
    for svc in spec.services_for(inst.flavor):
        ports = spec.services[svc].ports
        if ports is not None:
            public = d.port(ports.public)
            keys[str(public)] = f"{inst.backend.container_name(site, svc, slot)}:{ports.container_port(public)}"
    return keys


def _swap_to_spare(inst: Instance, site: str,
                   phases: dict[str, float]) -> tuple[str, Copy, Fingerprint | None, float] | None:
    """Route the site to its first ready spare: one read and one write of the routing table (a flip of
    the proxy's live route, no reload).

    Returns (dirty slot, the new active copy, pristine fingerprint, when the spare was last verified),
    or None when no spare is ready. A spare that died after it was marked ready is caught by the probe
    that follows.
    """
    t = time.monotonic()
    spec = inst.catalog.site(site)
    d = inst.settings.deployment
    with inst.routing() as table:
        ready = table.spares.get(site, [])
        if not ready:
            return None
        slot = ready[0]
        names = {svc: inst.backend.container_name(site, svc, slot) for svc in spec.services_for(inst.flavor)}
        dirty = table.active.get(site, "")
        for svc, name in names.items():
            ports = spec.services[svc].ports
            if ports is not None:
                public = d.port(ports.public)
                route = table.routes.get(str(public))
                table.routes[str(public)] = Route(name, ports.container_port(public), route.allow if route else "")
        table.active[site] = slot
        table.spares[site] = ready[1:]
        record = table.verified.pop(slot, [0.0, -1])
        # addressed since it was verified (someone reached the spare): not to be trusted without a fingerprint
        verified = record[0] if proxy.addressed(inst.name, _backend_keys(inst, site, slot)) == record[1] else 0.0
        pristine = inst.pristine(site, table)
    phases["swap"] = time.monotonic() - t
    return dirty, Copy(site, slot, dict(names)), pristine, verified  # type: ignore[arg-type]  # names address containers


def _spare_booting(inst: Instance, site: str) -> bool:
    """Whether a replenisher holds the site's spare lock (it is booting or cleaning up copies)."""
    try:
        with locked(f"spare.{inst.name}.{site}", wait=False):
            return False
    except EnvctlError:
        return True


def _wait_for_spare(inst: Instance, site: str,
                    phases: dict[str, float]) -> tuple[str, Copy, Fingerprint | None, float] | None:
    """Swap to the spare a replenisher is booting, as soon as it is ready; None if the replenisher ends
    without one (or the site's health deadline passes)."""
    t = time.monotonic()
    deadline = t + inst.catalog.site(site).health.timeout
    while time.monotonic() < deadline and not inst.cancel.is_set():
        if inst.table().spares.get(site):
            swapped = _swap_to_spare(inst, site, phases)
            if swapped is not None:
                phases["wait_spare"] = time.monotonic() - t
                return swapped
        if not _spare_booting(inst, site):
            break
        time.sleep(0.2)
    phases["wait_spare"] = time.monotonic() - t
    return None


def _endpoint(inst: Instance, site: str, phases: dict[str, float]) -> None:
    spec = inst.catalog.site(site)
    t = time.monotonic()
    url = inst.settings.deployment.url(spec) + (spec.reset.endpoint or "")
    token = spec.settings.get("reset_token", "")
    try:
        resp = requests.post(url, data={"token": token}, timeout=60)
    except requests.RequestException as exc:
        raise ResetFailed(f"{site}: reset endpoint unreachable: {exc}") from None
    phases["endpoint"] = time.monotonic() - t
    # Errors come back with HTTP 200 too ("Error: Invalid token"): the body decides.
    if spec.reset.success_text and spec.reset.success_text not in resp.text:
        raise ResetFailed(f"{site}: reset endpoint answered {resp.status_code}: {mask(spec, resp.text.strip())[:200]}")


def _inplace(inst: Instance, site: str, phases: dict[str, float], progress: Progress) -> None:
    """Restore the saved pristine state inside the running copy (the site's ``reset.inplace.restore``)."""
    inplace = inst.catalog.site(site).reset.inplace
    if inplace is None:
        raise UsageError(f"{site} has no in-place tier", "its catalog entry declares no reset.inplace steps")
    active = inst.active_copy(site, inst.table())
    if active is None:
        raise SiteNotUp(site, inst.name)
    t = time.monotonic()
    d = inst.settings.deployment
    ports = [d.port(p) for p in inst.catalog.site(site).public_ports().values()]
    # New requests wait in the proxy and those in flight end before the database goes: clients see
    # a delay, not the errors of a copy whose database is being replaced.
    with proxy.hold(inst.name, ports):
        inst.backend.run_steps(active, inplace.restore, "restore", progress=progress)
    phases["inplace"] = time.monotonic() - t


def _recreate(inst: Instance, site: str, phases: dict[str, float], progress: Progress) -> tuple[str, Copy]:
    # The spare lock keeps replenishers' cleanup away from this copy while it is neither active nor spare.
    with locked(f"spare.{inst.name}.{site}", timeout=inst.catalog.site(site).health.timeout * 2):
        t = time.monotonic()
        copy = boot_pristine(inst, site, role="active", progress=progress)
        phases["boot"] = time.monotonic() - t
        t = time.monotonic()
        with inst.routing() as table:
            dirty = table.active.get(site, "")
            inst.route(table, copy)
        phases["swap"] = time.monotonic() - t
    return dirty, copy


def restore(inst: Instance, logins: Logins, site: str, images: dict[str, str], label: str,
            progress: Progress = _noop) -> Copy:
    """Boot a copy from ``images`` (a snapshot), wait until healthy, route it, drop the old copy."""
    with locked(f"reset.{inst.name}.{site}"):
        # The spare lock keeps a replenisher's cleanup away from this copy while it is neither active
        # nor spare (it would remove it as a stray), as in a recreate.
        with locked(f"spare.{inst.name}.{site}", timeout=inst.catalog.site(site).health.timeout * 2):
            copy = inst.boot_copy(site, role="active", images=images, golden=label, progress=progress)
            try:
                inst.wait_healthy(copy, progress)
            except BaseException:
                inst.backend.remove_copy(copy)
                raise
            with inst.routing() as table:
                inst.route(table, copy)
            cleanup_strays(inst, logins, site)
        try:
            login(inst, logins, [site])
        except NoBrowser:
            pass  # a machine without a browser (a lab host): nothing to renew here
    return copy


def reset_site(inst: Instance, logins: Logins, site: str, *, tier: str | None = None, wait: bool = True,
               progress: Progress = _noop, replenish_async: bool = True, defer_login: bool = False) -> ResetResult:
    """Reset ``site`` through its tiers until one verifies. ``defer_login``: the caller renews the login
    files of the new copy (a multi-site reset does it once, after every site has its final copy, so
    files pairing two sites are not made against a copy that is being replaced)."""
    spec = inst.catalog.site(site)
    if tier is not None and tier not in TIERS:
        raise UsageError(f"unknown tier '{tier}'", f"choose one of {', '.join(TIERS)}")
    start = time.monotonic()
    phases: dict[str, float] = {}
    escalations: list[str] = []
    first = tier or spec.reset.tier
    chain = [first] if first == "recreate" else [first, "recreate"]
    if first == "spare" and spec.reset.inplace is not None:
        chain = ["spare", "inplace", "recreate"]  # no spare ready: restore in place before recreating
    with locked(f"reset.{inst.name}.{site}", wait=wait):
        for t in chain:
            try:
                dirty = None
                if t == "spare":
                    swapped = _swap_to_spare(inst, site, phases)
                    if swapped is None and _spare_booting(inst, site):
                        # A replenisher is booting one: it is ready sooner than a recreate would be.
                        progress(site, "wait", "a spare is booting; waiting for it instead of recreating")
                        swapped = _wait_for_spare(inst, site, phases)
                    if swapped is None:
                        escalations.append("spare: no spare ready")
                        progress(site, "escalate", "no spare ready; " + (
                            "restoring in place" if "inplace" in chain else "recreating"))
                        continue
                    dirty, copy, pristine, verified = swapped
                else:
                    if t == "endpoint":
                        _endpoint(inst, site, phases)
                    if t == "inplace":
                        _inplace(inst, site, phases, progress)
                    if t == "recreate":
                        dirty, copy = _recreate(inst, site, phases, progress)
                    table = inst.table()
                    active = inst.active_copy(site, table)
                    if active is None:
                        raise SiteNotUp(site, inst.name)
                    copy, pristine = active, inst.pristine(site, table)
                if t == "spare" and pristine is not None and time.time() - verified < SPARE_FRESH_SECONDS:
                    why = _probed(inst, site, phases)  # fingerprinted when it became ready
                else:
                    why = _verified(inst, copy, pristine, phases)
                if why:
                    escalations.append(f"{t}: {why}")
                    progress(site, "escalate", f"{t} did not verify ({why}); escalating")
                    continue
                tl = time.monotonic()
                note = ""
                # New copies and restored databases need new login state (pre-made for spares); the
                # endpoint restores listings, not sessions, and 'none' changes nothing, so their login
                # files stay valid.
                if (t in ("recreate", "inplace") or (t == "spare" and not _install_staged(logins, site, copy.slot))) \
                        and not defer_login:
                    try:
                        login(inst, logins, [site])
                    except NoBrowser as exc:  # a lab host: the site is pristine, its login files not renewed
                        note = f"login files not renewed: {str(exc).splitlines()[0]}"
                phases["login"] = time.monotonic() - tl
                if replenish_async:
                    spawn_replenish(inst, logins, [site])
                elif dirty:
                    cleanup_strays(inst, logins, site)
                return ResetResult(site, True, t, time.monotonic() - start, phases, escalations, note=note)
            except EnvctlError as exc:
                escalations.append(f"{t}: {exc}")
                progress(site, "escalate", f"{t} failed: {str(exc).splitlines()[0]}")
        return ResetResult(site, False, chain[-1], time.monotonic() - start, phases, escalations,
                           escalations[-1] if escalations else "no tier worked")
