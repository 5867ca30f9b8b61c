"""Where a lab's machines come from: a provider makes them (or is given them) and removes them.

- :class:`Ec2Provider`: EC2 instances (boto3), tagged with the lab, in a security group that opens SSH, the
  sites' ports and the registry only to the CIDRs the user names and lets the lab's machines reach each other
  (the swarm's own ports); they terminate themselves after their TTL;
- :class:`InventoryProvider`: SSH machines the user already has (a list, or an Ansible inventory file); nothing
  is created and nothing is removed.

Everything after "there are machines" — the Docker engine, the swarm, the registry, node labels — is Ansible's
(:mod:`envctl.cloud.labs`, ``playbooks/swarm.yml``), and everything after "there is a swarm" is envctl's Swarm
backend. A new provider is one class here with :meth:`Provider.machines`, :meth:`Provider.remove` and
:meth:`Provider.states`, plus its branch in :func:`envctl.cloud.labs.provider_of` and ``labs.up`` and its
options in :func:`envctl.cloud.up` and ``envctl cloud up`` (docs/architecture.md, "Files to touch").
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import envctl.cloud.ec2 as ec2mod
from envctl.cloud.aws import ec2_client
from envctl.paths import data_root

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Machine:
    """One machine of a lab, as Ansible reaches it."""

    name: str  # inventory name (the instance id on EC2)
    address: str  # what SSH connects to
    user: str = "root"
    port: int = 22
    key_file: str | None = None
    become: bool = False
    advertise: str = ""  # the address it advertises to the swarm ('' = address; on EC2 its private address)
    engine: str = ""  # how envctl reaches its engine ('' = ssh://user@address)
    instance_id: str | None = None

    @property
    def engine_url(self) -> str:
        return self.engine or f"ssh://{self.user}@{self.address}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class MachineState:
    name: str
    address: str
    state: str  # EC2 state; "given" for an inventory's machine
    instance_type: str | None = None
    time_left_minutes: int | None = None
    cost_usd: float | None = None


class Provider(Protocol):
    kind: str

    def machines(self, progress: Progress) -> list[Machine]:
        """Make (or complete) the lab's machines; every one of them, made now or before."""

    def remove(self, progress: Progress) -> Any:
        """Remove what the provider made for the lab (nothing for machines it was given)."""

    def states(self, now: datetime | None = None) -> tuple[list[MachineState], float | None, str | None]:
        """(each machine's state, the lab's cost so far, the price table's date)."""


@dataclass
class InventoryProvider:
    """Machines the user has: ``given`` (a list) or ``inventory_file`` (an Ansible inventory: the machines of its group
    ``envctl``, read by ansible-inventory; the first is the manager)."""

    given: Sequence[Machine] = ()
    inventory_file: Path | None = None
    kind: str = "inventory"

    def machines(self, progress: Progress) -> list[Machine]:
        if self.inventory_file is None:
            return list(self.given)
        from envctl.cloud.ansible import inventory_hosts

        out = []
        for name, v in inventory_hosts(self.inventory_file).items():
            out.append(Machine(name, str(v.get("ansible_host", name)), str(v.get("ansible_user", "root")),
                               int(v.get("ansible_port", 22)), v.get("ansible_ssh_private_key_file"),
                               bool(v.get("ansible_become", False)), str(v.get("envctl_advertise", "")),
                               str(v.get("envctl_engine", ""))))
        self.given = out
        return out

    def remove(self, progress: Progress) -> Any:
        progress("the lab's machines are yours: nothing was created, nothing is removed")
        return None

    def states(self, now: datetime | None = None) -> tuple[list[MachineState], float | None, str | None]:
        return [MachineState(m.name, m.address, "given") for m in self.given], None, None


@dataclass
class Ec2Provider:
    """EC2 machines for lab ``spec.lab`` (boto3; a moto server with ENVCTL_AWS_ENDPOINT_URL)."""

    spec: ec2mod.Ec2LabSpec
    ssh_user: str = "ubuntu"
    client: Any = None
    resources: ec2mod.LabResources = field(default_factory=ec2mod.LabResources)
    kind: str = "ec2"

    def _ec2(self) -> Any:
        if self.client is None:
            self.client = ec2_client(self.spec.region)
        return self.client

    def machines(self, progress: Progress) -> list[Machine]:
        spec, res, ec2 = self.spec, self.resources, self._ec2()
        spec.validate()
        res.ami_id = ec2mod.resolve_ami(ec2, spec.region, spec.ami)
        ec2mod.ensure_key_pair(ec2, spec, data_root() / "keys", res)
        ec2mod.ensure_security_group(ec2, spec, res)
        running = [h for h in ec2mod.describe_hosts(ec2, spec.lab) if h.state in ("pending", "running")]
        missing = spec.hosts - len(running)
        if missing > 0:
            ec2mod.launch_instances(ec2, replace(spec, hosts=missing), res, progress=progress)
        ec2mod.wait_running(ec2, spec.lab, [h.instance_id for h in running] + res.instance_ids, progress=progress)
        return [Machine(h.instance_id, h.public_dns or h.public_ip, self.ssh_user, key_file=res.key_file, become=True,
                        advertise=h.private_ip, instance_id=h.instance_id)
                for h in ec2mod.describe_hosts(self._ec2(), spec.lab)]

    def remove(self, progress: Progress) -> Any:
        key_files = [str(data_root() / "keys" / f"envctl-{self.spec.lab}.pem")]
        return ec2mod.teardown(self._ec2(), self.spec.lab, key_files=key_files, progress=progress)

    def states(self, now: datetime | None = None) -> tuple[list[MachineState], float | None, str | None]:
        prices = ec2mod.load_prices()
        storage = self.spec.root_gb + self.spec.data_gb
        out = []
        for h in ec2mod.describe_hosts(self._ec2(), self.spec.lab):
            left = h.time_left(now)
            out.append(MachineState(h.instance_id, h.public_dns or h.public_ip, h.state, h.instance_type,
                                    None if left is None else max(0, int(left.total_seconds() // 60)),
                                    ec2mod.cost_so_far(h, self.spec.region, storage_gb=storage, prices=prices, now=now)))
        costs = [s.cost_usd for s in out if s.cost_usd is not None]
        return out, (round(sum(costs), 4) if costs else None), prices.snapshot_date


__all__ = ["Machine", "MachineState", "Provider", "Ec2Provider", "InventoryProvider"]
