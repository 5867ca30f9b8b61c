"""The lease pool: isolated instances handed out verified pristine, reset between holders.

An instance moves ``starting -> free -> checking -> leased | shared -> releasing -> free`` (``quarantined`` when the
background re-verification finds a free one changed, ``broken`` when a reset does not verify; both rebuilt). The
promise a lease makes is about the *whole instance*, not only the sites a holder asked for, because a holder can reach
every site of its instance:

- **acquire** hands out an instance only when every site it runs passes its probes and is *known* pristine: its change
  signal read inside its copy is the one recorded when it last verified, else its fingerprint is taken
  (:mod:`envctl.leases.known`); one that does not verify is sent to release and another is tried. The checks run
  bounded by what is left of the request's ``wait`` plus :data:`ANSWER_SLACK`; a candidate whose checks do not end in
  time is given up. The lease record is written into the member's routing table (the compare-and-set claim) only once
  its checks passed, so a refused or timed-out request leaves no record;
- a **read lease** (``access: read``) shares a verified instance with other read leases (up to ``readers``); the pool
  packs readers onto an instance already shared before opening another, and hands a writer an instance only once its
  readers are gone and it verified. A reader that changed it taints every overlapping read lease;
- **release** (asked for, expired, or reclaimed by the watchdog) resets the leased sites the proxy saw reached during
  the lease, checks every other site as an acquire does (resetting those that do not verify), and frees the instance
  only when all of them verified (:mod:`envctl.leases.holds`);
- holders are told: an id whose lease ended answers 409 with why (expired, reclaimed, released, lost), an unknown id 404.

The pool works through its members' :class:`envctl.lab.Lab` objects (:class:`PoolLab`). Where the members are and how
they come up is a *store* (:class:`MemberStore`, :class:`envctl.leases.members.Members`): names, bring-up, and the
lease records, which live in each member's own routing table (the engine, not a process, knows who holds what, so a
restarted server rebuilds the pool and two servers cannot lease one instance).
"""
from __future__ import annotations

import json
import os
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
from envctl.leases.client import (DEFAULT_TTL, Lease, NoFreeInstance, iso_time, validate_access, validate_max_seconds,
                                  validate_ttl, validate_wait)
from envctl.leases.holds import Holds
from envctl.leases.known import Known, first_line
from envctl.leases.metrics import Stats, fingerprints_computed, percentile, prometheus
from envctl.leases.states import (BROKEN, CHECKING, ENDED_KEPT, FREE, FULL_RESET_WAIT, HELD, LEASED,  # noqa: F401
                                  QUARANTINED, READ, RECORD_KEYS, RELEASING, SHARED, STARTING, STATES, WRITE, Attempt,
                                  Conflict, PoolMember, MemberStore, PoolLab, leases_of, shared_summary)
from envctl.leases.watch import Watch
from envctl.validate import validate_instance_name

ANSWER_SLACK = 4.5  # a POST /leases answers within its wait plus this, whatever the engine does
WRITER_WAITS = "a write lease waits for it"  # why a shared member takes no more readers


def say_stderr(message: str) -> None:
    """The pool's and the reset server's log: one line on stderr, at once."""
    print(message, file=sys.stderr, flush=True)


def default_readers() -> int:
    """Read leases one instance takes at most by default (``serve --readers``): two per CPU of this host, at least 2.
    A reader is an agent's browser reading pages; the instance's copies serve them on this host's CPUs (bench/study.py
    measured it: README, "Performance")."""
    return max(2, 2 * (os.cpu_count() or 1))


class Pool(Watch, Known, Holds):
    """A pool of instances handed out by lease, its members kept by ``store``."""

    def __init__(self, name: str, store: MemberStore, *, heal_after: float = 60.0, probe_interval: float = 2.0,
                 tick: float = 0.5, health_timeout: float = 120.0, auth_max_age: float = 1800.0,
                 max_lease: float | None = None, readers: int | None = None, reverify_every: float = 60.0,
                 reverify_load: float | None = None, answer_slack: float = ANSWER_SLACK,
                 log: Callable[[str], None] = say_stderr) -> None:
        self.name = validate_instance_name(name)
        self.store = store
        self.heal_after, self.probe_interval, self.tick = heal_after, probe_interval, tick
        self.health_timeout, self.auth_max_age = health_timeout, auth_max_age
        self.max_lease = validate_max_seconds(max_lease)
        self.readers = readers if readers is not None else default_readers()
        if self.readers < 1:
            raise UsageError(f"--readers {self.readers} is out of range", "give 1 or more")
        self.reverify_every = reverify_every
        self.reverify_load = float(reverify_load if reverify_load is not None else (os.cpu_count() or 1))
        self.next_reverify = time.monotonic() + reverify_every
        self.answer_slack = answer_slack
        self.log = log
        self.members: dict[str, PoolMember] = {}
        self.ended: OrderedDict[str, str] = OrderedDict()  # lease id -> why it ended
        self.tainted_ended: dict[str, str] = {}  # read leases found tainted after they ended
        self.stats = Stats()
        self.cond = threading.Condition()
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []
        self.starting = True  # until the first ensure() has finished
        self.node_states: dict[str, str] = {}  # node -> state, as last seen (a pool on a swarm)
        self.nodes_lost: set[str] = set()  # nodes counted lost and not ready since
        self.starting_error = ""
        self.retry_pause = max(5.0, min(30.0, heal_after))  # before a broken member is tried again
        self.waiting = {READ: 0, WRITE: 0}  # acquires waiting for a member, by access

    # -- membership ------------------------------------------------------------------------------
    def _member(self, name: str) -> PoolMember:
        with self.cond:
            m = self.members.get(name)
            if m is None:
                m = self.members[name] = PoolMember(name, self.store.make(name))
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

    def _half_made(self, m: PoolMember) -> bool:
        return not set(self.store.target(m)) <= set(m.sites)

    def _adopt(self, m: PoolMember, *, resume: bool = True) -> None:
        """Take the member as its record says (what a restarted server does, and every bring-up's end)."""
        rec, sites = self.store.claim(m, self.name)
        try:
            node = m.lab.node()
        except EnvctlError:
            node = m.node
        access, leases = leases_of(rec)
        first = min((float(x.get("acquired", 0)) for x in leases.values()), default=0.0)
        restarted = bool(leases) and self._restarted_since(m, first)
        with self.cond:
            m.sites, m.node, m.failures = sites, node, 0
            m.state, m.access, m.leases = str(rec.get("state", FREE)), access, leases
            if m.state not in STATES:
                m.state = RELEASING
            m.reset_sites = [s for s in rec.get("sites") or [] if s in sites] if m.state in (RELEASING, BROKEN) else []
            m.attempt, m.joining, m.closed, m.taint = None, 0, "", ""
            m.window = set(leases) if access == READ else set()
            if m.state == QUARANTINED:  # a previous server was rebuilding it
                m.quarantine = {"at": time.time(), "why": str(rec.get("why", "")), "sites": list(rec.get("sites") or [])}
            if restarted:  # its containers were stopped under the lease (a reboot, an engine restart)
                for lid in list(leases):
                    self._end(lid, "ended: host restarted (the instance's containers were stopped while it was held: "
                                   "a reboot or a Docker engine restart); it was reset")
                m.leases, m.reset_sites, m.state = {}, list(sites), RELEASING
                self.log(f"pool {self.name}: {m.name}'s lease ended: its host restarted while it was held")
            if m.state in HELD and not m.leases:
                m.state = RELEASING
            if m.state in (FREE, BROKEN) and self._half_made(m):
                m.state = STARTING  # never handed out without every site it should run
            self.cond.notify_all()
        if m.state == RELEASING and resume:  # the previous server stopped in the middle of it
            self.log(f"pool {self.name}: {m.name} was being reset; resetting it again")
            self._spawn(self._reclaim, m)
        elif m.state == QUARANTINED and resume:
            self._spawn(self._rebuild_quarantined, m)
        elif m.state == BROKEN:
            m.retry_at = 0.0

    @staticmethod
    def _restarted_since(m: PoolMember, when: float) -> bool:
        """Whether the member's front proxy started after ``when`` (Unix time): what a reboot or an engine restart
        does to a held instance, and a restarted server does not."""
        act = m.lab.activity([])
        try:
            return act is not None and float(act.process.split("@")[1]) > when + 2
        except (IndexError, ValueError):
            return False

    def came_up_failed(self, m: PoolMember, error: str) -> None:
        """``m`` failed to come up: broken, retried later; counted, and its error shown (status, 503s, metrics)."""
        with self.cond:
            m.state, m.error = BROKEN, error
            m.failures += 1
            m.retry_at = time.monotonic() + self.retry_pause
            self.stats.member_failures += 1
            self.cond.notify_all()
        self.log(f"pool {self.name}: {m.name} failed to come up: {error}")

    def _retry(self, m: PoolMember) -> None:
        """A broken member again: brought up when it lacks sites (or is gone), else reset by recreating."""
        if not m.lab.present() or self._half_made(m) or m.failures:  # never came up: 'up' again (it repairs)
            with self.cond:
                m.state = STARTING
            self._spawn(self.store.bring_up, self, [m])
        else:
            self._begin_release(m, force=True)

    def _write(self, m: PoolMember, expect: Callable[[dict[str, Any]], bool] | None = None) -> None:
        """Record ``m`` in the store as memory has it; with ``expect``, only if the stored record passes it
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
            for lid, lease in sorted(m.leases.items()) if m.state in HELD else []:
                out.append(f"pool {self.name} stopped: {'read ' if m.state == SHARED else ''}lease {lid} on {m.name} "
                           f"(holder {str(lease.get('holder', ''))[:60] or '?'}) is kept until "
                           f"{iso_time(float(lease.get('expires', 0)))}: its record stays in the instance and the next "
                           f"'envctl serve' of pool {self.name} honours it")
            if m.state in (RELEASING, QUARANTINED):
                out.append(f"pool {self.name} stopped while {m.name} was being reset ({m.state}): the next "
                           f"'envctl serve' of pool {self.name} resets it again before it is leased")
            elif m.state == STARTING and not self.starting_error:
                out.append(f"pool {self.name} stopped while {m.name} was being brought up: the next 'envctl serve' "
                           f"of pool {self.name} finishes it")
        return out

    def worker(self) -> None:
        """Expire leases whose heartbeat stopped, reclaim hung ones, retry broken instances, heal sites, read shared
        members' change signals, re-verify free members when the host is idle."""
        next_probe = 0.0
        while not self.stop_event.wait(self.tick):
            with self.cond:
                members = list(self.members.values())
            for m in members:
                if m.state in HELD:
                    self._expire(m)
                elif m.state == BROKEN and m.retry_at <= time.monotonic() and not self.starting:
                    m.retry_at = time.monotonic() + self.retry_pause
                    self._retry(m)
            if time.monotonic() >= next_probe:
                next_probe = time.monotonic() + self.probe_interval
                self._watch_nodes(members)
                self._read_shared(members)
                for m in members:
                    if m.state in (*HELD, FREE):
                        try:
                            self._watch_oom(m)
                            self._probe(m)
                        except Exception as exc:  # noqa: BLE001 - the engine hiccuped; next round
                            self.log(f"pool {self.name}: probing {m.name} failed: {exc}")
                self._reverify_round()

    def _end(self, lease_id: str, why: str) -> None:
        if not lease_id:
            return
        with self.cond:
            self.ended[lease_id] = why
            while len(self.ended) > ENDED_KEPT:
                gone, _ = self.ended.popitem(last=False)
                self.tainted_ended.pop(gone, None)

    # -- leasing ---------------------------------------------------------------------------------
    def _targets(self) -> set[str]:
        """Every site some member of the pool runs or is meant to run."""
        out: set[str] = set()
        for m in self.members.values():
            out |= set(m.sites) | set(self.store.target(m))
        return out

    def _usable_node(self, m: PoolMember) -> bool:
        """Whether ``m``'s node takes new leases: ready and active (a paused node keeps only the leases held there)."""
        return self.node_states.get(m.node, "ready") == "ready"

    def _pick(self, wanted: list[str] | None, access: str, may_wait: bool = False) -> PoolMember | None:
        """A member for a new lease: for a reader, the shared member with the most readers and room (packing), else
        (``may_wait``) one another reader is opening a share on and that has room (the caller waits for it), else the
        free one first by name; for a writer, the free one last by name (readers and writers keep to opposite ends of
        the pool, so a share freed a moment ago is the one the next reader opens again)."""
        def fits(m: PoolMember) -> bool:
            return (wanted is None or set(wanted) <= set(m.sites)) and self._usable_node(m)

        members = sorted(self.members.values(), key=lambda x: x.name)
        if access == READ:
            shared = [m for m in members if m.state == SHARED and fits(m) and not m.closed and not m.taint
                      and len(m.leases) + m.joining < self.readers]
            if shared:
                return max(shared, key=lambda m: len(m.leases) + m.joining)
            opening = [m for m in members if m.state == CHECKING and m.attempt is not None and fits(m)
                       and m.attempt.access == READ and m.attempt.opening and 1 + m.joining < self.readers]
            if opening and may_wait:
                return opening[0]
        free = [m for m in members if m.state == FREE and fits(m)]
        return (free[0] if access == READ else free[-1]) if free else None

    def _writer_waits(self, wanted: list[str] | None) -> None:
        """A write lease finds no free member: close as many shared members to new readers as writers wait (those
        with the fewest readers), so they drain and a writer gets one (readers do not starve writers)."""
        shared = [m for m in self.members.values() if m.state == SHARED and not m.closed
                  and (wanted is None or set(wanted) <= set(m.sites))]
        closing = sum(1 for m in self.members.values() if m.state == SHARED and m.closed == WRITER_WAITS)
        for m in sorted(shared, key=lambda x: (len(x.leases), x.name))[:max(0, self.waiting[WRITE] - closing)]:
            m.closed = WRITER_WAITS
            self.log(f"pool {self.name}: a write lease waits: {m.name} takes no more readers until its "
                     f"{len(m.leases)} reader(s) are gone")

    def acquire(self, sites: list[str] | None = None, *, ttl: Any = None, holder: str = "", wait: Any = 0.0,
                max_seconds: Any = None, full_reset: Callable[[str], str] | None = None, access: Any = None) -> Lease:
        """Lease an instance with ``sites`` up (default: all its sites) whose every site is healthy and known
        pristine: a free one for a write lease, or for a read lease one shared with other readers (or a free one).
        Waits up to ``wait`` seconds for one, and answers within ``wait`` + ``answer_slack`` whatever the engine does;
        raises :class:`NoFreeInstance` (503: try again) otherwise, :class:`UsageError` (400) for bad input."""
        ttl = validate_ttl(ttl if ttl is not None else DEFAULT_TTL)
        wait = validate_wait(wait)
        access = validate_access(access)
        limit = validate_max_seconds(max_seconds)
        if self.max_lease is not None:
            limit = min(limit or self.max_lease, self.max_lease)
        wanted = list(dict.fromkeys(sites)) if sites else None
        start = time.monotonic()
        deadline, answer_by = start + wait, start + wait + self.answer_slack
        terms = {"sites": wanted, "ttl": ttl, "holder": str(holder)[:200], "max_seconds": limit, "full_reset": full_reset}
        note = ""
        with self.cond:
            self.waiting[access] += 1
        try:
            while True:
                m, attempt = self._candidate(wanted, access, deadline, note)
                lease = self._attempt(m, attempt, answer_by, terms)
                if lease is not None:
                    self.stats.acquired += 1
                    self.log(f"pool {self.name}: {'read ' if access == READ else ''}lease {lease.id} on {m.name} for "
                             f"{lease.holder or 'a client'} ({', '.join(lease.sites)}, ttl {ttl:g}s; checked in "
                             f"{time.monotonic() - start:.1f}s)")
                    return lease
                if attempt.abandoned:
                    note = f"; the checks of {m.name} did not end within {wait + self.answer_slack:g}s (given up)"
                    with self.cond:  # no time left to check another candidate
                        self.stats.rejected += 1
                        raise NoFreeInstance(f"no free instance in pool '{self.name}' ({self._busy()}){note}"
                                             f"{self._why_not()}", self._retry_after())
        finally:
            with self.cond:
                self.waiting[access] -= 1

    def _candidate(self, wanted: list[str] | None, access: str, deadline: float, note: str) -> tuple[PoolMember, Attempt]:
        """A member to check for a new lease, marked as being checked (a free one: CHECKING; a shared one: one more
        joining); waits for one until ``deadline``, then raises :class:`NoFreeInstance`."""
        reserved: PoolMember | None = None  # a share being opened that this reader waits for (a place kept on it)
        with self.cond:
            while True:
                if reserved is not None:
                    reserved.joining, reserved = max(0, reserved.joining - 1), None
                if wanted and self.members:
                    next(iter(self.members.values())).lab.catalog.resolve(wanted)  # unknown site: 400
                    if not self.starting and not set(wanted) <= self._targets():
                        raise UsageError(f"pool '{self.name}' does not serve {', '.join(sorted(set(wanted) - self._targets()))}",
                                         "lease sites the pool serves (see 'envctl lease list')")
                m = self._pick(wanted, access, may_wait=deadline > time.monotonic())
                if m is not None and m.state == CHECKING:  # another reader opens a share there: join it once open
                    m.joining, reserved = m.joining + 1, m
                    self.cond.wait(min(max(0.0, deadline - time.monotonic()), 1.0))
                    continue
                if m is not None:
                    attempt = Attempt(access, opening=m.state == FREE)
                    if attempt.opening:
                        m.state, m.attempt = CHECKING, attempt
                    else:
                        m.joining += 1
                    return m, attempt
                left = deadline - time.monotonic()
                if left <= 0 or self.stop_event.is_set():
                    self.stats.rejected += 1
                    raise NoFreeInstance(f"no free instance in pool '{self.name}' ({self._busy()}){note}{self._why_not()}",
                                         self._retry_after())
                if access == WRITE:
                    self._writer_waits(wanted)
                self.cond.wait(min(left, 1.0))

    def _busy(self) -> str:
        if not self.members:
            return "the pool is starting"
        count = {s: sum(1 for x in self.members.values() if x.state == s) for s in STATES}
        busy = count[LEASED] + count[RELEASING] + count[CHECKING] + count[SHARED]
        parts = [f"{busy} of {len(self.members)} busy"]
        if count[SHARED]:
            full = sum(1 for x in self.members.values() if x.state == SHARED and (x.closed or x.taint
                                                                                  or len(x.leases) >= self.readers))
            parts.append(f"{count[SHARED]} shared by readers ({full} full or closed)")
        for s in (STARTING, QUARANTINED):
            if count[s]:
                parts.append(f"{count[s]} {s}")
        return ", ".join(parts)

    def _attempt(self, m: PoolMember, attempt: Attempt, answer_by: float, terms: dict[str, Any]) -> Lease | None:
        """Check ``m`` for a lease and write its record, in a thread waited for until ``answer_by``: the lease, or None
        when the candidate was given up (it did not verify, another process took it, or its checks ran out of time:
        they end in the background then, and leave no record)."""
        done = threading.Event()
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["lease"] = self._prepare(m, attempt, terms)
            except BaseException as exc:  # noqa: BLE001 - handed to the request's thread
                box["error"] = exc
            finally:
                done.set()

        self._spawn(run)
        if not done.wait(max(0.0, answer_by - time.monotonic())):
            with self.cond:
                attempt.abandoned = True
                self.stats.given_up += 1
            self.log(f"pool {self.name}: the checks of {m.name} did not end in time; the request is answered without "
                     "it (they end in the background and write no lease record)")
            return None
        if "error" in box:
            raise box["error"]
        lease: Lease | None = box.get("lease")
        return lease

    def _prepare(self, m: PoolMember, attempt: Attempt, terms: dict[str, Any]) -> Lease | None:
        """The attempt's work (in its own thread): the checks, the lease composed, then the record (compare-and-set)."""
        opening = attempt.opening
        try:
            if opening:
                dirty = self._check_pristine(m)
            else:  # a reader joining a shared member: its probes, and a reading of its signals
                dirty = m.lab.problems(list(m.sites)) or [w for w in [self._reading(m)] if w]
        except BaseException:
            self._let_go(m, attempt, opening, forget=True)
            raise
        if dirty:
            if opening:
                self._found_dirty(m, dirty)
            else:
                self._let_go(m, attempt, opening)
            return None
        lid = secrets.token_hex(12)
        now = time.time()
        lease: dict[str, Any] = {"holder": terms["holder"], "sites": terms["sites"] or list(m.sites), "acquired": now,
                                 "expires": now + terms["ttl"], "ttl": terms["ttl"]}
        if terms["max_seconds"]:
            lease["max_seconds"] = terms["max_seconds"]
        try:
            out = self._lease_of(m, lid, {**lease, "access": attempt.access}, terms["full_reset"])
        except BaseException:
            self._let_go(m, attempt, opening)
            raise
        return self._commit(m, attempt, opening, lid, lease, out)

    def _commit(self, m: PoolMember, attempt: Attempt, opening: bool, lid: str, lease: dict[str, Any],
                out: Lease) -> Lease | None:
        """Write the lease into the member's record (compare-and-set: a write lease only on a free record, a reader
        on a free record it opens or on the shared one it joins), then into memory; nothing when the request was
        answered first, and a record written meanwhile is taken back."""
        with m.lock:
            with self.cond:
                if attempt.abandoned:
                    self._let_go(m, attempt, opening, locked=True)
                    return None

            def change(rec: dict[str, Any]) -> dict[str, Any]:
                state = rec.get("state", FREE)
                if attempt.access == WRITE:
                    if state != FREE:
                        raise Conflict(f"the lease record of {m.name} is {state}, not free")
                    return {"pool": self.name, "state": LEASED, "id": lid, "access": WRITE, **lease}
                if not ((opening and state == FREE) or (not opening and state == SHARED)):
                    raise Conflict(f"the lease record of {m.name} is {state}")
                readers = leases_of(rec)[1] if state == SHARED else {}
                readers[lid] = lease
                return {"pool": self.name, "state": SHARED, **shared_summary(readers)}

            try:
                self.store.update(m, change)
            except Conflict as exc:
                self.log(f"pool {self.name}: {m.name} was taken by another process ({exc}); trying another")
                self._let_go(m, attempt, opening)
                if opening:
                    self._adopt(m, resume=False)  # take the store's word
                return None
            except BaseException:
                self._let_go(m, attempt, opening, forget=True)
                raise
            with self.cond:
                if not attempt.abandoned:
                    m.leases[lid] = dict(lease)
                    m.access = attempt.access
                    m.state = LEASED if attempt.access == WRITE else SHARED
                    m.attempt, m.quarantine = None, {}
                    if not opening:
                        m.joining -= 1
                    if attempt.access == READ:
                        m.window.add(lid)
                    self.cond.notify_all()
                    return out
            self._take_back(m, attempt, opening, lid)
            return None

    def _take_back(self, m: PoolMember, attempt: Attempt, opening: bool, lid: str) -> None:
        """The request was answered while its record was being written: remove the lease from the record again."""
        def change(rec: dict[str, Any]) -> dict[str, Any]:
            access, leases = leases_of(rec)
            leases.pop(lid, None)
            if access == READ and leases:
                return {"pool": self.name, "state": SHARED, **shared_summary(leases)}
            return {"pool": self.name, "state": FREE}

        try:
            self.store.update(m, change)
        except EnvctlError as exc:
            self.log(f"pool {self.name}: could not take back the record of an abandoned lease on {m.name}: {exc}")
        self.log(f"pool {self.name}: a lease on {m.name} was written after its request was answered; taken back")
        self._let_go(m, attempt, opening)

    def _let_go(self, m: PoolMember, attempt: Attempt, opening: bool, *, forget: bool = False, locked: bool = False) -> None:
        """The attempt ends without a lease: an opened member is free again (``forget``: its sites are checked in
        full by the next acquire, as after an error), a joined one has one joiner less."""
        def undo() -> None:
            if opening:
                if m.state == CHECKING and m.attempt is attempt:
                    m.state, m.attempt = FREE, None
                if forget:
                    m.known.clear()
                    m.seen = None
            else:
                m.joining = max(0, m.joining - 1)
            self.cond.notify_all()

        if locked:
            undo()
        else:
            with self.cond:
                undo()

    def _found_dirty(self, m: PoolMember, dirty: list[str]) -> None:
        """A free member that did not verify when about to be leased: sent to release (reset, verified)."""
        self.stats.dirty += 1
        self.log(f"pool {self.name}: {m.name} is not pristine ({'; '.join(dirty)}); resetting it before anyone "
                 "leases it")
        self._begin_release(m)

    def _check_pristine(self, m: PoolMember, *, full: bool = False) -> list[str]:
        """Why the member may not be handed out: its sites' probes (waited for, as a site may still be settling), then
        every site not known pristine (:meth:`Known._known_dirty`; ``full``: every fingerprint)."""
        ok, bad = wait_for(lambda: (not (p := m.lab.problems(list(m.sites))), p),
                           timeout=self.health_timeout, cancel=self.stop_event)
        if not ok:
            return list(bad) or ["not healthy"]
        before = m.lab.activity(list(m.sites))
        dirty = self._known_dirty(m, list(m.sites), full=full)
        if dirty:
            m.seen = None
            return [f"{s}: {why}" for s, why in sorted(dirty.items())]
        m.seen, m.checked_at = before, time.monotonic()
        return []

    def _touched(self, m: PoolMember, sites: list[str], now: Any) -> list[str]:
        """The sites of ``sites`` the proxy saw reached since ``m.seen`` by anyone but envctl, or now served by another
        copy (a heal, a restarted proxy): a cheap first look (which leased sites a release resets), never the proof
        that the others are pristine. A read-only site (reset tier 'none') changes only with its copy. Without a
        reading, every site."""
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
        busy = [m for m in self.members.values() if m.state in (RELEASING, STARTING, BROKEN, QUARANTINED)]
        return 10 if self.starting or any(m.state == STARTING for m in busy) or not self.members else 2 if busy else 5

    def _lease_of(self, m: PoolMember, lid: str, rec: dict[str, Any], full_reset: Callable[[str], str] | None) -> Lease:
        sites: list[str] = list(rec["sites"])
        url = full_reset(lid) if full_reset else None
        env = m.lab.harness(sites, url)
        env["ENVCTL_INSTANCE"] = m.name
        env["ENVCTL_LEASE"] = lid
        return Lease(lid, m.name, sites, rec.get("holder", ""), rec["acquired"], rec["expires"], rec["ttl"],
                     env, self._auth(m, sites), url, max_seconds=rec.get("max_seconds"), host=m.node or None,
                     access=str(rec.get("access", WRITE)))

    def lease_auth(self, lease_id: str) -> dict[str, Any]:
        """A held lease's login state as it is now (a reset through the lease renews the sites' login files)."""
        m = self._find(lease_id)
        return self._auth(m, list(m.leases.get(lease_id, {}).get("sites") or m.sites))

    def _auth(self, m: PoolMember, sites: list[str]) -> dict[str, Any]:
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

    # -- views -----------------------------------------------------------------------------------
    def _lease_row(self, m: PoolMember, lid: str) -> dict[str, Any]:
        lease = m.leases.get(lid, {})
        expires = float(lease.get("expires", 0))
        row: dict[str, Any] = {"instance": m.name, "state": m.state, "id": lid, "holder": lease.get("holder", ""),
                               "access": READ if m.state == SHARED else WRITE, "lease_sites": lease.get("sites", []),
                               "expires": expires, "expires_at": iso_time(expires),
                               "seconds_left": round(expires - time.time(), 1)}
        if m.node:
            row["node"] = m.node
        if lease.get("max_seconds"):
            row["max_seconds"] = lease["max_seconds"]
        if lease.get("notices"):  # what happened to the holder's sites (healed, killed for memory, tainted)
            row["notices"] = list(lease["notices"])
        if lease.get("tainted"):
            row["tainted"] = lease["tainted"]
        return row

    def _row(self, m: PoolMember, lid: str | None = None) -> dict[str, Any]:
        """One member's row; with ``lid``, that lease's fields at the top (what a heartbeat and a release answer)."""
        row: dict[str, Any] = {"instance": m.name, "state": m.state, "sites": list(m.sites), "error": m.error,
                               "healing": sorted(m.healing)}
        if m.node:
            row["node"] = m.node
        if m.quarantine:
            row["quarantined"] = {"at": iso_time(float(m.quarantine.get("at", 0))), "why": m.quarantine.get("why", ""),
                                  "sites": list(m.quarantine.get("sites") or [])}
        if m.state == SHARED:
            row.update({"access": READ, "readers": [self._lease_row(m, x) for x in sorted(m.leases)],
                        "closed": m.closed, "taint": m.taint, "limit": self.readers})
        if lid is None and m.state == LEASED and m.leases:
            lid = next(iter(m.leases))
        if lid is not None and lid in m.leases:
            row.update({k: v for k, v in self._lease_row(m, lid).items() if k not in ("instance", "state", "node")})
        return row

    def rows(self) -> list[dict[str, Any]]:
        with self.cond:
            return [self._row(m) for m in sorted(self.members.values(), key=lambda x: x.name)]

    def leases(self) -> list[dict[str, Any]]:
        with self.cond:
            return [self._lease_row(m, lid) for m in sorted(self.members.values(), key=lambda x: x.name)
                    if m.state in HELD for lid in sorted(m.leases)]

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
        states = {s: 0 for s in STATES}
        for m in list(self.members.values()):
            states[m.state] = states.get(m.state, 0) + 1
        resets = self.stats.resets_summary()
        turn = list(self.stats.turnaround)
        st = self.stats
        reads = sum(len(m.leases) for m in list(self.members.values()) if m.state == SHARED)
        return {"pool": self.name, "starting": self.starting, "instances": len(self.members), "states": states,
                "leases_active": states[LEASED] + reads, "leases_read": reads, "leases_free": states[FREE],
                "readers_limit": self.readers,
                "acquired": st.acquired, "released": st.released, "expired": st.expired,
                "reclaimed": st.reclaimed, "lost": st.lost, "dirty_found": st.dirty,
                "rejected": st.rejected, "given_up": st.given_up, "heals": dict(st.heals),
                "heal_failures": st.heal_failures, "resets": resets,
                "turnaround": {"count": len(turn), "p50_s": percentile(turn, 0.5), "p95_s": percentile(turn, 0.95)},
                "verifications": st.verifications, "verifications_skipped": st.verifications_skipped,
                "signal_reads": st.signal_reads, "resets_skipped": st.resets_skipped,
                "fingerprints": fingerprints_computed() - st.signals, "quarantined": st.quarantined,
                "reverified": st.reverified,
                "reverify_deferred": st.reverify_deferred, "reverify_every": self.reverify_every,
                "tainted": st.tainted, "moved": st.moved, "nodes": self._nodes_summary(),
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


__all__ = ["Pool", "MemberStore", "PoolMember", "PoolLab", "Conflict", "FREE", "LEASED", "SHARED", "RELEASING", "BROKEN",
           "STARTING", "CHECKING", "QUARANTINED", "FULL_RESET_WAIT", "ANSWER_SLACK", "default_readers", "first_line"]
