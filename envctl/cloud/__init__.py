"""Cloud labs: many hosts (EC2 through boto3, or SSH hosts from an inventory), each running envctl.

The public face of :mod:`envctl.cloud.hosts` (manifests, Ansible plays) and
:mod:`envctl.cloud.ec2` (AWS), used by ``envctl cloud`` and by harnesses::

    from envctl import cloud
    manifest, play = cloud.up("eval1", hosts=4, region="us-east-2", allow_cidrs=["203.0.113.7/32"])
    workers = cloud.env("eval1", "browsergym")
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from envctl.catalog import load_catalog
from envctl.errors import CloudError, UsageError
from envctl.validate import (validate_allowed_cidrs, validate_duration, validate_ec2_inputs,
                             validate_lab_name, validate_region)
import envctl.cloud.ec2 as ec2mod
import envctl.cloud.hosts as labmod
from envctl.cloud.hosts import InstanceHealth, LabManifest, LabStatus, down, env, reset, status

__all__ = ["up", "status", "env", "reset", "down", "LabManifest", "LabStatus", "InstanceHealth", "ttl_minutes"]


def ttl_minutes(text: str) -> int:
    """'8h' -> 480: between one minute and a week."""
    return validate_duration(text, "--ttl", minimum=60, maximum=7 * 86400) // 60


def up(lab: str, *, hosts: int = 1, region: str | None = None, instance_type: str = "t3a.xlarge",
       ami: str = "webarena", allow_cidrs: Sequence[str] = (), allow_world: bool = False,
       key_name: str | None = None, spot: bool = False, ttl: str = "8h", sites: str = "all", flavor: str = "full",
       inventory_file: str | Path | None = None, images_url: str = "", instances_per_host: int = 1,
       progress: Callable[[str], None] = lambda _m: None) -> tuple[LabManifest, Any]:
    """Create the hosts (or take ``inventory_file``), prepare them with Ansible, run envctl up + serve on each
    (``instances_per_host`` isolated instances on each host, on distinct port offsets).

    Returns the lab's manifest and the play's result (its ``failures`` name each host that failed).
    Every value is checked before anything is created or written."""
    validate_lab_name(lab)
    if region is not None:
        validate_region(region)  # shell metacharacters and garbage: one line, before any AWS call
    minutes = ttl_minutes(ttl)
    selected = None if sites == "all" else sites.split(",")
    names = load_catalog().resolve(selected)  # a typo is refused here, not on every host
    offsets = labmod.instance_offsets(instances_per_host, labmod.lab_ports(names))
    if inventory_file:
        return labmod.up_inventory(lab, inventory_file=Path(inventory_file), flavor=flavor, sites=sites,
                                   images_url=images_url, instances_per_host=instances_per_host, progress=progress)
    validate_ec2_inputs(instance_type, ami, key_name, images_url)
    allow_cidrs = validate_allowed_cidrs(allow_cidrs, allow_world=allow_world)
    if not region:
        raise UsageError("no AWS region given", "pass --region (e.g. us-east-2) or set AWS_REGION")
    sizing = labmod.lab_sizing(selected, flavor, ami=ami, extra_ports=(load_catalog().reset_server.port,))
    ports = tuple(sorted({p + off for p in sizing.ports for off in offsets}))  # every instance's, for the group
    spec = ec2mod.Ec2LabSpec(lab=lab, region=region, hosts=hosts, instance_type=instance_type, ami=ami,
                             ports=ports, allow_cidrs=tuple(allow_cidrs), allow_world=allow_world,
                             key_name=key_name, spot=spot, ttl_minutes=minutes,
                             root_gb=sizing.root_gb, data_gb=sizing.data_gb)
    return labmod.up_ec2(spec, flavor=flavor, sites=sites, images_url=images_url, instance_offsets=offsets,
                         progress=progress)
