"""The Swarm backend: an instance's copies are services on a Docker Swarm, reached through a manager.

Point envctl at a swarm with ``ENVCTL_BACKEND=swarm``, ``DOCKER_HOST`` (or the docker
context) naming a manager, and ``ENVCTL_SWARM_REGISTRY`` the registry every node pulls from (``host:port``, trusted
as insecure by the nodes' engines). What runs where:

- an instance is placed on one node (the ready, active node matching ``ENVCTL_SWARM_CONSTRAINT`` with the fewest
  envctl instances, then the most memory not reserved): Swarm has no notion of a group of services that must share
  a node and its data directory, so envctl chooses it from Swarm's own node list and pins every service of the
  instance there with a constraint (``node.id==…``); Swarm runs them, restarts them, refuses a drained node;
- a copy's member is a service (``endpoint-mode dnsrr``: this kernel's Swarm has no IPVS, and the front proxy
  routes anyway) on the instance's attachable overlay network, named as on one engine, carrying the same labels
  (on the service and its container), with the catalog's memory as its limit and its reservation; a link alias
  (``db``) is an ``/etc/hosts`` entry pointing at the dependency's task (a network alias would be shared by every
  copy of the site on the network);
- the front proxy is a service publishing the sites' ports in host mode on the instance's node, its routing table
  on a named volume there (a task Swarm restarts starts on the table as it was);
- what only a node can do — a step in a member (configure, fingerprints, in-place restores, login helpers), a
  commit, a freeze, logs — goes to the engine of the node the member's task runs on: the node's label
  ``envctl.engine`` (``tcp://10.0.0.5:2375``, ``ssh://admin@10.0.0.5``), else ``ENVCTL_SWARM_NODE_ENGINE`` with
  ``{addr}`` (default ``ssh://{addr}``);
- images reach every node through the registry: ``images build/get`` results are pushed there from the manager
  (:meth:`SwarmBackend.distribute`), goldens and snapshots from the node they were committed on.
"""
from __future__ import annotations

import dataclasses
import os
import re
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence

from envctl.backends.base import (DataItem, FrontProxy, InstanceSettings, Member, MemberMemory, Placement, ProxyInfo,
                                  ProxySpec, network_name, proxy_name)
from envctl.backends.docker import ENGINE, Engine
from envctl.backends.registry import Registry
from envctl.errors import DockerError, EngineUnavailable, EnvctlError, NotReady, UsageError
from envctl.healthchecks.wait import attempts
from envctl.locks import locked
from envctl.validate import env_value

HELPER = "debian:bookworm-slim"  # for work on a node's filesystem (bind-mount sources)
RESTART = {"no": "none", "always": "any", "unless-stopped": "any", "on-failure": "on-failure"}
RUNNING = "running"
ENDED = ("complete", "failed", "shutdown", "rejected", "orphaned", "remove")
_MEM = re.compile(r"^([0-9]+)([kmg])$")


def size_bytes(text: str | None) -> int:
    m = _MEM.match(text or "")
    return int(m.group(1)) * {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2)] if m else 0


@dataclass(frozen=True)
class Node:
    """A swarm node as the manager lists it."""

    id: str
    hostname: str
    addr: str
    state: str  # ready | down | unknown
    availability: str  # active | pause | drain
    labels: dict[str, str]
    memory: int
    manager: bool

    @property
    def usable(self) -> bool:
        return self.state == "ready" and self.availability == "active"


@dataclass(frozen=True)
class Task:
    """The latest task of a service: where and how it runs."""

    service: str
    id: str
    node: str
    state: str
    desired: str
    container: str
    error: str
    addresses: dict[str, str]  # network name -> IPv4
    exit_code: int = 0


def _constraint_matches(expr: str, node: Node) -> bool:
    """Whether ``node`` satisfies one Swarm constraint (``node.labels.K==V``, ``node.hostname!=X``, ...)."""
    m = re.match(r"^\s*node\.(labels\.([\w.-]+)|hostname|id|role)\s*(==|!=)\s*(\S+)\s*$", expr)
    if m is None:
        raise UsageError(f"ENVCTL_SWARM_CONSTRAINT {expr!r} is not a constraint envctl understands",
                         "give node.labels.KEY==VALUE, node.hostname==NAME, node.id==ID or node.role==worker")
    field, key, op, want = m.group(1), m.group(2), m.group(3), m.group(4)
    have = (node.labels.get(key or "") if key else node.hostname if field == "hostname" else node.id if field == "id"
            else "manager" if node.manager else "worker")
    return (have == want) == (op == "==")


class Swarm:
    """What the four parts of the Swarm backend share: the manager, the registry, the nodes and their engines, and
    how services and their tasks read."""

    def __init__(self, manager: Engine | None = None, registry: str | None = None) -> None:
        self.manager = manager or ENGINE
        self.registry_address = registry if registry is not None else (env_value("ENVCTL_SWARM_REGISTRY") or "")
        self._registry: Registry | None = None
        self._engines: dict[str, Engine] = {}
        self._nodes: dict[str, Node] = {}
        self._nodes_at = -1e9
        self._lock = threading.Lock()

    @property
    def registry(self) -> Registry:
        if not self.registry_address:
            raise UsageError("the swarm backend needs a registry every node pulls from",
                             "set ENVCTL_SWARM_REGISTRY=host:port (e.g. the registry 'envctl cloud up' runs on the manager)")
        if self._registry is None:
            self._registry = Registry(self.registry_address)
        return self._registry

    def ref(self, image: str) -> str:
        """The reference a node pulls ``image`` by: the registry's copy."""
        return image if image.startswith(self.registry_address + "/") else f"{self.registry_address}/{image}"

    def nodes(self, *, fresh: bool = False) -> dict[str, Node]:
        """The swarm's nodes by id (read again when older than 2 s, or ``fresh``)."""
        with self._lock:
            if not fresh and time.monotonic() - self._nodes_at < 2.0:
                return dict(self._nodes)
        ids = self.manager.run_cli(["node", "ls", "-q"], what="node ls").split()
        raw = self.manager.json_cli(["node", "inspect", *ids], what="node inspect") if ids else []
        nodes = {}
        for n in raw:
            desc, spec, status = n.get("Description") or {}, n.get("Spec") or {}, n.get("Status") or {}
            addr = status.get("Addr") or ""
            if addr in ("", "0.0.0.0") and n.get("ManagerStatus"):
                addr = str(n["ManagerStatus"].get("Addr", "")).rsplit(":", 1)[0]
            nodes[n["ID"]] = Node(n["ID"], desc.get("Hostname", ""), addr, status.get("State", "unknown"),
                                  spec.get("Availability", "active"), dict(spec.get("Labels") or {}),
                                  int((desc.get("Resources") or {}).get("MemoryBytes") or 0), spec.get("Role") == "manager")
        with self._lock:
            self._nodes, self._nodes_at = nodes, time.monotonic()
        return dict(nodes)

    def node(self, node_id: str) -> Node:
        nodes = self.nodes()
        if node_id not in nodes:
            nodes = self.nodes(fresh=True)
        if node_id not in nodes:
            raise EnvctlError(f"swarm node {node_id[:12]} is not in the swarm any more",
                              "bring the instance up again ('envctl up'): it is placed on another node")
        return nodes[node_id]

    def engine(self, node_id: str) -> Engine:
        """The engine of a node: its ``envctl.engine`` label, else ENVCTL_SWARM_NODE_ENGINE with {addr}."""
        node = self.node(node_id)
        url = node.labels.get("envctl.engine") or os.environ.get("ENVCTL_SWARM_NODE_ENGINE", "ssh://{addr}").format(
            addr=node.addr, hostname=node.hostname)
        with self._lock:
            if url not in self._engines:
                self._engines[url] = Engine(url, timeout=self.manager.timeout)
            return self._engines[url]

    def services(self, **labels: str) -> list[dict[str, Any]]:
        filters = [a for k, v in labels.items() for a in ("--filter", f"label=envctl.{k}={v}")] or \
            ["--filter", "label=envctl.instance"]
        ids = self.manager.run_cli(["service", "ls", "-q", *filters], what="service ls").split()
        return self.manager.json_cli(["service", "inspect", *ids], what="service inspect") if ids else []

    def tasks(self, services: list[str]) -> dict[str, Task]:
        """The latest task of each service (by id), read in two calls whatever their number."""
        if not services:
            return {}
        for attempt in range(3):  # a service or task removed between the listing and these reads (a spare swapped
            try:                  # out by another process): read again without it
                out = self.manager.run_cli(["service", "ps", "-q", "--no-trunc", *services], what="service ps").split()
                raw = self.manager.json_cli(["inspect", *sorted(set(out))], what="inspect tasks") if out else []
                break
            except DockerError as exc:
                if attempt == 2 or not re.search(r"no such (service|object)", str(exc), re.I):
                    raise
                alive = self.manager.run_cli(["service", "ls", "-q"], what="service ls").split()
                services = [s for s in services if any(s.startswith(a) or a.startswith(s) for a in alive)]
                if not services:
                    return {}
        latest: dict[str, dict[str, Any]] = {}
        for t in raw:
            sid = t.get("ServiceID", "")
            if sid not in latest or (t.get("Version") or {}).get("Index", 0) > (latest[sid].get("Version") or {}).get("Index", 0):
                latest[sid] = t
        tasks = {}
        for sid, t in latest.items():
            st = t.get("Status") or {}
            cs = st.get("ContainerStatus") or {}
            addrs = {str(((a.get("Network") or {}).get("Spec") or {}).get("Name", "")):
                     str((a.get("Addresses") or [""])[0]).split("/")[0] for a in t.get("NetworksAttachments") or []}
            tasks[sid] = Task(sid, t.get("ID", ""), t.get("NodeID", ""), st.get("State", ""), t.get("DesiredState", ""),
                              cs.get("ContainerID", ""), st.get("Err", ""), addrs, int(cs.get("ExitCode") or 0))
        return tasks

    def member_of(self, svc: dict[str, Any], task: Task | None) -> Member:
        spec = svc.get("Spec") or {}
        labels = dict(spec.get("Labels") or {})
        status = ""
        if task is not None:
            node_ok = self.nodes().get(task.node)
            if task.state == RUNNING and node_ok is not None and node_ok.state == "ready":
                status = "running"
            elif task.state in ENDED or (node_ok is not None and node_ok.state != "ready"):
                status = "exited"
            else:
                status = "created"
        image = str(((spec.get("TaskTemplate") or {}).get("ContainerSpec") or {}).get("Image", "")).split("@")[0]
        net = network_name(labels.get("envctl.instance", ""))
        return Member(labels.get("envctl.service", ""), spec.get("Name", ""), task.container if task else "", labels,
                      status, image, task.node if task else "", (task.addresses.get(net, "") if task else ""),
                      task.exit_code if task else 0, "OOM" in (task.error if task else ""))

    def await_task(self, name: str, timeout: float, cancel: threading.Event | None = None) -> Task:
        """The running task of service ``name``, waited for; one line naming why it cannot run."""
        task: Task | None = None
        for _ in attempts(timeout, cancel=cancel, cap=1.0):
            tasks = self.tasks([name])
            task = next(iter(tasks.values()), None)
            if task is not None and task.state == RUNNING and task.container:
                return task
            if task is not None and task.state in ("rejected", "failed") and "No such image" not in task.error:
                raise DockerError(f"swarm service {name} could not start: {task.error or task.state}",
                                  "see 'docker service ps --no-trunc " + name + "' on the manager")
        why = task.error if task is not None else "no task"
        if "insufficient resources" in why:
            raise NotReady(f"no swarm node has the memory {name} reserves ({why})",
                           "add a node, free memory on the instance's node, or serve fewer spares (--spares 0)")
        raise NotReady(f"swarm service {name} is not running after {timeout:.0f}s ({why or (task.state if task else '')})",
                       "see 'docker service ps --no-trunc " + name + "' on the manager")

    def member(self, name: str) -> Member | None:
        svc = self.manager.json_cli(["service", "inspect", name], what="service inspect")
        if not svc:
            return None
        return self.member_of(svc[0], self.tasks([svc[0]["ID"]]).get(svc[0]["ID"]))

    def remove_services(self, names: list[str]) -> None:
        existing = [n for n in names if n]
        if not existing:
            return
        listed = set(self.manager.run_cli(["service", "ls", "--format", "{{.Name}}"], what="service ls").split())
        gone = [n for n in existing if n in listed]
        if gone:
            self.manager.run_cli(["service", "rm", *gone], what="service rm")

    def live(self, member: Member) -> tuple[Engine, str]:
        """The engine of the node ``member`` runs on now, and its container (looked up again when stale)."""
        if not member.id or not member.node:
            live = self.member(member.name)
            if live is None or not live.id:
                raise DockerError(f"swarm service {member.name} has no running task", "see 'envctl status'")
            member = live
        return self.engine(member.node), member.id

    def push_from(self, eng: Engine, tag: str) -> None:
        """Push ``tag`` (made on the engine ``eng``) to the registry, so that every node can boot it."""
        eng.tag_image(tag, self.ref(tag))
        eng.push(self.ref(tag))

    def helper_image(self, node: str) -> None:
        """The helper image (debian:bookworm-slim) on the node: pulled from the registry, tagged as itself."""
        self.pull(node, HELPER)

    def pull(self, node: str, image: str) -> None:
        """``image`` on the node's engine under its own name: pulled from the registry when missing there."""
        eng = self.engine(node)
        if eng.image_exists(image):
            return
        for _ in eng.pull_lines(self.ref(image)):
            pass
        eng.tag_image(self.ref(image), image)


class DataRoom(Protocol):
    """What placement asks of the nodes' data (envctl.backends.swarm_data.SwarmData)."""

    def lacking(self, node: Node, items: Sequence[DataItem]) -> list[DataItem]: ...

    def room_problem(self, node: Node, items: Sequence[DataItem]) -> str: ...


class SwarmPlacement(Placement):
    """Where an instance runs on a swarm: the node envctl chooses, its network, memory and ports."""

    def __init__(self, swarm: Swarm, data: DataRoom) -> None:
        self.swarm = swarm
        self.data = data

    def info(self) -> dict[str, object]:
        info = self.swarm.manager.info()
        if not info.get("swarm_manager"):
            where = self.swarm.manager.where
            raise EngineUnavailable(f"{where} is not a swarm manager (swarm: {info.get('swarm') or 'inactive'})",
                                    "point DOCKER_HOST at a manager of the swarm ('docker swarm init' makes one), or "
                                    "unset ENVCTL_BACKEND for this machine's engine")
        self.swarm.registry  # noqa: B018 - a missing registry setting is named before anything runs
        return info

    def answers(self, timeout: float) -> str:
        m = self.swarm.manager
        return "" if m.ping(timeout) else f"the swarm manager, {m.where}, did not answer within {timeout:g}s (stalled or down)"

    def oom_kills(self, settings: InstanceSettings, since: float, until: float) -> list[tuple[str, str, float]]:
        node = self.swarm.nodes().get(settings.node)
        if node is None or node.state != "ready":  # a lost node's engine would hold the call (problem() says why)
            return []
        return [(lab.get("envctl.site", ""), lab.get("com.docker.swarm.service.name", lab.get("name", "")), t)
                for lab, t in self.swarm.engine(settings.node).oom_events({"envctl.instance": settings.name}, since, until)]

    def node_states(self) -> dict[str, str]:
        """Node -> ready, down, drain (Swarm stops its tasks) or pause (no new task; those there run on)."""
        return {n.hostname: (n.state if n.state != "ready" else n.availability if n.availability in ("drain", "pause")
                             else "ready") for n in self.swarm.nodes().values()}

    def problem(self, settings: InstanceSettings) -> str:
        """Why the instance's node cannot run it now ('' when it can): down, drained, gone."""
        if not settings.node:
            return ""
        try:
            node = self.swarm.nodes(fresh=True).get(settings.node)
        except EnvctlError as exc:
            return str(exc).splitlines()[0]
        if node is None:
            return f"node down ({settings.node[:12]} left the swarm)"
        if node.state != "ready":
            return f"node down ({node.hostname} is {node.state})"
        if node.availability == "drain":
            return f"node drained ({node.hostname})"
        if not self.swarm.engine(node.id).ping(timeout=3):  # the manager notices a lost node only after its heartbeat
            return f"node down ({node.hostname} does not answer)"
        return ""

    def prepare(self, settings: InstanceSettings, need: int = 0,
                data: Sequence[DataItem] = ()) -> tuple[InstanceSettings, bool]:
        net = network_name(settings.name)
        # A host-mode port of a swarm service listens on every address of its node (Swarm has no bind address):
        # the lab's network rules (the security group 'envctl cloud up' makes) say who reaches it.
        settings = dataclasses.replace(settings, bind="0.0.0.0")
        with locked("swarm-place", timeout=120):  # instances placed side by side (a pool) each see the others
            if not settings.node:
                node = self.place(settings, need, data)
                settings = dataclasses.replace(settings, node=node.id, public_host=settings.public_host or node.addr)
            elif not settings.public_host:
                settings = dataclasses.replace(settings, public_host=self.swarm.node(settings.node).addr)
            existed = bool(self.swarm.manager.json_cli(["network", "inspect", net], what="network inspect"))
            if not existed:  # its labels say where the instance runs: the next placement counts it
                args = ["network", "create", "--driver", "overlay", "--attachable"]
                for k, v in settings.labels().items():
                    args += ["--label", f"{k}={v}"]
                self.swarm.manager.run_cli([*args, net], what=f"network create {net}")
        return settings, existed

    def place(self, settings: InstanceSettings, need: int = 0, data: Sequence[DataItem] = ()) -> Node:
        """The node a new instance runs on: usable, matching ENVCTL_SWARM_CONSTRAINT, with ``need`` bytes not reserved
        by envctl's services; of those, one that holds the sites' ``data`` already (else the one lacking least), then
        the fewest envctl instances, then the most memory free; a node whose disk cannot hold the data it lacks is
        passed over, and when every one is, one line says each node's room."""
        nodes = [n for n in self.swarm.nodes(fresh=True).values() if n.usable]
        want = os.environ.get("ENVCTL_SWARM_CONSTRAINT", "").strip()
        if want:
            nodes = [n for n in nodes if all(_constraint_matches(c, n) for c in want.split(",") if c.strip())]
        if not nodes:
            raise UsageError("no swarm node can take a new instance" + (f" (none is ready, active and matches {want!r})"
                                                                         if want else " (none is ready and active)"),
                             "check 'docker node ls' on the manager; fix or unset ENVCTL_SWARM_CONSTRAINT; "
                             "activate a node ('docker node update --availability active NODE')")
        load: dict[str, int] = {}
        for labels in self.swarm.manager.networks(backend="swarm").values():
            if labels.get("envctl.instance") != settings.name:
                load[labels.get("envctl.node", "")] = load.get(labels.get("envctl.node", ""), 0) + 1
        reserved: dict[str, int] = {}
        for s in self.swarm.services():
            spec = s.get("Spec") or {}
            node = (spec.get("Labels") or {}).get("envctl.node", "")
            res = ((spec.get("TaskTemplate") or {}).get("Resources") or {}).get("Reservations") or {}
            reserved[node] = reserved.get(node, 0) + int(res.get("MemoryBytes") or 0)
        free = {n.id: n.memory - reserved.get(n.id, 0) for n in nodes}
        fits = [n for n in nodes if free[n.id] >= need]
        if not fits:
            best = max(nodes, key=lambda n: free[n.id])
            raise UsageError(f"no swarm node has the {need / (1 << 30):.1f} GiB instance '{settings.name}' reserves (the "
                             f"most free: {best.hostname}, {max(0, free[best.id]) / (1 << 30):.1f} GiB)",
                             "add a node or memory, take instances down, or bring up fewer sites")
        lacking = {n.id: sum(i.bytes for i in self.data.lacking(n, data)) for n in fits}
        order = sorted(fits, key=lambda n: (lacking[n.id] > 0, lacking[n.id], load.get(n.id, 0), -free[n.id], n.hostname))
        refused = []
        for n in order:
            why = self.data.room_problem(n, data) if lacking[n.id] else ""
            if not why:
                return n
            refused.append(why)
        raise UsageError(f"no swarm node has the disk for instance '{settings.name}''s data: " + "; ".join(refused),
                         "free disk on a node (its data directory), add a node, or bring up fewer sites")

    def remove_network(self, instance: str) -> bool:
        net = network_name(instance)
        if not self.swarm.manager.json_cli(["network", "inspect", net], what="network inspect"):
            return True
        for _ in range(20):  # tasks just removed release their endpoints a moment later
            try:
                self.swarm.manager.run_cli(["network", "rm", net], what=f"network rm {net}")
                return True
            except DockerError as exc:
                if "active endpoints" not in str(exc):
                    raise
                time.sleep(0.5)
        return False

    def where(self, settings: InstanceSettings) -> tuple[str, str]:
        if not settings.node:
            return "", ""
        try:
            node = self.swarm.node(settings.node)
        except EnvctlError:
            return settings.node[:12], f"node {settings.node[:12]} (gone)"
        return node.hostname, (f"node {node.hostname} ({node.addr})"
                               + ("" if node.usable else f", {node.state}/{node.availability}"))

    def host_memory(self, settings: InstanceSettings | None = None) -> int | None:
        if settings is None or not settings.node:
            return None
        try:
            return self.swarm.node(settings.node).memory or None
        except EnvctlError:
            return None

    def port_problem(self, settings: InstanceSettings, port: int, owned: set[int]) -> str:
        if port in owned or not settings.node:
            return ""
        for s in self.swarm.services(node=settings.node):
            for p in ((s.get("Endpoint") or {}).get("Ports") or []):
                if int(p.get("PublishedPort") or 0) == port:
                    return f"swarm service {(s.get('Spec') or {}).get('Name', '')} on the same node"
        node = self.swarm.node(settings.node)
        with socket.socket() as sock:
            sock.settimeout(1.0)
            if sock.connect_ex((node.addr, port)) == 0:
                return f"a process on node {node.hostname} ({node.addr})"
        return ""

    def memory(self) -> tuple[list[MemberMemory], int, str]:
        held: list[MemberMemory] = []
        used = 0
        for node in self.swarm.nodes().values():
            if node.state != "ready":
                continue
            try:
                eng = self.swarm.engine(node.id)
                every = [c for c in eng.container_memory() if c.labels.get("envctl.instance")]
                use, _ = eng.memory_use([c.id for c in every if c.running])
            except EnvctlError:
                continue
            held += [MemberMemory(c.labels, c.limit, use.get(c.id), c.running) for c in every]
            used += sum(use.values())
        return held, used, "stats"




class SwarmProxy(FrontProxy):
    """The front proxy as a service publishing the sites' ports in host mode on the instance's node."""

    def __init__(self, swarm: Swarm) -> None:
        self.swarm = swarm

    def instance_labels(self, instance: str) -> dict[str, str] | None:
        svc = self.swarm.manager.json_cli(["service", "inspect", proxy_name(instance)], what="service inspect")
        if svc:
            return dict((svc[0].get("Spec") or {}).get("Labels") or {})
        net = self.swarm.manager.json_cli(["network", "inspect", network_name(instance)], what="network inspect")
        return dict(net[0].get("Labels") or {}) if net and (net[0].get("Labels") or {}).get("envctl.instance") else None

    def all(self) -> list[tuple[dict[str, str], str]]:
        svcs = self.swarm.services(role="proxy")
        tasks = self.swarm.tasks([s["ID"] for s in svcs])
        out = []
        for s in svcs:
            m = self.swarm.member_of(s, tasks.get(s["ID"]))
            out.append((m.labels, m.status or "created"))
        return out

    def boot(self, spec: ProxySpec, settings: InstanceSettings) -> ProxyInfo:
        name = proxy_name(spec.instance)
        self.swarm.remove_services([name])
        args = ["service", "create", "--detach", "--quiet", "--no-healthcheck", "--name", name, "--endpoint-mode", "dnsrr",
                "--network", network_name(spec.instance), "--constraint", f"node.id=={settings.node}",
                "--restart-condition", "any", "--limit-memory", spec.memory.upper(),
                # the table's volume is this proxy's own (named after its token): a volume a proxy left on a node that was
                # lost holds another token's config, which a new proxy there must not start on
                "--mount", f"type=volume,source={name}-{spec.labels.get('envctl.control', '')[:12]},target=/etc/envctl,"
                           f"volume-label=envctl.instance={spec.instance},volume-label=envctl.role=proxy"]
        for k, v in spec.labels.items():
            args += ["--label", f"{k}={v}", "--container-label", f"{k}={v}"]
        for k, v in spec.env.items():
            args += ["--env", f"{k}={v}"]
        for p in sorted(spec.ports):
            args += ["--publish", f"mode=host,target={p},published={p}"]
        self.swarm.manager.run_cli([*args, self.swarm.ref(spec.image)], what=f"service create {name}")
        self.swarm.await_task(name, 120)
        info = self.find(spec.instance)
        if info is None:
            raise DockerError(f"the front proxy service {name} did not start", f"see 'docker service ps {name}'")
        return info

    def find(self, instance: str) -> ProxyInfo | None:
        svc = self.swarm.manager.json_cli(["service", "inspect", proxy_name(instance)], what="service inspect")
        if not svc:
            return None
        m = self.swarm.member_of(svc[0], self.swarm.tasks([svc[0]["ID"]]).get(svc[0]["ID"]))
        node = self.swarm.nodes().get(m.node or m.labels.get("envctl.node", ""))
        return ProxyInfo(m.name, m.labels, m.status == "running", node.addr if node else m.labels.get("envctl.public_host", ""))

    def remove(self, instance: str) -> None:
        name = proxy_name(instance)
        svc = self.swarm.manager.json_cli(["service", "inspect", name], what="service inspect")
        labels = ((svc[0].get("Spec") or {}).get("Labels") or {}) if svc else {}
        self.swarm.remove_services([name])
        if labels.get("envctl.node"):
            volume = f"{name}-{labels.get('envctl.control', '')[:12]}"
            try:
                eng = self.swarm.engine(labels["envctl.node"])
                if not eng.ping(timeout=3):  # a dead node's engine would hold this call for its TCP timeout
                    return  # 'down --volumes' removes the volume when the node is back
                for _ in attempts(20, cap=0.5):  # the task's container goes a moment after the service
                    if not eng.remove_volumes([volume]):
                        break
            except EnvctlError:
                pass  # the node is gone: 'down --volumes' removes the volume when it is back

    def address(self, instance: str, name: str) -> str | None:
        m = self.swarm.member(name)
        return (m.address or None) if m is not None and m.status == "running" else None



__all__ = ["Swarm", "SwarmPlacement", "SwarmProxy", "Node", "Task"]
