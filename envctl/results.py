"""What :class:`envctl.lab.Lab`'s verbs return (up, status, down, snapshots, the instance list): plain records, with
``to_dict()`` for ``--json``."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from envctl.state.up import SiteResult


def _asdict(obj: Any) -> dict[str, Any]:
    return asdict(obj)


@dataclass
class UpResult:
    instance: str
    flavor: str
    sites: list[SiteResult]
    seconds: float
    login_files: list[str] = field(default_factory=list)
    login_error: str = ""
    spares: dict[str, int] = field(default_factory=dict)  # spares per site set by this 'up' (booted in the background)
    spares_short: dict[str, str] = field(default_factory=dict)  # site -> why the plan gave it fewer than it wants
    flavor_reason: str = ""  # why this flavor, when none was given for a new instance

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.sites) and not self.login_error

    def to_dict(self) -> dict[str, Any]:
        return {"instance": self.instance, "flavor": self.flavor, "ok": self.ok, "seconds": round(self.seconds, 3),
                "sites": [asdict(s) for s in self.sites], "login_files": self.login_files,
                "login_error": self.login_error, "spares": self.spares, "spares_short": self.spares_short,
                "flavor_reason": self.flavor_reason}


@dataclass
class ContainerStatus:
    name: str
    service: str
    slot: str
    role: str  # active | spare | warm | booting
    state: str
    image: str
    golden: str | None
    uptime_s: float


@dataclass
class SiteStatus:
    site: str
    url: str
    flavor: str
    healthy: bool
    probes: list[dict[str, Any]]
    containers: list[ContainerStatus]
    spares_ready: int
    spares_wanted: int = 0  # what the site keeps: the catalog's want when the capacity plan decides it
    spares_note: str = ""  # why it gets fewer than it wants (the capacity plan's reason), else ""
    oom_kills: list[str] = field(default_factory=list)  # its copies killed by their memory limit (the last day)


@dataclass
class Status:
    instance: str
    flavor: str
    public_host: str
    bind: str
    port_offset: int
    sites: list[SiteStatus]
    running: bool = True
    lease: dict[str, Any] = field(default_factory=dict)  # pool, state, holder, sites, expires (a pool member)
    backend: str = "local"
    where: str = ""  # the node it runs on (swarm), '' on this machine
    engine: str = ""  # '' when the engine answered; else which did not: what the routing table and probes say instead

    @property
    def healthy(self) -> bool:
        return all(s.healthy for s in self.sites)

    def to_dict(self) -> dict[str, Any]:
        return _asdict(self)


@dataclass
class DownResult:
    instance: str
    removed: list[str]
    kept: list[str] = field(default_factory=list)  # what the engine would not remove (reused by the next 'up')

    def to_dict(self) -> dict[str, Any]:
        return _asdict(self)


@dataclass
class SnapshotResult:
    site: str
    name: str
    images: dict[str, str]
    fingerprint: str
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)  # phases in seconds (freeze: the site's pause)
    method: str = ""  # create: freeze | stop; restore: warm | cold
    attempts: int = 1  # captures made (a write during the first makes a second)
    warm: list[str] = field(default_factory=list)  # warm copies (create) / the one swapped in (restore)
    login: str = ""  # restore: kept | stash | renewed | none
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return _asdict(self)


@dataclass
class InstanceInfo:
    instance: str
    flavor: str
    public_host: str
    bind: str
    port_offset: int
    state: str
    sites: list[str]
    webarena: dict[str, str]
    visualwebarena: dict[str, str]
    backend: str = "local"
    node: str = ""
    ports: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return _asdict(self)


__all__ = ["UpResult", "ContainerStatus", "SiteStatus", "Status", "DownResult", "SnapshotResult", "InstanceInfo"]
