"""The lease pool: isolated instances handed out verified pristine, reset between holders.

An instance moves ``starting -> free -> leased -> releasing -> free`` (``broken`` when a reset does
not verify; retried). The promise a lease makes is about the *whole instance*, not only the sites a
holder asked for, because a holder can reach every site of its instance:

- **acquire** hands out an instance only when every site it runs passes its probes and verifies
  pristine by its fingerprint (one fingerprint pass, side by side, not a reset); one that does not
  is sent to release and another is tried;
- **release** (asked for, expired, or reclaimed by the watchdog) resets the leased sites and every
  other site that does not verify, and frees the instance only when all of them verified;
- a lease's own reset (``full_reset``, BrowserGym's protocol) does the same, answered when done;
- the **watchdog** reclaims a lease held past ``max_seconds`` (``serve --max-lease``) even while it
  heartbeats (a hung episode), and counts it;
- holders are told: an id whose lease ended answers 409 with why (expired, reclaimed, released),
  an unknown id 404, so :func:`envctl.leases.client.held` raises ``LeaseLost``.

Where members live is a *store* (:class:`MemberStore`): :class:`LocalStore` keeps each member's
lease record in its own routing table (inside its front proxy: the engine, not a process, knows who
holds what, so a restarted server rebuilds the pool and two servers cannot lease one instance) and
brings members up on this engine; :class:`envctl.cloud.pool.LabStore` keeps them in a file beside a
cloud lab's manifest and resets through each host's reset server. The pool never asks which.
"""
from __future__ import annotations

import json
import secrets
import sys
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

from envctl.auth import login_combos, state_name
from envctl.catalog import Catalog
from envctl.errors import EnvctlError, UsageError
from envctl.healthchecks.wait import wait_for
from envctl.leases.client import (DEFAULT_TTL, Lease, LeaseLost, NoFreeInstance, NoSuchLease, _iso,
                                  validate_max_seconds, validate_ttl, validate_wait)
from envctl.locks import lock_dir
from envctl.provision import docker as dk
from envctl.provision import proxy
from envctl.provision.local import InstanceSettings
from envctl.provision.ports import port_bindable
from envctl.state.reset import ResetResult
from envctl.validate import validate_instance_name

STARTING, FREE, LEASED, RELEASING, BROKEN = "starting", "free", "leased", "releasing", "broken"
RESET_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 40, 80, 160)
FULL_RESET_WAIT = 600.0  # BrowserGym's own limit for a full reset
ENDED_KEPT = 1000  # ended lease ids remembered, so their holders get 409 and why, not 404
RECORD_KEYS = ("id", "holder", "sites", "acquired", "expires", "ttl", "max_seconds")


class Conflict(EnvctlError):
    """Another process changed an instance's lease record first."""


class PoolLab(Protocol):
    """What the pool uses of a member (a :class:`envctl.lab.Lab`, or a cloud lab's remote instance)."""

    instance: str
    catalog: Catalog
    auth_dir: Path

    def env(self, benchmark: str = ...) -> dict[str, str]: ...

    def login(self, sites: list[str] | None = ..., *, max_age: float | None = ...) -> dict[str, Path]: ...

    def reset(self, sites: list[str] | None = ..., *, tier: str | None = ...,
              replenish_async: bool = ...) -> list[ResetResult]: ...


@dataclass
class Member:
    """One instance of the pool, as the server tracks it (its record is mirrored in the store)."""

    name: str
    lab: Any  # PoolLab
    state: str = STARTING
    lease: dict[str, Any] = field(default_factory=dict)  # RECORD_KEYS
    sites: list[str] = field(default_factory=list)  # sites up
    error: str = ""
    retry_at: float = 0.0
    auth_at: float = 0.0  # when its login files were last (re)written by us
    failing: dict[str, float] = field(default_factory=dict)  # site -> first failing probe (monotonic)
    healing: set[str] = field(default_factory=set)
    resetting: bool = False  # a lease's own (BrowserGym) reset is running
    reset_done: threading.Event = field(default_factory=threading.Event)
    reset_error: str = ""
    released_at: float = 0.0  # monotonic: when its last release began (turnaround figures)

    def record(self, pool: str) -> dict[str, Any]:
        out: dict[str, Any] = {"pool": pool, "state": self.state if self.state != STARTING else FREE}
        if self.lease:
            out.update({k: self.lease[k] for k in RECORD_KEYS if k in self.lease})
        return out


class MemberStore(Protocol):
    """Where a pool's members live and how they are reached (local engine or cloud lab)."""

    heals: bool  # whether the pool replaces sites failing their probes
    repairs: bool  # whether a starting pool runs its members' 'up' again (idempotent: checks and repairs)
    auth_note: str | None  # why leases carry no login state (None: they do)

    def names(self, pool: str) -> list[str]: ...

    def make(self, name: str) -> Any: ...

    def target(self, m: Member) -> list[str]:
        """The sites the member should run."""

    def present(self, m: Member) -> bool: ...

    def exists(self, m: Member) -> bool: ...

    def claim(self, m: Member, pool: str) -> tuple[dict[str, Any], list[str]]: ...

    def store(self, m: Member, record: dict[str, Any], expect: Callable[[dict[str, Any]], bool] | None) -> None: ...

    def problems(self, m: Member, sites: list[str]) -> list[str]:
        """Why ``sites`` of the member are not healthy ([] when they are)."""

    def not_pristine(self, m: Member, sites: list[str]) -> dict[str, str]:
        """Site -> why it does not verify pristine, for those of ``sites`` that do not."""

    def bring_up(self, pool: "Pool", members: list[Member]) -> None: ...

    def probe(self, m: Member, site: str) -> tuple[bool, str]: ...

    def replenish(self, m: Member) -> bool: ...

    def decorate(self, m: Member, lease: Lease, full_reset: Callable[[str], str] | None) -> None: ...

    def row(self, m: Member, row: dict[str, Any]) -> None: ...

    def spares(self, members: list[Member]) -> dict[tuple[str, str], int]: ...


@dataclass
class Stats:
    acquired: int = 0
    rejected: int = 0
    released: int = 0
    expired: int = 0
    reclaimed: int = 0  # held past max_seconds (the watchdog)
    dirty: int = 0  # instances found not pristine when about to be leased (tampered while free)
    heals: dict[str, int] = field(default_factory=dict)  # site -> count
    heal_failures: int = 0
    resets: dict[tuple[str, str], int] = field(default_factory=dict)  # (tier, ok) -> count
    reset_seconds: dict[str, list[float]] = field(default_factory=dict)  # tier -> [bucket counts..., sum, count]
    turnaround: list[float] = field(default_factory=list)  # seconds from a release to the instance free again

    def reset(self, r: ResetResult) -> None:
        key = (r.tier, "true" if r.ok else "false")
        self.resets[key] = self.resets.get(key, 0) + 1
        h = self.reset_seconds.setdefault(r.tier, [0.0] * (len(RESET_BUCKETS) + 2))
        for i, le in enumerate(RESET_BUCKETS):
            if r.seconds <= le:
                h[i] += 1
        h[-2] += r.seconds
        h[-1] += 1


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, int(round(q * (len(s) - 1))))], 3)


class Pool:
    """A pool of instances handed out by lease, its members kept by ``store``."""

    def __init__(self, name: str, store: MemberStore, *, heal_after: float = 60.0, probe_interval: float = 2.0,
                 tick: float = 0.5, health_timeout: float = 120.0, auth_max_age: float = 1800.0,
                 max_lease: float | None = None, log: Callable[[str], None] = _stderr) -> None:
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
        self.starting_error = ""

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
            if not self.store.present(m):
                m.state, m.error = BROKEN, "not running"
                continue
            self._adopt(m, resume=resume)

    def ensure(self) -> None:
        """Bring every member to its wanted sites: missing members and half-made ones (a start that was
        stopped, a site removed) are brought up in parallel; the others are adopted as they are."""
        todo = []
        for name in self.store.names(self.name):
            m = self._member(name)
            if self.store.present(m):
                self._adopt(m)  # STARTING when it lacks sites it should run
                if m.state == FREE and self.store.repairs:
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
        with self.cond:
            m.sites = sites
            m.state = rec.get("state", FREE)
            m.lease = {k: rec[k] for k in RECORD_KEYS if k in rec}
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

    def _retry(self, m: Member) -> None:
        """A broken member again: brought up when it lacks sites (or is gone), else reset by recreating."""
        if not self.store.present(m) or self._half_made(m):
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
        self.stop_event.set()
        with self.cond:
            self.cond.notify_all()
        for t in self.threads:
            t.join(timeout=10)

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
                    m.retry_at = time.monotonic() + max(30.0, self.heal_after)
                    self._retry(m)
            if self.store.heals and time.monotonic() >= next_probe:
                next_probe = time.monotonic() + self.probe_interval
                for m in members:
                    if m.state in (LEASED, FREE):
                        try:
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

    def _probe(self, m: Member) -> None:
        for site in list(m.sites):
            if site in m.healing:
                continue
            ok, why = self.store.probe(m, site)
            if ok:
                m.failing.pop(site, None)
                continue
            since = m.failing.setdefault(site, time.monotonic())
            if time.monotonic() - since >= self.heal_after:
                self.log(f"pool {self.name}: {m.name}/{site} failed its probes for {time.monotonic() - since:.0f}s "
                         f"({why}); healing it (recreate)")
                m.healing.add(site)
                self._spawn(self._heal, m, site)

    def _heal(self, m: Member, site: str) -> None:
        try:
            [r] = m.lab.reset([site], tier="recreate", replenish_async=self.store.replenish(m))
            self.stats.reset(r)
            if r.ok:
                self.stats.heals[site] = self.stats.heals.get(site, 0) + 1
                m.auth_at = time.time()
                self.log(f"pool {self.name}: healed {m.name}/{site} in {r.seconds:.1f}s (URLs unchanged)")
            else:
                self.stats.heal_failures += 1
                self.log(f"pool {self.name}: healing {m.name}/{site} failed: {r.error}")
        except Exception as exc:  # noqa: BLE001
            self.stats.heal_failures += 1
            self.log(f"pool {self.name}: healing {m.name}/{site} failed: {exc}")
        finally:
            m.failing.pop(site, None)
            m.healing.discard(site)

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
                        raise NoFreeInstance(f"no free instance in pool '{self.name}' ({what})", self._retry_after())
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
                    m.state, m.lease = (FREE if self.store.exists(m) else BROKEN), {}
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
        settling) and every site's fingerprint (one pass)."""
        ok, bad = wait_for(lambda: (not (p := self.store.problems(m, list(m.sites))), p),
                           timeout=self.health_timeout, cancel=self.stop_event)
        if not ok:
            return list(bad) or ["not healthy"]
        return [f"{s}: {why}" for s, why in self.store.not_pristine(m, list(m.sites)).items()]

    def _retry_after(self) -> int:
        """Seconds a client should wait: about one reset, a little more while the pool is starting."""
        busy = [m for m in self.members.values() if m.state in (RELEASING, STARTING, BROKEN)]
        return 10 if self.starting or any(m.state == STARTING for m in busy) or not self.members else 2 if busy else 5

    def _lease_of(self, m: Member, full_reset: Callable[[str], str] | None) -> Lease:
        lab, rec = m.lab, m.lease
        sites: list[str] = list(rec["sites"])
        catalog = lab.catalog
        keep = {k for s in sites for b in ("webarena", "visualwebarena") for k in catalog.site(s).env.get(b, {})}
        wa = {k: v for k, v in lab.env("webarena").items() if k in keep}
        vwa = {k: v for k, v in lab.env("visualwebarena").items() if k in keep or k == "DATASET"}
        env = {**vwa, **wa}  # WebArena's WIKIPEDIA (landing URL) wins, as in 'envctl smoke'
        env.update({f"WA_{k}": v for k, v in wa.items()})
        env.update({f"VWA_{k}": v for k, v in vwa.items() if k != "DATASET"})
        url = full_reset(rec["id"]) if full_reset else None
        if url:
            env["WA_FULL_RESET"] = env["VWA_FULL_RESET"] = url
        env["ENVCTL_INSTANCE"] = m.name
        env["ENVCTL_LEASE"] = rec["id"]
        lease = Lease(rec["id"], m.name, sites, rec.get("holder", ""), rec["acquired"], rec["expires"], rec["ttl"],
                      env, {} if self.store.auth_note else self._auth(m, sites), url,
                      max_seconds=rec.get("max_seconds"))
        self.store.decorate(m, lease, full_reset)
        return lease

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
        self._write(m, lambda rec: rec.get("id") == lease_id and rec.get("state") == LEASED)
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
        """Reset ``always`` and every other site of the member that does not verify; '' when every
        reset verified, else why not."""
        others = [s for s in m.sites if s not in always]
        try:
            dirty = list(self.store.not_pristine(m, others)) if others else []
            if dirty:
                self.log(f"pool {self.name}: {m.name}: {', '.join(dirty)} not pristine either (outside the lease); "
                         "resetting it too")
            names = list(always) + dirty
            if not names:
                return ""
            results = m.lab.reset(names, tier=tier, replenish_async=self.store.replenish(m))
            for r in results:
                self.stats.reset(r)
            return "; ".join(f"{r.site}: {r.error}" for r in results if not r.ok)
        except Exception as exc:  # noqa: BLE001
            return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"

    def _reclaim(self, m: Member, force: bool = False) -> None:
        """Reset the instance (leased sites and whatever does not verify); free it only when all verified."""
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
                    self.stats.turnaround.append(time.monotonic() - m.released_at)
                    del self.stats.turnaround[:-1000]
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
        if m.state in (LEASED, RELEASING) and m.lease.get("id"):
            row.update({"id": m.lease.get("id"), "holder": m.lease.get("holder", ""),
                        "lease_sites": m.lease.get("sites", []), "expires": m.lease.get("expires"),
                        "expires_at": _iso(float(m.lease.get("expires", 0))),
                        "seconds_left": round(float(m.lease.get("expires", 0)) - time.time(), 1)})
            if m.lease.get("max_seconds"):
                row["max_seconds"] = m.lease["max_seconds"]
        self.store.row(m, row)
        return row

    def rows(self) -> list[dict[str, Any]]:
        with self.cond:
            return [self._row(m) for m in sorted(self.members.values(), key=lambda x: x.name)]

    def leases(self) -> list[dict[str, Any]]:
        return [r for r in self.rows() if r["state"] == LEASED]

    def spares(self) -> dict[tuple[str, str], int]:
        return self.store.spares([m for m in list(self.members.values()) if m.state != STARTING])

    def summary(self) -> dict[str, Any]:
        """The figures of :meth:`metrics_text`, as JSON (what 'envctl lease list' shows)."""
        states = {s: 0 for s in (FREE, LEASED, RELEASING, BROKEN, STARTING)}
        for m in list(self.members.values()):
            states[m.state] = states.get(m.state, 0) + 1
        resets: dict[str, dict[str, Any]] = {}
        for tier, h in self.stats.reset_seconds.items():
            resets[tier] = {"count": int(h[-1]), "mean_s": round(h[-2] / h[-1], 3) if h[-1] else None,
                            "failed": self.stats.resets.get((tier, "false"), 0)}
        turn = list(self.stats.turnaround)
        return {"pool": self.name, "starting": self.starting, "instances": len(self.members), "states": states,
                "leases_active": states[LEASED], "leases_free": states[FREE],
                "acquired": self.stats.acquired, "released": self.stats.released, "expired": self.stats.expired,
                "reclaimed": self.stats.reclaimed, "dirty_found": self.stats.dirty,
                "rejected": self.stats.rejected, "heals": dict(self.stats.heals),
                "heal_failures": self.stats.heal_failures, "resets": resets,
                "turnaround": {"count": len(turn), "p50_s": _percentile(turn, 0.5), "p95_s": _percentile(turn, 0.95)},
                "max_lease": self.max_lease,
                "spares_ready": {f"{i}/{s}": n for (i, s), n in self.spares().items()}}

    def metrics_text(self) -> str:
        """Prometheus text exposition format (version 0.0.4)."""
        out: list[str] = []

        def metric(name: str, kind: str, help_text: str, samples: Iterable[tuple[dict[str, str], float]]) -> None:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")
            for labels, value in samples:
                lbl = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
                out.append(f"{name}{{{lbl}}} {_num(value)}" if lbl else f"{name} {_num(value)}")

        p = {"pool": self.name}
        s = self.summary()
        metric("envctl_pool_instances", "gauge", "Instances of the pool by state.",
               [({**p, "state": k}, v) for k, v in s["states"].items()])
        metric("envctl_leases_active", "gauge", "Instances leased now.", [(p, s["leases_active"])])
        metric("envctl_leases_free", "gauge", "Instances free to lease now.", [(p, s["leases_free"])])
        for key, help_text in (("acquired", "Leases handed out."), ("released", "Leases released by their holder."),
                               ("expired", "Leases reclaimed because their heartbeat stopped."),
                               ("reclaimed", "Leases reclaimed because they were held past their max_seconds."),
                               ("rejected", "Lease requests answered 503 (no free instance).")):
            metric(f"envctl_leases_{key}_total", "counter", help_text, [(p, s[key])])
        metric("envctl_instances_dirty_total", "counter",
               "Free instances found not pristine when about to be leased (reset instead).", [(p, s["dirty_found"])])
        metric("envctl_resets_total", "counter", "Site resets by the tier that ended them and whether they verified.",
               [({**p, "tier": t, "ok": ok}, n) for (t, ok), n in sorted(self.stats.resets.items())])
        out.append("# HELP envctl_reset_seconds Site reset latency (verified), by tier.")
        out.append("# TYPE envctl_reset_seconds histogram")
        for tier, h in sorted(self.stats.reset_seconds.items()):
            for i, le in enumerate(RESET_BUCKETS):
                out.append(f'envctl_reset_seconds_bucket{{pool="{self.name}",tier="{tier}",le="{le:g}"}} {_num(h[i])}')
            out.append(f'envctl_reset_seconds_bucket{{pool="{self.name}",tier="{tier}",le="+Inf"}} {_num(h[-1])}')
            out.append(f'envctl_reset_seconds_sum{{pool="{self.name}",tier="{tier}"}} {_num(h[-2])}')
            out.append(f'envctl_reset_seconds_count{{pool="{self.name}",tier="{tier}"}} {_num(h[-1])}')
        metric("envctl_heals_total", "counter", "Sites replaced because they failed their probes.",
               [({**p, "site": k}, v) for k, v in sorted(self.stats.heals.items())])
        metric("envctl_heal_failures_total", "counter", "Heals that did not verify.", [(p, s["heal_failures"])])
        metric("envctl_spares_ready", "gauge", "Verified spare copies ready, per instance and site.",
               [({**p, "instance": i, "site": st}, n) for (i, st), n in sorted(self.spares().items())])
        return "\n".join(out) + "\n"


def _escape(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


# -- the local store: instances on this engine ---------------------------------------------------------
def auth_dir(instance: str) -> Path:
    """Where a pool member's login state lives: ``<state dir>/leases/<instance>/auth`` (0700)."""
    d = lock_dir() / "leases" / validate_instance_name(instance) / "auth"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return d


def auto_size(catalog: Catalog, sites: list[str], flavor: str, spares: int | None, pool: str,
              host_bytes: int | None = None, limit: int = 64, engine: Any = None) -> tuple[int, str]:
    """How many instances of ``sites`` (each with the spares the plan grants it, or ``spares``) fit this
    host's memory budget, counting what other instances on the engine hold (the pool's own members
    are not counted: a restarted pool reuses them). Copies are counted as the capacity plan counts
    them (issue 23): a running active copy of the same site and flavor on the engine (the pool's own
    members included) measured × the margin, capped by the limits; the limits when none runs. Other
    instances are measured the same way. Returns (count, why)."""
    from envctl.errors import EnvctlError
    from envctl.plan import BUDGET_SHARE, gib, host_memory, measure_engine
    from envctl.plan import plan as capacity_plan

    host = host_memory() if host_bytes is None else host_bytes
    if engine is None:
        try:
            engine = measure_engine()
        except EnvctlError:
            engine = None  # counted by the limits, as before
    measured = engine.site_use(flavor) if engine is not None else {}
    fixed = None if spares is None else {s: (spares if catalog.site(s).reset.tier == "spare" else 0) for s in sites}
    one_plan = capacity_plan(catalog, sites, flavor, host_bytes=host, fixed=fixed, measured=measured)
    granted = one_plan.spares()
    one = one_plan.used_bytes
    held, others = engine.held_by_others(lambda n: n.startswith(pool + "-")) if engine is not None else (0, 0)
    budget = int(host * BUDGET_SHARE) - held
    count = max(0, min(limit, budget // one if one else limit))
    how = (f"measured x{one_plan.margin:g}, capped by the limits: "
           + ", ".join(f"{s.site} {s.counted_bytes >> 20} MiB" + ("" if s.measured_bytes is not None else " (limits)")
                       for s in one_plan.sites)) if measured else "memory limits: nothing of theirs runs to measure"
    why = (f"{count} instance(s): one needs {gib(one)} ({how}; spares {granted}), "
           f"budget {gib(budget)} of {gib(host)} ({gib(held)} held by {others} other instance(s))")
    return count, why


class LocalStore:
    """Members ``<pool>-1`` … ``<pool>-N`` on this Docker engine, each a :class:`envctl.lab.Lab` made by
    ``make_lab``; their lease records in their routing tables. ``size`` None: every instance whose
    table says it belongs to the pool (what a client-side view uses)."""

    heals = True
    repairs = True
    auth_note: str | None = None

    def __init__(self, make_lab: Callable[[str], Any], *, size: int | None = None, flavor: str | None = None,
                 sites: list[str] | None = None, spares: int | None = None, base_offset: int = 10000,
                 offset_step: int = 1000, bind: str = "127.0.0.1") -> None:
        self.make_lab = make_lab
        self.size, self.flavor, self.sites, self.want_spares = size, flavor, sites, spares
        self.base_offset, self.offset_step, self.bind = base_offset, offset_step, bind

    def names(self, pool: str) -> list[str]:
        if self.size:
            return [f"{pool}-{i}" for i in range(1, self.size + 1)]
        names = []
        for c in dk.containers(role="proxy"):
            got = dk.seen(c)  # None: removed since the listing
            inst = got[1].get("envctl.instance", "") if got else ""
            if inst and got and got[2] == "running":
                try:
                    table = proxy.read_state(inst)
                except EnvctlError:
                    continue  # another instance's proxy going away as we look
                if table is not None and table.lease.get("pool") == pool:
                    names.append(inst)
        return names

    def make(self, name: str) -> Any:
        return self.make_lab(name)

    def target(self, m: Member) -> list[str]:
        return m.lab.catalog.resolve(self.sites, all_sites=not self.sites)

    def present(self, m: Member) -> bool:
        return m.lab.settings() is not None and proxy.read_state(m.name) is not None

    def exists(self, m: Member) -> bool:
        return m.lab.settings() is not None

    def claim(self, m: Member, pool: str) -> tuple[dict[str, Any], list[str]]:
        inst = m.lab.running()
        with inst.routing() as table:
            rec = table.lease
            if rec.get("pool") not in (None, pool):
                raise UsageError(f"instance '{m.name}' belongs to pool '{rec['pool']}'",
                                 "serve that pool, or use another --instance name for this one")
            if not rec:
                table.lease = {"pool": pool, "state": FREE}
                rec = table.lease
            return dict(rec), inst.sites_up(table)

    def store(self, m: Member, record: dict[str, Any], expect: Callable[[dict[str, Any]], bool] | None) -> None:
        with m.lab.running().routing() as table:
            if expect is not None and not expect(table.lease):
                raise Conflict(f"the lease record of {m.name} changed under us: {table.lease.get('state')}")
            table.lease = record

    def problems(self, m: Member, sites: list[str]) -> list[str]:
        inst = m.lab.running()
        bad = []
        for s in sites:
            ok, results = inst.probe(s)
            if not ok:
                r = next(x for x in results if not x.ok)
                bad.append(f"{s}: probe '{r.name}' {r.detail or r.status}")
        return bad

    def not_pristine(self, m: Member, sites: list[str]) -> dict[str, str]:
        if not sites:
            return {}

        def one(site: str) -> tuple[str, str]:
            try:
                v = m.lab.verify(site)
                return site, "" if v.ok else "; ".join(v.differences[:2]) or "fingerprint differs"
            except EnvctlError as exc:
                return site, str(exc).splitlines()[0]

        with ThreadPoolExecutor(max_workers=len(sites)) as ex:
            return {s: why for s, why in ex.map(one, sites) if why}

    def bring_up(self, pool: Pool, members: list[Member]) -> None:
        catalog = members[0].lab.catalog
        sites = catalog.resolve(self.sites, all_sites=not self.sites)
        fresh = [m for m in members if m.lab.settings() is None]
        offsets = dict(zip((m.name for m in fresh), self._free_offsets(len(fresh), sites, catalog)))

        def up(m: Member) -> None:
            t = time.monotonic()
            offset = offsets.get(m.name)
            pool.log(f"pool {pool.name}: bringing {m.name} up (flavor {self.flavor or 'full'}, "
                     + (f"port offset {offset}, " if offset is not None else "repairing, ") + f"sites {', '.join(sites)})")
            try:
                res = m.lab.up(sites, flavor=self.flavor, port_offset=offset, login=True, spares=self.want_spares)
                if not getattr(res, "ok", False):
                    bad = [s for s in getattr(res, "sites", []) if not s.ok]
                    raise EnvctlError(f"{m.name}: " + ("; ".join(f"{s.site}: {s.error}" for s in bad)
                                                        or getattr(res, "login_error", "") or "up failed"))
                m.auth_at = time.time()
                pool._adopt(m)
                pool.log(f"pool {pool.name}: {m.name} ready in {time.monotonic() - t:.1f}s")
            except Exception as exc:  # noqa: BLE001 - reported through the pool's listing; retried
                with pool.cond:
                    m.state, m.error = BROKEN, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    m.retry_at = time.monotonic() + 30
                    pool.cond.notify_all()
                pool.log(f"pool {pool.name}: {m.name} failed to come up: {m.error}")

        workers = [threading.Thread(target=up, args=(m,), daemon=True) for m in members]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    def _free_offsets(self, count: int, sites: list[str], catalog: Catalog) -> list[int]:
        """``count`` port offsets whose public ports (for ``sites``) are free and clash with no instance."""
        if not count:
            return []
        ports = sorted({p for s in sites for p in catalog.site(s).public_ports().values()})
        taken: set[int] = set()
        for c in dk.containers(role="proxy"):
            got = dk.seen(c)
            taken.update(int(p) for p in (got[1] if got else {}).get("envctl.ports", "").split(",") if p)
        out: list[int] = []
        offset = self.base_offset
        while len(out) < count:
            mine = {p + offset for p in ports}
            if max(mine) > 65535:
                raise UsageError(f"no free port offsets from {self.base_offset} for {count} instance(s) of "
                                 f"{', '.join(sites)} (ports up to {max(ports)} + offset must stay below 65536)",
                                 "free some ports, give a lower --base-offset, or serve fewer --instances")
            if not mine & taken and all(port_bindable(self.bind, p) for p in mine):
                out.append(offset)
                taken |= mine
            offset += self.offset_step
        return out

    def probe(self, m: Member, site: str) -> tuple[bool, str]:
        ok, results = m.lab.running().probe(site)
        if ok:
            return True, ""
        bad = next(r for r in results if not r.ok)
        return False, f"{bad.name}: {bad.detail or bad.status}"

    def replenish(self, m: Member) -> bool:
        """Whether resets should spawn a spare replenisher (only when the instance keeps spares)."""
        try:
            return any(n > 0 for n in m.lab.running().table().wanted.values())
        except EnvctlError:
            return False

    def decorate(self, m: Member, lease: Lease, full_reset: Callable[[str], str] | None) -> None:
        return None

    def row(self, m: Member, row: dict[str, Any]) -> None:
        return None

    def spares(self, members: list[Member]) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        for m in members:
            table = proxy.read_state(m.name)
            if table is None:
                continue
            for site in m.sites:
                if table.wanted.get(site) or table.spares.get(site):
                    out[(m.name, site)] = len(table.spares.get(site, []))
        return out


__all__ = ["Pool", "LocalStore", "auto_size", "MemberStore", "Member", "PoolLab", "Conflict", "auth_dir",
           "FREE", "LEASED", "RELEASING", "BROKEN", "STARTING", "FULL_RESET_WAIT"]
