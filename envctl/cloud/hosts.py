"""Cloud labs: N hosts (EC2 or any SSH host list) each running one or more envctl instances.

The verbs behind ``envctl cloud up|status|reset|down|env``. EC2 work is in ``ec2`` (boto3),
host work in the playbooks run by ``ansible``. A lab's manifest (what was created, each host's
``envctl env --json``, failures) is JSON in ``<data dir>/labs/<lab>.json``; the data dir is
``$ENVCTL_DATA_DIR`` or ``$XDG_DATA_HOME/envctl`` (default ``~/.local/share/envctl``). The
manifest is a convenience: ``cloud down`` finds EC2 resources by tag even without it. It holds
the lab's reset-server token, so it is written 0600 in a 0700 directory; lab names are validated
(:func:`envctl.validate.validate_lab_name`) before any file is written or removed.

Every lab has a token (``secrets.token_urlsafe``, made at the first ``cloud up`` and kept in the
manifest): the playbook gives it to each host's ``envctl serve`` (``$ENVCTL_SERVE_TOKEN``), whose
``WA_FULL_RESET`` then carries it as the first path segment; ``cloud env`` shows those URLs.

The hosts run the controller's catalog (``lab_catalog``: this envctl's, or ``$ENVCTL_CATALOG``'s),
shipped by the playbook; with ``images_url`` every artifact lists the lab's copy
(``<images_url>/<artifact name>``) as its first source, so ``images get`` on the hosts fetches
from there first (verified and pinned as from any mirror) and falls back to the upstream mirrors.
A host runs ``instances_per_host`` isolated instances on port offsets chosen from the catalog's
ports (``instance_offsets``); ``cloud env`` lists every instance of every host.
"""
from __future__ import annotations

import json
import math
import os
import re
import secrets
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import requests

from envctl.errors import CloudError, UsageError
from envctl.locks import write_private
from envctl.paths import data_root as data_dir
import envctl.cloud.ec2 as ec2mod
from envctl.cloud.ansible import InventoryHost, PlayEvent, PlayResult, inventory, run_playbook
from envctl.cloud.aws import ec2_client
from envctl.cloud.package import ControllerPackage, controller_wheel
from envctl.validate import (validate_host, validate_instance_name, validate_lab_name, validate_port_offset,
                             validate_region)

Progress = Callable[[str], None]
GB = 1_000_000_000
ROOT_BASE_GB = 30  # OS, Docker engine, envctl and logs
OFFSET_STEP = 1000  # instances of one host sit on port offsets that are multiples of this
LAB_MIRROR = "lab"  # the mirror name of the lab's copy of the artifacts (--images-url)


def labs_dir() -> Path:
    return data_dir() / "labs"


def lab_file(lab: str, suffix: str) -> Path:
    """``<labs dir>/<lab><suffix>`` for a validated lab name (never outside the labs dir)."""
    return labs_dir() / f"{validate_lab_name(lab)}{suffix}"


def _private_labs_dir() -> Path:
    d = labs_dir()
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(d, 0o700)
    return d


@dataclass
class LabInstance:
    instance: str
    port_offset: int
    env: dict[str, Any] | None = None  # its `envctl env --format browsergym --json` on the host


@dataclass
class LabHost:
    name: str  # inventory name (the instance id on EC2)
    address: str
    instance: str = "default"  # the host's instance name (its instances are <name>-1..N when it runs N)
    port_offset: int = 0  # the host's base port offset
    public_host: str = ""
    instance_id: str | None = None
    error: str | None = None  # the failing task and its output, when the play failed here
    ssh_port: int = 22
    ssh_user: str | None = None  # None: the lab's default (root; ubuntu on EC2)
    key_file: str | None = None
    instances: list[LabInstance] = field(default_factory=list)

    @property
    def env(self) -> dict[str, Any] | None:
        """The first instance's environment (the host's only one unless --instances-per-host)."""
        return self.instances[0].env if self.instances else None

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "LabHost":
        raw = dict(raw)
        legacy_env = raw.pop("env", None)  # manifests written before hosts ran several instances
        instances = [LabInstance(**i) for i in raw.pop("instances", [])]
        host = cls(**raw, instances=instances)
        if not instances and legacy_env is not None:
            host.instances = [LabInstance(host.instance, host.port_offset, legacy_env)]
        return host


@dataclass
class LabManifest:
    lab: str
    kind: str  # "ec2" | "inventory"
    created: str
    region: str | None = None
    flavor: str = "mini"
    sites: str = "all"
    spec: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    hosts: list[LabHost] = field(default_factory=list)
    inventory_file: str | None = None
    last_play_seconds: float | None = None
    serve_token: str = ""  # the hosts' reset-server token (see the module docstring)
    instance_offsets: list[int] = field(default_factory=lambda: [0])  # per host, relative to its port offset
    images_url: str = ""

    @property
    def path(self) -> Path:
        return lab_file(self.lab, ".json")

    def save(self) -> Path:
        path = self.path
        _private_labs_dir()
        return write_private(path, json.dumps(asdict(self), indent=2, sort_keys=True))

    @classmethod
    def load(cls, lab: str) -> "LabManifest":
        path = lab_file(lab, ".json")
        if not path.is_file():
            known = sorted(p.stem for p in labs_dir().glob("*.json"))
            raise UsageError(f"no lab named '{lab}' (no {path})",
                             f"known labs: {', '.join(known)}" if known else "create one with 'envctl cloud up'")
        raw = json.loads(path.read_text())
        raw["hosts"] = [LabHost.from_dict(h) for h in raw.get("hosts", [])]
        return cls(**raw)


def lab_token(lab: str) -> str:
    """The lab's reset-server token: the one in its manifest (a re-run keeps the hosts' servers
    valid), else a new ``secrets.token_urlsafe(32)``."""
    try:
        token = LabManifest.load(lab).serve_token
    except (UsageError, OSError, ValueError, TypeError):
        token = ""
    return token or secrets.token_urlsafe(32)


@dataclass(frozen=True)
class LabSizing:
    ports: tuple[int, ...]
    root_gb: int
    data_gb: int


def lab_sizing(sites: Sequence[str] | None, flavor: str, *, ami: str = "ubuntu", extra_ports: Sequence[int] = ()) -> LabSizing:
    """Ports to open and disk sizes from the catalog: downloads plus loaded images, with headroom."""
    from envctl.catalog import load_catalog

    catalog = load_catalog()
    names = list(catalog.sites) if not sites else list(sites)
    ports: set[int] = set(extra_ports)
    total = 0
    for name in names:
        site = catalog.site(name)
        ports.update(site.public_ports().values())
        fl = site.flavors.get(flavor)
        for art in fl.artifacts if fl else ():
            total += (art.size or 0) + (art.loaded_size or art.size or 0)
    data_gb = 0 if flavor == "mini" or ami == "webarena" else max(20, math.ceil(total * 1.15 / GB))
    return LabSizing(tuple(sorted(ports)), ROOT_BASE_GB + (10 if flavor == "mini" else 0), data_gb)


def instance_offsets(count: int, ports: Sequence[int], *, step: int = OFFSET_STEP, limit: int = 60000) -> list[int]:
    """``count`` port offsets (0 first, multiples of ``step``) at which copies of ``ports`` never share a port."""
    if count < 1:
        raise UsageError(f"--instances-per-host {count} is out of range", "give 1 or more")
    taken: set[int] = set()
    out: list[int] = []
    offset = 0
    while len(out) < count:
        if offset > limit or max(ports, default=0) + offset > 65535:
            raise UsageError(f"{count} instances per host do not fit below port 65536",
                             "run fewer instances per host, or fewer sites")
        mine = {p + offset for p in ports}
        if not mine & taken:
            out.append(offset)
            taken |= mine
        offset += step
    return out


def _resolved(sites: str) -> list[str]:
    """``all`` or ``a,b`` -> the catalog's names, with their dependencies (unknown names refused)."""
    from envctl.catalog import load_catalog

    return load_catalog().resolve(None if sites == "all" else sites.split(","))


def lab_ports(sites: Sequence[str] | None) -> list[int]:
    """The public ports of one instance of ``sites`` (all when None), and its reset server's."""
    from envctl.catalog import load_catalog

    catalog = load_catalog()
    names = list(catalog.sites) if not sites else list(sites)
    ports = {catalog.reset_server.port}
    for name in names:
        ports.update(catalog.site(name).public_ports().values())
    return sorted(ports)


def _check_images_url(images_url: str) -> str:
    if images_url and not re.fullmatch(r"(https?|s3)://[^\s\"'<>]+", images_url):
        raise UsageError(f"invalid --images-url {images_url[:80]!r}", "give an http(s):// or s3:// URL")
    return images_url


def lab_catalog(out_dir: Path, images_url: str = "") -> Path:
    """The controller's catalog as JSON (valid YAML) for the hosts; with ``images_url`` every
    artifact lists ``<images_url>/<artifact name>`` (mirror ``lab``) as its first source."""
    from envctl.catalog import load_catalog

    raw = load_catalog().model_dump(mode="json", by_alias=True, exclude_unset=True)
    if images_url:
        base = images_url.rstrip("/")
        kind = "s3" if base.startswith("s3://") else "http"
        for site in raw.get("sites", {}).values():
            for flavor in (site.get("flavors") or {}).values():
                for art in (flavor or {}).get("artifacts") or []:
                    others = [s for s in art.get("sources") or [] if s.get("mirror") != LAB_MIRROR]
                    art["sources"] = [{"kind": kind, "mirror": LAB_MIRROR, "url": f"{base}/{art['name']}"}, *others]
    out = out_dir / "catalog.json"
    out.write_text(json.dumps(raw, indent=1, sort_keys=True) + "\n")
    load_catalog(out)  # what the hosts will read must validate here first
    return out


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def _configure(m: LabManifest, inv: dict[str, Any] | Path, *, lifecycle: bool, wheelhouse: bool,
               progress: Progress, playbook_progress: Callable[[PlayEvent], None] | None,
               package: ControllerPackage | None = None) -> PlayResult:
    with tempfile.TemporaryDirectory(prefix="envctl-wheel-") as tmp:
        pkg = package or controller_wheel(Path(tmp), with_dependencies=wheelhouse)
        catalog = lab_catalog(Path(tmp), m.images_url)
        progress(f"configuring {len(m.hosts) or 'the'} host(s) with envctl {pkg.version}")
        result = run_playbook(
            "site.yml", inv, progress=playbook_progress,
            extravars={
                "envctl_wheel": str(pkg.wheel), "envctl_wheel_sha256": pkg.sha256, "envctl_version": pkg.version,
                "envctl_wheelhouse": str(pkg.wheelhouse) if pkg.wheelhouse else "", "envctl_flavor": m.flavor,
                "envctl_sites": m.sites, "envctl_lifecycle": lifecycle, "envctl_catalog": str(catalog),
                "envctl_serve_token": m.serve_token, "envctl_instance_offsets": list(m.instance_offsets),
            },
        )
    failed = {f.host: f for f in result.failures}
    known = {h.name for h in m.hosts}
    for name in result.hosts:  # hosts from a user inventory file are learnt from the play
        if name not in known and name != "*":
            m.hosts.append(LabHost(name=name, address=name))
    for h in m.hosts:
        f = failed.get(h.name)
        h.error = f.line() if f else None
        envs = result.collected.get(h.name, {}).get("env")
        if isinstance(envs, list):
            h.instances = [LabInstance(str(rec["item"][0]), int(rec["item"][1]),
                                       rec["value"] if isinstance(rec["value"], dict) else {"raw": rec["value"]})
                           for rec in envs if isinstance(rec, dict) and isinstance(rec.get("item"), list)]
    m.last_play_seconds = round(result.seconds, 1)
    m.save()
    for f in result.failures:
        progress(f"FAILED {f.line()}")
    return result


def up_inventory(lab: str, hosts: Sequence[InventoryHost] | None = None, *, inventory_file: Path | None = None,
                 flavor: str = "mini", sites: str = "all", lifecycle: bool = True, wheelhouse: bool = False,
                 images_url: str = "", instances_per_host: int = 1, progress: Progress = print,
                 playbook_progress: Callable[[PlayEvent], None] | None = None,
                 package: ControllerPackage | None = None) -> tuple[LabManifest, PlayResult]:
    """Configure a lab of existing SSH hosts (``hosts`` or the user's inventory file).

    ``package`` reuses an already built controller wheel (see ``package.controller_wheel``)."""
    validate_lab_name(lab)
    _check_images_url(images_url)
    if (hosts is None) == (inventory_file is None):
        raise UsageError("give either hosts or an inventory file")
    offsets = instance_offsets(instances_per_host, lab_ports(_resolved(sites)))
    for h in hosts or ():
        name = str(h.vars.get("envctl_instance", "default"))
        validate_instance_name(name if instances_per_host == 1 else f"{name}-{instances_per_host}")
        validate_port_offset(int(h.vars.get("envctl_port_offset", 0)) + offsets[-1])
        for key in ("envctl_public_host", "envctl_bind"):
            if key in h.vars:
                validate_host(str(h.vars[key]), key)
    m = LabManifest(lab=lab, kind="inventory", created=_now(), flavor=flavor, sites=sites,
                    inventory_file=str(inventory_file) if inventory_file else None, serve_token=lab_token(lab),
                    instance_offsets=offsets, images_url=images_url)
    for h in hosts or ():
        m.hosts.append(LabHost(name=h.name, address=h.address, instance=str(h.vars.get("envctl_instance", "default")),
                               port_offset=int(h.vars.get("envctl_port_offset", 0)),
                               public_host=str(h.vars.get("envctl_public_host", h.address)),
                               ssh_port=h.port, ssh_user=h.user, key_file=h.key_file))
    m.save()
    known_hosts = lab_file(lab, ".known_hosts")
    inv: dict[str, Any] | Path = inventory_file if inventory_file else inventory(hosts or [], known_hosts=known_hosts)
    result = _configure(m, inv, lifecycle=lifecycle, wheelhouse=wheelhouse,
                        progress=progress, playbook_progress=playbook_progress, package=package)
    return m, result


def up_ec2(spec: ec2mod.Ec2LabSpec, *, flavor: str = "mini", sites: str = "all", configure: bool = True,
           lifecycle: bool = True, wheelhouse: bool = False, images_url: str = "", ssh_user: str = "ubuntu",
           instance_offsets: Sequence[int] = (0,),
           progress: Progress = print, playbook_progress: Callable[[PlayEvent], None] | None = None,
           ec2: Any = None) -> tuple[LabManifest, PlayResult | None]:
    """Create (or complete) an EC2 lab, then configure its hosts with the playbook (``instance_offsets``:
    one per instance a host runs, see :func:`instance_offsets`; ``spec.ports`` must cover them all)."""
    spec.validate()
    _check_images_url(images_url)
    ec2 = ec2 or ec2_client(spec.region)
    res = ec2mod.LabResources()
    m = LabManifest(lab=spec.lab, kind="ec2", created=_now(), region=spec.region, flavor=flavor, sites=sites,
                    spec=asdict(spec), serve_token=lab_token(spec.lab), instance_offsets=list(instance_offsets),
                    images_url=images_url)
    try:
        res.ami_id = ec2mod.resolve_ami(ec2, spec.region, spec.ami)
        ec2mod.ensure_key_pair(ec2, spec, data_dir() / "keys", res)
        ec2mod.ensure_security_group(ec2, spec, res)
        running = [h for h in ec2mod.describe_hosts(ec2, spec.lab) if h.state in ("pending", "running")]
        missing = spec.hosts - len(running)
        if missing > 0:
            ec2mod.launch_instances(ec2, _with_hosts(spec, missing), res, progress=progress)
        ids = [h.instance_id for h in running] + res.instance_ids
        ec2mod.wait_running(ec2, spec.lab, ids, progress=progress)
    finally:
        m.resources = ec2mod.resources_dict(res)
        m.save()
    for h in ec2mod.describe_hosts(ec2, spec.lab):
        addr = h.public_dns or h.public_ip
        m.hosts.append(LabHost(name=h.instance_id, address=addr, public_host=addr, instance_id=h.instance_id,
                               ssh_user=ssh_user, key_file=res.key_file))
    m.save()
    if not configure:
        return m, None
    inv_hosts = [InventoryHost(name=h.name, address=h.address, user=ssh_user, key_file=res.key_file, become=True,
                               vars={"envctl_public_host": h.public_host}) for h in m.hosts]
    known_hosts = lab_file(spec.lab, ".known_hosts")
    result = _configure(m, inventory(inv_hosts, known_hosts=known_hosts), lifecycle=lifecycle, wheelhouse=wheelhouse,
                        progress=progress, playbook_progress=playbook_progress)
    return m, result


def _with_hosts(spec: ec2mod.Ec2LabSpec, n: int) -> ec2mod.Ec2LabSpec:
    from dataclasses import replace

    return replace(spec, hosts=n)


@dataclass(frozen=True)
class InstanceHealth:
    instance: str
    running: bool  # the instance exists on the host's engine
    sites_up: list[str]  # healthy by the host's own probes
    sites_down: list[str]
    ready: bool | None  # its reset server's /status says "Ready for duty!" (None: no reset server known)
    error: str | None = None  # why the host's `envctl status` gave nothing usable


@dataclass(frozen=True)
class HostStatus:
    name: str
    address: str
    state: str  # EC2 state, or "reachable" / "unreachable" for inventory labs
    instance_type: str | None
    time_left_minutes: int | None
    cost_usd: float | None
    ready: bool | None  # every instance's reset server says "Ready for duty!"
    error: str | None
    reachable: bool | None = None  # SSH reached the host (None: not checked)
    instances: list[InstanceHealth] = field(default_factory=list)


@dataclass(frozen=True)
class LabStatus:
    lab: str
    kind: str
    region: str | None
    hosts: list[HostStatus]
    total_cost_usd: float | None
    price_snapshot: str | None


def _ready(env: dict[str, Any] | None) -> bool | None:
    url = (env or {}).get("WA_FULL_RESET")
    if not url:
        return None
    try:
        r = requests.get(str(url).rstrip("/").rsplit("/reset", 1)[0] + "/status", timeout=5)
        return r.status_code == 200 and "Ready for duty!" in r.text
    except requests.RequestException:
        return False


def _all_ready(values: Sequence[bool | None]) -> bool | None:
    known = [v for v in values if v is not None]
    return all(known) if known else None


def _instance_health(rec: dict[str, Any], env: dict[str, Any] | None, probe: bool) -> InstanceHealth:
    item = rec.get("item") or ["?"]
    value = rec.get("value")
    if not isinstance(value, dict):
        return InstanceHealth(str(item[0]), False, [], [], None, rec.get("stderr") or str(value or "")[-300:] or None)
    sites = value.get("sites") or []
    up = sorted(str(s.get("site")) for s in sites if s.get("healthy"))
    down = sorted(str(s.get("site")) for s in sites if not s.get("healthy"))
    return InstanceHealth(str(value.get("instance") or item[0]), bool(value.get("running", True)), up, down,
                          _ready(env) if probe else None)


def _inventory_status(m: LabManifest, probe: bool) -> LabStatus:
    """Ask every host (over SSH, with Ansible) for ``envctl status --json`` of each of its instances."""
    result = run_playbook("status.yml", _inventory_for(m), extravars={"envctl_instance_offsets": list(m.instance_offsets)})
    failed = {f.host: f for f in result.failures}
    hosts: list[HostStatus] = []
    names = [h.name for h in m.hosts] + [n for n in result.hosts if n not in {h.name for h in m.hosts} and n != "*"]
    by_name = {h.name: h for h in m.hosts}
    for name in names:
        rec = by_name.get(name)
        f = failed.get(name)
        envs = {i.instance: i.env for i in rec.instances} if rec else {}
        records = result.collected.get(name, {}).get("status")
        insts = [_instance_health(r, envs.get(str((r.get("item") or ["?"])[0])), probe)
                 for r in (records if isinstance(records, list) else []) if isinstance(r, dict)]
        reachable = not (f and f.unreachable) and name in result.hosts
        hosts.append(HostStatus(name, rec.address if rec else name, "reachable" if reachable else "unreachable", None,
                                None, None, _all_ready([i.ready for i in insts]) if insts else None,
                                f.line() if f else (rec.error if rec else None), reachable, insts))
    if "*" in failed:  # ansible-playbook itself failed: say so rather than report every host unreachable
        raise CloudError(f"cannot ask the hosts of lab {m.lab}: {failed['*'].output}",
                         "check the inventory and that ansible-playbook runs on this machine")
    return LabStatus(m.lab, m.kind, None, hosts, None, None)


def status(lab: str, *, ec2: Any = None, probe: bool = True, now: datetime | None = None) -> LabStatus:
    """EC2 labs: hosts, EC2 state, TTL left, cost so far (price table snapshot) and readiness per host.
    Inventory labs: per host whether SSH reaches it and, per instance, which sites are up (the host's
    own ``envctl status``) and whether its reset server is ready; no AWS call."""
    m = LabManifest.load(lab)
    by_name = {h.name: h for h in m.hosts}
    if m.kind != "ec2":
        return _inventory_status(m, probe)
    ec2 = ec2 or ec2_client(m.region or "")
    prices = ec2mod.load_prices()
    storage = int(m.spec.get("root_gb", 0)) + int(m.spec.get("data_gb", 0))
    out: list[HostStatus] = []
    for h in ec2mod.describe_hosts(ec2, lab):
        left = h.time_left(now)
        cost = ec2mod.cost_so_far(h, m.region or "", storage_gb=storage, prices=prices, now=now)
        rec = by_name.get(h.instance_id)
        live = probe and rec is not None and h.state == "running"
        insts = [InstanceHealth(i.instance, True, [], [], _ready(i.env) if live else None) for i in (rec.instances if rec else [])]
        out.append(HostStatus(h.instance_id, h.public_dns or h.public_ip, h.state, h.instance_type,
                              None if left is None else max(0, int(left.total_seconds() // 60)), cost,
                              _all_ready([i.ready for i in insts]) if live else None,
                              rec.error if rec else None, None, insts))
    costs = [h.cost_usd for h in out if h.cost_usd is not None]
    return LabStatus(lab, "ec2", m.region, out, round(sum(costs), 4) if costs else None, prices.snapshot_date)


def reset(lab: str, sites: Sequence[str] = (), *, progress: Callable[[PlayEvent], None] | None = None) -> PlayResult:
    """``envctl reset`` on every instance of every host of the lab, in parallel."""
    m = LabManifest.load(lab)
    inv = _inventory_for(m)
    return run_playbook("reset.yml", inv, progress=progress,
                        extravars={"envctl_reset_sites": list(sites), "envctl_instance_offsets": list(m.instance_offsets)})


def _inventory_for(m: LabManifest) -> dict[str, Any] | Path:
    if m.inventory_file:
        return Path(m.inventory_file)
    default_user = "ubuntu" if m.kind == "ec2" else "root"
    hosts = [InventoryHost(h.name, h.address, port=h.ssh_port, user=h.ssh_user or default_user,
                           key_file=h.key_file or m.resources.get("key_file"), become=m.kind == "ec2",
                           vars={"envctl_instance": h.instance, "envctl_port_offset": h.port_offset})
             for h in m.hosts]
    return inventory(hosts, known_hosts=lab_file(m.lab, ".known_hosts"))


def down(lab: str, *, ec2: Any = None, region: str | None = None, progress: Progress = print) -> ec2mod.Teardown | None:
    """Terminate the lab's instances and delete the group and key pair envctl created for it."""
    validate_lab_name(lab)
    if region is not None:
        validate_region(region)  # before anything is removed or AWS is called
    try:
        m: LabManifest | None = LabManifest.load(lab)
    except UsageError:
        m = None
        if not region:
            raise
    for suffix in (".leases.json", ".leases.json.lock"):  # a lab lease server's records (envctl.cloud.pool.LabStore)
        lab_file(lab, suffix).unlink(missing_ok=True)
    if m and m.kind != "ec2":
        m.path.unlink()
        progress(f"lab {lab} forgotten (its hosts are not envctl's to remove)")
        return None
    ec2 = ec2 or ec2_client(region or (m.region if m else "") or "")
    key_files = [str(m.resources["key_file"])] if m and m.resources.get("key_file") else []
    key_files.append(str(data_dir() / "keys" / f"envctl-{lab}.pem"))
    result = ec2mod.teardown(ec2, lab, key_files=key_files, progress=progress)
    if m:
        m.path.unlink(missing_ok=True)
    lab_file(lab, ".known_hosts").unlink(missing_ok=True)
    return result


def _agentlab(h: LabHost, inst: LabInstance) -> dict[str, Any]:
    """AgentLab's fields for one instance (as ``envformat.agentlab`` gives them locally): a lower-case
    key per WebArena site, ``full_reset``, ``base_url``; plus where it runs."""
    env = inst.env or {}
    entry: dict[str, Any] = {"host": h.name, "instance": inst.instance, "base_url": f"http://{h.public_host or h.address}"}
    entry.update({k[3:].lower(): v for k, v in env.items() if k.startswith("WA_")})
    entry.setdefault("full_reset", None)
    return entry


def env(lab: str, fmt: str = "json") -> list[dict[str, Any]]:
    """One URL set per instance of every host: json = the instance's env as is; browsergym = its
    WA_*/VWA_* vars; agentlab = AgentLab ``WebArenaInstanceVars`` fields."""
    m = LabManifest.load(lab)
    if fmt not in ("json", "browsergym", "agentlab"):
        raise UsageError(f"unknown env format '{fmt}'", "use json, browsergym or agentlab")
    out: list[dict[str, Any]] = []
    for h in m.hosts:
        for inst in h.instances:
            if not inst.env:
                continue
            if fmt == "json":
                out.append({"host": h.name, "instance": inst.instance, "env": inst.env, "reset_token": m.serve_token or None})
            elif fmt == "browsergym":
                out.append({k: v for k, v in inst.env.items() if k.startswith(("WA_", "VWA_")) or k == "DATASET"})
            else:
                out.append(_agentlab(h, inst))
    if not out:
        raise CloudError(f"lab {lab} has no host with a collected environment",
                         f"run 'envctl cloud up --lab {lab}' again, or see 'envctl cloud status --lab {lab}'")
    return out
