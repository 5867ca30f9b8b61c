"""``snapshot restore``: make a site's state a named snapshot's, verified by the snapshot's fingerprint.

The fastest path routes a warm copy (a ready copy of source ``snapshot:NAME``, :mod:`envctl.state.ready`): a
route flip. Without one, a copy is booted from the snapshot's images (the cold path) and routed the same way.
Either way the routed copy passes its probes on the public URL and matches the fingerprint the images are
labelled with; the login files are made valid for it (:func:`envctl.state.logins.after_restore`); the
replaced copy is removed and the next warm copy booted by the refill worker.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from envctl.backends.base import Copy
from envctl.errors import ResetFailed
from envctl.instance import Instance, ready_role
from envctl.locks import locked
from envctl.routing.table import snapshot_source
from envctl.state import logins as login_state
from envctl.state import ready, snapshots
from envctl.state.logins import Logins
from envctl.state.tiers import verified

Progress = Callable[[str, str, str], None]


def _noop(*_: str) -> None:
    pass


@dataclass
class Restored:
    copy: Copy
    warm: bool  # a warm copy was routed (else one was booted: the cold path)
    fingerprint: str
    login: str  # kept | stash | renewed | none
    phases: dict[str, float] = field(default_factory=dict)


def restore(inst: Instance, logins: Logins, site: str, name: str, progress: Progress = _noop, *,
            background: bool = True) -> Restored:
    """Make ``site``'s state snapshot ``name``'s (see the module's docstring). ``background``: the next warm copy
    is booted by a detached worker (else before returning)."""
    tags = snapshots.snapshot_tags(inst, site, name)
    expected = snapshots.labelled_fingerprint(inst, tags)
    source = snapshot_source(name)
    phases: dict[str, float] = {}
    with locked(inst.reset_lock(site)):
        t = time.monotonic()
        taken = inst.take_ready(site, source)
        phases["swap"] = time.monotonic() - t
        copy = taken[1] if taken else None
        warm = copy is not None
        if copy is not None:
            why = verified(inst, copy, expected, phases, fingerprint=expected is not None)
            if why:
                progress(site, "escalate", f"the warm copy did not verify ({why}); booting a new one")
                copy, warm = None, False
        if copy is None:
            t = time.monotonic()
            # Booted under the ready lock, so no cleanup takes it for a stray before it is routed; a worker
            # that holds the lock now may just be finishing a warm copy of it.
            with locked(inst.ready_lock(site), timeout=inst.catalog.site(site).health.timeout * 4):
                taken = inst.take_ready(site, source)
                copy, warm = (taken[1], True) if taken else (None, False)
                if copy is None:
                    progress(site, "boot", f"no warm copy of '{name}': booting one from its images")
                    with inst.booting(site, role=ready_role(source), images=tags, golden=source,
                                      progress=progress) as copy:
                        inst.route(copy)
            phases["boot"] = time.monotonic() - t
            why = verified(inst, copy, expected, phases, fingerprint=expected is not None)
            if why:
                raise ResetFailed(f"{site}: the copy restored from snapshot '{name}' does not match it: {why}",
                                  f"take the snapshot again: envctl snapshot create {site} {name}")
        t = time.monotonic()
        login = login_state.after_restore(inst, logins, site, name)
        phases["login"] = time.monotonic() - t
        digest = expected.digest if expected else inst.fingerprint(copy).digest
    if background:
        ready.spawn(inst, logins, [site])
    else:
        ready.refill(inst, logins, site, progress, wait=True, sources=[source])
    return Restored(copy, warm, digest, login, phases)


__all__ = ["restore", "Restored"]
