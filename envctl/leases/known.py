"""Known, not assumed (issue 38): what the pool reads to know that a member's sites are pristine, and what it does
when they are not. A mixin of :class:`envctl.leases.pool.Pool`.

- **Change signals.** Each site with a fingerprint has a cheap change signal read inside its routed copy
  (``Lab.signals``: the catalog's ``changes`` queries, e.g. PostgreSQL's WAL position, InnoDB's log sequence number).
  When a site is known pristine the pool records (the copy routed, its signal). Later the same pair means nothing the
  fingerprint covers changed, whatever path a change took (the proxy, ``docker exec``, a process in the copy, its own
  address, a background job). A site whose signal moved, or with a fingerprint and no signal, is fingerprinted. The
  signal is read *before* the fingerprint, so a write between the two is caught by the fingerprint, and one after it
  moves the signal.
- **Free members stay honest** (:meth:`Known._reverify_round`): when the host is idle (its 1-minute load average,
  ``os.getloadavg``, below ``--reverify-load``, default the CPU count), at most one free member every
  ``--reverify-every`` seconds is checked again in the background: probes, then *every* fingerprint (not only the
  moved signals: the re-verification also checks the signals' own promise). One that fails is quarantined (never
  handed out), rebuilt (its failing sites reset by recreate, then every site verified) and counted.
- **Readers share, writers own** (issue 40, :meth:`Known._reading`): a shared member's signals are read when sharing
  starts (the check of its first reader), when a reader joins, on every probe round of the watch and at each reader's
  release. A reading whose signals moved fingerprints those sites; when one no longer verifies, every read lease held
  at that moment or since the last reading that found nothing (``PoolMember.window``) is *tainted* (told on its heartbeat,
  in its release's answer, counted), and the member takes no more readers. A change between two readings is
  attributed to every reader of that window: the pool cannot tell which reader wrote.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from envctl.errors import EnvctlError
from envctl.leases.metrics import Stats
from envctl.leases.states import (CHECKING, FREE, QUARANTINED, SHARED, Attempt, PoolMember, MemberStore)


def first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def short(why: str, limit: int = 160) -> str:
    """A verification's why, on one line and cut to ``limit`` characters (a taint's reason, a notice)."""
    line = " ".join(why.split())
    return line if len(line) <= limit else line[:limit - 1] + "…"


class Known:
    """The pool's knowledge of its members' state (see the module's docstring); the pool supplies the attributes."""

    name: str
    store: MemberStore
    stats: Stats
    cond: threading.Condition
    members: dict[str, PoolMember]
    node_states: dict[str, str]
    log: Callable[[str], None]
    reverify_every: float
    reverify_load: float
    next_reverify: float
    tainted_ended: dict[str, str]
    ended: Any

    def _spawn(self, fn: Callable[..., Any], *args: Any) -> threading.Thread:
        raise NotImplementedError

    def _end(self, lease_id: str, why: str) -> None:
        raise NotImplementedError

    _notice: Callable[..., None]  # Watch
    _check_pristine: Callable[..., list[str]]  # Pool
    _settle: Callable[..., None]  # Holds

    # -- signals ----------------------------------------------------------------------------------------------
    @staticmethod
    def _route(act: Any, site: str) -> str:
        """The copy the proxy routes ``site`` to (its members, one per public port), '' when it could not be read."""
        if act is None:
            return ""
        ports = act.sites.get(site) or []
        return ",".join(str(act.routes.get(p, "")) for p in sorted(ports))

    def _known_dirty(self, m: PoolMember, sites: list[str], *, full: bool = False) -> dict[str, str]:
        """Site -> why it is not pristine, for those of ``sites`` that are not. The proxy's routes and every signal are
        read first (one step per site, side by side); then only the sites whose (copy, signal) is not the one recorded
        when they were last known pristine (or that have a fingerprint and no signal; every one with ``full``) are
        fingerprinted. Those that verify are recorded as known pristine; those that do not are forgotten."""
        catalog = m.lab.catalog
        with_fp = [s for s in sites if catalog.site(s).fingerprint]
        if not with_fp:
            return {}
        act = m.lab.activity(list(m.sites))
        sig = m.lab.signals(with_fp)
        self.stats.signal_reads += 1
        self.stats.signals += sum(1 for s in with_fp if catalog.site(s).changes)  # each hashed like a fingerprint
        now = {s: (self._route(act, s), sig.get(s)) for s in with_fp}
        check = [s for s in with_fp if full or now[s][1] is None or m.known.get(s) != now[s]]
        self.stats.verifications += len(check)
        self.stats.verifications_skipped += len(sites) - len(check)
        dirty = m.lab.not_pristine(check) if check else {}
        for s in with_fp:
            if s in dirty:
                m.known.pop(s, None)
            elif now[s][1] is not None:
                m.known[s] = (now[s][0], str(now[s][1]))
        return dict(dirty)

    # -- readers share: who overlapped a change -------------------------------------------------------------
    def _reading(self, m: PoolMember, *, wait: bool = True) -> str:
        """Read a shared member's signals now (fingerprinting what moved): the change found ('' for none). A change
        taints every read lease of the window, and the member takes no more readers. One reading at a time per
        member; without ``wait``, none when one runs already."""
        if m.taint or not m.read_lock.acquire(blocking=wait):
            return m.taint  # a tainted member: every lease on it was told, and it takes no more
        try:
            with self.cond:
                held = set(m.leases)  # held when the signals are read: a change after it may be theirs too
            dirty = self._known_dirty(m, list(m.sites))
            return self._found(m, dirty) if dirty else self._clean(m, held)
        finally:
            m.read_lock.release()

    def _clean(self, m: PoolMember, held: set[str]) -> str:
        """A reading that found nothing: the next window is the read leases held when it read, and those since."""
        with self.cond:
            m.window = held | set(m.leases)
            return m.taint

    def _found(self, m: PoolMember, dirty: dict[str, str]) -> str:
        with self.cond:
            why = "; ".join(f"{s}: {short(d)}" for s, d in sorted(dirty.items()))
            m.taint = m.taint or why
            m.closed = "tainted: " + why
            overlapped = m.window | set(m.leases)
            m.window = set(m.leases)
        self.log(f"pool {self.name}: {m.name} changed while shared ({why}); tainting {len(overlapped)} read lease(s)")
        for lid in sorted(overlapped):
            self._taint(m, lid, why, sorted(dirty))
        return why

    def _taint(self, m: PoolMember, lease_id: str, why: str, sites: list[str]) -> None:
        """Mark one read lease tainted (once): a notice on it, or, when it has ended, its 409's why."""
        with self.cond:
            lease = m.leases.get(lease_id)
            if lease is not None:
                if lease.get("tainted"):
                    return
                lease["tainted"] = why
            elif lease_id in self.tainted_ended:
                return
            else:
                self.tainted_ended[lease_id] = why
            self.stats.tainted += 1
        what = (f"tainted: {why} changed while this read lease was held: another reader of the instance wrote (or "
                "this one did); what was read may include that change")
        if lease is not None:
            for site in sites:
                self._notice(m, site, what, lease_id)
        else:
            with self.cond:
                ended = self.ended.get(lease_id)
                if ended is not None:
                    self.ended[lease_id] = f"{ended} (tainted: {why})"

    def _read_shared(self, members: list[PoolMember]) -> None:
        """The watch's round: a reading of every shared member (each in its own thread, one at a time per member)."""
        for m in members:
            if m.state == SHARED and not m.taint and not m.read_lock.locked():
                self._spawn(self._reading_logged, m)

    def _reading_logged(self, m: PoolMember) -> None:
        try:
            self._reading(m, wait=False)
        except Exception as exc:  # noqa: BLE001 - the engine hiccuped: the next round reads again
            self.log(f"pool {self.name}: reading the change signals of {m.name} failed: {first_line(exc)}")

    # -- free members stay honest --------------------------------------------------------------------------
    def host_idle(self) -> tuple[bool, str]:
        """Whether this host is idle enough for a background re-verification: its 1-minute load average (what
        ``os.getloadavg`` reads from the kernel) below ``reverify_load`` (default: the CPU count)."""
        try:
            load = os.getloadavg()[0]
        except OSError:
            return True, "load average unknown"
        return load < self.reverify_load, f"load average {load:.2f}, limit {self.reverify_load:g}"

    def _reverify_round(self) -> None:
        """At most one free member every ``reverify_every`` seconds, the one checked longest ago, when the host is
        idle: checked in the background (CHECKING meanwhile: an acquire waits for it)."""
        if self.reverify_every <= 0 or time.monotonic() < self.next_reverify:
            return
        idle, why = self.host_idle()
        if not idle:
            self.stats.reverify_deferred += 1
            self.next_reverify = time.monotonic() + min(10.0, self.reverify_every)
            return
        with self.cond:
            free = [m for m in self.members.values() if m.state == FREE
                    and self.node_states.get(m.node, "ready") == "ready"]
            if not free:
                return
            m = min(free, key=lambda x: (x.checked_at, x.name))
            m.state, m.attempt = CHECKING, Attempt("reverify")
            self.next_reverify = time.monotonic() + self.reverify_every
        self._spawn(self._reverify, m)

    def _reverify(self, m: PoolMember) -> None:
        """Probes (one pass: a site failing them is the watch's to heal, not a reason to wait here), then every
        fingerprint; quarantined when one differs."""
        try:
            failing = m.lab.problems(list(m.sites))
            dirty = [] if failing else self._check_pristine(m, full=True)
            self.stats.reverified += 0 if failing else 1
        except Exception as exc:  # noqa: BLE001 - the engine did not answer: it stays free, verified at its acquire
            dirty = []
            m.known.clear()
            self.log(f"pool {self.name}: re-verifying {m.name} failed: {first_line(exc)}")
        if dirty:
            self._quarantine(m, dirty)
            return
        with self.cond:
            if m.state == CHECKING and m.attempt is not None and m.attempt.access == "reverify":
                m.state, m.attempt = FREE, None
            self.cond.notify_all()

    def _quarantine(self, m: PoolMember, dirty: list[str]) -> None:
        """A free member that failed its re-verification: quarantined (never handed out), counted, and rebuilt."""
        why = "; ".join(dirty)
        sites = sorted({d.split(":", 1)[0] for d in dirty if d.split(":", 1)[0] in m.sites})
        with self.cond:
            self.stats.quarantined += 1
            m.state, m.attempt = QUARANTINED, None
            m.quarantine = {"at": time.time(), "why": why, "sites": sites}
            m.error = f"quarantined: {why} (found by the background re-verification; rebuilding)"
            m.known.clear()
            self.cond.notify_all()
        self.log(f"pool {self.name}: {m.name} failed its background re-verification ({why}); quarantined, rebuilding")
        try:
            self.store.store(m, m.record(self.name), None)
        except EnvctlError as exc:
            self.log(f"pool {self.name}: could not record the quarantine of {m.name}: {first_line(exc)}")
        self._spawn(self._rebuild_quarantined, m)

    def _rebuild_quarantined(self, m: PoolMember) -> None:
        """Reset the quarantined member's failing sites by recreate (every site when the failure names none), then
        verify every site (probes, every fingerprint); free when it all verifies, else broken (retried)."""
        sites = list(m.quarantine.get("sites") or m.sites)
        error = ""
        try:
            results = m.lab.reset(sites, tier="recreate", refill=m.lab.keeps_spares())
            for r in results:
                self.stats.reset(r.tier, r.ok, r.seconds)
            error = "; ".join(f"{r.site}: {r.error}" for r in results if not r.ok)
            if not error:
                still = self._check_pristine(m, full=True)
                error = "; ".join(still)
        except Exception as exc:  # noqa: BLE001
            error = first_line(exc)
        self._settle(m, error, what="rebuilt after its quarantine")


__all__ = ["Known", "first_line"]
