"""Cloud labs: N hosts (EC2 or any SSH host list) each running one envctl instance.

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
"""
from __future__ import annotations

import json
import math
import os
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
from envctl.provision import ec2 as ec2mod
from envctl.provision.ansible import InventoryHost, PlayEvent, PlayResult, inventory, run_playbook
from envctl.provision.aws import ec2_client
from envctl.provision.package import ControllerPackage, controller_wheel
from envctl.validate import validate_host, validate_instance_name, validate_lab_name, validate_port_offset

Progress = Callable[[str], None]
GB = 1_000_000_000
ROOT_BASE_GB = 30  # OS, Docker engine, envctl and logs


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
class LabHost:
    name: str  # inventory name (the instance id on EC2)
    address: str
    instance: str = "default"
    port_offset: int = 0
    public_host: str = ""
    instance_id: str | None = None
    env: dict[str, Any] | None = None  # the host's `envctl env --json`
    error: str | None = None  # the failing task and its output, when the play failed here


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
        raw["hosts"] = [LabHost(**h) for h in raw.get("hosts", [])]
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


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def _configure(m: LabManifest, inv: dict[str, Any] | Path, *, lifecycle: bool, wheelhouse: bool,
               images_url: str, progress: Progress, playbook_progress: Callable[[PlayEvent], None] | None,
               package: ControllerPackage | None = None) -> PlayResult:
    with tempfile.TemporaryDirectory(prefix="envctl-wheel-") as tmp:
        pkg = package or controller_wheel(Path(tmp), with_dependencies=wheelhouse)
        progress(f"configuring {len(m.hosts) or 'the'} host(s) with envctl {pkg.version}")
        result = run_playbook(
            "site.yml", inv, progress=playbook_progress,
            extravars={
                "envctl_wheel": str(pkg.wheel), "envctl_wheel_sha256": pkg.sha256, "envctl_version": pkg.version,
                "envctl_wheelhouse": str(pkg.wheelhouse) if pkg.wheelhouse else "", "envctl_flavor": m.flavor,
                "envctl_sites": m.sites, "envctl_lifecycle": lifecycle, "envctl_images_url": images_url,
                "envctl_serve_token": m.serve_token,
            },
        )
    failed = {f.host: f for f in result.failures}
    known = {h.name for h in m.hosts}
    for name in result.hosts:  # hosts from a user inventory file are learnt from the play
        if name not in known:
            m.hosts.append(LabHost(name=name, address=name))
    for h in m.hosts:
        f = failed.get(h.name)
        h.error = f.line() if f else None
        env = result.collected.get(h.name, {}).get("env")
        if env is not None:
            h.env = env if isinstance(env, dict) else {"raw": env}
    m.last_play_seconds = round(result.seconds, 1)
    m.save()
    for f in result.failures:
        progress(f"FAILED {f.line()}")
    return result


def up_inventory(lab: str, hosts: Sequence[InventoryHost] | None = None, *, inventory_file: Path | None = None,
                 flavor: str = "mini", sites: str = "all", lifecycle: bool = True, wheelhouse: bool = False,
                 images_url: str = "", progress: Progress = print,
                 playbook_progress: Callable[[PlayEvent], None] | None = None,
                 package: ControllerPackage | None = None) -> tuple[LabManifest, PlayResult]:
    """Configure a lab of existing SSH hosts (``hosts`` or the user's inventory file).

    ``package`` reuses an already built controller wheel (see ``package.controller_wheel``)."""
    validate_lab_name(lab)
    if (hosts is None) == (inventory_file is None):
        raise UsageError("give either hosts or an inventory file")
    for h in hosts or ():
        validate_instance_name(str(h.vars.get("envctl_instance", "default")))
        validate_port_offset(h.vars.get("envctl_port_offset", 0))
        for key in ("envctl_public_host", "envctl_bind"):
            if key in h.vars:
                validate_host(str(h.vars[key]), key)
    m = LabManifest(lab=lab, kind="inventory", created=_now(), flavor=flavor, sites=sites,
                    inventory_file=str(inventory_file) if inventory_file else None, serve_token=lab_token(lab))
    for h in hosts or ():
        m.hosts.append(LabHost(name=h.name, address=h.address, instance=str(h.vars.get("envctl_instance", "default")),
                               port_offset=int(h.vars.get("envctl_port_offset", 0)),
                               public_host=str(h.vars.get("envctl_public_host", h.address))))
    m.save()
    known_hosts = lab_file(lab, ".known_hosts")
    inv: dict[str, Any] | Path = inventory_file if inventory_file else inventory(hosts or [], known_hosts=known_hosts)
    result = _configure(m, inv, lifecycle=lifecycle, wheelhouse=wheelhouse, images_url=images_url,
                        progress=progress, playbook_progress=playbook_progress, package=package)
    return m, result


def up_ec2(spec: ec2mod.Ec2LabSpec, *, flavor: str = "mini", sites: str = "all", configure: bool = True,
           lifecycle: bool = True, wheelhouse: bool = False, images_url: str = "", ssh_user: str = "ubuntu",
           progress: Progress = print, playbook_progress: Callable[[PlayEvent], None] | None = None,
           ec2: Any = None) -> tuple[LabManifest, PlayResult | None]:
    """Create (or complete) an EC2 lab, then configure its hosts with the playbook."""
    spec.validate()
    ec2 = ec2 or ec2_client(spec.region)
    res = ec2mod.LabResources()
    m = LabManifest(lab=spec.lab, kind="ec2", created=_now(), region=spec.region, flavor=flavor, sites=sites,
                    spec=asdict(spec), serve_token=lab_token(spec.lab))
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
        m.hosts.append(LabHost(name=h.instance_id, address=addr, public_host=addr, instance_id=h.instance_id))
    m.save()
    if not configure:
        return m, None
    inv_hosts = [InventoryHost(name=h.name, address=h.address, user=ssh_user, key_file=res.key_file, become=True,
                               vars={"envctl_public_host": h.public_host}) for h in m.hosts]
    known_hosts = lab_file(spec.lab, ".known_hosts")
    result = _configure(m, inventory(inv_hosts, known_hosts=known_hosts), lifecycle=lifecycle, wheelhouse=wheelhouse,
                        images_url=images_url, progress=progress, playbook_progress=playbook_progress)
    return m, result


def _with_hosts(spec: ec2mod.Ec2LabSpec, n: int) -> ec2mod.Ec2LabSpec:
    from dataclasses import replace

    return replace(spec, hosts=n)


@dataclass(frozen=True)
class HostStatus:
    name: str
    address: str
    state: str  # EC2 state, or "configured" / "failed" for inventory labs
    instance_type: str | None
    time_left_minutes: int | None
    cost_usd: float | None
    ready: bool | None  # the reset server's /status says "Ready for duty!"
    error: str | None


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


def status(lab: str, *, ec2: Any = None, probe: bool = True, now: datetime | None = None) -> LabStatus:
    """Hosts, EC2 state, TTL left, cost so far (price table snapshot) and readiness per host."""
    m = LabManifest.load(lab)
    by_name = {h.name: h for h in m.hosts}
    if m.kind != "ec2":
        hosts = [HostStatus(h.name, h.address, "failed" if h.error else "configured", None, None, None,
                            _ready(h.env) if probe else None, h.error) for h in m.hosts]
        return LabStatus(lab, m.kind, None, hosts, None, None)
    ec2 = ec2 or ec2_client(m.region or "")
    prices = ec2mod.load_prices()
    storage = int(m.spec.get("root_gb", 0)) + int(m.spec.get("data_gb", 0))
    out: list[HostStatus] = []
    for h in ec2mod.describe_hosts(ec2, lab):
        left = h.time_left(now)
        cost = ec2mod.cost_so_far(h, m.region or "", storage_gb=storage, prices=prices, now=now)
        rec = by_name.get(h.instance_id)
        out.append(HostStatus(h.instance_id, h.public_dns or h.public_ip, h.state, h.instance_type,
                              None if left is None else max(0, int(left.total_seconds() // 60)), cost,
                              _ready(rec.env) if (probe and rec and h.state == "running") else None,
                              rec.error if rec else None))
    costs = [h.cost_usd for h in out if h.cost_usd is not None]
    return LabStatus(lab, "ec2", m.region, out, round(sum(costs), 4) if costs else None, prices.snapshot_date)


def reset(lab: str, sites: Sequence[str] = (), *, progress: Callable[[PlayEvent], None] | None = None) -> PlayResult:
    """``envctl reset`` on every host of the lab, in parallel."""
    m = LabManifest.load(lab)
    inv = _inventory_for(m)
    return run_playbook("reset.yml", inv, extravars={"envctl_reset_sites": list(sites)}, progress=progress)


def _inventory_for(m: LabManifest) -> dict[str, Any] | Path:
    if m.inventory_file:
        return Path(m.inventory_file)
    key = m.resources.get("key_file")
    user = "ubuntu" if m.kind == "ec2" else "root"
    hosts = [InventoryHost(h.name, h.address, user=user, key_file=key, become=m.kind == "ec2",
                           vars={"envctl_instance": h.instance, "envctl_port_offset": h.port_offset})
             for h in m.hosts]
    return inventory(hosts, known_hosts=lab_file(m.lab, ".known_hosts"))


def down(lab: str, *, ec2: Any = None, region: str | None = None, progress: Progress = print) -> ec2mod.Teardown | None:
    """Terminate the lab's instances and delete the group and key pair envctl created for it."""
    validate_lab_name(lab)
    try:
        m: LabManifest | None = LabManifest.load(lab)
    except UsageError:
        m = None
        if not region:
            raise
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


def env(lab: str, fmt: str = "json") -> list[dict[str, Any]]:
    """One URL set per host: json = the host's env as is; browsergym = its WA_*/VWA_* vars;
    agentlab = AgentLab ``WebArenaInstanceVars`` fields."""
    m = LabManifest.load(lab)
    out: list[dict[str, Any]] = []
    for h in m.hosts:
        if not h.env:
            continue
        if fmt == "json":
            out.append({"host": h.name, "instance": h.instance, "env": h.env, "reset_token": m.serve_token or None})
        elif fmt == "browsergym":
            out.append({k: v for k, v in h.env.items() if k.startswith(("WA_", "VWA_")) or k == "DATASET"})
        elif fmt == "agentlab":
            wa = {k[3:].lower(): v for k, v in h.env.items() if k.startswith("WA_")}
            wa["base_url"] = f"http://{h.public_host or h.address}"
            out.append(wa)
        else:
            raise UsageError(f"unknown env format '{fmt}'", "use json, browsergym or agentlab")
    if not out:
        raise CloudError(f"lab {lab} has no host with a collected environment",
                         f"run 'envctl cloud up --lab {lab}' again, or see 'envctl cloud status --lab {lab}'")
    return out
