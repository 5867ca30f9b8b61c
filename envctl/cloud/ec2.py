"""EC2 resources of a lab: key pair, security group, tagged instances with a TTL, and teardown.

Everything is tagged at creation (TagSpecifications), so an interrupted ``cloud up`` leaves
nothing that ``cloud down`` cannot find. Hosts terminate themselves when the TTL expires, even
with the controller gone: InstanceInitiatedShutdownBehavior=terminate plus user-data that
schedules ``shutdown -h +MIN`` at first boot. All boto3 calls go through ``aws.aws_call``.
"""
from __future__ import annotations

import getpass
import json
import os
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence

from envctl.errors import CloudError, UsageError
from envctl.cloud.aws import aws_call
from envctl.validate import env_value, validate_allowed_cidrs, validate_lab_name, validate_port, validate_region

TAG_LAB, TAG_TTL, TAG_OWNER, TAG_CREATED_BY = "envctl:lab", "envctl:ttl", "envctl:owner", "envctl:created-by"
# Official WebArena AMI ("webarena-with-configurable-map-backend"), published in us-east-2 only.
WEBARENA_AMIS: dict[str, str] = {"us-east-2": "ami-08a862bf98e3bd7aa"}
UBUNTU_OWNER = "099720109477"  # Canonical
UBUNTU_NAME = "ubuntu/images/hvm-ssd*/ubuntu-*-amd64-server-*"
SSH_PORT = 22
LAB_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}$")
Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class Ec2LabSpec:
    """What to create. ``ports`` are the public ports of the selected sites (plus the reset server)."""

    lab: str
    region: str
    hosts: int = 1
    instance_type: str = "t3a.xlarge"
    ami: str = "webarena"  # "webarena" | "ubuntu" | an AMI id
    ports: tuple[int, ...] = ()
    allow_cidrs: tuple[str, ...] = ()
    allow_world: bool = False
    key_name: str | None = None  # the user's key pair; None = create one for the lab
    spot: bool = False
    ttl_minutes: int = 480
    root_gb: int = 30
    data_gb: int = 0  # 0 = no separate data volume
    owner: str = field(default_factory=lambda: env_value("USER") or getpass.getuser())

    def validate(self) -> None:
        validate_lab_name(self.lab)
        if not LAB_NAME.match(self.lab):
            raise UsageError(f"invalid lab name '{self.lab}'", "use 1-31 lowercase letters, digits and '-'")
        validate_region(self.region)
        if self.hosts < 1:
            raise UsageError(f"--hosts must be at least 1 (got {self.hosts})")
        if not 1 <= self.ttl_minutes <= 7 * 24 * 60:
            raise UsageError(f"--ttl must be between 1 minute and 7 days (got {self.ttl_minutes} min)")
        check_cidrs(self.allow_cidrs, allow_world=self.allow_world)
        for p in self.ports:
            validate_port(p, "lab port")


@dataclass
class LabResources:
    """What envctl created (or adopted) for a lab; saved in the lab manifest."""

    key_name: str = ""
    key_created: bool = False
    key_file: str | None = None
    security_group_id: str | None = None
    instance_ids: list[str] = field(default_factory=list)
    ami_id: str | None = None

    def summary(self) -> list[str]:
        out = [f"key pair {self.key_name}"] if self.key_created else []
        if self.security_group_id:
            out.append(f"security group {self.security_group_id}")
        if self.instance_ids:
            out.append(f"instances {', '.join(self.instance_ids)}")
        return out


@dataclass(frozen=True)
class Ec2Host:
    instance_id: str
    state: str
    instance_type: str
    public_dns: str
    public_ip: str
    private_ip: str
    launch_time: str  # ISO 8601, UTC
    expires: str | None  # ISO 8601 from the envctl:ttl tag
    spot: bool

    def time_left(self, now: datetime | None = None) -> timedelta | None:
        if not self.expires:
            return None
        return datetime.fromisoformat(self.expires) - (now or datetime.now(timezone.utc))

    def hours_up(self, now: datetime | None = None) -> float:
        start = datetime.fromisoformat(self.launch_time)
        return max(0.0, ((now or datetime.now(timezone.utc)) - start).total_seconds() / 3600)


@dataclass(frozen=True)
class Teardown:
    terminated: list[str]
    security_groups_deleted: list[str]
    key_pairs_deleted: list[str]
    key_files_removed: list[str]


def check_cidrs(cidrs: Sequence[str], *, allow_world: bool) -> list[str]:
    """The normalised CIDRs, or UsageError: none given, one invalid, or together the whole IPv4 or
    IPv6 internet (``0.0.0.0/0``, ``0.0.0.0/1`` + ``128.0.0.0/1``, ``::/0``…) without ``allow_world``."""
    return validate_allowed_cidrs(cidrs, allow_world=allow_world)


def lab_filter(lab: str) -> list[dict[str, Any]]:
    return [{"Name": f"tag:{TAG_LAB}", "Values": [lab]}]


def _tags(spec: Ec2LabSpec, resource: str, expires: str | None = None) -> dict[str, Any]:
    tags = [
        {"Key": TAG_LAB, "Value": spec.lab}, {"Key": TAG_OWNER, "Value": spec.owner},
        {"Key": TAG_CREATED_BY, "Value": "envctl"}, {"Key": "Name", "Value": f"envctl-{spec.lab}"},
    ]
    if expires:
        tags.append({"Key": TAG_TTL, "Value": expires})
    return {"ResourceType": resource, "Tags": tags}


def resolve_ami(ec2: Any, region: str, ami: str, *, table: dict[str, str] | None = None) -> str:
    """The AMI id for "webarena", "ubuntu" or an explicit id, checked to exist in ``region``."""
    table = WEBARENA_AMIS if table is None else table
    if ami == "webarena":
        if region not in table:
            where = ", ".join(f"{i} in {r}" for r, i in table.items())
            raise CloudError(
                f"the official WebArena AMI is not published in {region} (only {where})",
                f"use --region {next(iter(table))}, copy the AMI to {region} with 'aws ec2 copy-image', "
                "or use --ami ubuntu (images fetched on the hosts)",
            )
        image_id = table[region]
    elif ami == "ubuntu":
        with aws_call("looking up the Ubuntu AMI"):
            images = ec2.describe_images(
                Owners=[UBUNTU_OWNER],
                Filters=[{"Name": "name", "Values": [UBUNTU_NAME]}, {"Name": "architecture", "Values": ["x86_64"]},
                         {"Name": "state", "Values": ["available"]}],
            )["Images"]
        if not images:
            raise CloudError(f"no Canonical Ubuntu AMI found in {region}", "pass an explicit --ami ami-…")
        return max(images, key=lambda i: (i.get("CreationDate") or "", i["Name"]))["ImageId"]
    elif re.match(r"^ami-[0-9a-f]{8,17}$", ami):
        image_id = ami
    else:
        raise UsageError(f"invalid --ami '{ami}'", "use webarena, ubuntu or an AMI id like ami-0123456789abcdef0")
    with aws_call(f"checking AMI {image_id} in {region}"):
        try:
            found = ec2.describe_images(ImageIds=[image_id])["Images"]
        except Exception as exc:  # InvalidAMIID.NotFound / .Malformed
            if "InvalidAMIID" in str(exc):
                found = []
            else:
                raise
    if not found:
        raise CloudError(f"AMI {image_id} does not exist in {region} (or is not shared with this account)",
                         "AMIs are per region: pass the region it lives in, or copy it with 'aws ec2 copy-image'")
    return image_id


def ensure_key_pair(ec2: Any, spec: Ec2LabSpec, key_dir: Path, res: LabResources) -> None:
    """Use the user's key pair, or create ``envctl-<lab>`` and save its private key 0600."""
    if spec.key_name:
        with aws_call(f"checking key pair {spec.key_name}", lab=spec.lab, created=res.summary()):
            try:
                ec2.describe_key_pairs(KeyNames=[spec.key_name])
            except Exception as exc:
                if "InvalidKeyPair.NotFound" in str(exc):
                    raise CloudError(f"key pair '{spec.key_name}' does not exist in {spec.region}",
                                     "import it there, or drop --key-name to let envctl create one") from exc
                raise
        res.key_name, res.key_created = spec.key_name, False
        return
    name = f"envctl-{spec.lab}"
    path = key_dir / f"{name}.pem"
    with aws_call("looking up the lab key pair", lab=spec.lab, created=res.summary()):
        existing = ec2.describe_key_pairs(Filters=[{"Name": "key-name", "Values": [name]}])["KeyPairs"]
    if existing:
        if not path.exists():
            raise CloudError(f"key pair {name} exists in {spec.region} but its private key {path} is gone",
                             f"run 'envctl cloud down --lab {spec.lab}' and start again")
        res.key_name, res.key_created, res.key_file = name, True, str(path)
        return
    key_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with aws_call("creating key pair", lab=spec.lab, created=res.summary()):
        material = ec2.create_key_pair(KeyName=name, KeyType="ed25519",
                                       TagSpecifications=[_tags(spec, "key-pair")])["KeyMaterial"]
    res.key_name, res.key_created, res.key_file = name, True, str(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(material if material.endswith("\n") else material + "\n")
    os.chmod(path, 0o600)


def ensure_security_group(ec2: Any, spec: Ec2LabSpec, res: LabResources) -> None:
    """A group ``envctl-<lab>`` opening SSH, the site ports and the registry to ``allow_cidrs`` only, and every
    port between the lab's own machines (the swarm)."""
    name = f"envctl-{spec.lab}"
    with aws_call("looking up the security group", lab=spec.lab, created=res.summary()):
        groups = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": [name]}, *lab_filter(spec.lab)])["SecurityGroups"]
    if groups:
        res.security_group_id = groups[0]["GroupId"]
        return
    with aws_call("creating security group", lab=spec.lab, created=res.summary()):
        gid = ec2.create_security_group(
            GroupName=name, Description=f"envctl lab {spec.lab}: SSH and site ports from named CIDRs",
            TagSpecifications=[_tags(spec, "security-group")],
        )["GroupId"]
    res.security_group_id = gid
    ports = sorted({SSH_PORT, *spec.ports})
    cidrs = check_cidrs(spec.allow_cidrs, allow_world=spec.allow_world)
    ranges = [{"CidrIp": c, "Description": "envctl --allow-cidr"} for c in cidrs if ":" not in c]
    ranges6 = [{"CidrIpv6": c, "Description": "envctl --allow-cidr"} for c in cidrs if ":" in c]
    perms = [{"IpProtocol": "tcp", "FromPort": p, "ToPort": p, "IpRanges": ranges, "Ipv6Ranges": ranges6} for p in ports]
    # the lab's machines reach each other: the swarm (2377, 7946 tcp/udp, 4789 udp), the overlay, the registry
    perms.append({"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": gid, "Description": "envctl lab machines"}]})
    with aws_call("opening the lab ports", lab=spec.lab, created=res.summary()):
        ec2.authorize_security_group_ingress(GroupId=gid, IpPermissions=perms)


DATA_LABEL = "envctl-data"


def ttl_user_data(ttl_minutes: int, *, data_volume: bool = False) -> str:
    """First-boot script: schedule the TTL power-off (which terminates the host) and, with a data
    volume, format it and mount it as Docker's data root before Docker is installed."""
    lines = [
        "#!/bin/sh",
        "# envctl lab TTL: with InstanceInitiatedShutdownBehavior=terminate this terminates the host.",
        f"shutdown -h +{int(ttl_minutes)} 'envctl lab TTL reached'",
    ]
    if data_volume:
        lines += [
            "for d in /dev/nvme1n1 /dev/xvdf /dev/sdf; do",
            f"  if [ -b \"$d\" ] && ! blkid \"$d\" >/dev/null; then mkfs.ext4 -q -L {DATA_LABEL} \"$d\"; break; fi",
            "done",
            "mkdir -p /var/lib/docker",
            f"grep -q {DATA_LABEL} /etc/fstab || echo 'LABEL={DATA_LABEL} /var/lib/docker ext4 defaults,nofail 0 2' >> /etc/fstab",
            "mount -a",
        ]
    return "\n".join(lines) + "\n"


def launch_instances(ec2: Any, spec: Ec2LabSpec, res: LabResources, *, progress: Progress = _quiet,
                     now: datetime | None = None) -> list[str]:
    """Start ``spec.hosts`` tagged instances; returns their ids (also recorded in ``res``)."""
    assert res.ami_id and res.security_group_id and res.key_name
    expires = ((now or datetime.now(timezone.utc)) + timedelta(minutes=spec.ttl_minutes)).replace(microsecond=0).isoformat()
    with aws_call("reading the AMI", lab=spec.lab, created=res.summary()):
        image = ec2.describe_images(ImageIds=[res.ami_id])["Images"][0]
    root_device = image.get("RootDeviceName") or "/dev/sda1"
    # The root volume cannot be smaller than the AMI's snapshot (the WebArena AMI's is large).
    snap_gb = max([int(b.get("Ebs", {}).get("VolumeSize") or 0) for b in image.get("BlockDeviceMappings", [])
                   if b.get("DeviceName") == root_device] or [0])
    disks = [{"DeviceName": root_device, "Ebs": {"VolumeSize": max(spec.root_gb, snap_gb), "VolumeType": "gp3", "DeleteOnTermination": True}}]
    if spec.data_gb:
        disks.append({"DeviceName": "/dev/sdf", "Ebs": {"VolumeSize": spec.data_gb, "VolumeType": "gp3", "DeleteOnTermination": True}})
    kwargs: dict[str, Any] = dict(
        ImageId=res.ami_id, InstanceType=spec.instance_type, MinCount=spec.hosts, MaxCount=spec.hosts,
        KeyName=res.key_name, SecurityGroupIds=[res.security_group_id], BlockDeviceMappings=disks,
        InstanceInitiatedShutdownBehavior="terminate", UserData=ttl_user_data(spec.ttl_minutes, data_volume=spec.data_gb > 0),
        TagSpecifications=[_tags(spec, "instance", expires), _tags(spec, "volume", expires)],
    )
    if spec.spot:
        kwargs["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": {
            "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}
    progress(f"launching {spec.hosts} x {spec.instance_type} from {res.ami_id}{' (spot)' if spec.spot else ''}")
    with aws_call("launching instances", lab=spec.lab, created=res.summary()):
        ids = [i["InstanceId"] for i in ec2.run_instances(**kwargs)["Instances"]]
    res.instance_ids.extend(ids)
    return ids


def wait_running(ec2: Any, lab: str, ids: Sequence[str], *, progress: Progress = _quiet, status_ok: bool = True) -> None:
    """Block with boto3 waiters until the instances run (and pass status checks)."""
    progress(f"waiting for {len(ids)} instance(s) to run")
    with aws_call("waiting for instances to run", lab=lab):
        ec2.get_waiter("instance_running").wait(InstanceIds=list(ids), WaiterConfig={"Delay": 5, "MaxAttempts": 120})
    if status_ok:
        progress("waiting for status checks")
        with aws_call("waiting for instance status checks", lab=lab):
            ec2.get_waiter("instance_status_ok").wait(InstanceIds=list(ids), WaiterConfig={"Delay": 10, "MaxAttempts": 90})
    progress("instances running")


def describe_hosts(ec2: Any, lab: str, *, include_terminated: bool = False) -> list[Ec2Host]:
    with aws_call(f"listing instances of lab {lab}", lab=lab):
        pages = ec2.get_paginator("describe_instances").paginate(Filters=lab_filter(lab))
        instances = [i for page in pages for r in page["Reservations"] for i in r["Instances"]]
    hosts = []
    for i in instances:
        state = i["State"]["Name"]
        if state == "terminated" and not include_terminated:
            continue
        tags = {t["Key"]: t["Value"] for t in i.get("Tags", [])}
        launch = i["LaunchTime"]
        launch = launch.astimezone(timezone.utc) if isinstance(launch, datetime) else datetime.fromisoformat(str(launch))
        hosts.append(Ec2Host(
            instance_id=i["InstanceId"], state=state, instance_type=i["InstanceType"],
            public_dns=i.get("PublicDnsName") or "", public_ip=i.get("PublicIpAddress") or "",
            private_ip=i.get("PrivateIpAddress") or "", launch_time=launch.isoformat(),
            expires=tags.get(TAG_TTL), spot=i.get("InstanceLifecycle") == "spot",
        ))
    return sorted(hosts, key=lambda h: (h.launch_time, h.instance_id))


def teardown(ec2: Any, lab: str, *, key_files: Sequence[str] = (), progress: Progress = _quiet) -> Teardown:
    """Terminate every instance tagged with the lab, then delete the lab's own group and key pair.

    Only resources carrying ``envctl:lab=<lab>`` and ``envctl:created-by=envctl`` are deleted, so
    a user's own key pair (never tagged by envctl) and other labs are left alone.
    """
    ids = [h.instance_id for h in describe_hosts(ec2, lab)]
    if ids:
        progress(f"terminating {len(ids)} instance(s)")
        with aws_call("terminating instances", lab=lab):
            ec2.terminate_instances(InstanceIds=ids)
            ec2.get_waiter("instance_terminated").wait(InstanceIds=ids, WaiterConfig={"Delay": 5, "MaxAttempts": 120})
    ours = [*lab_filter(lab), {"Name": f"tag:{TAG_CREATED_BY}", "Values": ["envctl"]}]
    groups: list[str] = []
    with aws_call("deleting the lab security group", lab=lab):
        for g in ec2.describe_security_groups(Filters=ours)["SecurityGroups"]:
            ec2.delete_security_group(GroupId=g["GroupId"])
            groups.append(g["GroupId"])
    keys: list[str] = []
    with aws_call("deleting the lab key pair", lab=lab):
        for k in ec2.describe_key_pairs(Filters=ours)["KeyPairs"]:
            ec2.delete_key_pair(KeyName=k["KeyName"])
            keys.append(k["KeyName"])
    removed = []
    for f in key_files:
        if f and Path(f).exists() and Path(f).stem in keys:
            Path(f).unlink()
            removed.append(f)
    progress(f"lab {lab} removed")
    return Teardown(ids, groups, keys, removed)


# --- prices ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class PriceTable:
    snapshot_date: str
    source: str
    hourly: dict[str, dict[str, float]]  # region -> instance type -> USD/hour (on-demand Linux)
    ebs_gp3_gb_month: dict[str, float]

    def hourly_price(self, region: str, instance_type: str) -> float | None:
        return self.hourly.get(region, {}).get(instance_type)


def load_prices() -> PriceTable:
    raw = json.loads(resources.files("envctl").joinpath("data/ec2_prices.json").read_text())
    return PriceTable(raw["snapshot_date"], raw["source"], raw["on_demand_hourly_usd"], raw["ebs_gp3_usd_per_gb_month"])


def cost_so_far(host: Ec2Host, region: str, *, storage_gb: int = 0, prices: PriceTable | None = None,
                now: datetime | None = None) -> float | None:
    """USD spent by a host since launch at the table's on-demand price (an upper bound for spot)."""
    prices = prices or load_prices()
    rate = prices.hourly_price(region, host.instance_type)
    if rate is None:
        return None
    hours = host.hours_up(now)
    ebs = prices.ebs_gp3_gb_month.get(region, 0.08) * storage_gb * hours / 730
    return round(rate * hours + ebs, 4)


def resources_dict(res: LabResources) -> dict[str, Any]:
    return asdict(res)
