"""The lease pool: isolated instances handed out verified pristine, reset between holders.

An instance moves ``starting -> free -> leased -> releasing -> free`` (``broken`` when a reset does
not verify; retried). The promise a lease makes is about the *whole instance*, not only the sites a
holder asked for, because a holder can reach every site of its instance:

- **acquire** hands out an instance only when every site it runs passes its probes and verifies
  pristine: by its fingerprint (one pass, side by side, not a reset) unless the front proxy saw no request
  but envctl's own reach it, on the same copy, since it last verified (``routing.proxy.activity``); one that
  does not verify is sent to release and another is tried;
- **release** (asked for, expired, or reclaimed by the watchdog) resets the leased sites that were reached
  during the lease and verifies every other site that was (resetting those that do not verify), and frees
  the instance only when all of them verified;
- a lease's own reset (``full_reset``, BrowserGym's protocol) does the same, answered when done;
- the **watchdog** reclaims a lease held past ``max_seconds`` (``serve --max-lease``) even while it
  heartbeats (a hung episode), and counts it;
- holders are told: an id whose lease ended answers 409 with why (expired, reclaimed, released),
  an unknown id 404, so :func:`envctl.leases.client.held` raises ``LeaseLost``.

The pool works through its members' :class:`envctl.lab.Lab` objects (:class:`PoolLab`): probes, verification,
resets, logins, lease records — whatever backend runs them. Where the members are and how they come up is a
*store* (:class:`MemberStore`, :class:`envctl.leases.members.Members`): names, bring-up, and the lease records,
which live in each member's own routing table (the engine, not a process, knows who holds what, so a restarted
server rebuilds the pool and two servers cannot lease one instance).
"""
from __future__ import annotations

import json
import secrets
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

from envctl.auth import login_combos, state_name
from envctl.errors import EnvctlError, UsageError
from envctl.healthchecks.wait import wait_for
from envctl.leases.client import (DEFAULT_TTL, Lease, LeaseLost, NoFreeInstance, NoSuchLease, _iso,
                                  validate_max_seconds, validate_ttl, validate_wait)
from envctl.leases.metrics import Stats, fingerprints_computed, percentile, prometheus
from envctl.validate import validate_instance_name

from envctl.leases.states import (BROKEN, ENDED_KEPT, FREE, FULL_RESET_WAIT, LEASED, RECORD_KEYS,  # noqa: F401
                                  RELEASING, STARTING, Conflict, Member, MemberStore, PoolLab)
from envctl.leases.watch import Watch


def say_stderr(message: str) -> None:
    """The pool's and the reset server's log: one line on stderr, at once."""
    print(message, file=sys.stderr, flush=True)


class Pool(Watch):
    """A pool of instances handed out by lease, its members kept by ``store``."""

    def __init__(self, name: str, store: MemberStore, *, heal_after: float = 60.0, probe_interval: float = 2.0,
                 tick: float = 0.5, health_timeout: float = 120.0, auth_max_age: float = 1800.0,
                 max_lease: float | None = None, log: Callable[[str], None] = say_stderr) -> None:
        self.name = validate_instance_name(name)
        self.store = store
        self.heal_after, self.probe_interval, self.tick = heal_after, probe_interval, tick
        self.health_timeout, self.auth_max_age = health_timeout, auth_max_age
        self.max_lease = validate_max_seconds(max_lease)
        self.log = log
        self.members: dict[str, Member] = {}
        self.ended: OrderedDict[str, str] = OrderedDict()  # lease id -> why it ended
        self.stats = Stats()
        self.cond = threading.Condition()
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []
        self.starting = True  # until the first ensure() has finished
        self.node_states: dict[str, str] = {}  # node -> state, as last seen (a pool on a swarm)
        self.nodes_lost: set[str] = set()  # nodes counted lost and not ready since
        self.starting_error = ""
        self.retry_pause = max(5.0, min(30.0, heal_after))  # before a broken member is tried again

    # -- membership ------------------------------------------------------------------------------
    def _member(self, name: str) -> Member:
        with self.cond:
            m = self.members.get(name)
            if m is None:
                m = self.members[name] = Member(name, self.store.make(name))
            return m

    def load(self, *, resume: bool = True) -> None:
        """Rebuild the pool from the store (what a restarted server does); with ``resume``, finish the
        resets a previous server left half-done."""
        for name in self.store.names(self.name):
            m = self._member(name)
            if not m.lab.present():
                m.state, m.error = BROKEN, "not running"
                continue
            self._adopt(m, resume=resume)

    def ensure(self) -> None:
        """Bring every member to its wanted sites: missing members and half-made ones (a start that was
        stopped, a site removed) are brought up in parallel; the others are adopted as they are."""
        todo = []
        for name in self.store.names(self.name):
            m = self._member(name)
            if m.lab.present():
                self._adopt(m)  # STARTING when it lacks sites it should run
                if m.state == FREE:
                    with self.cond:
                        m.state = STARTING  # a free member is checked (and repaired) before its first lease
            else:
                with self.cond:
                    m.state = STARTING
            if m.state == STARTING:
                if self._half_made(m):
                    self.log(f"pool {self.name}: {m.name} runs {', '.join(m.sites) or 'no site'} of "
                             f"{', '.join(self.store.target(m))}; bringing it up")
                todo.append(m)
        if todo:
            self.store.bring_up(self, todo)

    def _half_made(self, m: Member) -> bool:
        return not set(self.store.target(m)) <= set(m.sites)

    def _adopt(self, m: Member, *, resume: bool = True) -> None:
        rec, sites = self.store.claim(m, self.name)
        try:
            node = m.lab.node()
        except EnvctlError:
            node = m.node
        restarted = rec.get("state") == LEASED and rec.get("id") and self._restarted_since(m, float(rec.get("acquired", 0)))
        with self.cond:
            m.sites, m.node, m.failures = sites, node, 0
            m.state = rec.get("state", FREE)
            m.lease = {k: rec[k] for k in RECORD_KEYS if k in rec}
            if restarted:  # its containers were stopped under the lease (a reboot, an engine restart)
                self._end(str(m.lease["id"]), "ended: host restarted (the instance's containers were stopped while "
                                              "it was held: a reboot or a Docker engine restart); it was reset")
                m.lease["sites"] = list(sites)
                m.state = RELEASING
                self.log(f"pool {self.name}: {m.name}'s lease ended: its host restarted while it was held")
            if m.state == LEASED and not m.lease.get("id"):
                m.state = RELEASING
            if m.state in (FREE, BROKEN) and self._half_made(m):
                m.state = STARTING  # never handed out without every site it should run
            self.cond.notify_all()
        if m.state == RELEASING and resume:  # the previous server stopped in the middle of it
            self.log(f"pool {self.name}: {m.name} was being reset; resetting it again")
            self._spawn(self._reclaim, m)
        elif m.state == BROKEN:
            m.retry_at = 0.0

    @staticmethod
    def _restarted_since(m: Member, when: float) -> bool:
        """Whether the member's front proxy started after ``when`` (Unix time): what a reboot or an engine restart
        does to a held instance, and a restarted server does not."""
        act = m.lab.activity([])
        try:
            return act is not None and float(act.process.split("@")[1]) > when + 2
        except (IndexError, ValueError):
            return False

    def came_up_failed(self, m: Member, error: str) -> None:
        """``m`` failed to come up: broken, retried later; counted, and its error shown (status, 503s, metrics)."""
        with self.cond:
            m.state, m.error = BROKEN, error
            m.failures += 1
            m.retry_at = time.monotonic() + self.retry_pause
            self.stats.member_failures += 1
            self.cond.notify_all()
        self.log(f"pool {self.name}: {m.name} failed to come up: {error}")

    def _retry(self, m: Member) -> None:
        """A broken member again: brought up when it lacks sites (or is gone), else reset by recreating."""
        if not m.lab.present() or self._half_made(m) or m.failures:  # never came up: 'up' again (it repairs)
            with self.cond:
                m.state = STARTING
            self._spawn(self.store.bring_up, self, [m])
        else:
            self._begin_release(m, force=True)

    def _write(self, m: Member, expect: Callable[[dict[str, Any]], bool] | None = None) -> None:
        """Record ``m``'s lease in the store; with ``expect``, only if the stored record passes it
        (compare-and-set across processes)."""
        self.store.store(m, m.record(self.name), expect)

    # -- background work -------------------------------------------------------------------------
    def _spawn(self, fn: Callable[..., Any], *args: Any) -> threading.Thread:
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        return t

    def start(self, *, bring_up: bool = True) -> "Pool":
        """Adopt (and, with ``bring_up``, start or finish) the members in the background; run the worker."""
        def init() -> None:
            while not self.stop_event.is_set():
                try:
                    self.ensure() if bring_up else self.load()
                    self.starting_error = ""
                    break
                except UsageError as exc:  # an impossible configuration: retrying cannot help
                    self.starting_error = str(exc)
                    self.log(f"pool {self.name}: {str(exc).splitlines()[0]}; the pool cannot start")
                    with self.cond:
                        for m in self.members.values():
                            if m.state == STARTING:
                                m.state, m.error = BROKEN, str(exc).splitlines()[0]
                                m.retry_at = float("inf")  # retrying cannot help
                    break
                except Exception as exc:  # noqa: BLE001 - e.g. the engine busy; try again
                    self.starting_error = str(exc)
                    self.log(f"pool {self.name}: {exc}; retrying in 5s")
                    self.stop_event.wait(5)
            with self.cond:
                self.starting = False
                self.cond.notify_all()
            self.worker()

        self.threads.append(self._spawn(init))
        return self

    def stop(self) -> None:
        """Stop the worker (Ctrl-C, SIGTERM, or the server's end) and say what the next server finds."""
        self.stop_event.set()
        with self.cond:
            self.cond.notify_all()
        for t in self.threads:
            t.join(timeout=10)
        for line in self.left():
            self.log(line)

    def left(self) -> list[str]:
        """What a stopped pool leaves, one line per member with something to say: a held lease is kept (its
        record is the instance's own: the next server of the pool honours it until it expires), a release or
        a bring-up half-done is finished by the next server."""
        out = []
        with self.cond:
            members = sorted(self.members.values(), key=lambda m: m.name)
        for m in members:
            if m.state == LEASED and m.lease.get("id"):
                out.append(f"pool {self.name} stopped: lease {m.lease['id']} on {m.name} (holder "
                           f"{str(m.lease.get('holder', ''))[:60] or '?'}) is kept until {_iso(float(m.lease.get('expires', 0)))}: "
                           f"its record stays in the instance and the next 'envctl serve' of pool {self.name} honours it")
            elif m.state == RELEASING:
                out.append(f"pool {self.name} stopped while {m.name} was being reset after a release: the next "
                           f"'envctl serve' of pool {self.name} resets it again before it is leased")
            elif m.state == STARTING and not self.starting_error:
                out.append(f"pool {self.name} stopped while {m.name} was being brought up: the next 'envctl serve' "
                           f"of pool {self.name} finishes it")
        return out

    def worker(self) -> None:
        """Expire leases whose heartbeat stopped, reclaim hung ones, retry broken instances, heal sites."""
        next_probe = 0.0
        while not self.stop_event.wait(self.tick):
            now = time.time()
            with self.cond:
                members = list(self.members.values())
            for m in members:
                if m.state == LEASED:
                    lease_id = str(m.lease.get("id", ""))
                    limit = m.lease.get("max_seconds")
                    if limit and float(m.lease.get("acquired", now)) + float(limit) < now:
                        self.stats.reclaimed += 1
                        self._end(lease_id, f"reclaimed: held past its limit of {float(limit):g}s (serve --max-lease)")
                        self.log(f"pool {self.name}: lease {lease_id} on {m.name} held past {float(limit):g}s; reclaiming")
                        self._begin_release(m)
                    elif float(m.lease.get("expires", 0)) < now:
                        self.stats.expired += 1
                        self._end(lease_id, f"expired at {_iso(float(m.lease.get('expires', 0)))} (no heartbeat)")
                        self.log(f"pool {self.name}: lease {lease_id} on {m.name} expired; reclaiming")
                        self._begin_release(m)
                elif m.state == BROKEN and m.retry_at <= time.monotonic() and not self.starting:
                    m.retry_at = time.monotonic() + self.retry_pause
                    self._retry(m)
            if time.monotonic() >= next_probe:
                next_probe = time.monotonic() + self.probe_interval
                self._watch_nodes(members)
                for m in members:
                    if m.state in (LEASED, FREE):
                        try:
                            self._watch_oom(m)
                            self._probe(m)
                        except Exception as exc:  # noqa: BLE001 - the engine hiccuped; next round
                            self.log(f"pool {self.name}: probing {m.name} failed: {exc}")

    def _end(self, lease_id: str, why: str) -> None:
        if not lease_id:
            return
        with self.cond:
            self.ended[lease_id] = why
            while len(self.ended) > ENDED_KEPT:
                self.ended.popitem(last=False)

    # -- leasing ---------------------------------------------------------------------------------
    def _targets(self) -> set[str]:
        """Every site some member of the pool runs or is meant to run."""
        out: set[str] = set()
        for m in self.members.values():
            out |= set(m.sites) | set(self.store.target(m))
        return out

    def _pick(self, wanted: list[str] | None) -> Member | None:
        for m in sorted(self.members.values(), key=lambda x: x.name):
            if m.state == FREE and (wanted is None or set(wanted) <= set(m.sites)):
                return m
        return None

    def acquire(self, sites: list[str] | None = None, *, ttl: Any = None, holder: str = "", wait: Any = 0.0,
                max_seconds: Any = None, full_reset: Callable[[str], str] | None = None) -> Lease:
        """Lease a free instance with ``sites`` up (default: all its sites) whose every site is healthy
        and verifies pristine. Waits up to ``wait`` seconds for one; raises :class:`NoFreeInstance`
        (503: try again) otherwise, :class:`UsageError` (400) for sites the pool does not serve."""
        ttl = validate_ttl(ttl if ttl is not None else DEFAULT_TTL)
        wait = validate_wait(wait)
        limit = validate_max_seconds(max_seconds)
        if self.max_lease is not None:
            limit = min(limit or self.max_lease, self.max_lease)
        wanted = list(dict.fromkeys(sites)) if sites else None
        deadline = time.monotonic() + wait
        while True:
            with self.cond:
                if wanted and self.members:
                    next(iter(self.members.values())).lab.catalog.resolve(wanted)  # unknown site: 400
                    if not self.starting and not set(wanted) <= self._targets():
                        raise UsageError(f"pool '{self.name}' does not serve {', '.join(sorted(set(wanted) - self._targets()))}",
                                         "lease sites the pool serves (see 'envctl lease list')")
                m = self._pick(wanted)
                if m is None:
                    left = deadline - time.monotonic()
                    if left <= 0 or self.stop_event.is_set():
                        self.stats.rejected += 1
                        busy = sum(1 for x in self.members.values() if x.state in (LEASED, RELEASING))
                        starting = sum(1 for x in self.members.values() if x.state == STARTING)
                        what = (f"{busy} of {len(self.members)} busy" + (f", {starting} starting" if starting else "")
                                if self.members else "the pool is starting")
                        raise NoFreeInstance(f"no free instance in pool '{self.name}' ({what}){self._why_not()}",
                                             self._retry_after())
                    self.cond.wait(min(left, 1.0))
                    continue
                now = time.time()
                lease_sites = wanted or list(m.sites)
                m.state = LEASED
                m.lease = {"id": secrets.token_hex(12), "holder": str(holder)[:200], "sites": lease_sites,
                           "acquired": now, "expires": now + ttl, "ttl": ttl,
                           **({"max_seconds": limit} if limit else {})}
            try:
                self._write(m, lambda rec: rec.get("state", FREE) == FREE)
            except Conflict:
                self._adopt(m, resume=False)  # someone else leased it: take the store's word, try another
                continue
            t = time.monotonic()
            try:
                dirty = self._check_pristine(m)
                if dirty:
                    self.stats.dirty += 1
                    self.log(f"pool {self.name}: {m.name} is not pristine ({'; '.join(dirty)}); resetting it "
                             "before anyone leases it")
                    with self.cond:
                        m.lease = {"sites": []}
                    self._begin_release(m)
                    continue
                lease = self._lease_of(m, full_reset)
                with self.cond:
                    if m.state != LEASED or m.lease.get("id") != lease.id:  # ended while we got it ready
                        raise Conflict(f"the lease on {m.name} ended while it was being made ready")
            except Conflict:
                continue
            except Exception:
                with self.cond:
                    m.state, m.lease = (FREE if m.lab.present() else BROKEN), {}
                    m.retry_at = time.monotonic()
                try:
                    self._write(m)
                except EnvctlError:
                    pass
                raise
            self.stats.acquired += 1
            self.log(f"pool {self.name}: lease {lease.id} on {m.name} for {lease.holder or 'a client'} "
                     f"({', '.join(lease.sites)}, ttl {ttl:g}s; verified in {time.monotonic() - t:.1f}s)")
            return lease

    def _check_pristine(self, m: Member) -> list[str]:
        """Why the member may not be handed out: its sites' probes (waited for, as a site may still be
        settling) and the fingerprint of every site that may have changed since it was last verified (one pass)."""
        ok, bad = wait_for(lambda: (not (p := m.lab.problems(list(m.sites))), p),
                           timeout=self.health_timeout, cancel=self.stop_event)
        if not ok:
            return list(bad) or ["not healthy"]
        now = m.lab.activity(list(m.sites))
        check = self._touched(m, list(m.sites), now)
        self.stats.verifications += len(check)
        self.stats.verifications_skipped += len(m.sites) - len(check)
        dirty = [f"{s}: {why}" for s, why in m.lab.not_pristine(check).items()]
        m.seen = None if dirty else now
        return dirty

    def _touched(self, m: Member, sites: list[str], now: Any) -> list[str]:
        """The sites of ``sites`` that may have changed since ``m.seen``: reached by anyone but envctl through the
        proxy, or served by another copy (a heal, a restarted proxy). A read-only site (reset tier 'none') changes
        only with its copy. Without a reading, every site."""
        if m.seen is None or now is None:
            return list(sites)
        out = []
        for site in sites:
            read_only = m.lab.catalog.site(site).reset.tier == "none"
            ports = now.sites.get(site) or []
            same = now.same_copy if read_only else now.untouched
            if not ports or not all(same(m.seen, port) for port in ports):
                out.append(site)
        return out

    def _why_not(self) -> str:
        """Why the pool cannot serve, for a 503's message: what stopped it starting, members that failed to come up
        twice or more (with their error); '' when it is only busy."""
        failing = [f"{m.name} failed to come up {m.failures} times: {m.error}" for m in self.members.values()
                   if m.state == BROKEN and m.failures >= 2 and m.error]
        why = ([self.starting_error.splitlines()[0]] if self.starting_error else []) + failing
        return ("; " + "; ".join(why))[:600] if why else ""

    def _retry_after(self) -> int:
        """Seconds a client should wait: about one reset, a little more while the pool is starting."""
        busy = [m for m in self.members.values() if m.state in (RELEASING, STARTING, BROKEN)]
        return 10 if self.starting or any(m.state == STARTING for m in busy) or not self.members else 2 if busy else 5

    def _lease_of(self, m: Member, full_reset: Callable[[str], str] | None) -> Lease:
        rec = m.lease
        sites: list[str] = list(rec["sites"])
        url = full_reset(rec["id"]) if full_reset else None
        env = m.lab.harness(sites, url)
        env["ENVCTL_INSTANCE"] = m.name
        env["ENVCTL_LEASE"] = rec["id"]
        return Lease(rec["id"], m.name, sites, rec.get("holder", ""), rec["acquired"], rec["expires"], rec["ttl"],
                     env, self._auth(m, sites), url, max_seconds=rec.get("max_seconds"), host=m.node or None)

    def lease_auth(self, lease_id: str) -> dict[str, Any]:
        """A held lease's login state as it is now (a reset through the lease renews the sites' login files)."""
        m = self._find(lease_id)
        return self._auth(m, list(m.lease.get("sites") or m.sites))

    def _auth(self, m: Member, sites: list[str]) -> dict[str, Any]:
        """The login state (storage_state JSON) of every file touching the leased login sites."""
        catalog = m.lab.catalog
        with_login = [s for s in sites if catalog.site(s).login]
        if not with_login:
            return {}
        names = [state_name(c) for c in login_combos(catalog, with_login,
                                                    [s for s in m.sites if catalog.site(s).login])]
        folder = Path(m.lab.auth_dir)
        fresh = time.time() - self.auth_max_age
        if not all((folder / n).is_file() and (folder / n).stat().st_mtime >= fresh for n in names):
            m.lab.login(with_login)
            m.auth_at = time.time()
        out: dict[str, Any] = {}
        for n in names:
            try:
                out[n] = json.loads((folder / n).read_text())
            except (OSError, ValueError):
                continue
        return out

    def _find(self, lease_id: str) -> Member:
        """The member holding ``lease_id``; 409 (:class:`LeaseLost`) when it ended, 404 when unknown."""
        with self.cond:
            for m in self.members.values():
                if m.state == LEASED and m.lease.get("id") == lease_id:
                    return m
            why = self.ended.get(lease_id)
        if why:
            raise LeaseLost(lease_id, why)
        raise NoSuchLease(lease_id)

    def heartbeat(self, lease_id: str, ttl: Any = None) -> dict[str, Any]:
        """Extend a lease by its ttl (or ``ttl``) from now."""
        new_ttl = validate_ttl(ttl) if ttl is not None else None
        m = self._find(lease_id)
        with self.cond:
            if new_ttl is not None:
                m.lease["ttl"] = new_ttl
            m.lease["expires"] = time.time() + float(m.lease["ttl"])
        try:
            self._write(m, lambda rec: rec.get("id") == lease_id and rec.get("state") == LEASED)
        except Conflict:
            raise
        except EnvctlError:
            # the instance did not take the record: gone (its node down, removed) means the lease is lost, said now
            why = m.lab.lost()
            if why:
                self._lose(m, why)
                raise LeaseLost(lease_id, f"lost: {why}") from None
            raise
        return self._row(m)

    def release(self, lease_id: str, *, background: bool = True) -> dict[str, Any]:
        """End a lease: the instance is reset (every site that does not verify, the leased ones always)
        before it is leased again."""
        m = self._find(lease_id)
        self.stats.released += 1
        self._end(lease_id, "released")
        self.log(f"pool {self.name}: lease {lease_id} on {m.name} released")
        row = self._row(m)
        self._begin_release(m, background=background)
        return row

    def _begin_release(self, m: Member, *, force: bool = False, background: bool = True) -> None:
        with self.cond:
            if m.state == RELEASING:
                return
            m.state = RELEASING
            m.released_at = time.monotonic()
            m.lease.setdefault("sites", list(m.sites))
            m.error = ""
            if force:
                m.lease["sites"] = list(m.sites)
        try:
            self._write(m)
        except EnvctlError as exc:
            self.log(f"pool {self.name}: could not record the release of {m.name}: {exc}")
        if background:
            self._spawn(self._reclaim, m, force)
        else:
            self._reclaim(m, force)

    def _restore(self, m: Member, always: list[str], *, tier: str | None = None) -> str:
        """Reset the sites of ``always`` that may have changed since the member was last known pristine (all of
        them for a forced ``tier``) and every other site that may have changed and does not verify; '' when every
        reset verified, else why not. The proxy's reading taken first is what the next acquire compares with."""
        before = m.lab.activity(list(m.sites))
        if tier is not None:
            m.seen = None
        touched = self._touched(m, list(m.sites), before)
        others = [s for s in touched if s not in always]
        try:
            self.stats.verifications += len(others)
            self.stats.verifications_skipped += len([s for s in m.sites if s not in always and s not in others])
            dirty = list(m.lab.not_pristine(others)) if others else []
            if dirty:
                self.log(f"pool {self.name}: {m.name}: {', '.join(dirty)} not pristine either (outside the lease); "
                         "resetting it too")
            names = [s for s in always if s in touched] + dirty
            self.stats.resets_skipped += len([s for s in always if s not in touched])
            results = m.lab.reset(names, tier=tier, refill=m.lab.keeps_spares()) if names else []
            for r in results:
                self.stats.reset(r.tier, r.ok, r.seconds)
            error = "; ".join(f"{r.site}: {r.error}" for r in results if not r.ok)
        except Exception as exc:  # noqa: BLE001
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        m.seen = None
        if not error and before is not None:
            after = m.lab.activity(list(m.sites))
            if after is not None and after.process == before.process:
                # requests counted up to 'before' (the reset's own are not counted), on the copies routed now
                m.seen = type(before)(before.process, before.counts, after.routes)
        return error

    def _reclaim(self, m: Member, force: bool = False) -> None:
        """Reset the instance (the leased sites reached, whatever else does not verify); free it when all verified."""
        t = time.monotonic()
        error = self._restore(m, list(m.lease.get("sites") or []), tier="recreate" if force else None)
        # The store first, then memory: an acquirer never sees FREE before the store does.
        try:
            self.store.store(m, {"pool": self.name, **m.lease, "state": BROKEN} if error
                             else {"pool": self.name, "state": FREE}, None)
        except EnvctlError as exc:
            self.log(f"pool {self.name}: could not record the state of {m.name}: {exc}")
            error = error or str(exc)
        with self.cond:
            if error:
                m.state, m.error, m.retry_at = BROKEN, error, time.monotonic() + max(10.0, self.heal_after)
            else:
                m.state, m.lease, m.error, m.auth_at = FREE, {}, "", time.time()
                if m.released_at:
                    self.stats.turned(time.monotonic() - m.released_at)
            self.cond.notify_all()
        if error:
            self.log(f"pool {self.name}: reset of {m.name} did not verify ({error}); retrying with a recreate later")
        else:
            self.log(f"pool {self.name}: {m.name} reset and verified in {time.monotonic() - t:.1f}s; free")

    # -- a lease's own reset (BrowserGym's protocol on /leases/<id>/reset) -----------------------
    def lease_reset(self, lease_id: str, *, wait: bool = True, timeout: float = FULL_RESET_WAIT) -> bool:
        """Reset a lease's sites (and any other site of its instance that does not verify); with
        ``wait``, return when it has ended. False when one is already running (BrowserGym: 418)."""
        m = self._find(lease_id)
        with self.cond:
            if m.resetting:
                return False
            m.resetting, m.reset_error = True, ""
            m.reset_done.clear()

        def run() -> None:
            try:
                m.reset_error = self._restore(m, list(m.lease.get("sites") or m.sites))
                m.auth_at = time.time()
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

    # -- views -----------------------------------------------------------------------------------
    def _row(self, m: Member) -> dict[str, Any]:
        row: dict[str, Any] = {"instance": m.name, "state": m.state, "sites": list(m.sites), "error": m.error,
                               "healing": sorted(m.healing)}
        if m.node:
            row["node"] = m.node
        if m.state in (LEASED, RELEASING) and m.lease.get("id"):
            row.update({"id": m.lease.get("id"), "holder": m.lease.get("holder", ""),
                        "lease_sites": m.lease.get("sites", []), "expires": m.lease.get("expires"),
                        "expires_at": _iso(float(m.lease.get("expires", 0))),
                        "seconds_left": round(float(m.lease.get("expires", 0)) - time.time(), 1)})
            if m.lease.get("max_seconds"):
                row["max_seconds"] = m.lease["max_seconds"]
            if m.lease.get("notices"):  # what happened to the holder's sites (healed, killed for memory)
                row["notices"] = list(m.lease["notices"])
        return row

    def rows(self) -> list[dict[str, Any]]:
        with self.cond:
            return [self._row(m) for m in sorted(self.members.values(), key=lambda x: x.name)]

    def leases(self) -> list[dict[str, Any]]:
        return [r for r in self.rows() if r["state"] == LEASED]

    def spares(self) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        for m in [m for m in list(self.members.values()) if m.state != STARTING]:
            try:
                out.update({(m.name, site): n for site, n in m.lab.spares_ready().items()})
            except EnvctlError:
                continue
        return out

    def summary(self) -> dict[str, Any]:
        """The figures of :meth:`metrics_text`, as JSON (what 'envctl lease list' shows)."""
        states = {s: 0 for s in (FREE, LEASED, RELEASING, BROKEN, STARTING)}
        for m in list(self.members.values()):
            states[m.state] = states.get(m.state, 0) + 1
        resets = self.stats.resets_summary()
        turn = list(self.stats.turnaround)
        return {"pool": self.name, "starting": self.starting, "instances": len(self.members), "states": states,
                "leases_active": states[LEASED], "leases_free": states[FREE],
                "acquired": self.stats.acquired, "released": self.stats.released, "expired": self.stats.expired,
                "reclaimed": self.stats.reclaimed, "lost": self.stats.lost, "dirty_found": self.stats.dirty,
                "rejected": self.stats.rejected, "heals": dict(self.stats.heals),
                "heal_failures": self.stats.heal_failures, "resets": resets,
                "turnaround": {"count": len(turn), "p50_s": percentile(turn, 0.5), "p95_s": percentile(turn, 0.95)},
                "verifications": self.stats.verifications, "verifications_skipped": self.stats.verifications_skipped,
                "resets_skipped": self.stats.resets_skipped, "fingerprints": fingerprints_computed(),
                "nodes": self._nodes_summary(),
                "failing": {m.name: m.error for m in list(self.members.values()) if m.state == BROKEN and m.error},
                "max_lease": self.max_lease,
                "spares_ready": {f"{i}/{s}": n for (i, s), n in self.spares().items()}}

    def _nodes_summary(self) -> dict[str, Any] | None:
        """Nodes by state, the pool's instances per node and node losses; None on one machine."""
        members = list(self.members.values())
        if not any(m.node for m in members):
            return None
        if not self.node_states:  # asked before the worker's first look
            self._watch_nodes(members)
        per: dict[str, int] = {}
        for m in members:
            if m.node and m.state != STARTING:
                per[m.node] = per.get(m.node, 0) + 1
        states: dict[str, int] = {}
        for st in self.node_states.values():
            states[st] = states.get(st, 0) + 1
        return {"states": states, "instances": per, "losses": self.stats.node_losses}

    def metrics_text(self) -> str:
        """Prometheus text exposition format (version 0.0.4)."""
        s = self.summary()
        return prometheus(s, self.stats, s.get("nodes"))


__all__ = ["Pool", "MemberStore", "Member", "PoolLab", "Conflict", "FREE", "LEASED", "RELEASING", "BROKEN", "STARTING",
           "FULL_RESET_WAIT"]
