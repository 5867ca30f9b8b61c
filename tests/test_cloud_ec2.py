"""EC2 side of `envctl cloud` against moto in server mode: real boto3 calls over HTTP."""
from __future__ import annotations

import base64
import os
import stat
from datetime import datetime, timedelta, timezone
from typing import Iterator

import pytest
from moto.server import ThreadedMotoServer

from envctl.errors import CloudError, UsageError
from envctl.cloud import ec2 as e
from envctl.cloud import labs as lab
from envctl.cloud.providers import Ec2Provider, InventoryProvider
from envctl.cloud.aws import AwsCallFailed, aws_call, ec2_client

REGION = "us-east-2"


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path) -> Iterator[object]:
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("ENVCTL_AWS_ENDPOINT_URL", moto_url)
    monkeypatch.setenv("ENVCTL_DATA_DIR", str(tmp_path / "data"))
    import requests

    requests.post(f"{moto_url}/moto-api/reset", timeout=10)
    yield ec2_client(REGION)


@pytest.fixture
def ami(aws) -> str:
    """A registered image standing in for the official AMI (moto cannot hold its real id)."""
    image = aws.register_image(Name="webarena-with-configurable-map-backend", RootDeviceName="/dev/sda1")
    return image["ImageId"]


def spec(**kw) -> e.Ec2LabSpec:
    base = dict(lab="lab-a", region=REGION, hosts=2, ami="ubuntu", ports=(7770, 9999), allow_cidrs=("203.0.113.7/32",),
                ttl_minutes=90, owner="tester")
    base.update(kw)
    return e.Ec2LabSpec(**base)


def made(s: e.Ec2LabSpec, aws: object) -> tuple[lab.LabManifest, object]:
    """The lab's EC2 machines, not joined (moto's machines cannot be reached over SSH)."""
    return lab.up(s.lab, Ec2Provider(s, client=aws), progress=lambda _: None, join_swarm=False)


def test_no_credentials_is_one_line(monkeypatch, tmp_path):
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(CloudError) as err:
        ec2_client(REGION)
    assert "no AWS credentials" in str(err.value) and "AWS_ACCESS_KEY_ID" in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_region_names_valid_ones(monkeypatch):
    monkeypatch.delenv("ENVCTL_AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with pytest.raises(CloudError) as err:
        ec2_client("us-east-9")
    assert "unknown AWS region 'us-east-9'" in str(err.value) and "us-east-2" in str(err.value)


def test_quota_error_reports_what_exists_and_how_to_remove(aws):
    from botocore.exceptions import ClientError

    with pytest.raises(AwsCallFailed) as err:
        with aws_call("launching instances", lab="lab-a", created=["key pair envctl-lab-a", "security group sg-1"]):
            raise ClientError({"Error": {"Code": "VcpuLimitExceeded", "Message": "You have requested more vCPU capacity"}},
                              "RunInstances")
    msg = str(err.value)
    assert err.value.code == "VcpuLimitExceeded" and "more vCPU capacity" in msg
    assert "security group sg-1" in msg and "envctl cloud down --lab lab-a" in msg


def test_world_is_refused_without_flag(aws):
    with pytest.raises(UsageError, match="--allow-world"):
        spec(allow_cidrs=("0.0.0.0/0",)).validate()
    with pytest.raises(UsageError, match="--allow-cidr"):
        spec(allow_cidrs=()).validate()
    spec(allow_cidrs=("0.0.0.0/0",), allow_world=True).validate()
    # halves that add up to the whole internet, and IPv6's ::/0 in pieces, are the whole internet too
    for cidrs in (("0.0.0.0/1", "128.0.0.0/1"), ("203.0.113.7/32", "::/1", "8000::/1")):
        with pytest.raises(UsageError, match="--allow-world"):
            spec(allow_cidrs=cidrs).validate()
        spec(allow_cidrs=cidrs, allow_world=True).validate()


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", "x" * 41, "-rf"])
def test_bad_lab_names_touch_no_file(aws, tmp_path, name):
    victim = tmp_path / "data" / "escape.json"
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_text("{}")
    with pytest.raises(UsageError, match="lab name"):
        spec(lab=name).validate()
    with pytest.raises(UsageError, match="lab name"):
        lab.LabManifest.load(name)
    with pytest.raises(UsageError, match="lab name"):
        lab.down(name, ec2=aws, region=REGION, progress=lambda _: None)
    with pytest.raises(UsageError, match="lab name"):
        lab.up(name, InventoryProvider([]), progress=lambda _: None)
    assert victim.read_text() == "{}" and not (tmp_path / "data" / "labs").exists()


def test_webarena_ami_outside_its_region_is_explained(aws):
    with pytest.raises(CloudError) as err:
        e.resolve_ami(aws, "eu-west-1", "webarena")
    assert "not published in eu-west-1" in str(err.value) and "us-east-2" in str(err.value)
    with pytest.raises(CloudError, match="does not exist in us-east-2"):
        e.resolve_ami(aws, REGION, "ami-0123456789abcdef0")


def test_ubuntu_ami_is_looked_up_from_canonical(aws):
    image_id = e.resolve_ami(aws, REGION, "ubuntu")
    image = aws.describe_images(ImageIds=[image_id])["Images"][0]
    assert image["OwnerId"] == e.UBUNTU_OWNER and image["Name"].startswith("ubuntu/images/")


def test_up_creates_tagged_lab_and_status_shows_ttl_and_cost(aws, ami, monkeypatch):
    monkeypatch.setitem(e.WEBARENA_AMIS, REGION, ami)
    s = spec(ami="webarena", data_gb=0, root_gb=8)
    snap_gb = aws.describe_images(ImageIds=[ami])["Images"][0]["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"]
    assert snap_gb > 8
    m, play = made(s, aws)
    assert play is None and len(m.machines) == 2

    # key pair: created, tagged, private key saved 0600 in the data dir
    key_file = m.resources["key_file"]
    assert key_file.startswith(os.environ["ENVCTL_DATA_DIR"])
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600 and "PRIVATE KEY" in open(key_file).read()
    kp = aws.describe_key_pairs(KeyNames=["envctl-lab-a"])["KeyPairs"][0]
    assert {t["Key"]: t["Value"] for t in kp.get("Tags", [])}[e.TAG_LAB] == "lab-a"

    # security group: SSH and the site ports, only from the named CIDR; every port between the lab's machines
    sg = aws.describe_security_groups(GroupIds=[m.resources["security_group_id"]])["SecurityGroups"][0]
    tcp = [p for p in sg["IpPermissions"] if p["IpProtocol"] == "tcp"]
    assert sorted(p["FromPort"] for p in tcp) == [22, 7770, 9999]
    for perm in tcp:
        assert [r["CidrIp"] for r in perm["IpRanges"]] == ["203.0.113.7/32"]
    [own] = [p for p in sg["IpPermissions"] if p["IpProtocol"] == "-1"]
    assert [g["GroupId"] for g in own["UserIdGroupPairs"]] == [sg["GroupId"]] and not own.get("IpRanges")

    # instances: tags, TTL (terminate on shutdown + scheduled shutdown), disks, key, group
    reservations = aws.describe_instances(Filters=e.lab_filter("lab-a"))["Reservations"]
    instances = [i for r in reservations for i in r["Instances"]]
    assert len(instances) == 2
    for inst in instances:
        tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
        assert tags[e.TAG_LAB] == "lab-a" and tags[e.TAG_OWNER] == "tester"
        expires = datetime.fromisoformat(tags[e.TAG_TTL])
        assert timedelta(minutes=88) < expires - datetime.now(timezone.utc) <= timedelta(minutes=90)
        assert inst["ImageId"] == ami and inst["KeyName"] == "envctl-lab-a"
        assert inst["SecurityGroups"][0]["GroupId"] == sg["GroupId"]
        iid = inst["InstanceId"]
        behaviour = aws.describe_instance_attribute(InstanceId=iid, Attribute="instanceInitiatedShutdownBehavior")
        assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
        ud = aws.describe_instance_attribute(InstanceId=iid, Attribute="userData")["UserData"]["Value"]
        assert "shutdown -h +90" in base64.b64decode(ud).decode()
        vol_ids = [b["Ebs"]["VolumeId"] for b in inst["BlockDeviceMappings"]]
        vols = aws.describe_volumes(VolumeIds=vol_ids)["Volumes"]
        assert [v["Size"] for v in vols] == [snap_gb]  # root grown to the AMI snapshot's size

    # waiters: the instances run, and the manifest was written, private (it names the key file)
    assert {h.state for h in e.describe_hosts(aws, "lab-a")} == {"running"}
    manifest = lab.labs_dir() / "lab-a.json"
    assert manifest.is_file() and stat.S_IMODE(os.stat(manifest).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(lab.labs_dir()).st_mode) == 0o700
    assert [x.name for x in lab.LabManifest.load("lab-a").machines] == [x.name for x in m.machines]

    # status: time left and cost from the price table, two hours after launch
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    st = lab.status("lab-a", ec2=aws, now=later)
    assert len(st.machines) == 2 and st.price_snapshot and st.nodes == []  # not joined: no swarm to ask
    rate = e.load_prices().hourly_price(REGION, "t3a.xlarge")
    for h in st.machines:
        assert 25 <= h.time_left_minutes <= 30
        assert rate * 0.99 < h.cost_usd < rate * 1.2
    assert st.total_cost_usd == pytest.approx(sum(h.cost_usd for h in st.machines))


def test_rerun_reuses_and_completes_the_lab(aws, ami, monkeypatch):
    s = spec(ami=ami, hosts=1)
    m1, _ = made(s, aws)
    m2, _ = made(spec(ami=ami, hosts=2), aws)
    assert m2.resources["security_group_id"] == m1.resources["security_group_id"]
    assert m2.created == m1.created  # the same lab, completed
    assert len(e.describe_hosts(aws, "lab-a")) == 2
    assert len(aws.describe_key_pairs(Filters=[{"Name": "key-name", "Values": ["envctl-lab-a"]}])["KeyPairs"]) == 1


def test_spot_and_data_volume(aws, ami):
    made(spec(ami=ami, hosts=1, spot=True, data_gb=120), aws)
    inst = [i for r in aws.describe_instances(Filters=e.lab_filter("lab-a"))["Reservations"] for i in r["Instances"]][0]
    assert inst.get("InstanceLifecycle") == "spot"
    sizes = sorted(v["Size"] for v in aws.describe_volumes(
        VolumeIds=[b["Ebs"]["VolumeId"] for b in inst["BlockDeviceMappings"]])["Volumes"])
    assert sizes == [30, 120]
    ud = base64.b64decode(aws.describe_instance_attribute(InstanceId=inst["InstanceId"], Attribute="userData")["UserData"]["Value"]).decode()
    assert "mkfs.ext4" in ud and "/var/lib/docker" in ud


def test_down_removes_only_this_labs_resources(aws, ami, tmp_path):
    # the user's own key pair, another lab and an untagged instance must survive
    aws.create_key_pair(KeyName="users-own-key")
    other, _ = made(spec(lab="lab-b", ami=ami, hosts=1), aws)
    stray = aws.run_instances(ImageId=ami, MinCount=1, MaxCount=1, InstanceType="t3.micro")["Instances"][0]["InstanceId"]
    mine, _ = made(spec(ami=ami, hosts=2, key_name="users-own-key"), aws)
    assert mine.resources["key_created"] is False and mine.resources["key_file"] is None

    result = lab.down("lab-a", ec2=aws, progress=lambda _: None)
    assert len(result.terminated) == 2 and result.key_pairs_deleted == []
    assert result.security_groups_deleted == [mine.resources["security_group_id"]]
    assert e.describe_hosts(aws, "lab-a") == []
    assert not aws.describe_security_groups(Filters=e.lab_filter("lab-a"))["SecurityGroups"]
    assert not (lab.labs_dir() / "lab-a.json").exists()

    names = {k["KeyName"] for k in aws.describe_key_pairs()["KeyPairs"]}
    assert {"users-own-key", "envctl-lab-b"} <= names
    assert len(e.describe_hosts(aws, "lab-b")) == 1
    state = aws.describe_instances(InstanceIds=[stray])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state == "running"

    # a lab whose manifest is lost is still found by its tags; its key file goes too
    key_file = other.resources["key_file"]
    (lab.labs_dir() / "lab-b.json").unlink()
    result = lab.down("lab-b", ec2=aws, region=REGION, progress=lambda _: None)
    assert result.key_pairs_deleted == ["envctl-lab-b"] and result.key_files_removed == [key_file]
    assert e.describe_hosts(aws, "lab-b") == []
    assert "users-own-key" in {k["KeyName"] for k in aws.describe_key_pairs()["KeyPairs"]}
