"""One envctl instance: its settings, its routing table, its copies — the one user of the backend and the one
writer of the table (docs/architecture.md, "The engine seam", "The routing table").

Everything above (reset tiers, ready copies, snapshots, logins, leases) asks an :class:`Instance`; nothing
else reaches the backend or writes the table. Settings are read once from the backend's labels when the
instance is found. An instance is composed of named parts:

- ``inst.routing`` (:class:`~envctl.instance.routing.Routing`): the table, read once per operation
  (``inst.routing.table()``) and changed only through its methods, each a read-modify-write applied atomically;
- ``inst.copies`` (:class:`~envctl.instance.copies.Copies`): boot, steps inside copies, stops, commits, captures;
- ``inst.checks`` (:class:`~envctl.instance.checks.Checks`): probes, fingerprints, change signals;
- ``inst.front`` (:class:`~envctl.instance.front.Front`): the front proxy and its control service;
- ``inst.images``: the backend's images-and-data part, as it is (nothing to add for one instance)::

    inst = Instance.get(catalog, "default"); table = inst.routing.table()
    ok, results = inst.checks.probe_copy(inst.routing.active_copy("reddit", table))
"""
from __future__ import annotations

import dataclasses
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from envctl.backends import default_kind, get as get_backend
from envctl.backends.base import Backend, Images, InstanceSettings
from envctl.catalog import Catalog
from envctl.errors import EnvctlError, NoSuchInstance
from envctl.instance.checks import VERIFY_SLOTS, Checks
from envctl.instance.copies import InstanceCopies
from envctl.instance.core import Core, Progress, noop
from envctl.instance.front import Front
from envctl.instance.routing import Routing
from envctl.locks import locked, state_dir
from envctl.paths import data_dir
from envctl.plan import EngineMemory, Held, copy_memory
from envctl.routing import proxy
from envctl.routing.table import GOLDEN, RoutingTable

ROLES = ("active", "spare", "warm", "proxy")  # envctl.role of a member: routed, ready (golden / snapshot), the proxy


def ready_role(source: str) -> str:
    """The envctl.role a ready copy of ``source`` carries."""
    return "spare" if source == GOLDEN else "warm"


def _with_data_dir(settings: InstanceSettings) -> InstanceSettings:
    return dataclasses.replace(settings, data_dir=str(data_dir(settings.flavor)))


def find_settings(name: str, backend: Backend | None = None, *, engine: bool = True) -> InstanceSettings | None:
    """An instance's settings: through its proxy's control service when this machine reached it lately (the table
    keeps the settings its labels had when the proxy was made: no engine call), else from its labels (its proxy's,
    or its network's if the proxy is gone)."""
    backend = backend or get_backend()
    try:
        ctl = proxy.known(name)
        table = proxy.load(ctl) if ctl is not None else None
    except EnvctlError:
        table = None
    got = table.settings if table is not None else {}
    if got.get("envctl.instance") == name and got.get("envctl.backend", "local") == backend.kind:
        return _with_data_dir(InstanceSettings.from_labels(got))
    if not engine:
        return None
    labels = backend.proxy.instance_labels(name)
    return None if labels is None else _with_data_dir(InstanceSettings.from_labels(labels))


class Instance(Core):
    """One instance: what runs, what is routed, and how to check it (its parts: routing, copies, checks, front)."""

    def __init__(self, catalog: Catalog, settings: InstanceSettings, *, cancel: threading.Event | None = None,
                 backend: Backend | None = None) -> None:
        super().__init__(catalog, settings, backend or get_backend(settings.backend), cancel)
        self.front = Front(self)
        self.routing = Routing(self, self.front)
        self.checks = Checks(self, self.front)
        self.copies = InstanceCopies(self, self.routing, self.checks, self.front)
        self.images: Images = self.backend.images

    @classmethod
    def find(cls, catalog: Catalog, name: str, *, cancel: threading.Event | None = None,
             backend: Backend | None = None) -> "Instance | None":
        backend = backend or get_backend()
        settings = find_settings(name, backend)
        return cls(catalog, settings, cancel=cancel, backend=backend) if settings else None

    @classmethod
    def get(cls, catalog: Catalog, name: str, *, cancel: threading.Event | None = None) -> "Instance":
        inst = cls.find(catalog, name, cancel=cancel)
        if inst is None:
            raise NoSuchInstance(name)
        return inst

    @classmethod
    def create(cls, catalog: Catalog, settings: InstanceSettings, *, cancel: threading.Event | None = None,
               sites: list[str] | None = None) -> tuple["Instance", bool]:
        """An instance about to be brought up: its network made (and, on a swarm, its node chosen, with the memory
        ``sites``' copies reserve); (it, whether the network existed before)."""
        probe = cls(catalog, settings, cancel=cancel, backend=get_backend(settings.backend))
        need = sum(copy_memory(catalog, s, settings.flavor) for s in sites or [])
        placed, existed = probe.backend.placement.prepare(settings, need, probe.copies.data_of(sites or []))
        return cls(catalog, placed, cancel=cancel, backend=probe.backend), existed

    @staticmethod
    def listed(backend: Backend | None = None) -> list[tuple[InstanceSettings, str, list[int]]]:
        """(settings, state, published ports) of every instance whose front proxy the backend has."""
        out = []
        for labels, state in (backend or get_backend()).proxy.all():
            if labels.get("envctl.instance"):
                ports = [int(p) for p in labels.get("envctl.ports", "").split(",") if p.isdigit()]
                out.append((_with_data_dir(InstanceSettings.from_labels(labels)), state, ports))
        return out

    @staticmethod
    def backend_kind() -> str:
        """The backend a new instance runs on (``$ENVCTL_BACKEND``, default local)."""
        return default_kind()

    @staticmethod
    def check_engine() -> dict[str, object]:
        """The backend's engine facts (version, storage driver, data root, CPUs); EngineUnavailable with the fix
        when it cannot be used now."""
        return get_backend().placement.info()

    @staticmethod
    def node_states() -> dict[str, str]:
        """The backend's nodes and their states ({} on one machine)."""
        return get_backend().placement.node_states()

    # -- where it runs ------------------------------------------------------------------------------------
    def where(self) -> tuple[str, str]:
        """(the node's name, where the instance runs for humans); ('', '') on this machine."""
        return self.backend.placement.where(self.settings)

    def problem(self) -> str:
        """Why the instance cannot serve now ('' when it can): its node down or drained (a swarm), or its front proxy
        gone. A site copy that stopped or was removed is not such a problem: a heal replaces it, URLs unchanged."""
        why = self.backend.placement.problem(self.settings)
        if why:
            return why
        return "" if self.routing.exists() else "front proxy gone"

    def engine_problem(self, timeout: float = 3.0) -> str:
        """'' when the engine (a swarm's manager) answers within ``timeout`` seconds, else which did not."""
        return self.backend.placement.answers(timeout)

    def oom_kills(self, since: float, until: float | None = None) -> list[tuple[str, str, float]]:
        """Copies' members the kernel killed for their memory limit since ``since`` (Unix time): (site, member, when).

        The engine keeps only its last 256 events (a busy engine, or the change signals' ``docker exec``, pushes an
        OOM event out within seconds), so every kill read from it is also kept in the instance's journal
        (``<state dir>/oom-<instance>.jsonl``, dropped with the instance's network) and read back from there."""
        until = time.time() if until is None else until
        seen = self.backend.placement.oom_kills(self.settings, since, until)
        path = state_dir() / f"oom-{self.name}.jsonl"
        known: set[tuple[str, str, float]] = set()
        try:
            for line in path.read_text().splitlines():
                try:
                    site, member, when = json.loads(line)
                    known.add((str(site), str(member), round(float(when), 3)))
                except (ValueError, TypeError):
                    continue
        except OSError:
            pass
        new = [k for k in seen if (k[0], k[1], round(k[2], 3)) not in known]
        if new:
            with open(path, "a") as out:
                out.write("".join(json.dumps([s, m, round(w, 3)]) + "\n" for s, m, w in new))
        kills = known | {(s, m, round(w, 3)) for s, m, w in new}
        return sorted((k for k in kills if since <= k[2] <= until), key=lambda k: k[2])

    def remove_network(self) -> bool:
        """Remove the instance's network (a refused first 'up' leaves nothing); False when the engine keeps it."""
        (state_dir() / f"oom-{self.name}.jsonl").unlink(missing_ok=True)
        return self.backend.placement.remove_network(self.name)

    def volumes(self, site: str | None = None) -> list[str]:
        """The instance's named volumes (of ``site``)."""
        return self.images.volumes(self.name, site)

    # -- locks ------------------------------------------------------------------------------------------
    def ready_lock(self, site: str) -> str:
        """The lock a process holds while it boots or cleans up ``site``'s ready copies (or a copy it is about
        to route: a recreate, a cold snapshot restore): cleanups leave ready-role copies alone while it is held."""
        return f"ready.{self.name}.{site}"

    def reset_lock(self, site: str) -> str:
        """The lock a reset, a snapshot or a restore of ``site`` holds: one at a time per site."""
        return f"reset.{self.name}.{site}"

    def boot_lock(self, site: str) -> str:
        """The lock 'up' holds while it boots an active copy of ``site`` and routes it: until it is routed,
        that copy is neither active nor ready, and a cleanup must not take it for a stray."""
        return f"boot.{self.name}.{site}"

    @staticmethod
    def held(lock: str) -> bool:
        """Does another process hold ``lock`` right now?"""
        try:
            with locked(lock, wait=False):
                return False
        except EnvctlError:
            return True


def measure(backend: Backend | None = None) -> EngineMemory:
    """Every envctl member's limit and measured use (one read for all), and each instance's routing (side
    by side): what the capacity plan counts. Raises the engine's errors (EngineUnavailable)."""
    backend = backend or get_backend()
    every, used, source = backend.placement.memory()
    held = [Held(h.labels["envctl.instance"], h.labels.get("envctl.site", ""), h.labels.get("envctl.slot", ""),
                 h.labels.get("envctl.role", ""), h.labels.get("envctl.flavor", ""), h.limit, h.measured)
            for h in every if h.labels.get("envctl.instance")]

    def table(n: str) -> tuple[str, RoutingTable | None]:
        try:
            ctl = proxy.known(n) or proxy.locate(n, backend.proxy.find(n))
            return n, proxy.load(ctl) if ctl is not None else None
        except EnvctlError:
            return n, None

    names = sorted({h.instance for h in held})
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(names)))) as pool:
        tables = dict(pool.map(table, names))
    return EngineMemory(tuple(held), {n: dict(t.routes.active) for n, t in tables.items() if t is not None},
                        {n: {s: w.get(GOLDEN, 0) for s, w in t.ready.wanted.items()}
                         for n, t in tables.items() if t is not None}, used, source)


__all__ = ["Instance", "Progress", "find_settings", "measure", "ready_role", "ROLES", "VERIFY_SLOTS", "noop"]
