"""A lease pool's members as the server tracks them: their states, their lease record, what the pool needs of
the :class:`envctl.lab.Lab` behind each (:class:`PoolLab`) and of the store that keeps them (:class:`MemberStore`)."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from envctl.catalog import Catalog
from envctl.errors import EnvctlError

STARTING, FREE, LEASED, RELEASING, BROKEN = "starting", "free", "leased", "releasing", "broken"
FULL_RESET_WAIT = 600.0  # BrowserGym's own limit for a full reset
ENDED_KEPT = 1000  # ended lease ids remembered, so their holders get 409 and why, not 404
RECORD_KEYS = ("id", "holder", "sites", "acquired", "expires", "ttl", "max_seconds")


class Conflict(EnvctlError):
    """Another process changed an instance's lease record first."""


class PoolLab(Protocol):
    """What the pool uses of a member (an :class:`envctl.lab.Lab`)."""

    instance: str
    catalog: Catalog
    auth_dir: Path

    def harness(self, sites: list[str] | None = ..., full_reset: str | None = ...) -> dict[str, str]: ...

    def login(self, sites: list[str] | None = ..., *, max_age: float | None = ...) -> dict[str, Path]: ...

    def reset(self, sites: list[str] | None = ..., *, tier: str | None = ..., refill: bool = ...) -> list[Any]: ...

    def probe_site(self, site: str) -> tuple[bool, str]: ...

    def activity(self, sites: list[str]) -> Any: ...

    def problems(self, sites: list[str]) -> list[str]: ...

    def not_pristine(self, sites: list[str]) -> dict[str, str]: ...

    def keeps_spares(self) -> bool: ...

    def spares_ready(self) -> dict[str, int]: ...

    def present(self) -> bool: ...

    def node(self) -> str: ...

    def lost(self) -> str: ...

    def oom_kills(self, since: float, until: float) -> list[tuple[str, str, float]]: ...

    def down(self) -> Any: ...

    @staticmethod
    def nodes() -> dict[str, str]: ...


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
    node: str = ""  # the node it runs on (a swarm), '' on this machine
    failures: int = 0  # times in a row it failed to come up
    # the proxy's reading (requests per port, routes) at which every site was last known pristine: a site nothing
    # but envctl reached since, on the same copy, is not verified again (None: verify every site)
    seen: Any = None
    oom_since: float = field(default_factory=time.time)  # OOM kills are counted from here on

    def record(self, pool: str) -> dict[str, Any]:
        out: dict[str, Any] = {"pool": pool, "state": self.state if self.state != STARTING else FREE}
        if self.lease:
            out.update({k: self.lease[k] for k in RECORD_KEYS if k in self.lease})
        return out


class MemberStore(Protocol):
    """Where a pool's members are: their names, how they come up, and their lease records."""

    def names(self, pool: str) -> list[str]: ...

    def make(self, name: str) -> PoolLab: ...

    def target(self, m: Member) -> list[str]:
        """The sites the member should run."""

    def bring_up(self, pool: Any, members: list[Member]) -> None:
        """(Re)start ``members`` (side by side); each ends adopted by the pool, or broken with its error."""

    def claim(self, m: Member, pool: str) -> tuple[dict[str, Any], list[str]]:
        """The member's lease record (made ``{pool, free}`` when it has none) and the sites it runs."""

    def store(self, m: Member, record: dict[str, Any], expect: Callable[[dict[str, Any]], bool] | None) -> None:
        """Write the record; with ``expect``, only if the stored one passes it (else :class:`Conflict`)."""




__all__ = ["STARTING", "FREE", "LEASED", "RELEASING", "BROKEN", "FULL_RESET_WAIT", "ENDED_KEPT", "RECORD_KEYS",
           "Conflict", "PoolLab", "Member", "MemberStore"]
