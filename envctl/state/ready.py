"""Ready copies: copies of a site booted from an image, verified, logged in and kept ready, not routed.

One mechanism for two sources (the routing table's :class:`~envctl.routing.table.ReadyCopies`):

- a site's **spares** are ready copies of its golden image (source ``golden``): a spare-tier reset routes
  the first one (a route flip); how many the site keeps is ``up --spares K`` or the capacity plan's;
- **warm** copies of a named snapshot (source ``snapshot:NAME``): ``snapshot restore`` routes one.

A ready copy is booted and checked (probes through the proxy's ``X-Envctl-Backend`` header on the real
public URL; its fingerprint equal to what its source is labelled with), its login files made (staged,
moved into place when it is routed), then listed ready. Refills run in a detached worker
(``envctl _ready``) so a reset returns at once; one lock per site (``Instance.ready_lock``) is held
while a process boots or cleans up the site's ready copies, and at most ``BOOT_SLOTS`` copies boot at
once on the machine, so refills after many resets queue instead of starving the resets in progress.
"""
from __future__ import annotations

import os
import subprocess
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from envctl.backends.base import Copy, Progress, noop
from envctl.errors import DockerError, EnvctlError, LoginFailed, NoBrowser, NotReady, ResetFailed
from envctl.healthchecks.fingerprint import Fingerprint, mismatch
from envctl.instance import Instance, ready_role
from envctl.locks import Busy, locked, one_of
from envctl.routing.table import GOLDEN, SNAPSHOT, RoutingTable
from envctl.state import capacity, snapshots, workers
from envctl.state import logins as login_state
from envctl.state.logins import Logins

WORKER = b"_ready"  # argv marker of the detached refill worker
BOOT_SLOTS = max(2, 2 * (os.cpu_count() or 1))  # ready copies booting at once on this machine, every instance's
# A worker's pass that fails (a proxy or engine too busy to answer in time on a crowded host) is tried again
# after these pauses: the next episode needs the copy. The next pass removes what the failed one left half-booted.
RETRY_PAUSES = (5.0, 15.0, 30.0, 60.0, 60.0, 60.0, 60.0, 60.0)



@contextmanager
def boot_slot(progress: Progress, site: str) -> Iterator[None]:
    """Hold one of the machine's boot slots while a ready copy boots and logs in (background work)."""
    note = f"waiting for one of the {BOOT_SLOTS} boot slots of this machine"
    with one_of("spare-boot", BOOT_SLOTS, timeout=1800, on_wait=lambda: progress(site, "wait", note)):
        yield


def expected(inst: Instance, site: str, source: str) -> tuple[dict[str, str] | None, str, Fingerprint | None]:
    """(images, golden label, the fingerprint a copy of ``source`` must have) — a golden not made yet: (None, "", pristine)."""
    if source == GOLDEN:
        imgs, key = snapshots.golden_images(inst, site)
        return imgs, key, inst.routing.pristine(site, inst.routing.table())
    name = source[len(SNAPSHOT):]
    tags = snapshots.snapshot_tags(inst, site, name)
    return tags, source, snapshots.labelled_fingerprint(inst, tags)


def boot_pristine(inst: Instance, site: str, *, role: str, progress: Progress = noop) -> Copy:
    """A new, healthy copy of ``site`` verified pristine, not routed. Makes the golden image if missing."""
    imgs, key, fp_expected = expected(inst, site, GOLDEN)
    with inst.copies.booting(site, role=role, images=imgs, golden=key, progress=progress) as copy:
        fp = inst.checks.fingerprint(copy)
        why = mismatch(fp_expected, fp) if fp_expected is not None else ""
        if why:
            raise ResetFailed(f"{site}: a fresh copy is not pristine: {why}",
                              "the golden image is stale: 'envctl snapshot rm golden' and reset again")
        if not imgs:
            inst.copies.save_inplace(copy, progress)  # pristine now: the golden carries the saved state
            progress(site, "golden", "committing the golden image (clean stop, commit, start)")
            copy = snapshots.commit_golden(inst, copy, fp)
            inst.checks.wait_healthy(copy, progress)
        if fp_expected is None:
            inst.routing.set_pristine(site, fp, only_if_missing=True)
        return copy


def boot_ready(inst: Instance, logins: Logins, site: str, source: str, progress: Progress = noop) -> Copy | None:
    """Boot one ready copy of ``source``: healthy, its fingerprint checked, logged in (files staged for its
    swap), checked again (the login wrote its sessions), listed ready. None when ``source`` stopped wanting
    copies meanwhile. The caller holds the site's ready lock."""
    role = ready_role(source)
    if source == GOLDEN:
        copy = boot_pristine(inst, site, role=role, progress=progress)
        fp = inst.routing.pristine(site, inst.routing.table())
    else:
        imgs, label, fp = expected(inst, site, source)
        with inst.copies.booting(site, role=role, images=imgs, golden=label, progress=progress) as copy:
            why = mismatch(fp, inst.checks.fingerprint(copy)) if fp else ""
            if why:
                raise ResetFailed(f"{site}: a copy booted from {source} does not match it: {why}",
                                  f"take the snapshot again: envctl snapshot create {site} {source[len(SNAPSHOT):]}")
    try:
        if source == GOLDEN and inst.catalog.site(site).login:
            staged = logins.staged(site, copy.slot)
            staged.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                login_state.renew(inst, logins, [site], out_dir=staged, pairs=False,  # pairs: composed when routed
                                  headers=inst.front.backend_header(copy, inst.catalog.site(site).entry))
            except NoBrowser:
                pass  # a machine without a browser (a lab host): the copy is ready, without login files
            why = inst.checks.not_pristine(copy, fp)
            if why:
                raise ResetFailed(f"{site}: ready copy {copy.slot} is not pristine after its login: {why}")
        addrs = {m.name: inst.backend.proxy.address(inst.name, m.name) or "" for m in copy.members.values()}
        if not inst.routing.add_ready(copy, source, seen=inst.front.addressed(site, copy.slot), addrs=addrs):
            inst.copies.remove(copy)
            login_state.drop_staged(logins, site, copy.slot)
            return None
    except BaseException:
        inst.copies.remove(copy)
        login_state.drop_staged(logins, site, copy.slot)
        raise
    progress(site, "ready", f"ready copy {copy.slot} of {source} listed")
    return copy


def remove_strays(inst: Instance, site: str, table: RoutingTable, *, holding: bool = False) -> list[Copy]:
    """Remove copies of ``site`` that are neither active nor ready; returns them. A copy still booting
    is kept while its booter holds the site's ready lock (unless the caller holds it: ``holding``), and an
    active-role one while 'up' holds the site's boot lock (a booter killed mid-way leaves one that the next
    cleanup removes)."""
    keep = {table.routes.active.get(site)} | set(table.ready.all_slots(site))
    booting: bool | None = False if holding else None
    activating: bool | None = None
    removed = []
    for (_, slot), c in inst.copies.of(site).items():
        if slot in keep:
            continue
        roles = c.roles
        if roles & {"spare", "warm"}:
            if booting is None:
                booting = inst.held(inst.ready_lock(site))
            if booting:
                continue
        if "active" in roles:  # perhaps the copy an 'up' (repair) is booting, not yet routed
            if activating is None:
                activating = inst.held(inst.boot_lock(site))
            if activating:
                continue
            # 'up' lets the lock go once the copy is routed: routed since ``table`` was read, it is the active one
            if slot == inst.routing.table().routes.active.get(site):
                continue
        # A copy a route just left is drained: it takes no new request; let those in flight end.
        inst.front.retire(c.names)
        inst.copies.remove(c)
        removed.append(c)
    return removed


def cleanup(inst: Instance, logins: Logins, site: str, *, holding: bool = False) -> list[str]:
    """Remove copies that are neither active nor ready (dirty ones, leftovers of a killed boot); their slots.
    ``holding``: the caller holds the site's ready lock (no other process can be booting a ready copy of it)."""
    table = inst.routing.table()
    if not table.routes.active and not table.routes.by_port:
        return []  # no live routing table: nothing can be told apart
    removed = remove_strays(inst, site, table, holding=holding)
    for c in removed:
        login_state.drop_staged(logins, site, c.slot)
    return [c.slot for c in removed]


def refill(inst: Instance, logins: Logins, site: str, progress: Progress = noop, *, wait: bool = False,
           sources: list[str] | None = None) -> list[str]:
    """Remove dirty copies and boot ready copies until every source of ``site`` (or ``sources``) has what it
    wants. Holds the site's ready lock: when another process holds it (a worker at it) this returns at once,
    or, with ``wait``, waits for it and then makes its own pass, so that on return the copies are ready and
    no stray copy is left. Returns the slots booted."""
    try:
        ctx = locked(inst.ready_lock(site), wait=wait, timeout=inst.catalog.site(site).health.timeout * 4)
        ctx.__enter__()
    except EnvctlError:
        return []
    try:
        capacity.replan(inst, site)  # a site the plan cut gets its spare back once it fits (issue 23)
        booted: list[str] = []
        while not inst.cancel.is_set():
            cleanup(inst, logins, site, holding=True)  # resets since the last pass left dirty copies
            table = inst.routing.table()
            todo = [s for s in (sources or table.ready.sources(site))
                    if len(table.ready.of(site, s)) < table.ready.want(site, s)]
            if not todo:
                break
            with boot_slot(progress, site):
                copy = boot_ready(inst, logins, site, todo[0], progress)
            if copy is not None:
                booted.append(copy.slot)
        cleanup(inst, logins, site, holding=True)
        return booted
    finally:
        ctx.__exit__(None, None, None)


def refill_retrying(inst: Instance, logins: Logins, sites: list[str], progress: Progress = noop) -> list[str]:
    """:func:`refill` each site, retrying a failed pass after :data:`RETRY_PAUSES` (what a crowded host makes
    late: the engine, the proxy, a probe, a login); the sites that got nothing in the end. What the worker runs."""
    failed = []
    for site in sites:
        t = time.monotonic()
        for attempt, pause in enumerate(RETRY_PAUSES + (None,), start=1):
            try:
                slots = refill(inst, logins, site, progress)  # another worker at it is doing the job
            except (DockerError, NotReady, LoginFailed, ResetFailed) as exc:  # not a usage error
                progress(site, "retry", f"pass {attempt} failed: {exc}" + (f"; again in {pause:.0f}s" if pause else ""))
                if pause is None:
                    failed.append(site)
                    break
                if inst.cancel.wait(pause):
                    return failed
                continue
            progress(site, "ready", f"{len(slots)} ready copies booted in {time.monotonic() - t:.1f}s")
            break
    return failed


def spawn(inst: Instance, logins: Logins, sites: list[str]) -> subprocess.Popen[bytes] | None:
    """:func:`refill_retrying` in a detached worker that outlives the caller (log: <state dir>/ready-<inst>.log)."""
    if not sites:
        return None
    return workers.spawn([WORKER.decode()], inst.name, logins.auth_dir, sites, log_name="ready",
                         catalog_path=logins.catalog_path, nice=10)  # background work: episodes come first


def worker_pids(instance: str, sites: list[str] | None = None) -> list[int]:
    return workers.pids(WORKER, instance, sites)


def stop_workers(instance: str, sites: list[str] | None = None, timeout: float = 20.0) -> list[int]:
    """Stop ``instance``'s refill workers (SIGTERM: a copy being booted is removed), SIGKILL after ``timeout``.
    'down' calls this first, so no copy appears after it has listed what to remove."""
    return workers.stop(WORKER, instance, sites, timeout)


def booting(inst: Instance, site: str) -> bool:
    """Whether a process holds the site's ready lock (it is booting or cleaning up ready copies)."""
    return inst.held(inst.ready_lock(site))


def wait_and_take(inst: Instance, site: str, source: str, deadline: float) -> tuple | None:
    """Route ``site`` to the ready copy a worker is booting, as soon as it is listed; None if the worker ends
    without one (or ``deadline``, a monotonic time, passes)."""
    while time.monotonic() < deadline and not inst.cancel.is_set():
        if inst.routing.table().ready.of(site, source):
            taken = inst.routing.take_ready(site, source)
            if taken is not None:
                return taken
        if not booting(inst, site):
            break
        time.sleep(0.2)
    return None


def drop(inst: Instance, logins: Logins, site: str, source: str | None = None) -> list[str]:
    """Forget and remove ``site``'s ready copies of ``source`` (every snapshot's when None); their slots."""
    slots = inst.routing.drop_ready(site, source)
    copies = inst.copies.of(site) if slots else {}
    for slot in slots:
        if (site, slot) in copies:
            inst.copies.remove(copies[(site, slot)])
        login_state.drop_staged(logins, site, slot)
    return slots


def cleanup_locked(inst: Instance, logins: Logins, site: str) -> None:
    """:func:`cleanup` under the site's ready lock (skipped when a holder keeps it too long: it cleans up itself)."""
    try:
        with locked(inst.ready_lock(site), timeout=inst.catalog.site(site).health.timeout * 2):
            cleanup(inst, logins, site, holding=True)
    except Busy:
        pass


__all__ = ["boot_pristine", "boot_ready", "refill", "refill_retrying", "spawn", "stop_workers", "worker_pids",
           "cleanup", "cleanup_locked", "drop", "booting", "wait_and_take", "BOOT_SLOTS", "WORKER"]
