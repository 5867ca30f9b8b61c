"""Taking a snapshot of a site's active copy: golden (pristine redefined, with a clean stop) or named (frozen for the
commit only, unless a clean stop is asked for), and, for a named one, its warm copy. The primitives (tags, commits,
live capture) are :mod:`envctl.state.snapshots`; restoring one is :mod:`envctl.state.restore`."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from envctl.backends.base import Copy
from envctl.errors import ResetFailed, SiteNotUp
from envctl.healthchecks.fingerprint import Fingerprint
from envctl.instance import Instance, Progress, noop
from envctl.locks import locked
from envctl.routing.table import snapshot_source
from envctl.state import logins as login_state
from envctl.state import ready, snapshots
from envctl.state.logins import Logins


@dataclass
class Made:
    tags: dict[str, str]
    fingerprint: Fingerprint
    method: str = "stop"  # how the copy was captured: stop | freeze
    attempts: int = 1
    note: str = ""
    slots: list[str] = field(default_factory=list)  # warm copies booted from it
    timings: dict[str, float] = field(default_factory=dict)


def create(inst: Instance, logins: Logins, site: str, name: str, progress: Progress = noop, *, warm: bool = False,
           clean_stop: bool = False) -> Made:
    """Commit ``site``'s active copy (volumes included) as golden or as snapshot ``name``; with ``warm``, keep a
    verified copy of it booted so that a restore is a route swap."""
    t = time.monotonic()
    timings: dict[str, float] = {}
    with locked(inst.reset_lock(site)):
        copy = inst.routing.active_copy(site, inst.routing.table())
        if copy is None:
            raise SiteNotUp(site, inst.name)
        if inst.copies.thaw_leftovers(copy):
            progress(site, "snapshot", "unpaused members a killed capture had left frozen")
        if name == "golden":
            made = _golden(inst, copy, progress, timings)
        else:
            with login_state.stashing(logins, site, name):  # staged first: a full disk stops it before the capture
                cap = snapshots.capture_live(inst, copy, name, progress, clean_stop=clean_stop)
            made = Made(cap.tags, cap.fingerprint, cap.method, cap.attempts, cap.note)
            timings.update(cap.timings)
            if cap.method == "stop":
                inst.checks.wait_healthy(copy, progress, public=True)
        timings["capture"] = time.monotonic() - t
    if name != "golden":
        # warm copies booted from the images this snapshot replaces are stale
        source = snapshot_source(name)
        stale = ready.drop(inst, logins, site, source)
        if stale:
            progress(site, "warm", f"removed {len(stale)} warm copies of the replaced snapshot")
        if warm:
            tw = time.monotonic()
            inst.routing.want_ready(site, source, 1)
            ready.refill(inst, logins, site, progress, wait=True, sources=[source])
            made.slots = [r.slot for r in inst.routing.table().ready.of(site, source)]
            timings["warm"] = time.monotonic() - tw
            if not made.slots:
                raise ResetFailed(f"{site}: no warm copy of '{name}' became ready",
                                  f"see 'envctl status' and 'envctl logs {site}'")
    made.timings = timings
    return made


def _golden(inst: Instance, copy: Copy, progress: Progress, timings: dict[str, float]) -> Made:
    site = copy.site
    tf = time.monotonic()
    fp = inst.checks.fingerprint(copy)
    timings["fingerprint"] = time.monotonic() - tf
    # Pristine is redefined as this state: the in-place tier must restore it, not the state saved when the copy
    # was configured (the golden then carries it to every copy).
    tf = time.monotonic()
    if inst.copies.save_inplace(copy, progress):
        timings["save"] = time.monotonic() - tf
    progress(site, "snapshot", "clean stop, commit, start")
    tf = time.monotonic()
    copy = snapshots.commit_golden(inst, copy, fp)
    timings["stop_commit_start"] = time.monotonic() - tf
    inst.routing.set_pristine(site, fp)
    inst.checks.wait_healthy(copy, progress, public=True)
    return Made(snapshots.golden_tags(inst, site), fp)
