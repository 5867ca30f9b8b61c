"""Cloud labs: machines (EC2 through boto3, or SSH machines from an inventory) joined into one Docker Swarm by
Ansible; from there on the lab is envctl's Swarm backend. Needs the ``cloud`` extra (boto3, ansible-runner)::

    from envctl import cloud
    manifest, play = cloud.up("eval1", hosts=4, region="us-east-2", allow_cidrs=["203.0.113.7/32"])
    cloud.env("eval1")   # {"ENVCTL_BACKEND": "swarm", "DOCKER_HOST": "ssh://ubuntu@...", "ENVCTL_SWARM_REGISTRY": ...}

The providers are :mod:`envctl.cloud.providers`, the lab's manifest and the play :mod:`envctl.cloud.labs`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from envctl.errors import MissingExtra, UsageError, need_extra


need_extra("cloud", "envctl cloud", "boto3", "ansible_runner")

from envctl.catalog import load_catalog  # noqa: E402 - after the extra is known to be there
from envctl.cloud import ec2 as ec2mod  # noqa: E402
from envctl.cloud.ansible import InventoryHost  # noqa: E402
from envctl.cloud.labs import LabManifest, LabStatus, NodeState, down, env, join, status  # noqa: E402
from envctl.cloud.labs import up as lab_up  # noqa: E402
from envctl.cloud.providers import Ec2Provider, InventoryProvider, Machine  # noqa: E402
from envctl.validate import (validate_allowed_cidrs, validate_duration, validate_ec2_inputs,  # noqa: E402
                             validate_lab_name, validate_region, validate_registry_mirror)

__all__ = ["up", "up_machines", "status", "env", "down", "join", "LabManifest", "LabStatus", "NodeState", "Machine",
           "ttl_minutes", "MissingExtra", "lab_ports"]

ROOT_BASE_GB = 30  # OS, Docker engine, images of the mini flavor, logs
GB = 1_000_000_000
POOL_OFFSETS = (0, 10000)  # 'envctl up' (offset 0) and 'envctl serve --instances N' (from --base-offset 10000)


def ttl_minutes(text: str) -> int:
    """'8h' -> 480: between one minute and a week."""
    return validate_duration(text, "--ttl", minimum=60, maximum=7 * 86400) // 60


def lab_ports(sites: Sequence[str] | None, instances: int = 1) -> list[int]:
    """The ports a lab opens to the user's CIDRs: the sites' public ports of one instance at offset 0 and of
    ``instances`` pool members (offsets 10000, 11000, ...), and the registry's."""
    catalog = load_catalog()
    names = catalog.resolve(list(sites) if sites else None)
    base = sorted({p for n in names for p in catalog.site(n).public_ports().values()})
    offsets = [0] + [POOL_OFFSETS[1] + 1000 * k for k in range(max(0, instances))]
    return sorted({p + off for p in base for off in offsets if p + off <= 65535} | {5000})


def _disk_gb(sites: Sequence[str] | None, flavor: str) -> int:
    """The data volume a node needs for the flavor's images (0 for the mini flavor: the root volume holds them)."""
    if flavor == "mini":
        return 0
    catalog = load_catalog()
    total = 0
    for n in catalog.resolve(list(sites) if sites else None):
        fl = catalog.site(n).flavors.get(flavor)
        total += sum(int(a.size or 0) + int(a.loaded_size or a.size or 0) for a in (fl.artifacts if fl else ()))
    return max(20, int(total * 1.15 / GB) + 1)


def up(lab: str, *, hosts: int = 1, region: str | None = None, instance_type: str = "t3a.xlarge",
       ami: str = "ubuntu", allow_cidrs: Sequence[str] = (), allow_world: bool = False, key_name: str | None = None,
       spot: bool = False, ttl: str = "8h", sites: str = "all", flavor: str = "mini", instances: int = 1,
       inventory_file: str | Path | None = None, registry: str = "",
       progress: Callable[[str], None] = lambda _m: None) -> tuple[LabManifest, Any]:
    """EC2 machines (or the ones of ``inventory_file``) joined into one swarm. Every value is checked before anything
    is created or written; the lab's security group opens SSH, the sites' ports (for ``instances`` pool members) and
    the registry to ``allow_cidrs`` only."""
    validate_lab_name(lab)
    if region is not None:
        validate_region(region)
    minutes = ttl_minutes(ttl)
    if registry:
        validate_registry_mirror(registry, "--registry")
    selected = None if sites == "all" else sites.split(",")
    load_catalog().resolve(selected)  # a typo is refused here
    if inventory_file:
        return lab_up(lab, InventoryProvider(inventory_file=Path(inventory_file)), registry=registry, progress=progress)
    validate_ec2_inputs(instance_type, ami, key_name, "")
    cidrs = validate_allowed_cidrs(allow_cidrs, allow_world=allow_world)
    if not region:
        raise UsageError("no AWS region given", "pass --region (e.g. us-east-2) or set AWS_REGION")
    spec = ec2mod.Ec2LabSpec(lab=lab, region=region, hosts=hosts, instance_type=instance_type, ami=ami,
                             ports=tuple(lab_ports(selected, instances)), allow_cidrs=tuple(cidrs),
                             allow_world=allow_world, key_name=key_name, spot=spot, ttl_minutes=minutes,
                             root_gb=ROOT_BASE_GB + 10, data_gb=_disk_gb(selected, flavor))
    return lab_up(lab, Ec2Provider(spec), registry=registry, progress=progress)


def up_machines(lab: str, hosts: Sequence[InventoryHost], *, registry: str = "", registry_trusted: bool = False,
                progress: Callable[[str], None] = lambda _m: None, **kwargs: Any) -> tuple[LabManifest, Any]:
    """SSH machines given as records (what a harness or a test has), joined into one swarm."""
    from envctl.cloud.labs import machines_from

    return lab_up(lab, InventoryProvider(machines_from(hosts)), registry=registry, registry_trusted=registry_trusted,
                  progress=progress, **kwargs)
