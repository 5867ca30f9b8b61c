"""``snapshot restore``: make a site's state a named snapshot's, verified by the snapshot's fingerprint.

The fastest path routes a warm copy (a ready copy of source ``snapshot:NAME``, :mod:`envctl.state.ready`): a
route flip. Without one, a site with in-place steps that can tell whether the routed copy holds the snapshot's
saved state (``reset.inplace.has``; saved there by ``snapshot create``) has it restored inside that copy, requests
held meanwhile (the in-place path). Else a copy is booted from the snapshot's images (the cold path) and routed
the same way. Every path ends with the routed copy passing its probes on the public URL and matching the
fingerprint the images are labelled with (a path that does not falls through to the next); the login files are
made valid for it (:func:`envctl.state.logins.after_restore`); a replaced copy is removed and the next warm copy
booted by the refill worker.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from envctl.backends.base import Copy, Progress, noop
from envctl.errors import ResetFailed
from envctl.healthchecks.fingerprint import Fingerprint
from envctl.instance import Instance, ready_role
from envctl.locks import locked
from envctl.routing.table import snapshot_source
from envctl.state import logins as login_state
from envctl.state import ready, snapshots
from envctl.state.logins import Logins
from envctl.state.tiers import verified




@dataclass
class Restored:
    copy: Copy
    warm: bool  # a warm copy was routed (else one was booted: the cold path)
    fingerprint: str
    login: str  # kept | stash | renewed | none
    phases: dict[str, float] = field(default_factory=dict)
    how: str = ""  # warm (a warm copy routed) | in place (restored inside the running copy) | cold (a copy booted)


def restore(inst: Instance, logins: Logins, site: str, name: str, progress: Progress = noop, *,
            background: bool = True) -> Restored:
    """Make ``site``'s state snapshot ``name``'s (see the module's docstring). ``background``: the next warm copy
    is booted by a detached worker (else before returning)."""
    tags = snapshots.snapshot_tags(inst, site, name)
    expected = snapshots.labelled_fingerprint(inst, tags)
    source = snapshot_source(name)
    phases: dict[str, float] = {}
    with locked(inst.reset_lock(site)):
        t = time.monotonic()
        taken = inst.routing.take_ready(site, source)
        phases["swap"] = time.monotonic() - t
        copy = taken[1] if taken else None
        warm, how = copy is not None, "warm" if copy is not None else "cold"
        if copy is not None:
            why = verified(inst, copy, expected, phases, fingerprint=expected is not None)
            if why:
                progress(site, "escalate", f"the warm copy did not verify ({why}); booting a new one")
                copy, warm = None, False
        if copy is None and expected is not None:
            copy = _in_place(inst, site, name, expected, phases, progress)
            how = "in place" if copy is not None else "cold"
        if copy is None:
            t = time.monotonic()
            # Booted under the ready lock, so no cleanup takes it for a stray before it is routed; a worker
            # that holds the lock now may just be finishing a warm copy of it.
            with locked(inst.ready_lock(site), timeout=inst.catalog.site(site).health.timeout * 4):
                taken = inst.routing.take_ready(site, source)
                copy, warm = (taken[1], True) if taken else (None, False)
                if copy is None:
                    progress(site, "boot", f"no warm copy of '{name}': booting one from its images")
                    with inst.copies.booting(site, role=ready_role(source), images=tags, golden=source,
                                      progress=progress) as copy:
                        inst.routing.route(copy)
            phases["boot"] = time.monotonic() - t
            why = verified(inst, copy, expected, phases, fingerprint=expected is not None)
            if why:
                raise ResetFailed(f"{site}: the copy restored from snapshot '{name}' does not match it: {why}",
                                  f"take the snapshot again: envctl snapshot create {site} {name}")
        t = time.monotonic()
        login = login_state.after_restore(inst, logins, site, name)
        phases["login"] = time.monotonic() - t
        digest = expected.digest if expected else inst.checks.fingerprint(copy).digest
    if background:
        ready.spawn(inst, logins, [site])
    else:
        ready.refill(inst, logins, site, progress, wait=True, sources=[source])
    return Restored(copy, warm, digest, login, phases, how)


def _in_place(inst: Instance, site: str, name: str, expected: Fingerprint, phases: dict[str, float],
              progress: Progress) -> Copy | None:
    """Restore snapshot ``name`` inside the routed copy when it holds the snapshot's saved state (the site's in-place
    steps; requests held meanwhile), verified by the snapshot's fingerprint; None when it cannot (the caller boots a
    copy)."""
    inplace = inst.catalog.site(site).reset.inplace
    copy = inst.routing.active_copy(site, inst.routing.table())
    if inplace is None or not inplace.has or copy is None:
        return None
    state = snapshots.saved_state(name)
    t = time.monotonic()
    if not inst.copies.has_saved(copy, state):
        return None
    progress(site, "restore", f"restoring '{name}' inside the running copy")
    with inst.front.hold(site):
        inst.copies.run_steps(copy, inplace.restore, "restore", progress=progress, state=state)
    phases["inplace"] = time.monotonic() - t
    why = verified(inst, copy, expected, phases, fingerprint=True)
    if why:
        progress(site, "escalate", f"the in-place restore did not verify ({why}); booting a copy")
        return None
    return copy


__all__ = ["restore", "Restored"]
