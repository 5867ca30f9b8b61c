"""What happens to a lease once granted: heartbeats, expiry and the watchdog, release, the reset and verification
before the member is free again, and a lease's own (BrowserGym) reset. A mixin of :class:`envctl.leases.pool.Pool`.

A **write** release resets the leased sites the proxy saw reached during the lease (its activity reading: a cheap
first look) and checks every other site as an acquire does (its change signal; a fingerprint when it moved): one that
does not verify is reset too. After the resets every reset site's signal is read and then its fingerprint taken, so
it is recorded *known* pristine (a spare swapped in is otherwise trusted by the reset when it is fresh). A **read**
release reads the shared member's signals first (its answer says whether the lease was tainted); the last reader's
release checks every site the same way (reset if dirty). A member whose node is paused (Swarm's ``pause``
availability: no new task, the running ones run on) is not reset in place at its release: it is taken down there and
brought up on another node.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, Callable

from envctl.errors import EnvctlError
from envctl.leases.client import LeaseLost, NoSuchLease, iso_time, validate_ttl
from envctl.leases.known import first_line
from envctl.leases.metrics import Stats
from envctl.leases.states import (BROKEN, FREE, FULL_RESET_WAIT, HELD, LEASED, READ, RELEASING, SHARED, STARTING,
                                  Conflict, PoolMember, MemberStore, leases_of, shared_summary)

RELEASE_READING = 8.0  # seconds a read release waits for its reading of the signals before it answers without


class Holds:
    """Held leases and releases (see the module's docstring); the pool supplies the attributes below."""

    name: str
    store: MemberStore
    stats: Stats
    cond: threading.Condition
    members: dict[str, PoolMember]
    ended: OrderedDict[str, str]
    node_states: dict[str, str]
    heal_after: float
    log: Callable[[str], None]
    tainted_ended: dict[str, str]

    def _spawn(self, fn: Callable[..., Any], *args: Any) -> threading.Thread:
        raise NotImplementedError

    def _end(self, lease_id: str, why: str) -> None:
        raise NotImplementedError

    _write: Callable[..., None]  # Pool
    _row: Callable[..., dict[str, Any]]  # Pool
    _touched: Callable[..., list[str]]  # Pool
    _reading: Callable[..., str]  # Known
    _known_dirty: Callable[..., dict[str, str]]  # Known
    _lose: Callable[[PoolMember, str], None]  # Watch
    _rebuild: Callable[..., None]  # Watch

    # -- held leases ----------------------------------------------------------------------------------------
    def _find(self, lease_id: str) -> PoolMember:
        """The member holding ``lease_id``; 409 (:class:`LeaseLost`) when it ended, 404 when unknown."""
        with self.cond:
            for m in self.members.values():
                if m.state in HELD and lease_id in m.leases:
                    return m
            why = self.ended.get(lease_id)
        if why:
            raise LeaseLost(lease_id, why)
        raise NoSuchLease(lease_id)

    def _recorded(self, m: PoolMember, lease_id: str, fields: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """A record change: ``fields`` set on the stored lease ``lease_id`` (Conflict when the record has it not)."""
        def change(rec: dict[str, Any]) -> dict[str, Any]:
            access, leases = leases_of(rec)
            if lease_id not in leases:
                raise Conflict(f"the lease record of {m.name} does not hold {lease_id[:8]}… any more")
            leases[lease_id].update(fields)
            if access == READ:
                return {**rec, **shared_summary(leases)}
            return {**rec, **leases[lease_id]}
        return change

    def heartbeat(self, lease_id: str, ttl: Any = None) -> dict[str, Any]:
        """Extend a lease by its ttl (or ``ttl``) from now; its row (notices, taint) is the answer."""
        new_ttl = validate_ttl(ttl) if ttl is not None else None
        m = self._find(lease_id)
        with m.lock:
            with self.cond:
                lease = m.leases.get(lease_id)
                if lease is None:
                    raise LeaseLost(lease_id, self.ended.get(lease_id, "ended"))
                if new_ttl is not None:
                    lease["ttl"] = new_ttl
                lease["expires"] = time.time() + float(lease["ttl"])
                fields = {"ttl": lease["ttl"], "expires": lease["expires"]}
            try:
                self.store.update(m, self._recorded(m, lease_id, fields))
            except Conflict:
                raise
            except EnvctlError:
                # the instance did not take the record: gone (its node down, removed) means the lease is lost, said now
                why = m.lab.lost()
                if why:
                    self._lose(m, why)
                    raise LeaseLost(lease_id, f"lost: {why}") from None
                raise
        with self.cond:
            return self._row(m, lease_id)

    def _expire(self, m: PoolMember) -> None:
        """The watchdog's look at one held member: leases past their expiry (no heartbeat) or their max_seconds."""
        now = time.time()
        for lid, lease in list(m.leases.items()):
            limit = lease.get("max_seconds")
            if limit and float(lease.get("acquired", now)) + float(limit) < now:
                self.stats.reclaimed += 1
                why = f"reclaimed: held past its limit of {float(limit):g}s (serve --max-lease)"
                self.log(f"pool {self.name}: lease {lid} on {m.name} held past {float(limit):g}s; reclaiming")
            elif float(lease.get("expires", 0)) < now:
                self.stats.expired += 1
                why = f"expired at {iso_time(float(lease.get('expires', 0)))} (no heartbeat)"
                self.log(f"pool {self.name}: lease {lid} on {m.name} expired; reclaiming")
            else:
                continue
            if m.state == SHARED:
                self._drop_reader(m, lid, why)
            else:
                self._end(lid, why)
                self._begin_release(m)

    # -- release -----------------------------------------------------------------------------------------
    def release(self, lease_id: str, *, background: bool = True) -> dict[str, Any]:
        """End a lease: a write lease's instance is reset (every site that does not verify, the leased ones the proxy
        saw reached) before it is leased again; a read lease's answer says whether it was tainted."""
        m = self._find(lease_id)
        if m.state == SHARED:
            return self._release_reader(m, lease_id)
        self.stats.released += 1
        self._end(lease_id, "released")
        self.log(f"pool {self.name}: lease {lease_id} on {m.name} released")
        with self.cond:
            row = self._row(m, lease_id)
        self._begin_release(m, background=background)
        return row

    def _release_reader(self, m: PoolMember, lease_id: str) -> dict[str, Any]:
        """A read lease ends: the member's signals are read first (bounded by :data:`RELEASE_READING`), so the answer
        says whether a change overlapped it; the last reader's release checks (and resets) the member."""
        box: dict[str, Any] = {}
        done = threading.Event()

        def read() -> None:
            try:
                self._reading(m)
            except Exception as exc:  # noqa: BLE001 - said in the answer; the next reading covers this lease
                box["error"] = first_line(exc)
            finally:
                done.set()

        self._spawn(read)
        if not done.wait(RELEASE_READING):
            box["error"] = f"the change signals were not read within {RELEASE_READING:g}s"
        self.stats.released += 1
        with self.cond:
            row = self._row(m, lease_id)
        last = self._drop_reader(m, lease_id, "released", read=not box.get("error"))
        row["tainted"] = row.get("tainted") or None
        if box.get("error"):
            row["reading"] = (f"{box['error']}: whether a change overlapped this lease is not known yet (a later "
                              "reading of the instance taints it if one did; its id then answers 409 with why)")
        self.log(f"pool {self.name}: read lease {lease_id} on {m.name} released"
                 + (f" (tainted: {row['tainted']})" if row["tainted"] else "") + ("; the last reader" if last else ""))
        return row

    def _drop_reader(self, m: PoolMember, lease_id: str, why: str, *, read: bool = False) -> bool:
        """Remove one read lease (ended with ``why``) from the member and its record; True when it was the last (the
        member is then checked and freed). ``read``: its own reading was just taken, so a later change is not its."""
        def change(rec: dict[str, Any]) -> dict[str, Any]:
            _, readers = leases_of(rec)
            readers.pop(lease_id, None)
            if readers:
                return {"pool": self.name, "state": SHARED, **shared_summary(readers)}
            return {"pool": self.name, "state": RELEASING, "sites": []}

        with m.lock:
            try:
                self.store.update(m, change)
            except EnvctlError as exc:
                self.log(f"pool {self.name}: could not record the end of read lease {lease_id} on {m.name}: {exc}")
            with self.cond:
                lease = m.leases.pop(lease_id, {})
                if read:
                    m.window.discard(lease_id)
                self._end(lease_id, why + (f" (tainted: {lease['tainted']})" if lease.get("tainted") else ""))
                if lease.get("tainted"):
                    self.tainted_ended[lease_id] = str(lease["tainted"])
                last = m.state == SHARED and not m.leases
                if last:
                    m.state, m.reset_sites, m.released_at, m.error = RELEASING, [], time.monotonic(), ""
                self.cond.notify_all()
        if last:
            self._spawn(self._reclaim, m, False)
        return last

    def _begin_release(self, m: PoolMember, *, force: bool = False, background: bool = True) -> None:
        """Send ``m`` to release (any state but releasing): every lease on it ends (the caller said why), its record
        says releasing, and it is reset and verified (``force``: every site recreated) before it is free again."""
        with self.cond:
            if m.state == RELEASING:
                return
            sites = sorted({s for x in m.leases.values() for s in x.get("sites") or []}) if m.state == LEASED else []
            m.state, m.released_at, m.error, m.attempt = RELEASING, time.monotonic(), "", None
            m.reset_sites = list(m.sites) if force else sites
            m.leases = {}
        try:
            self._write(m)
        except EnvctlError as exc:
            self.log(f"pool {self.name}: could not record the release of {m.name}: {exc}")
        if background:
            self._spawn(self._reclaim, m, force)
        else:
            self._reclaim(m, force)

    def _restore(self, m: PoolMember, always: list[str], *, tier: str | None = None) -> str:
        """Reset the sites of ``always`` the proxy saw reached since the member was last known pristine (all of them
        for a forced ``tier``), and every other site not known pristine that does not verify; then read the reset
        sites' signals and fingerprint them. '' when all of it verified, else why not."""
        sites = list(m.sites)
        before = m.lab.activity(sites)
        if tier is not None:
            m.seen = None
            m.known.clear()
        touched = self._touched(m, sites, before)
        now = [s for s in always if s in touched] if tier is None else sites
        try:
            self.stats.resets_skipped += len([s for s in always if s not in now])
            dirty = list(self._known_dirty(m, [s for s in sites if s not in now]))
            if dirty:
                self.log(f"pool {self.name}: {m.name}: {', '.join(dirty)} not pristine"
                         + (" either (outside the lease)" if always else "") + "; resetting it")
            names = now + dirty
            results = m.lab.reset(names, tier=tier, refill=m.lab.keeps_spares(), cheapest=True) if names else []
            for r in results:
                self.stats.reset(r.tier, r.ok, r.seconds)
            error = "; ".join(f"{r.site}: {r.error}" for r in results if not r.ok)
            if not error and names:
                for s in names:
                    m.known.pop(s, None)
                still = self._known_dirty(m, names)  # the new copies' signals, then their fingerprints
                error = "; ".join(f"{s}: {why} (after its reset)" for s, why in sorted(still.items()))
        except Exception as exc:  # noqa: BLE001
            error = first_line(exc)
        m.seen = None
        if not error and before is not None:
            after = m.lab.activity(sites)
            if after is not None and after.process == before.process:
                # requests counted up to 'before' (the reset's own are not counted), on the copies routed now
                m.seen = type(before)(before.process, before.counts, after.routes, after.sites)
        return error

    def _paused(self, m: PoolMember) -> bool:
        return bool(m.node) and self.node_states.get(m.node) == "pause"

    def _reclaim(self, m: PoolMember, force: bool = False) -> None:
        """Check the member after its leases ended, reset what changed, free it when all verified; moved to another
        node instead when its node is paused."""
        t = time.monotonic()
        if self._paused(m):
            self._move(m, f"its node {m.node} is paused (Swarm: no new task there)")
            return
        if m.window:  # the readers that overlapped the last change are told (ended ones: their 409's why)
            try:
                self._reading(m)
            except Exception as exc:  # noqa: BLE001 - the checks below read again
                self.log(f"pool {self.name}: reading the change signals of {m.name} failed: {first_line(exc)}")
        error = self._restore(m, list(m.reset_sites), tier="recreate" if force else None)
        self._settle(m, error, what=f"reset and verified in {time.monotonic() - t:.1f}s")

    def _settle(self, m: PoolMember, error: str, *, what: str) -> None:
        """The end of a release (or a rebuild): free when ``error`` is '', else broken (retried with a recreate).
        The store first, then memory: an acquirer never sees FREE before the store does."""
        try:
            self.store.store(m, {"pool": self.name, "state": BROKEN, "sites": list(m.reset_sites or m.sites)} if error
                             else {"pool": self.name, "state": FREE}, None)
        except EnvctlError as exc:
            self.log(f"pool {self.name}: could not record the state of {m.name}: {exc}")
            error = error or str(exc)
        with self.cond:
            if error:
                m.state, m.error, m.retry_at = BROKEN, error, time.monotonic() + max(10.0, self.heal_after)
            else:
                m.state, m.leases, m.error, m.auth_at = FREE, {}, "", time.time()
                m.closed, m.taint, m.window, m.reset_sites, m.attempt = "", "", set(), [], None
                m.checked_at = time.monotonic()
                if m.released_at:
                    self.stats.turned(time.monotonic() - m.released_at)
                    m.released_at = 0.0
            self.cond.notify_all()
        if error:
            self.log(f"pool {self.name}: {m.name} did not verify ({error}); retrying with a recreate later")
        else:
            self.log(f"pool {self.name}: {m.name} {what}; free")

    def _move(self, m: PoolMember, why: str) -> None:
        """Take the member down where it runs and bring it up on another node (its node is paused)."""
        with self.cond:
            if m.state not in (FREE, RELEASING):
                return
            m.state, m.error, m.leases, m.known, m.seen = STARTING, f"moving: {why}", {}, {}, None
            self.stats.moved += 1
            self.cond.notify_all()
        self.log(f"pool {self.name}: {m.name} leaves node {m.node}: {why}")
        self._spawn(self._rebuild, m)

    # -- a lease's own reset (BrowserGym's protocol on /leases/<id>/reset) -----------------------
    def lease_reset(self, lease_id: str, *, wait: bool = True, timeout: float = FULL_RESET_WAIT) -> bool:
        """Reset a lease's sites (and any other site of its instance that does not verify); with ``wait``, return
        when it has ended. False when one is already running (BrowserGym: 418). A read lease cannot reset an
        instance others read: its reset is a reading (its status says whether the instance changed)."""
        m = self._find(lease_id)
        with self.cond:
            if m.resetting:
                return False
            m.resetting, m.reset_error = True, ""
            m.reset_done.clear()
            shared = m.state == SHARED

        def run() -> None:
            try:
                if shared:
                    taint = self._reading(m)
                    m.reset_error = f"tainted: {taint} (a read lease cannot reset a shared instance)" if taint else ""
                else:
                    m.reset_error = self._restore(m, list(m.leases.get(lease_id, {}).get("sites") or m.sites))
                    m.auth_at = time.time()
            except Exception as exc:  # noqa: BLE001 - said on /status
                m.reset_error = first_line(exc)
            finally:
                m.resetting = False
                m.reset_done.set()

        self._spawn(run)
        if wait:
            m.reset_done.wait(timeout)
        return True

    def lease_reset_status(self, lease_id: str) -> tuple[bool, str]:
        m = self._find(lease_id)
        return m.resetting, m.reset_error


__all__ = ["Holds", "RELEASE_READING"]
