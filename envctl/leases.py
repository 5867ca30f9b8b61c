"""Leases: isolated instances handed out from a pool, reset and verified between holders (issue #16).

A *pool* is a set of instances on this engine (``envctl serve --instance P --instances N`` makes them
``P-1`` … ``P-N``). Each instance carries its lease in its own routing table
(:attr:`ProxyState.lease <envctl.provision.proxy.ProxyState>`, inside its front proxy, written
atomically through :meth:`Instance.routing`), so the engine, not a process, knows who holds what: a
restarted server rebuilds the pool from the tables, and two processes cannot lease one instance.

An instance moves ``free -> leased -> releasing -> free``. Releasing (asked for, or because the
heartbeat stopped and the lease expired) resets the leased sites with ``Lab.reset`` and marks the
instance free only when every reset verified (probes + pristine fingerprint); a reset that does not
verify leaves it ``broken`` and it is retried with a recreate. ``starting`` (being brought up) lives in
memory only.

Sites heal: a worker probes every leased and free instance; a site failing its probes for
``heal_after`` seconds is recreated through the reset machinery (``tier="recreate"``): same public
ports, so the lease's URLs do not change. Events are logged and counted (:meth:`Pool.metrics_text`).

A cloud lab is one pool too (:class:`LabPool`, ``envctl cloud serve --lab``): its members are the
lab's instances on every host (:class:`RemoteLab`, reached through the host's reset server), and
their lease records live in a file next to the lab's manifest instead of routing tables.

This module works through ``Lab`` objects made by the caller's factory (it sits at Lab's layer and
``Lab.lease`` uses it, so it never imports ``envctl.lab`` itself).
"""
from __future__ import annotations

import fcntl
import json
import os
import secrets
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol

import requests

from envctl.auth import plan, state_name
from envctl.catalog import Catalog
from envctl.errors import EnvctlError, UsageError
from envctl.healthchecks.wait import wait_for
from envctl.instance import Instance
from envctl.locks import lock_dir, write_private
from envctl.provision import docker as dk
from envctl.provision import proxy
from envctl.provision.local import InstanceSettings
from envctl.provision.ports import port_bindable
from envctl.state.reset import ResetResult
from envctl.validate import validate_instance_name

STARTING, FREE, LEASED, RELEASING, BROKEN = "starting", "free", "leased", "releasing", "broken"
DEFAULT_TTL = 600.0
MAX_TTL = 7 * 24 * 3600.0
RESET_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 40, 80, 160)


class NoFreeInstance(EnvctlError):
    """Every instance of the pool is leased, being reset or starting; try again after ``retry_after`` s."""

    def __init__(self, message: str, retry_after: int = 5) -> None:
        super().__init__(message, f"retry in {retry_after}s, release a lease, or serve a larger pool (--instances)")
        self.retry_after = retry_after


class NoSuchLease(EnvctlError):
    def __init__(self, lease_id: str) -> None:
        super().__init__(f"no active lease '{lease_id[:40]}'", "it was released or it expired; see 'envctl lease list'")


class Conflict(EnvctlError):
    """Another process changed an instance's lease record first."""


class PoolLab(Protocol):
    """What the pool uses of :class:`envctl.lab.Lab` (one per member instance)."""

    instance: str
    catalog: Catalog
    auth_dir: Path

    def settings(self) -> InstanceSettings | None: ...

    def running(self) -> Instance: ...

    def env(self, benchmark: str = ...) -> dict[str, str]: ...

    def login(self, sites: list[str] | None = ..., *, max_age: float | None = ...) -> dict[str, Path]: ...

    def reset(self, sites: list[str] | None = ..., *, tier: str | None = ...,
              replenish_async: bool = ...) -> list[ResetResult]: ...

    def up(self, sites: list[str] | None = ..., *, flavor: str | None = ..., port_offset: int | None = ...,
           login: bool = ..., spares: int | None = ...) -> Any: ...


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def validate_ttl(value: Any) -> float:
    try:
        ttl = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"invalid ttl {str(value)[:40]!r}", "give the lease's time to live in seconds, e.g. 600") from None
    if not 1 <= ttl <= MAX_TTL:
        raise UsageError(f"ttl {ttl:g} is out of range", f"use 1 to {MAX_TTL:.0f} seconds")
    return ttl


@dataclass
class Lease:
    """What a holder gets: the instance, its URLs (harness variables), login state and reset URL."""

    id: str
    instance: str
    sites: list[str]
    holder: str
    acquired: float
    expires: float
    ttl: float
    env: dict[str, str] = field(default_factory=dict)
    auth: dict[str, Any] = field(default_factory=dict)  # storage_state file name -> its JSON
    full_reset: str | None = None
    host: str | None = None  # the lab host the instance runs on (lab pools only)
    auth_note: str | None = None  # why ``auth`` is empty (lab pools: the hosts run no browser)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("host", "auth_note"):
            if d[k] is None:
                del d[k]
        d["expires_at"] = _iso(self.expires)
        return d


@dataclass
class Member:
    """One instance of the pool, as the server tracks it (its lease is mirrored in its routing table)."""

    name: str
    lab: PoolLab
    state: str = STARTING
    lease: dict[str, Any] = field(default_factory=dict)  # id, holder, sites, acquired, expires, ttl
    sites: list[str] = field(default_factory=list)  # sites up
    error: str = ""
    retry_at: float = 0.0
    auth_at: float = 0.0  # when its login files were last (re)written by us
    failing: dict[str, float] = field(default_factory=dict)  # site -> first failing probe (monotonic)
    healing: set[str] = field(default_factory=set)
    resetting: bool = False  # a per-lease (BrowserGym) reset is running
    reset_error: str = ""

    def record(self, pool: str) -> dict[str, Any]:
        out: dict[str, Any] = {"pool": pool, "state": self.state if self.state != STARTING else FREE}
        if self.lease:
            out.update({k: self.lease[k] for k in ("id", "holder", "sites", "acquired", "expires", "ttl")
                        if k in self.lease})
        return out


@dataclass
class Stats:
    acquired: int = 0
    rejected: int = 0
    released: int = 0
    expired: int = 0
    heals: dict[str, int] = field(default_factory=dict)  # site -> count
    heal_failures: int = 0
    resets: dict[tuple[str, str], int] = field(default_factory=dict)  # (tier, ok) -> count
    reset_seconds: dict[str, list[float]] = field(default_factory=dict)  # tier -> [bucket counts..., sum, count]

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


class Pool:
    """A pool of instances handed out by lease. ``make_lab(name)`` returns a Lab for one member."""

    def __init__(self, name: str, make_lab: Callable[[str], PoolLab], *, size: int | None = None,
                 flavor: str | None = None, sites: list[str] | None = None, spares: int | None = None,
                 heal_after: float = 60.0, probe_interval: float = 2.0, tick: float = 1.0,
                 base_offset: int = 10000, offset_step: int = 1000, health_timeout: float = 120.0,
                 auth_max_age: float = 1800.0, log: Callable[[str], None] = _stderr) -> None:
        self.name = validate_instance_name(name)
        self.make_lab = make_lab
        self.size = size
        self.flavor, self.sites, self.want_spares = flavor, sites, spares
        self.heal_after, self.probe_interval, self.tick = heal_after, probe_interval, tick
        self.base_offset, self.offset_step = base_offset, offset_step
        self.health_timeout, self.auth_max_age = health_timeout, auth_max_age
        self.log = log
        self.members: dict[str, Member] = {}
        self.stats = Stats()
        self.cond = threading.Condition()
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []
        self.starting_error = ""

    # -- membership ------------------------------------------------------------------------------
    def member_names(self) -> list[str]:
        """``<pool>-1`` … ``<pool>-N`` when a size is given, else every instance whose table says it
        belongs to this pool."""
        if self.size:
            return [f"{self.name}-{i}" for i in range(1, self.size + 1)]
        names = []
        for c in dk.containers(role="proxy"):
            inst = (c.config.labels or {}).get("envctl.instance", "")
            if inst and c.state.running:
                try:
                    table = proxy.read_state(inst)
                except EnvctlError:
                    continue  # another instance's proxy going away as we look
                if table is not None and table.lease.get("pool") == self.name:
                    names.append(inst)
        return names

    def _member(self, name: str) -> Member:
        with self.cond:
            m = self.members.get(name)
            if m is None:
                m = self.members[name] = Member(name, self.make_lab(name))
            return m

    def load(self, *, resume: bool = True) -> None:
        """Rebuild the pool from the instances' routing tables (what a restarted server does); with
        ``resume``, finish the resets a previous server left half-done."""
        for name in self.member_names():
            m = self._member(name)
            if not self._present(m):
                m.state, m.error = BROKEN, "not running"
                continue
            self._adopt(m, resume=resume)

    # -- where a member's lease record lives (a lab pool overrides these) -------------------------
    def _present(self, m: Member) -> bool:
        """Whether the member runs (its routing table can be read)."""
        return m.lab.settings() is not None and proxy.read_state(m.name) is not None

    def _exists(self, m: Member) -> bool:
        """Whether the member exists at all (a cheaper check than :meth:`_present`)."""
        return m.lab.settings() is not None

    def _claim(self, m: Member) -> tuple[dict[str, Any], list[str]]:
        """The member's lease record (made ``free`` in this pool when it has none) and its sites up."""
        inst = m.lab.running()
        with inst.routing() as table:
            rec = table.lease
            if rec.get("pool") not in (None, self.name):
                raise UsageError(f"instance '{m.name}' belongs to pool '{rec['pool']}'",
                                 "serve that pool, or use another --instance name for this one")
            if not rec:
                table.lease = {"pool": self.name, "state": FREE}
                rec = table.lease
            return dict(rec), inst.sites_up(table)

    def _store(self, m: Member, record: dict[str, Any], expect: Callable[[dict[str, Any]], bool] | None = None) -> None:
        """Replace the member's lease record; with ``expect``, only if the stored one passes it
        (compare-and-set across processes: the table is read and written under its lock)."""
        with m.lab.running().routing() as table:
            if expect is not None and not expect(table.lease):
                raise Conflict(f"the lease record of {m.name} changed under us: {table.lease.get('state')}")
            table.lease = record

    def _health_check(self, m: Member, sites: list[str]) -> Callable[[], tuple[bool, list[str]]]:
        """A check (ok, problems) of the member's ``sites``, for :func:`wait_for`."""
        inst = m.lab.running()

        def check() -> tuple[bool, list[str]]:
            bad = []
            for s in sites:
                ok, results = inst.probe(s)
                if not ok:
                    r = next(x for x in results if not x.ok)
                    bad.append(f"{s}: probe '{r.name}' {r.detail or r.status}")
            return not bad, bad

        return check

    def _adopt(self, m: Member, *, resume: bool = True) -> None:
        rec, sites = self._claim(m)
        with self.cond:
            m.sites = sites
            m.state = rec.get("state", FREE)
            m.lease = {k: rec[k] for k in ("id", "holder", "sites", "acquired", "expires", "ttl") if k in rec}
            if m.state == LEASED and not m.lease.get("id"):
                m.state = RELEASING
            self.cond.notify_all()
        if m.state == RELEASING and resume:  # the previous server stopped in the middle of it
            self.log(f"pool {self.name}: {m.name} was being reset; resetting it again")
            self._spawn(self._reclaim, m)
        elif m.state == BROKEN:
            m.retry_at = 0.0

    def _write(self, m: Member, expect: Callable[[dict[str, Any]], bool] | None = None) -> None:
        """Record ``m``'s lease in its routing table; with ``expect``, only if the table's record
        passes it (compare-and-set across processes: the table is read and written under its lock)."""
        self._store(m, m.record(self.name), expect)

    def _free_offsets(self, count: int, sites: list[str], catalog: Catalog, bind: str = "127.0.0.1") -> list[int]:
        """``count`` port offsets whose public ports (for ``sites``) are free and clash with no instance."""
        ports = sorted({p for s in sites for p in catalog.site(s).public_ports().values()})
        taken: set[int] = set()
        for c in dk.containers(role="proxy"):
            taken.update(int(p) for p in (c.config.labels or {}).get("envctl.ports", "").split(",") if p)
        out: list[int] = []
        offset = self.base_offset
        while len(out) < count:
            mine = {p + offset for p in ports}
            if max(mine) > 65535:
                raise UsageError(f"no free port offsets above {self.base_offset} for {count} instance(s)",
                                 "free some ports, or start the pool at another offset")
            if not mine & taken and all(port_bindable(bind, p) for p in mine):
                out.append(offset)
                taken |= mine
            offset += self.offset_step
        return out

    def ensure(self) -> None:
        """Bring the pool's missing members up (in parallel, on free port offsets) and adopt them all."""
        names = self.member_names()
        missing = []
        for name in names:
            m = self._member(name)
            if not self._present(m):
                missing.append(m)
            else:
                self._adopt(m)
        if not missing:
            return
        catalog = missing[0].lab.catalog
        sites = catalog.resolve(self.sites, all_sites=not self.sites)
        offsets = self._free_offsets(len(missing), sites, catalog)

        def bring_up(m: Member, offset: int) -> None:
            t = time.monotonic()
            self.log(f"pool {self.name}: bringing {m.name} up (flavor {self.flavor or 'full'}, "
                     f"port offset {offset}, sites {', '.join(sites)})")
            try:
                res = m.lab.up(sites, flavor=self.flavor, port_offset=offset, login=True, spares=self.want_spares)
                if not getattr(res, "ok", False):
                    bad = [s for s in getattr(res, "sites", []) if not s.ok]
                    raise EnvctlError(f"{m.name}: " + ("; ".join(f"{s.site}: {s.error}" for s in bad)
                                                        or getattr(res, "login_error", "") or "up failed"))
                m.auth_at = time.time()
                self._adopt(m)
                self.log(f"pool {self.name}: {m.name} ready in {time.monotonic() - t:.1f}s")
            except Exception as exc:  # noqa: BLE001 - reported through the pool's listing
                with self.cond:
                    m.state, m.error = BROKEN, str(exc).splitlines()[0]
                self.log(f"pool {self.name}: {m.name} failed to come up: {m.error}")

        workers = [threading.Thread(target=bring_up, args=(m, off), daemon=True) for m, off in zip(missing, offsets)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    # -- background work -------------------------------------------------------------------------
    def _spawn(self, fn: Callable[..., Any], *args: Any) -> threading.Thread:
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        return t

    def start(self, *, bring_up: bool = True) -> "Pool":
        """Adopt (and, with ``bring_up``, start) the members in the background; run the worker."""
        def init() -> None:
            while not self.stop_event.is_set():
                try:
                    self.ensure() if bring_up else self.load()
                    self.starting_error = ""
                    break
                except Exception as exc:  # noqa: BLE001 - e.g. the engine busy; try again
                    self.starting_error = str(exc)
                    self.log(f"pool {self.name}: {exc}; retrying in 5s")
                    self.stop_event.wait(5)
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
        """Expire leases whose heartbeat stopped, retry broken instances, heal failing sites."""
        next_probe = 0.0
        while not self.stop_event.wait(self.tick):
            now = time.time()
            with self.cond:
                members = list(self.members.values())
            for m in members:
                if m.state == LEASED and float(m.lease.get("expires", 0)) < now:
                    self.stats.expired += 1
                    self.log(f"pool {self.name}: lease {m.lease.get('id')} on {m.name} expired; reclaiming")
                    self._begin_release(m)
                elif m.state == BROKEN and m.retry_at <= time.monotonic() and self._exists(m):
                    m.retry_at = time.monotonic() + max(30.0, self.heal_after)
                    self._begin_release(m, force=True)
            if time.monotonic() >= next_probe:
                next_probe = time.monotonic() + self.probe_interval
                for m in members:
                    if m.state in (LEASED, FREE):
                        try:
                            self._probe(m)
                        except Exception as exc:  # noqa: BLE001 - the engine hiccuped; next round
                            self.log(f"pool {self.name}: probing {m.name} failed: {exc}")

    def _probe(self, m: Member) -> None:
        inst = m.lab.running()
        for site in m.sites:
            if site in m.healing:
                continue
            ok, results = inst.probe(site)
            if ok:
                m.failing.pop(site, None)
                continue
            since = m.failing.setdefault(site, time.monotonic())
            if time.monotonic() - since >= self.heal_after:
                bad = next(r for r in results if not r.ok)
                self.log(f"pool {self.name}: {m.name}/{site} failed its probes for {time.monotonic() - since:.0f}s "
                         f"({bad.name}: {bad.detail or bad.status}); healing it (recreate)")
                m.healing.add(site)
                self._spawn(self._heal, m, site)

    def _heal(self, m: Member, site: str) -> None:
        try:
            [r] = m.lab.reset([site], tier="recreate", replenish_async=self._replenish(m))
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

    def _replenish(self, m: Member) -> bool:
        """Whether resets should spawn a spare replenisher (only when the instance keeps spares)."""
        try:
            return any(n > 0 for n in m.lab.running().table().wanted.values())
        except EnvctlError:
            return False

    # -- leasing ---------------------------------------------------------------------------------
    def _pick(self, wanted: list[str] | None) -> Member | None:
        for m in sorted(self.members.values(), key=lambda x: x.name):
            if m.state == FREE and (wanted is None or set(wanted) <= set(m.sites)):
                return m
        return None

    def acquire(self, sites: list[str] | None = None, *, ttl: float | None = None, holder: str = "",
                wait: float = 0.0, full_reset: Callable[[str], str] | None = None) -> Lease:
        """Lease a free, healthy instance with ``sites`` up (default: all its sites).

        Waits up to ``wait`` seconds for one; raises :class:`NoFreeInstance` otherwise."""
        ttl = validate_ttl(ttl if ttl is not None else DEFAULT_TTL)
        wanted = list(dict.fromkeys(sites)) if sites else None
        deadline = time.monotonic() + max(0.0, float(wait))
        while True:
            with self.cond:
                if wanted and self.members:
                    any_m = next(iter(self.members.values()))
                    any_m.lab.catalog.resolve(wanted)  # an unknown site is a usage error
                    if not any(set(wanted) <= set(m.sites) for m in self.members.values() if m.state != STARTING):
                        if all(m.state != STARTING for m in self.members.values()):
                            raise UsageError(f"no instance of pool '{self.name}' has {', '.join(wanted)} up",
                                             "lease sites the pool serves (see 'envctl lease list')")
                m = self._pick(wanted)
                if m is None:
                    left = deadline - time.monotonic()
                    if left <= 0 or self.stop_event.is_set():
                        self.stats.rejected += 1
                        busy = sum(1 for x in self.members.values() if x.state in (LEASED, RELEASING))
                        raise NoFreeInstance(f"no free instance in pool '{self.name}' "
                                             f"({busy} of {len(self.members)} busy)", self._retry_after())
                    self.cond.wait(min(left, 1.0))
                    continue
                now = time.time()
                lease_sites = wanted or list(m.sites)
                m.state = LEASED
                m.lease = {"id": secrets.token_hex(12), "holder": str(holder)[:200], "sites": lease_sites,
                           "acquired": now, "expires": now + ttl, "ttl": ttl}
            try:
                self._write(m, lambda rec: rec.get("state", FREE) == FREE)
            except Conflict:
                self._adopt(m, resume=False)  # someone else leased it: take the table's word, try another
                continue
            t = time.monotonic()
            try:
                self._wait_healthy(m, lease_sites)
                lease = self._lease_of(m, full_reset)
                with self.cond:
                    if m.state != LEASED or m.lease.get("id") != lease.id:  # expired while we got it ready
                        raise Conflict(f"the lease on {m.name} ended while it was being made ready")
            except Conflict:
                continue
            except Exception:
                with self.cond:
                    m.state, m.lease = (FREE if self._exists(m) else BROKEN), {}
                    m.retry_at = time.monotonic()
                try:
                    self._write(m)
                except EnvctlError:
                    pass
                raise
            self.stats.acquired += 1
            self.log(f"pool {self.name}: lease {lease.id} on {m.name} for {lease.holder or 'a client'} "
                     f"({', '.join(lease.sites)}, ttl {ttl:g}s; ready in {time.monotonic() - t:.1f}s)")
            return lease

    def _retry_after(self) -> int:
        """Seconds a client should wait: about one reset, a little more while the pool is starting."""
        busy = [m for m in self.members.values() if m.state in (RELEASING, STARTING, BROKEN)]
        return 10 if any(m.state == STARTING for m in busy) or not self.members else 3 if busy else 5

    def _wait_healthy(self, m: Member, sites: list[str]) -> None:
        ok, bad = wait_for(self._health_check(m, sites), timeout=self.health_timeout, cancel=self.stop_event)
        if not ok:
            raise EnvctlError(f"{m.name} is not healthy: {'; '.join(bad)}", "the pool heals failing sites; retry")

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
        return Lease(rec["id"], m.name, sites, rec.get("holder", ""), rec["acquired"], rec["expires"], rec["ttl"],
                     env, self._auth(m, sites), url)

    def _auth(self, m: Member, sites: list[str]) -> dict[str, Any]:
        """The login state (storage_state JSON) of every file touching the leased login sites."""
        catalog = m.lab.catalog
        with_login = [s for s in sites if catalog.site(s).login]
        if not with_login:
            return {}
        names = [state_name(c) for c in plan(catalog, with_login, [s for s in m.sites if catalog.site(s).login])]
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
        with self.cond:
            for m in self.members.values():
                if m.state == LEASED and m.lease.get("id") == lease_id:
                    return m
        raise NoSuchLease(lease_id)

    def heartbeat(self, lease_id: str, ttl: float | None = None) -> dict[str, Any]:
        """Extend a lease by its ttl (or ``ttl``) from now."""
        m = self._find(lease_id)
        with self.cond:
            if ttl is not None:
                m.lease["ttl"] = validate_ttl(ttl)
            m.lease["expires"] = time.time() + float(m.lease["ttl"])
        self._write(m, lambda rec: rec.get("id") == lease_id and rec.get("state") == LEASED)
        return self._row(m)

    def release(self, lease_id: str, *, background: bool = True) -> dict[str, Any]:
        """End a lease: its sites are reset (and verified) before the instance is leased again."""
        m = self._find(lease_id)
        self.stats.released += 1
        self.log(f"pool {self.name}: lease {lease_id} on {m.name} released; resetting {', '.join(m.lease['sites'])}")
        row = self._row(m)
        self._begin_release(m, background=background)
        return row

    def _begin_release(self, m: Member, *, force: bool = False, background: bool = True) -> None:
        with self.cond:
            if m.state == RELEASING:
                return
            m.state = RELEASING
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

    def _reclaim(self, m: Member, force: bool = False) -> None:
        """Reset the leased sites; free the instance only when every reset verified."""
        sites = list(m.lease.get("sites") or m.sites)
        t = time.monotonic()
        try:
            results = m.lab.reset(sites, tier="recreate" if force else None, replenish_async=self._replenish(m))
            for r in results:
                self.stats.reset(r)
            bad = [r for r in results if not r.ok]
            error = "; ".join(f"{r.site}: {r.error}" for r in bad)
        except Exception as exc:  # noqa: BLE001
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        # The table first, then memory: an acquirer never sees FREE before the engine does.
        try:
            self._store(m, {"pool": self.name, **m.lease, "state": BROKEN} if error else {"pool": self.name, "state": FREE})
        except EnvctlError as exc:
            self.log(f"pool {self.name}: could not record the state of {m.name}: {exc}")
            error = error or str(exc)
        with self.cond:
            if error:
                m.state, m.error, m.retry_at = BROKEN, error, time.monotonic() + max(10.0, self.heal_after)
            else:
                m.state, m.lease, m.error, m.auth_at = FREE, {}, "", time.time()
            self.cond.notify_all()
        if error:
            self.log(f"pool {self.name}: reset of {m.name} did not verify ({error}); retrying with a recreate later")
        else:
            self.log(f"pool {self.name}: {m.name} reset and verified in {time.monotonic() - t:.1f}s; free")

    # -- a lease's own reset (BrowserGym's protocol on /leases/<id>/reset) -----------------------
    def start_lease_reset(self, lease_id: str) -> bool:
        """Start resetting a lease's sites in the background; False when one is running."""
        m = self._find(lease_id)
        with self.cond:
            if m.resetting:
                return False
            m.resetting, m.reset_error = True, ""

        def run() -> None:
            try:
                results = m.lab.reset(list(m.lease.get("sites") or m.sites), replenish_async=self._replenish(m))
                for r in results:
                    self.stats.reset(r)
                m.reset_error = "; ".join(f"{r.site}: {r.error}" for r in results if not r.ok)
                m.auth_at = time.time()
            except Exception as exc:  # noqa: BLE001 - reported through the lease's status
                m.reset_error = f"{type(exc).__name__}: {exc}"
            finally:
                m.resetting = False

        self._spawn(run)
        return True

    def lease_reset_status(self, lease_id: str) -> tuple[bool, str]:
        m = self._find(lease_id)
        return m.resetting, m.reset_error

    # -- views -----------------------------------------------------------------------------------
    def _row(self, m: Member) -> dict[str, Any]:
        row: dict[str, Any] = {"instance": m.name, "state": m.state, "sites": list(m.sites), "error": m.error,
                               "healing": sorted(m.healing)}
        if m.state in (LEASED, RELEASING) and m.lease:
            row.update({"id": m.lease.get("id"), "holder": m.lease.get("holder", ""),
                        "lease_sites": m.lease.get("sites", []), "expires": m.lease.get("expires"),
                        "expires_at": _iso(float(m.lease.get("expires", 0))),
                        "seconds_left": round(float(m.lease.get("expires", 0)) - time.time(), 1)})
        return row

    def rows(self) -> list[dict[str, Any]]:
        with self.cond:
            return [self._row(m) for m in sorted(self.members.values(), key=lambda x: x.name)]

    def leases(self) -> list[dict[str, Any]]:
        return [r for r in self.rows() if r["state"] == LEASED]

    def spares(self) -> dict[tuple[str, str], int]:
        """(instance, site) -> spares ready, from the routing tables."""
        out: dict[tuple[str, str], int] = {}
        for m in list(self.members.values()):
            table = proxy.read_state(m.name) if m.state != STARTING else None
            if table is None:
                continue
            for site in m.sites:
                if table.wanted.get(site) or table.spares.get(site):
                    out[(m.name, site)] = len(table.spares.get(site, []))
        return out

    def summary(self) -> dict[str, Any]:
        """The figures of :meth:`metrics_text`, as JSON (what 'envctl lease list' shows)."""
        states = {s: 0 for s in (FREE, LEASED, RELEASING, BROKEN, STARTING)}
        for m in list(self.members.values()):
            states[m.state] = states.get(m.state, 0) + 1
        resets: dict[str, dict[str, Any]] = {}
        for tier, h in self.stats.reset_seconds.items():
            resets[tier] = {"count": int(h[-1]), "mean_s": round(h[-2] / h[-1], 3) if h[-1] else None,
                            "failed": self.stats.resets.get((tier, "false"), 0)}
        return {"pool": self.name, "instances": len(self.members), "states": states,
                "leases_active": states[LEASED], "leases_free": states[FREE],
                "acquired": self.stats.acquired, "released": self.stats.released, "expired": self.stats.expired,
                "rejected": self.stats.rejected, "heals": dict(self.stats.heals),
                "heal_failures": self.stats.heal_failures, "resets": resets,
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
                               ("rejected", "Lease requests answered 503 (no free instance).")):
            metric(f"envctl_leases_{key}_total", "counter", help_text, [(p, s[key])])
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


# -- a lab is one pool: instances on the hosts of a cloud lab, reached through their reset servers --
LAB_AUTH_NOTE = ("lab hosts run no browser, so a lab lease carries no login state: "
                 "create it where the harness runs ('envctl login' against the lease's URLs)")


class RemoteLab:
    """One instance of a lab host, as a pool member (:class:`PoolLab`): its URLs are the ones the host
    reported (its ``envctl env --format browsergym``), its reset is the host's reset server
    (``GET <reset_url>/reset``, which answers when the reset has ended, then ``/status`` must say
    ``Ready for duty!``). ``reset_url`` carries the lab's token: it never appears in messages."""

    def __init__(self, host: str, instance: str, env: dict[str, str], reset_url: str, sites: list[str],
                 catalog: Catalog, *, reset_timeout: float = 900.0) -> None:
        self.host, self.instance, self.sites, self.catalog = host, instance, list(sites), catalog
        self.bg_env = {k: str(v).rstrip("/") for k, v in env.items()}
        self.reset_url = reset_url.rstrip("/")
        self.reset_timeout = reset_timeout
        self.auth_dir = Path(os.devnull)  # no login state (see LAB_AUTH_NOTE)

    @property
    def where(self) -> str:
        return f"{self.host}/{self.instance}"

    def settings(self) -> InstanceSettings | None:
        return None  # not on this engine

    def running(self) -> Instance:
        raise EnvctlError(f"{self.where} runs on lab host {self.host}, not on this Docker engine")

    def env(self, benchmark: str = "webarena") -> dict[str, str]:
        prefix = "WA_" if benchmark == "webarena" else "VWA_"
        out = {k[len(prefix):]: v for k, v in self.bg_env.items() if k.startswith(prefix) and k != f"{prefix}FULL_RESET"}
        if benchmark == "visualwebarena":
            out["DATASET"] = "visualwebarena"
        return out

    def login(self, sites: list[str] | None = None, *, max_age: float | None = None) -> dict[str, Path]:
        return {}

    def up(self, sites: list[str] | None = None, *, flavor: str | None = None, port_offset: int | None = None,
           login: bool = True, spares: int | None = None) -> Any:
        raise EnvctlError(f"{self.where} is brought up by 'envctl cloud up', not by a lease server")

    def _get(self, path: str, timeout: float) -> requests.Response:
        return requests.get(f"{self.reset_url}{path}", timeout=(10, timeout))

    def ready(self) -> str:
        """'' when the host's reset server says ``Ready for duty!``, else what it says."""
        try:
            r = self._get("/status", 30)
        except requests.RequestException as exc:
            return f"the reset server of {self.where} did not answer ({type(exc).__name__})"
        return "" if r.status_code == 200 and r.text.strip() == "Ready for duty!" else \
            f"the reset server of {self.where} says {r.status_code} {r.text.strip()[:120]}"

    def problems(self, sites: list[str]) -> list[str]:
        """Why ``sites`` are not ready: the reset server not idle, or a site URL not answering."""
        bad = [x for x in [self.ready()] if x]
        for s in sites:
            site = self.catalog.site(s)
            keys = [f"WA_{k}" for k in site.env.get("webarena", {})] + [f"VWA_{k}" for k in site.env.get("visualwebarena", {})]
            url = next((self.bg_env[k] for k in keys if k in self.bg_env), None)
            if url is None:
                bad.append(f"{s}: {self.where} reported no URL for it")
                continue
            try:
                r = requests.get(url, timeout=10)
                if r.status_code >= 500:
                    bad.append(f"{s}: {url} answered {r.status_code}")
            except requests.RequestException as exc:
                bad.append(f"{s}: {url} did not answer ({type(exc).__name__})")
        return bad

    def reset(self, sites: list[str] | None = None, *, tier: str | None = None,
              replenish_async: bool = False) -> list[ResetResult]:
        """Reset the instance through its host's reset server (every site it runs; the host picks the
        tier) and check it says ``Ready for duty!``; the results are the host's (``/status.json``)."""
        t = time.monotonic()
        deadline = t + self.reset_timeout
        names = list(sites or self.sites)

        def failed(error: str) -> list[ResetResult]:
            return [ResetResult(s, False, tier or "remote", time.monotonic() - t, error=error) for s in names]

        while True:
            try:
                r = self._get("/reset", self.reset_timeout)
            except requests.RequestException as exc:
                return failed(f"the reset server of {self.where} did not answer ({type(exc).__name__})")
            if r.status_code == 200:
                break
            if r.status_code != 418 or time.monotonic() > deadline:
                return failed(f"the reset server of {self.where} answered {r.status_code} {r.text.strip()[:120]}")
            while time.monotonic() < deadline:  # another reset runs: let it end, then ours (it may predate a write)
                try:
                    if self._get("/status", 30).text.strip() != "Reset ongoing":
                        break
                except requests.RequestException:
                    pass
                time.sleep(1)
        error = self.ready()
        if error:
            return failed(error)
        seconds = time.monotonic() - t
        try:
            last = self._get("/status.json", 60).json().get("last") or []
            results = [ResetResult(str(d["site"]), bool(d["ok"]), str(d.get("tier") or "remote"), float(d["seconds"]),
                                   error=str(d.get("error") or "")) for d in last if isinstance(d, dict)]
        except (requests.RequestException, ValueError, KeyError, TypeError, AttributeError):
            results = []
        return results or [ResetResult(s, True, "remote", seconds) for s in names]


class LabPool(Pool):
    """One pool over every instance of a cloud lab (``envctl cloud serve --lab NAME``).

    Members are :class:`RemoteLab` objects named ``<host>/<instance>``. Their lease records live in
    ``state_file`` (JSON next to the lab's manifest, 0600, replaced atomically, read-modify-written
    under an flock), not on the hosts: the lease server is the one writer, a restarted one reads
    them back, and the hosts need no change. Sites are not healed from here (the hosts' own reset
    servers recreate what a reset cannot verify); a member whose reset does not verify is ``broken``
    and its reset is retried."""

    def __init__(self, name: str, members: list[RemoteLab], state_file: Path, **kwargs: Any) -> None:
        self.remotes = {r.where: r for r in members}
        super().__init__(name, self.remotes.__getitem__, **kwargs)
        self.state_file = state_file
        self._file_lock = threading.Lock()

    def member_names(self) -> list[str]:
        return list(self.remotes)

    def ensure(self) -> None:
        self.load()  # the hosts' instances are brought up by 'envctl cloud up'

    def _present(self, m: Member) -> bool:
        return True

    def _exists(self, m: Member) -> bool:
        return True

    # -- the state file ----------------------------------------------------------------------------
    @contextmanager
    def _records(self) -> Iterator[dict[str, Any]]:
        """The file's ``members`` map, locked; written back (atomically, 0600) when the block ends."""
        lock_path = self.state_file.with_name(self.state_file.name + ".lock")
        with self._file_lock:
            fd = os.open(lock_path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    data = json.loads(self.state_file.read_text()) if self.state_file.exists() else {}
                except (OSError, ValueError) as exc:
                    raise EnvctlError(f"cannot read the lease state {self.state_file}: {type(exc).__name__}",
                                      "fix or remove the file (every lease of the lab is then forgotten)") from None
                members = data.get("members") if isinstance(data, dict) else None
                members = members if isinstance(members, dict) else {}
                before = json.dumps(members, sort_keys=True)
                yield members
                if json.dumps(members, sort_keys=True) != before:
                    write_private(self.state_file, json.dumps({"pool": self.name, "members": members},
                                                              indent=1, sort_keys=True))
            finally:
                os.close(fd)

    def _claim(self, m: Member) -> tuple[dict[str, Any], list[str]]:
        with self._records() as members:
            rec = members.get(m.name)
            if not isinstance(rec, dict) or not rec:
                rec = members[m.name] = {"pool": self.name, "state": FREE}
            elif rec.get("pool") not in (None, self.name):
                raise UsageError(f"instance '{m.name}' belongs to pool '{rec['pool']}'", "serve that pool")
            return dict(rec), list(self.remotes[m.name].sites)

    def _store(self, m: Member, record: dict[str, Any], expect: Callable[[dict[str, Any]], bool] | None = None) -> None:
        with self._records() as members:
            current = members.get(m.name)
            if expect is not None and not expect(current if isinstance(current, dict) else {}):
                raise Conflict(f"the lease record of {m.name} changed under us")
            members[m.name] = record

    # -- health, resets, views ---------------------------------------------------------------------
    def _health_check(self, m: Member, sites: list[str]) -> Callable[[], tuple[bool, list[str]]]:
        remote = self.remotes[m.name]

        def check() -> tuple[bool, list[str]]:
            bad = remote.problems(sites)
            return not bad, bad

        return check

    def _probe(self, m: Member) -> None:
        return None  # see the class docstring: no healing from the controller

    def _replenish(self, m: Member) -> bool:
        return False

    def _auth(self, m: Member, sites: list[str]) -> dict[str, Any]:
        return {}  # LAB_AUTH_NOTE

    def _lease_of(self, m: Member, full_reset: Callable[[str], str] | None) -> Lease:
        remote = self.remotes[m.name]
        lease = super()._lease_of(m, lambda _id: remote.reset_url)  # BrowserGym resets through the host
        lease.instance, lease.host, lease.auth_note = remote.instance, remote.host, LAB_AUTH_NOTE
        lease.env["ENVCTL_INSTANCE"] = remote.instance
        lease.env["ENVCTL_HOST"] = remote.host
        return lease

    def _row(self, m: Member) -> dict[str, Any]:
        row = super()._row(m)
        remote = self.remotes[m.name]
        row.update({"instance": remote.instance, "host": remote.host, "member": m.name})
        return row

    def spares(self) -> dict[tuple[str, str], int]:
        return {}


def auth_dir(instance: str) -> Path:
    """Where a pool member's login state lives: ``<state dir>/leases/<instance>/auth`` (0700)."""
    d = lock_dir() / "leases" / validate_instance_name(instance) / "auth"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return d


__all__ = ["Pool", "LabPool", "RemoteLab", "LAB_AUTH_NOTE", "Lease", "Member", "NoFreeInstance", "NoSuchLease", "PoolLab", "auth_dir", "validate_ttl",
           "DEFAULT_TTL", "FREE", "LEASED", "RELEASING", "BROKEN", "STARTING"]
