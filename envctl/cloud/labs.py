"""Cloud labs: machines from a provider (:mod:`envctl.cloud.providers`) joined into one Docker Swarm by Ansible.

``envctl cloud up`` makes the machines (EC2, or takes an SSH inventory), then ``playbooks/swarm.yml`` installs the
Docker engine on each, starts the swarm on the first (the manager), joins the others, labels every node with how
envctl reaches its engine and runs a registry every node pulls from. That is all: from there on the lab is the
Swarm backend's (``envctl cloud env`` prints the three variables that point envctl at it), and instances, resets,
snapshots and leases are the same commands as on one machine.

A lab's manifest (its machines, the manager, the registry; no token: a join token is read on the manager by the
play and never leaves it) is JSON in ``<data dir>/labs/<lab>.json`` (0600 in a 0700 directory); the data dir is
``$ENVCTL_DATA_DIR`` or ``$XDG_DATA_HOME/envctl``. It is a convenience: ``cloud down`` finds EC2 resources by tag
even without it. Lab names are validated before any file is written or removed.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from envctl.cloud.ansible import InventoryHost, PlayEvent, PlayResult, inventory, run_playbook
from envctl.cloud.providers import Ec2Provider, InventoryProvider, Machine, MachineState, Provider
from envctl.errors import CloudError, UsageError
from envctl.locks import write_private
from envctl.paths import data_root
from envctl.validate import validate_lab_name

Progress = Callable[[str], None]
REGISTRY_PORT = 5000


def labs_dir() -> Path:
    return data_root() / "labs"


def lab_file(lab: str, suffix: str) -> Path:
    """``<labs dir>/<lab><suffix>`` for a validated lab name (never outside the labs dir)."""
    return labs_dir() / f"{validate_lab_name(lab)}{suffix}"


@dataclass
class LabManifest:
    lab: str
    kind: str  # ec2 | inventory
    created: str
    region: str | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    machines: list[Machine] = field(default_factory=list)
    manager: str = ""  # the manager machine's name
    registry: str = ""  # host:port every node pulls from
    inventory_file: str | None = None
    failures: list[str] = field(default_factory=list)  # the machines the last play failed on, and why
    last_play_seconds: float | None = None

    @property
    def path(self) -> Path:
        return lab_file(self.lab, ".json")

    def save(self) -> Path:
        d = labs_dir()
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(d, 0o700)
        return write_private(self.path, json.dumps(asdict(self), indent=2, sort_keys=True))

    @classmethod
    def load(cls, lab: str) -> "LabManifest":
        path = lab_file(lab, ".json")
        if not path.is_file():
            known = sorted(p.stem for p in labs_dir().glob("*.json"))
            raise UsageError(f"no lab named '{lab}' (no {path})",
                             f"known labs: {', '.join(known)}" if known else "create one with 'envctl cloud up'")
        raw = json.loads(path.read_text())
        raw["machines"] = [Machine(**m) for m in raw.get("machines", [])]
        return cls(**{k: v for k, v in raw.items() if k in cls.__dataclass_fields__})

    @property
    def manager_machine(self) -> Machine | None:
        return next((m for m in self.machines if m.name == self.manager), None)

    def environment(self) -> dict[str, str]:
        """What points envctl at the lab's swarm: the Swarm backend, the manager's engine, the registry."""
        mgr = self.manager_machine
        if mgr is None:
            raise CloudError(f"lab {self.lab} has no manager yet", f"run 'envctl cloud up --lab {self.lab}' again")
        return {"ENVCTL_BACKEND": "swarm", "DOCKER_HOST": mgr.engine_url, "ENVCTL_SWARM_REGISTRY": self.registry}


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def _inventory(m: LabManifest) -> dict[str, Any] | Path:
    if m.inventory_file:
        return Path(m.inventory_file)
    hosts = [InventoryHost(x.name, x.address, port=x.port, user=x.user, key_file=x.key_file, become=x.become,
                           vars={k: v for k, v in (("envctl_advertise", x.advertise), ("envctl_engine", x.engine)) if v})
             for x in m.machines]
    return inventory(hosts, known_hosts=lab_file(m.lab, ".known_hosts"))


def join(m: LabManifest, *, registry: str = "", registry_trusted: bool = False, progress: Progress = print,
         playbook_progress: Callable[[PlayEvent], None] | None = None) -> PlayResult:
    """Run ``swarm.yml`` on the lab's machines (idempotent); the manifest learns the manager, the registry and which
    machines failed (a failed machine is left out of the swarm; the others are joined)."""
    if not m.machines and not m.inventory_file:
        raise UsageError(f"lab {m.lab} has no machines", "give --hosts N (EC2) or --inventory FILE")
    m.manager = m.manager or (m.machines[0].name if m.machines else "")
    progress(f"joining {len(m.machines) or 'the inventory'} machine(s) into one swarm (manager: {m.manager or 'first'})")
    result = run_playbook("swarm.yml", _inventory(m), progress=playbook_progress, extravars={
        "envctl_manager": m.manager, "envctl_registry": registry, "envctl_registry_port": REGISTRY_PORT,
        "envctl_registry_trusted": registry_trusted, "envctl_lab": m.lab})
    mgr = m.manager_machine
    m.registry = registry or (f"{mgr.advertise or mgr.address}:{REGISTRY_PORT}" if mgr else "")
    m.failures = [f.line() for f in result.failures]
    m.last_play_seconds = round(result.seconds, 1)
    m.save()
    for f in result.failures:
        progress(f"FAILED {f.line()}")
    return result


def up(lab: str, provider: Provider, *, registry: str = "", registry_trusted: bool = False,
       progress: Progress = print, playbook_progress: Callable[[PlayEvent], None] | None = None,
       region: str | None = None, spec: dict[str, Any] | None = None,
       join_swarm: bool = True) -> tuple[LabManifest, PlayResult | None]:
    """Machines from ``provider``, joined into one swarm (unless ``join_swarm`` is False: the machines only); the
    manifest (saved) and the play's result."""
    validate_lab_name(lab)
    try:
        previous: LabManifest | None = LabManifest.load(lab)
    except UsageError:
        previous = None
    inv_file = getattr(provider, "inventory_file", None)
    if isinstance(provider, Ec2Provider):
        region, spec = provider.spec.region, asdict(provider.spec)
    given = provider.machines(progress) if isinstance(provider, InventoryProvider) else None  # checked before a write
    m = LabManifest(lab, provider.kind, previous.created if previous else _now(), region, spec or {},
                    inventory_file=str(inv_file) if inv_file else None, manager=previous.manager if previous else "")
    if given is not None and m.manager not in {x.name for x in given}:
        m.manager = ""  # the previous manager is not among the machines given now: the first one is
    m.save()
    try:
        m.machines = given if given is not None else provider.machines(progress)
    finally:
        if isinstance(provider, Ec2Provider):
            m.resources = {k: v for k, v in asdict(provider.resources).items()}
        m.save()
    if not join_swarm:
        return m, None
    return m, join(m, registry=registry, registry_trusted=registry_trusted, progress=progress,
                   playbook_progress=playbook_progress)


@dataclass(frozen=True)
class NodeState:
    hostname: str
    address: str
    role: str
    state: str  # ready | down | ...
    availability: str  # active | drain | pause
    engine: str  # its envctl.engine label


@dataclass(frozen=True)
class LabStatus:
    lab: str
    kind: str
    region: str | None
    machines: list[MachineState]
    nodes: list[NodeState]
    total_cost_usd: float | None
    price_snapshot: str | None
    error: str = ""  # why the swarm could not be asked


def provider_of(m: LabManifest, ec2: Any = None) -> Provider:
    if m.kind == "ec2":
        import envctl.cloud.ec2 as ec2mod

        fields = {k: v for k, v in m.spec.items() if k in ec2mod.Ec2LabSpec.__dataclass_fields__}
        fields["ports"] = tuple(fields.get("ports", ()))
        fields["allow_cidrs"] = tuple(fields.get("allow_cidrs", ()))
        return Ec2Provider(ec2mod.Ec2LabSpec(**fields), client=ec2)
    return InventoryProvider(m.machines, Path(m.inventory_file) if m.inventory_file else None)


def status(lab: str, *, ec2: Any = None, now: datetime | None = None) -> LabStatus:
    """Each machine as its provider sees it (EC2: state, TTL left, cost so far) and each node of the swarm as its
    manager sees it (asked over SSH by Ansible)."""
    m = LabManifest.load(lab)
    machines, cost, prices = provider_of(m, ec2).states(now)
    nodes: list[NodeState] = []
    error = ""
    if m.manager:
        result = run_playbook("nodes.yml", _inventory(m), extravars={"envctl_manager": m.manager})
        raw = result.collected.get(m.manager, {}).get("nodes")
        if isinstance(raw, list):
            for n in raw:
                st, spec, desc = n.get("Status") or {}, n.get("Spec") or {}, n.get("Description") or {}
                nodes.append(NodeState(desc.get("Hostname", ""), st.get("Addr", ""), spec.get("Role", ""),
                                       st.get("State", ""), spec.get("Availability", ""),
                                       (spec.get("Labels") or {}).get("envctl.engine", "")))
        else:
            error = "; ".join(f.line() for f in result.failures) or "the manager gave no node list"
    return LabStatus(lab, m.kind, m.region, machines, nodes, cost, prices, error)


def env(lab: str) -> dict[str, str]:
    """The variables that point envctl at the lab's swarm."""
    return LabManifest.load(lab).environment()


def down(lab: str, *, ec2: Any = None, region: str | None = None, progress: Progress = print) -> Any:
    """Remove what the provider made for the lab (EC2: instances, group, key pair; an inventory: nothing) and forget it."""
    validate_lab_name(lab)
    try:
        m: LabManifest | None = LabManifest.load(lab)
    except UsageError:
        m = None
        if not region:
            raise
    if m is None:  # no manifest: EC2 resources are found by their tag
        import envctl.cloud.ec2 as ec2mod

        provider: Provider = Ec2Provider(ec2mod.Ec2LabSpec(lab=lab, region=region or ""), client=ec2)
    else:
        provider = provider_of(m, ec2)
    result = provider.remove(progress)
    lab_file(lab, ".json").unlink(missing_ok=True)
    lab_file(lab, ".known_hosts").unlink(missing_ok=True)
    return result


def machines_from(hosts: Sequence[InventoryHost]) -> list[Machine]:
    return [Machine(h.name, h.address, h.user, h.port, h.key_file, h.become, str(h.vars.get("envctl_advertise", "")),
                    str(h.vars.get("envctl_engine", ""))) for h in hosts]


__all__ = ["LabManifest", "LabStatus", "NodeState", "up", "join", "status", "env", "down", "lab_file", "labs_dir",
           "machines_from", "provider_of"]
