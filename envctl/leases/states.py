"""A lease pool's members as the server tracks them: their states, their leases, what the pool needs of the
:class:`envctl.lab.Lab` behind each (:class:`PoolLab`) and of the store that keeps them (:class:`MemberStore`).

A member is ``starting``, ``free``, ``checking`` (an acquire or the background re-verification is checking it; kept
as ``free`` in its record), ``leased`` (one write lease), ``shared`` (read leases, up to ``serve --readers``),
``releasing``, ``quarantined`` (it failed the background re-verification: never handed out, being rebuilt) or
``broken``. Its record (the lease record in its routing table) is what a restarted server rebuilds it from."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from envctl.catalog import Catalog
from envctl.errors import EnvctlError

STARTING, FREE, CHECKING, LEASED, SHARED = "starting", "free", "checking", "leased", "shared"
RELEASING, QUARANTINED, BROKEN = "releasing", "quarantined", "broken"
STATES = (STARTING, FREE, CHECKING, LEASED, SHARED, RELEASING, QUARANTINED, BROKEN)
HELD = (LEASED, SHARED)  # a member with leases
READ, WRITE = "read", "write"
FULL_RESET_WAIT = 600.0  # BrowserGym's own limit for a full reset
ENDED_KEPT = 1000  # ended lease ids remembered, so their holders get 409 and why, not 404
LEASE_KEYS = ("holder", "sites", "acquired", "expires", "ttl", "max_seconds")  # one lease in a record
RECORD_KEYS = ("id", *LEASE_KEYS)  # an exclusive (write) lease's record, as before read leases


class Conflict(EnvctlError):
    """Another process changed an instance's lease record first."""


class PoolLab(Protocol):
    """What the pool uses of a member (an :class:`envctl.lab.Lab`)."""

    instance: str
    catalog: Catalog
    auth_dir: Path

    def harness(self, sites: list[str] | None = ..., full_reset: str | None = ...) -> dict[str, str]: ...

    def login(self, sites: list[str] | None = ..., *, max_age: float | None = ...) -> dict[str, Path]: ...

    def reset(self, sites: list[str] | None = ..., *, tier: str | None = ..., refill: bool = ...,
              cheapest: bool = ...) -> list[Any]: ...

    def probe_site(self, site: str) -> tuple[bool, str]: ...

    def activity(self, sites: list[str]) -> Any: ...

    def signals(self, sites: list[str]) -> dict[str, str | None]: ...

    def problems(self, sites: list[str]) -> list[str]: ...

    def not_pristine(self, sites: list[str]) -> dict[str, str]: ...

    def keeps_spares(self) -> bool: ...

    def spares_ready(self) -> dict[str, int]: ...

    def present(self) -> bool: ...

    def node(self) -> str: ...

    def lost(self) -> str: ...

    def oom_kills(self, since: float, until: float) -> list[tuple[str, str, float]]: ...

    def down(self) -> Any: ...

    def write_lease(self, update: Callable[[dict[str, Any]], dict[str, Any] | None]) -> dict[str, Any]: ...

    @staticmethod
    def nodes() -> dict[str, str]: ...


@dataclass
class Attempt:
    """One acquire's work on a candidate member (its checks, then the record), run in a thread the acquire waits for
    no longer than its client does. ``abandoned`` (set when the client was answered first) keeps it from leaving a
    record behind: it is checked before the record is written, and a record written meanwhile is taken back."""

    access: str
    opening: bool = True  # the member was free (checked in full); False: a reader joins a shared member
    abandoned: bool = False


@dataclass
class PoolMember:
    """One instance of the pool, as the server tracks it (its record is mirrored in the store)."""

    name: str
    lab: Any  # PoolLab
    state: str = STARTING
    leases: dict[str, dict[str, Any]] = field(default_factory=dict)  # lease id -> LEASE_KEYS (+ notices, tainted)
    access: str = WRITE  # of its leases while leased or shared
    reset_sites: list[str] = field(default_factory=list)  # the leased sites a release in progress resets if reached
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
    node: str = ""  # the node it runs on (a swarm), '' on this machine
    failures: int = 0  # times in a row it failed to come up
    # The proxy's reading (requests per port, routes) when every site was last known pristine: a cheap first look
    # (which leased sites a release resets), never alone the proof that a site is pristine.
    seen: Any = None
    # site -> (the copy routed, its change signal) when the site was last known pristine: a site whose signal is the
    # same now did not change, whatever path a change would have taken (issue 38). No entry: fingerprint it.
    known: dict[str, tuple[str, str]] = field(default_factory=dict)
    checked_at: float = 0.0  # monotonic: when every site was last known pristine (the background re-verification)
    attempt: Attempt | None = None  # the acquire (or re-verification) checking it (CHECKING)
    joining: int = 0  # read leases being checked in to it (shared)
    closed: str = ""  # shared: why it takes no more readers
    taint: str = ""  # shared: the change a reading found ('reddit: ...'), '' while none
    window: set[str] = field(default_factory=set)  # shared: read leases held since the last reading that found none
    read_lock: threading.Lock = field(default_factory=threading.Lock)  # shared: one reading of its signals at a time
    quarantine: dict[str, Any] = field(default_factory=dict)  # the last quarantine: at, why, sites
    oom_since: float = field(default_factory=time.time)  # OOM kills are counted from here on
    lock: threading.RLock = field(default_factory=threading.RLock)  # its record written and its state moved as one

    def holders(self) -> str:
        return ", ".join(sorted({str(x.get("holder") or "?")[:40] for x in self.leases.values()}))

    def record(self, pool: str) -> dict[str, Any]:
        """What its routing table keeps (a restarted server rebuilds the member from it)."""
        state = FREE if self.state in (STARTING, CHECKING) else self.state
        out: dict[str, Any] = {"pool": pool, "state": state}
        if state == LEASED and self.leases:
            [(lid, lease)] = list(self.leases.items())[:1]
            out.update({"id": lid, "access": WRITE, **{k: lease[k] for k in LEASE_KEYS if k in lease}})
        elif state == SHARED:
            out.update(shared_summary({lid: {k: v for k, v in x.items() if k in LEASE_KEYS}
                                       for lid, x in self.leases.items()}))
        elif state in (RELEASING, BROKEN):
            out["sites"] = list(self.reset_sites)
        elif state == QUARANTINED:
            out.update({"sites": list(self.quarantine.get("sites") or []), "why": str(self.quarantine.get("why", ""))})
        return out


def shared_summary(readers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A shared member's record: its read leases, and what ``envctl status`` shows of them (holder, sites, expiry)."""
    names = sorted({str(x.get("holder") or "?")[:40] for x in readers.values()})
    return {"access": READ, "readers": readers,
            "holder": f"{len(readers)} reader{'s' if len(readers) != 1 else ''}: {', '.join(names)}"[:200],
            "sites": sorted({s for x in readers.values() for s in x.get("sites") or []}),
            "expires": max((float(x.get("expires", 0)) for x in readers.values()), default=0.0)}


def leases_of(rec: dict[str, Any]) -> tuple[str, dict[str, dict[str, Any]]]:
    """(access, lease id -> lease) of a stored record: a write lease (its fields at the top, as records written before
    read leases have them) or the read leases of a shared one."""
    if rec.get("state") == SHARED:
        readers = rec.get("readers")
        return READ, {str(k): dict(v) for k, v in (readers or {}).items() if isinstance(v, dict)} \
            if isinstance(readers, dict) else {}
    if rec.get("state") == LEASED and rec.get("id"):
        return WRITE, {str(rec["id"]): {k: rec[k] for k in LEASE_KEYS if k in rec}}
    return WRITE, {}


class MemberStore(Protocol):
    """Where a pool's members are: their names, how they come up, and their lease records."""

    def names(self, pool: str) -> list[str]: ...

    def make(self, name: str) -> PoolLab: ...

    def target(self, m: PoolMember) -> list[str]:
        """The sites the member should run."""

    def bring_up(self, pool: Any, members: list[PoolMember]) -> None:
        """(Re)start ``members`` (side by side); each ends adopted by the pool, or broken with its error."""

    def claim(self, m: PoolMember, pool: str) -> tuple[dict[str, Any], list[str]]:
        """The member's lease record (made ``{pool, free}`` when it has none) and the sites it runs."""

    def store(self, m: PoolMember, record: dict[str, Any], expect: Callable[[dict[str, Any]], bool] | None) -> None:
        """Write the record; with ``expect``, only if the stored one passes it (else :class:`Conflict`)."""

    def update(self, m: PoolMember, change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        """Read-modify-write the record: ``change`` gets the stored one and returns the new one, or raises
        :class:`Conflict` to leave it as it is."""


__all__ = ["STARTING", "FREE", "CHECKING", "LEASED", "SHARED", "RELEASING", "QUARANTINED", "BROKEN", "STATES", "HELD",
           "READ", "WRITE", "FULL_RESET_WAIT", "ENDED_KEPT", "LEASE_KEYS", "RECORD_KEYS", "Conflict", "PoolLab",
           "Attempt", "PoolMember", "MemberStore", "shared_summary", "leases_of"]
