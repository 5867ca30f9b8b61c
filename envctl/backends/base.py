"""The engine seam: what a backend does with an instance's copies (docs/architecture.md, "The engine seam").

A *backend* is where an instance's copies run: ``local`` (containers on one Docker engine,
:mod:`envctl.backends.local`) or ``swarm`` (services on a Docker Swarm, :mod:`envctl.backends.swarm`). It is a
small object holding four typed parts, each a handful of methods:

- :class:`Copies`: boot a copy from its images with labels and limits, list copies by label, remove them, run a
  step inside a member, its logs, stop and start, freeze and thaw;
- :class:`Images`: images and data: which exist, their labels, distribution to wherever a copy may boot,
  captures of a member's state (:class:`Capture`), an instance's named volumes;
- :class:`FrontProxy`: the instance's front proxy: boot, find, remove, start, a member's address;
- :class:`Placement`: where an instance runs: its network and node, memory, ports, node states, OOM kills.

Everything above it — reset tiers, ready copies, snapshots, logins, fingerprints, leases — is written once,
against these parts, and reaches them only through :class:`envctl.instance.Instance`.

A *copy* of a site is one member per service of the site's flavor, sharing a random ``slot`` id and named
``envctl-<instance>-<site>-<service>-<slot>``: the name the instance's front proxy and its network's DNS
address the member by (a container's name on one engine, a service's name on a swarm). Copies publish
no host ports; the front proxy routes to the active one. Everything about a copy is in its labels.
"""
from __future__ import annotations

import hashlib
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from envctl.catalog import Deployment
from envctl.errors import DockerError, NotReady
from envctl.healthchecks.wait import attempts

LABEL = "envctl"
Progress = Callable[[str, str, str], None]  # (site, phase, detail)


def noop(*_: str) -> None:
    pass


def network_name(instance: str) -> str:
    """The instance's private network (its copies and its front proxy)."""
    return f"envctl-{instance}"


def proxy_name(instance: str) -> str:
    """The instance's front proxy (a container, or a service on a swarm)."""
    return f"envctl-{instance}-proxy"


def member_name(instance: str, site: str, service: str, slot: str) -> str:
    """What a copy's member of ``service`` is called (and addressed by on the instance's network)."""
    return f"envctl-{instance}-{site}-{service}-{slot}".replace("_", "-")


@dataclass(frozen=True)
class InstanceSettings:
    """An instance's settings, kept in the labels of its proxy and network (never in a side file)."""

    name: str = "default"
    flavor: str = "full"
    public_host: str = "127.0.0.1"
    bind: str = "127.0.0.1"
    port_offset: int = 0
    scheme: str = "http"
    data_dir: str = ""
    backend: str = "local"  # local | swarm
    node: str = ""  # swarm: the node the instance's copies run on ('' until placed)

    @property
    def deployment(self) -> Deployment:
        return Deployment(self.public_host, self.scheme, self.port_offset, self.data_dir, self.name)

    def labels(self) -> dict[str, str]:
        out = {"envctl.instance": self.name, "envctl.flavor": self.flavor, "envctl.public_host": self.public_host,
               "envctl.bind": self.bind, "envctl.port_offset": str(self.port_offset), "envctl.scheme": self.scheme,
               "envctl.backend": self.backend}
        if self.node:
            out["envctl.node"] = self.node
        return out

    @classmethod
    def from_labels(cls, labels: dict[str, str], data_dir: str = "") -> "InstanceSettings":
        return cls(labels["envctl.instance"], labels.get("envctl.flavor", "full"),
                   labels.get("envctl.public_host", "127.0.0.1"), labels.get("envctl.bind", "127.0.0.1"),
                   int(labels.get("envctl.port_offset", "0")), labels.get("envctl.scheme", "http"), data_dir,
                   labels.get("envctl.backend", "local"), labels.get("envctl.node", ""))


@dataclass(frozen=True)
class Member:
    """One member of a copy (a container; a service's task on a swarm), as listed: read together, once."""

    service: str
    name: str  # the name the proxy and the network's DNS address it by
    id: str  # the engine's id of its container
    labels: dict[str, str]
    status: str  # running | paused | exited | created | dead | '' (gone)
    image: str = ""  # the image id it runs
    node: str = ""  # swarm: the node it runs on
    address: str = ""  # its address on the instance's network, when the listing knows it
    exit_code: int = 0
    oom_killed: bool = False

    @property
    def running(self) -> bool:
        return self.status in ("running", "paused")

    def label(self, key: str, default: str = "") -> str:
        return self.labels.get(f"{LABEL}.{key}", default)


@dataclass
class Copy:
    """A copy of a site: its members by service, sharing ``slot``."""

    site: str
    slot: str
    members: dict[str, Member] = field(default_factory=dict)  # service -> member

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.members.values()]

    def running(self) -> bool:
        return bool(self.members) and all(m.running for m in self.members.values())

    @property
    def frozen(self) -> list[str]:
        """Its members that are frozen (``docker pause``): running to the engine, answering nothing."""
        return [m.name for m in self.members.values() if m.status == "paused"]

    @property
    def golden(self) -> str:
        return next((m.label("golden") for m in self.members.values() if m.label("golden")), "")

    @property
    def created(self) -> float:
        return min((float(m.label("created", "0")) for m in self.members.values()), default=0.0)

    @property
    def roles(self) -> set[str]:
        return {m.label("role") for m in self.members.values()}


@dataclass
class ServiceSpec:
    """One member to start: everything the catalog says about it, rendered for this copy."""

    service: str
    name: str
    image: str
    labels: dict[str, str]
    command: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    volumes: list[tuple[str, str, str]] = field(default_factory=list)  # (source, target, ro|rw)
    links: dict[str, str] = field(default_factory=dict)  # alias -> name of a member started before it
    memory: str | None = None
    tmpfs: list[str] = field(default_factory=list)
    user: str | None = None
    stop_timeout: int | None = None
    restart: str = "no"
    ready: tuple[str, ...] = ()  # a command that succeeds once the member accepts the configure steps


@dataclass(frozen=True)
class DataItem:
    """One data file a copy mounts from the data directory (an artifact of its site's flavor: a ZIM, a map archive,
    an SQL dump), as wherever the copy boots must hold it before it starts (docs/architecture.md, "Data travels
    with placement"). ``size`` and ``sha256`` are the pins ``envctl images get`` verifies against (None: not
    pinned yet, the first download pins it); ``extract`` is the catalog's, as JSON."""

    name: str
    site: str
    dest: str  # absolute path under the data directory (the service's bind-mount source, the same on every node)
    data_root: str
    size: int | None = None
    estimate: int | None = None  # the catalog's size estimate, for the disk check before a first download
    sha256: str | None = None
    sources: tuple[tuple[str, str, str], ...] = ()  # (kind, mirror, url), in order
    extract: dict[str, object] | None = None
    volumes: tuple[str, ...] = ()  # named volumes of the instance its extract fills

    @property
    def bytes(self) -> int:
        """What holding it takes on a disk (the exact size when pinned, else the estimate; 0 when unknown)."""
        return self.size or self.estimate or 0

    @property
    def key(self) -> str:
        """How a node says it holds this file (a node label ``envctl.data.<key>``): its name and where it is (one
        node may hold the same file under two data directories, one each user's)."""
        where = hashlib.sha256(self.dest.encode()).hexdigest()[:8]
        return "".join(c if c.isalnum() or c in "-_." else "-" for c in self.name) + "." + where


@dataclass
class CopySpec:
    """A copy to boot: its members in dependency order, what labels its named volumes get, and the data it mounts."""

    instance: str
    site: str
    slot: str
    services: list[ServiceSpec]
    timeout: float  # how long each member may take to accept commands
    volume_labels: dict[str, str] = field(default_factory=dict)
    data: tuple[DataItem, ...] = ()


@dataclass(frozen=True)
class ProxySpec:
    """The instance's front proxy: an image publishing ``ports`` on ``bind`` (a port per site port)."""

    instance: str
    image: str
    bind: str
    ports: list[int]
    labels: dict[str, str]
    env: dict[str, str]
    memory: str = "256m"


@dataclass(frozen=True)
class ProxyInfo:
    """A front proxy as the backend finds it: how to reach its control service, and its labels."""

    name: str
    labels: dict[str, str]
    running: bool
    host: str  # where its published ports answer (127.0.0.1 on this machine; a node's address on a swarm)

    @property
    def token(self) -> str:
        return self.labels.get("envctl.control", "")

    @property
    def ports(self) -> list[int]:
        return [int(p) for p in self.labels.get("envctl.ports", "").split(",") if p.isdigit()]


@dataclass(frozen=True)
class ImageInfo:
    """An image as a backend finds it (on its engine, or in a swarm's registry): read together, once."""

    id: str
    tags: list[str]
    labels: dict[str, str]
    size: int


@dataclass
class Capture:
    """One member's state as of one instant, committed but not yet an image: :meth:`Images.finish` makes it one
    (tagged ``tag``), :meth:`Images.discard` drops it. Each backend's own kind carries what it needs."""

    tag: str
    member: str


@dataclass(frozen=True)
class MemberMemory:
    """A container or service the memory plan counts: its labels, limit (bytes, 0: none) and measured use."""

    labels: dict[str, str]
    limit: int
    measured: int | None
    running: bool


class Copies(ABC):
    """A backend's copies: booted from images with labels and limits, listed by label, removed; steps inside them."""

    @abstractmethod
    def boot(self, spec: CopySpec, settings: InstanceSettings, *, progress: Progress = noop,
             cancel: threading.Event | None = None, timings: dict[str, float] | None = None) -> Copy:
        """Start every member of ``spec`` (in order) and wait until each accepts commands (its ``ready``);
        on failure remove what was made: nothing half-made is left."""

    @abstractmethod
    def of(self, instance: str, site: str | None = None) -> dict[tuple[str, str], Copy]:
        """The copies of ``instance`` (of ``site``), by (site, slot), listed by label (the proxy left out)."""

    @abstractmethod
    def member(self, name: str) -> Member | None:
        """One member as it is now (None: gone)."""

    @abstractmethod
    def remove(self, names: list[str]) -> None:
        """Remove members (by name) and their anonymous volumes; one already gone is no failure."""

    @abstractmethod
    def exec(self, member: Member, argv: list[str]) -> tuple[int, str]:
        """Run argv inside ``member`` (wherever it runs); (exit code, output)."""

    @abstractmethod
    def logs(self, member: Member, tail: int = 30) -> str: ...

    @abstractmethod
    def follow(self, member: Member) -> Iterator[str]: ...

    @abstractmethod
    def stop(self, member: Member, timeout: int | None = None) -> None: ...

    @abstractmethod
    def start(self, copy: Copy, images: dict[str, str] | None = None) -> Copy:
        """Start a stopped copy again after a clean-stop commit (``images``: what the commit made of each member, the
        same state: a backend that cannot start a stopped member again boots it from there); the copy as it runs."""

    @abstractmethod
    def freeze(self, members: list[Member]) -> None: ...

    @abstractmethod
    def thaw(self, members: list[Member]) -> None:
        """Thaw ``members``; one that is not frozen is no failure (a freeze interrupted half-way)."""

    def died(self, copy: Copy) -> str:
        """Why ``copy`` cannot become healthy any more ('' while it may: the default, for a backend that restarts)."""
        return ""


def await_accepting(copies: Copies, spec: CopySpec, copy: Copy, progress: Progress,
                    cancel: threading.Event | None = None) -> None:
    """Wait until every member of a booted ``copy`` with ready commands runs them successfully (its catalog
    ``ready``), inside the member wherever it runs; NotReady after ``spec.timeout``, DockerError when it died."""
    for svc in spec.services:
        if not svc.ready:
            continue
        progress(spec.site, "boot", f"waiting for {svc.service} to accept commands")
        member, ok, out = copy.members[svc.service], False, ""
        for _ in attempts(spec.timeout, cancel=cancel):
            why = copies.died(copy)
            if why:
                raise DockerError(f"{spec.site}: {why}", f"see 'envctl logs {spec.site}'")
            rc, out = copies.exec(member, list(svc.ready))
            ok = rc == 0
            if ok:
                break
        if not ok:
            raise NotReady(f"{spec.site}: {svc.service} not ready after {spec.timeout:.0f}s ({out[-200:]})",
                           f"see 'envctl logs {spec.site}'")


class Images(ABC):
    """A backend's images and data: what exists wherever a copy may boot, captures of a member's state, volumes."""

    @abstractmethod
    def exists(self, ref: str) -> bool: ...

    @abstractmethod
    def info(self, ref: str) -> ImageInfo:
        """An image's id, tags, labels and size (DockerError naming it when it does not exist)."""

    @abstractmethod
    def labelled(self, label_key: str) -> list[ImageInfo]:
        """Every image carrying ``label_key`` (an image removed meanwhile is left out)."""

    @abstractmethod
    def remove(self, ref: str) -> None: ...

    def distribute(self, refs: list[str], progress: Progress = noop) -> None:
        """Make images reachable wherever a copy may boot (a no-op on one engine)."""

    @abstractmethod
    def capture(self, member: Member, tag: str, labels: dict[str, str], workdir: Path) -> Capture:
        """The part of a commit that must see one instant of ``member``: its layer, and its declared volumes'
        contents copied into ``workdir`` (the caller's); never pauses it (the caller decides)."""

    @abstractmethod
    def finish(self, capture: Capture) -> str:
        """Make a capture the image tagged ``capture.tag`` (reachable wherever a copy may boot); its id."""

    @abstractmethod
    def discard(self, capture: Capture) -> None:
        """Drop a capture (finished or not) whose snapshot will not be whole: nothing of it stays."""

    moves_data: bool = False  # whether place() carries data to where copies boot (a swarm), not only checks it

    @abstractmethod
    def place(self, settings: InstanceSettings, items: Sequence[DataItem], progress: Progress = noop, *,
              helper: str = "") -> dict[str, tuple[str, int]]:
        """Make ``items`` be where the instance's copies boot before one starts: fetched there and verified by their
        pins (a swarm node, with the node-data ``helper`` image), or checked where they are (this machine:
        ``images get`` put them there); one line naming what is missing and the fix when that cannot be.
        {name: (sha256, size)} of what was fetched (the caller pins what was not pinned yet)."""

    @abstractmethod
    def held(self, items: Sequence[DataItem]) -> dict[str, dict[str, bool]]:
        """Where each item is held: {place (a node's name, or '' for this machine): {item name: held}}."""

    @abstractmethod
    def volumes(self, instance: str, site: str | None = None) -> list[str]:
        """The named volumes of ``instance`` (of ``site``), wherever they are."""

    @abstractmethod
    def remove_volumes(self, names: list[str]) -> dict[str, str]:
        """Remove volumes; {name: why} for those the engine kept."""


def capture_all(images: Images, items: Sequence[tuple[Member, str, dict[str, str], Path]]) -> list[Capture]:
    """Capture each (member, tag, labels, workdir) of one snapshot, or none: when one fails (a full disk under its
    volumes' copy) or an interrupt lands, the others' captures are discarded."""
    caps: list[Capture] = []
    try:
        for member, tag, labels, workdir in items:
            caps.append(images.capture(member, tag, labels, workdir))
    except BaseException:
        for cap in caps:
            images.discard(cap)
        raise
    return caps


def finish_all(images: Images, captures: list[Capture]) -> None:
    """Finish every capture of one snapshot, or none: when one fails (or an interrupt lands), the others' images
    are removed too, so a snapshot is whole or absent."""
    try:
        for cap in captures:
            images.finish(cap)
    except BaseException:
        for cap in captures:
            images.discard(cap)
        raise


class FrontProxy(ABC):
    """A backend's front proxies: one per instance, owning its public ports."""

    @abstractmethod
    def boot(self, spec: ProxySpec, settings: InstanceSettings) -> ProxyInfo: ...

    @abstractmethod
    def find(self, instance: str) -> ProxyInfo | None: ...

    @abstractmethod
    def all(self) -> list[tuple[dict[str, str], str]]:
        """(labels, state) of every instance's front proxy on this backend."""

    @abstractmethod
    def remove(self, instance: str) -> None: ...

    def start(self, instance: str) -> None:
        """Start the instance's stopped front proxy as it is (its table is inside it); a backend whose proxy restarts
        by itself (a swarm service) does nothing."""

    @abstractmethod
    def address(self, instance: str, name: str) -> str | None:
        """``name``'s address on the instance's network (what the proxy's runtime servers point at)."""

    @abstractmethod
    def instance_labels(self, instance: str) -> dict[str, str] | None:
        """The labels an instance's settings are kept in (its proxy's, else its network's); None: no such instance."""


class Placement(ABC):
    """Where a backend's instances run: their networks and nodes, memory, ports, and what happens to the nodes."""

    @abstractmethod
    def prepare(self, settings: InstanceSettings, need: int = 0,
                data: Sequence[DataItem] = ()) -> tuple[InstanceSettings, bool]:
        """Make the instance's network (and, on a swarm, choose its node: one with ``need`` bytes of memory free,
        preferring one that holds ``data`` already and refusing one whose disk cannot hold what it lacks);
        (settings as placed, whether the network existed before)."""

    @abstractmethod
    def remove_network(self, instance: str) -> bool:
        """Remove the instance's network; False when the engine keeps it (a stale endpoint)."""

    def problem(self, settings: InstanceSettings) -> str:
        """Why the place the instance runs cannot run it now ('' when it can): a node down, drained, gone."""
        return ""

    def node_states(self) -> dict[str, str]:
        """Node -> its state (ready, down, drain, pause) for a backend of many machines; {} for one."""
        return {}

    def where(self, settings: InstanceSettings) -> tuple[str, str]:
        """(the node's name, where the instance runs for humans); ('', '') on this machine."""
        return "", ""

    def host_memory(self, settings: InstanceSettings | None = None) -> int | None:
        """Bytes of memory where the instance's copies run (None: this machine's)."""
        return None

    @abstractmethod
    def memory(self) -> tuple[list[MemberMemory], int, str]:
        """Every envctl member's labels, limit and measured use; bytes used by everything; how measured."""

    @abstractmethod
    def port_problem(self, settings: InstanceSettings, port: int, owned: set[int]) -> str:
        """'' when ``port`` can be published for the instance, else who holds it."""

    def oom_kills(self, settings: InstanceSettings, since: float, until: float) -> list[tuple[str, str, float]]:
        """Members of the instance the kernel killed for their memory limit between ``since`` and ``until`` (Unix
        times): (site, member name, when). [] where the backend cannot tell."""
        return []

    @abstractmethod
    def info(self) -> dict[str, object]:
        """The engine's version, storage driver, data root, CPUs (EngineUnavailable when it cannot be asked)."""

    @abstractmethod
    def answers(self, timeout: float) -> str:
        """'' when the engine (a swarm's manager) answers within ``timeout`` seconds, else which one did not and how:
        what a command that must answer in seconds asks before it waits on the engine."""


@dataclass(frozen=True)
class Backend:
    """Where an instance's copies run: a kind and its four parts."""

    kind: str
    copies: Copies
    images: Images
    proxy: FrontProxy
    placement: Placement
