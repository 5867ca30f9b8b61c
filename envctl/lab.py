"""``Lab``: the Python API behind every envctl command, a thin facade over :class:`Instance`.

A harness can use it directly between episodes::

    from envctl import Lab
    lab = Lab(instance="default")
    lab.up(["shopping", "reddit"], flavor="mini")
    urls = lab.env("webarena")          # {"SHOPPING": "http://127.0.0.1:7770", ...}
    lab.reset(["shopping"])
    lab.down()

The work is done below: :mod:`envctl.instance` (one running instance: routing table, copies,
probes), :mod:`envctl.state` (reset tiers, spares, snapshots), :mod:`envctl.auth` (login state).
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from envctl.auth import Report, Target, check, login_sites
from envctl.auth import login as log_in
from envctl.catalog import Catalog, Renderer, load_catalog
from envctl.errors import DockerError, EnvctlError, ImageMissing, NoBrowser, NoSuchInstance, PortInUse, ResetFailed, SiteNotUp, UsageError
from envctl.healthchecks.fingerprint import Fingerprint
from envctl.healthchecks.probes import ProbeResult
from envctl.healthchecks.wait import Cancelled, wait_for
from envctl.images.build import PROXY_IMAGE, build as build_image, proxy_build
from envctl.instance import Instance, Progress, _noop, network_name, read_settings
from envctl.locks import Busy, locked
from envctl.paths import data_dir, executable_file, usable_dir
from envctl.provision import docker as dk
from envctl.provision import proxy
from envctl.provision.local import Copy, InstanceSettings
from envctl.provision.ports import port_bindable, port_holder
from envctl.state import capacity
from envctl.state import reset as resets
from envctl.state import snapshots
from envctl.state import warm as warm_mod
from envctl.smoke import SmokeResult, TaskResult, load_task_set, run_smoke
from envctl.smoke.judge import Judge
from envctl.state.reset import Logins, ResetResult, VerifyResult
from envctl.validate import env_value, validate_duration, validate_host, validate_instance_name, validate_port_offset


def _asdict(obj: Any) -> dict[str, Any]:
    return asdict(obj)


@dataclass
class SiteResult:
    site: str
    ok: bool
    action: str  # created | kept | repaired | failed | interrupted
    url: str
    timings: dict[str, float] = field(default_factory=dict)
    error: str = ""
    probes: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class UpResult:
    instance: str
    flavor: str
    sites: list[SiteResult]
    seconds: float
    login_files: list[str] = field(default_factory=list)
    login_error: str = ""
    spares: dict[str, int] = field(default_factory=dict)  # spares per site set by this 'up' (booted in the background)
    spares_short: dict[str, str] = field(default_factory=dict)  # site -> why the plan gave it fewer than it wants

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.sites) and not self.login_error

    def to_dict(self) -> dict[str, Any]:
        return {"instance": self.instance, "flavor": self.flavor, "ok": self.ok, "seconds": round(self.seconds, 3),
                "sites": [asdict(s) for s in self.sites], "login_files": self.login_files,
                "login_error": self.login_error, "spares": self.spares, "spares_short": self.spares_short}


@dataclass
class ContainerStatus:
    name: str
    service: str
    slot: str
    role: str  # active | spare | booting
    state: str
    image: str
    golden: str | None
    uptime_s: float


@dataclass
class SiteStatus:
    site: str
    url: str
    flavor: str
    healthy: bool
    probes: list[dict[str, Any]]
    containers: list[ContainerStatus]
    spares_ready: int
    spares_wanted: int = 0  # what the site keeps: the catalog's want when the capacity plan decides it
    spares_note: str = ""  # why it gets fewer than it wants (the capacity plan's reason), else ""


@dataclass
class Status:
    instance: str
    flavor: str
    public_host: str
    bind: str
    port_offset: int
    sites: list[SiteStatus]
    running: bool = True
    lease: dict[str, Any] = field(default_factory=dict)  # pool, state, holder, sites, expires (a pool member)

    @property
    def healthy(self) -> bool:
        return all(s.healthy for s in self.sites)

    def to_dict(self) -> dict[str, Any]:
        return _asdict(self)


@dataclass
class DownResult:
    instance: str
    removed: list[str]
    kept: list[str] = field(default_factory=list)  # what the engine would not remove (reused by the next 'up')

    def to_dict(self) -> dict[str, Any]:
        return _asdict(self)


@dataclass
class SnapshotResult:
    site: str
    name: str
    images: dict[str, str]
    fingerprint: str
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)  # phases in seconds (freeze: the site's pause)
    method: str = ""  # create: freeze | stop; restore: warm | cold
    attempts: int = 1  # captures made (a write during the first makes a second)
    warm: list[str] = field(default_factory=list)  # warm copies (create) / the one swapped in (restore)
    login: str = ""  # restore: kept | stash | renewed | none
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return _asdict(self)


@dataclass
class InstanceInfo:
    instance: str
    flavor: str
    public_host: str
    bind: str
    port_offset: int
    state: str
    sites: list[str]
    webarena: dict[str, str]
    visualwebarena: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return _asdict(self)


class Lab:
    """One envctl instance on the local Docker engine (it need not be running yet)."""

    def __init__(self, catalog: Catalog | None = None, *, catalog_path: str | None = None,
                 instance: str = "default", auth_dir: str | Path | None = None) -> None:
        self.instance = validate_instance_name(instance)
        self.catalog = catalog or load_catalog(catalog_path)
        self.catalog_path = catalog_path or os.environ.get("ENVCTL_CATALOG")
        if auth_dir:  # every command that takes one writes login files there: refuse a file (or under one) now
            usable_dir(auth_dir, "auth directory", hint="give --auth-dir a folder you can write")
        self.auth_dir = Path(auth_dir) if auth_dir else Path(".auth") if instance == "default" else Path(".auth") / instance
        self.cancel = threading.Event()
        self.login_error = ""

    # -- the running instance ------------------------------------------------------------------
    def settings(self) -> InstanceSettings | None:
        """The running instance's settings (from labels), or None if it does not exist."""
        return read_settings(self.instance)

    def find(self) -> Instance | None:
        return Instance.find(self.catalog, self.instance, cancel=self.cancel)

    def running(self) -> Instance:
        """The running instance; NoSuchInstance when there is none."""
        return Instance.get(self.catalog, self.instance, cancel=self.cancel)

    @property
    def logins(self) -> Logins:
        return Logins(self.auth_dir, self.catalog_path)

    def sites_up(self) -> list[str]:
        inst = self.find()
        return inst.sites_up(inst.table()) if inst else []

    # -- up ----------------------------------------------------------------------------------
    def _settings_for_up(self, flavor: str | None, public_host: str | None, bind: str | None,
                         port_offset: int | None) -> InstanceSettings:
        current = self.settings()
        if current is None:
            return InstanceSettings(self.instance, flavor or "full", public_host or "127.0.0.1", bind or "127.0.0.1",
                                    port_offset or 0, "http", str(data_dir(flavor or "full")))
        wanted = {"flavor": flavor, "public_host": public_host, "bind": bind, "port_offset": port_offset}
        clash = [f"{k}={getattr(current, k)}" for k, v in wanted.items() if v is not None and v != getattr(current, k)]
        if clash:
            raise UsageError(f"instance '{self.instance}' already runs with {', '.join(clash)}",
                             f"run 'envctl down --instance {self.instance}' first, or use another --instance")
        return current

    def _check_ports(self, sites: list[str], settings: InstanceSettings) -> list[int]:
        d = settings.deployment
        owned = set(proxy.published_ports(self.instance))
        ports = {d.port(p) for s in sites for svc, p in self.catalog.site(s).public_ports().items()
                 if settings.flavor in self.catalog.site(s).services[svc].flavors}
        # Docker's own allocations too: a container that fails to publish can leave a stale endpoint
        # behind in the network (an engine bug), so a clash must be refused before anything is made.
        published = dk.published_host_ports()
        for port in sorted(ports):
            if port not in owned and (not port_bindable(settings.bind, port) or port in published):
                raise PortInUse(f"port {port} on {settings.bind} is in use by {port_holder(port)}",
                                "stop it, or pass --port-offset N (e.g. --port-offset 100) or another --instance")
        return sorted(ports | owned)

    def _check_images(self, sites: list[str], inst: Instance) -> None:
        missing = inst.backend.missing_images(sites)
        if not missing:
            return
        names = ", ".join(f"{img} ({site})" for site, img, _ in missing)
        flavor = f" --flavor {inst.flavor}" if inst.flavor != "full" else ""
        if all(build for _, _, build in missing):
            hint = f"build them with 'envctl images build --flavor {inst.flavor}'"
        else:
            hint = f"get them with 'envctl images get{flavor} " + " ".join(sorted({s for s, _, _ in missing})) + "'"
        raise ImageMissing(f"missing images: {names}", hint)

    def _ensure_proxy(self, settings: InstanceSettings, ports: list[int], progress: Progress) -> None:
        labels = settings.labels()
        net = network_name(self.instance)
        existed = net in dk.networks(instance=self.instance)
        dk.ensure_network(net, labels)
        c = dk.inspect(proxy.proxy_name(self.instance))
        if c is not None and c.state.running and set(ports) <= set(proxy.published_ports(self.instance)) \
                and proxy.controlled(c):  # an older proxy without the control service is replaced
            return
        table = proxy.read_state(self.instance) if c is not None and c.state.running else None
        progress("*", "proxy", f"front proxy on {settings.bind}: ports {', '.join(map(str, ports))}")
        try:
            if not dk.image_exists(PROXY_IMAGE):
                build_image(proxy_build())
            proxy.create(self.instance, net, settings.bind, ports, labels, table, image=PROXY_IMAGE)
        except BaseException:
            if not existed:
                dk.remove_network(net)  # a refused 'up' of a new instance leaves nothing behind
            raise

    def up(self, sites: list[str] | None = None, *, all_sites: bool = False, flavor: str | None = None,
           public_host: str | None = None, bind: str | None = None, port_offset: int | None = None,
           wait: bool = True, login: bool = False, spares: int | None = None,
           progress: Progress = _noop) -> UpResult:
        """Bring sites to a healthy, configured, reachable state; check and repair what already runs."""
        start = time.monotonic()
        if sites and all_sites:
            raise UsageError("name sites or pass --all, not both", "e.g. 'envctl up shopping' or 'envctl up --all'")
        names = self.catalog.resolve(sites, all_sites=all_sites or not sites)
        if flavor is not None and flavor not in self.catalog.flavors():
            raise UsageError(f"unknown flavor '{flavor}'", f"choose one of {', '.join(self.catalog.flavors())}")
        for value, what in ((public_host, "--public-host"), (bind, "--bind")):
            if value is not None:
                validate_host(value, what)
        if port_offset is not None:
            validate_port_offset(port_offset, [p for n in names for p in self.catalog.site(n).public_ports().values()])
        dk.engine_info()
        with locked(f"instance.{self.instance}"):
            settings = self._settings_for_up(flavor, public_host, bind, port_offset)
            self.catalog.require_flavor(sites if sites and not all_sites else (), settings.flavor)
            lacking = [n for n in names if settings.flavor not in self.catalog.site(n).flavors]
            names = [n for n in names if n not in lacking]
            if not names:
                raise UsageError(f"no site asked for has the flavor '{settings.flavor}'", "see 'envctl sites list'")
            for n in lacking:  # --all or a dependency: the sites this flavor does not have are left out, and said so
                progress(n, "skip", f"no {settings.flavor} flavor: left out (see 'envctl sites show {n}')")
            inst = Instance(self.catalog, settings, cancel=self.cancel)
            self._check_images(names, inst)
            ports = self._check_ports(names, settings)
            self._ensure_proxy(settings, ports, progress)
            done: dict[str, threading.Event] = {n: threading.Event() for n in names}

            def one(name: str) -> SiteResult:
                for dep in self.catalog.site(name).depends_on:
                    if dep in done:
                        done[dep].wait()
                try:
                    return self._ensure_site(inst, name, wait=wait, progress=progress)
                finally:
                    done[name].set()

            with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
                futures = {n: pool.submit(one, n) for n in names}
                try:
                    results = {n: f.result() for n, f in futures.items()}
                except KeyboardInterrupt:
                    self.cancel.set()
                    raise
        result = UpResult(self.instance, settings.flavor, [results[n] for n in names], time.monotonic() - start)
        if login and result.ok and wait:
            result.login_files = self._seed_logins([s.site for s in result.sites], progress)
            result.login_error = self.login_error
        want, planned = self._spares_wanted(inst, names, spares)
        if want:
            # Spares are booted by a detached process: 'up' returns when the active copies are healthy.
            with inst.routing() as table:
                table.wanted.update(want)
                for n in want:  # the plan's sites are re-planned by replenishers; '--spares K' sites are not
                    if n in planned:
                        table.planned[n] = planned[n]
                    else:
                        table.planned.pop(n, None)
            result.spares = want
            result.spares_short = {n: e["why"] for n, e in planned.items() if e["why"]}
            for why in result.spares_short.values():
                progress("*", "spares", f"fewer spares than the catalog wants: {why}")
            boot = [n for n, k in want.items() if k > 0]
            if boot and result.ok:
                progress("*", "spares", "booting spares in the background: "
                         + ", ".join(f"{n} {want[n]}" for n in boot))
                resets.spawn_replenish(inst, self.logins, boot)
        return result

    def _spares_wanted(self, inst: Instance, names: list[str],
                       spares: int | None) -> tuple[dict[str, int], dict[str, dict[str, Any]]]:
        """Spares per site this 'up' sets: ``--spares K`` for every spare-tier site; without it, what the
        capacity plan grants the sites that have no setting yet, or that it gave fewer than they want
        (planned again: memory may have freed up). The plan counts what copies really use (measured on
        the engine, × a margin, capped by the limits), here and in the other instances on the engine.
        Returns (spares, the plan's outcome for the sites it decided: {"wanted", "why"})."""
        spare_sites = [n for n in names if self.catalog.site(n).reset.tier == "spare"]
        if spares is not None:
            return {n: spares for n in spare_sites}, {}
        table = inst.table()
        fresh = [n for n in spare_sites if n not in table.wanted or capacity.short(table, n)]
        if not fresh:
            return {}, {}
        up = inst.sites_up(table)
        fixed = {n: table.wanted.get(n, 0) for n in up if n not in fresh}
        p = capacity.plan_spares(inst, up, fixed=fixed, at_least={n: table.wanted.get(n, 0) for n in fresh})
        planned: dict[str, dict[str, Any]] = {}
        capacity.record(planned, p, [n for n in fresh if n in up])
        granted = p.spares()
        return {n: granted.get(n, 0) for n in fresh}, planned

    def _ensure_site(self, inst: Instance, name: str, *, wait: bool, progress: Progress) -> SiteResult:
        site = self.catalog.site(name)
        url = inst.settings.deployment.url(site) + site.url_path
        timings: dict[str, float] = {}
        action = "created"
        fresh = booted = False  # booted: a new copy made here (else the running one, repaired in place)
        try:
            table = inst.table()
            active = inst.active_copy(name, table)
            if active is None and table.active.get(name):
                action = "repaired"  # routed before, but its containers are gone
                progress(name, "repair", "the active copy's containers are gone; recreating the site")
            expected = set(site.services_for(inst.flavor))
            copy: Copy
            if active is not None and active.running() and set(active.containers) == expected:
                progress(name, "check", "running; checking health")
                ok, results = inst.probe(name)
                if ok:
                    progress(name, "healthy", "already healthy")
                    return SiteResult(name, True, "kept", url, timings, probes=[r.to_dict() for r in results])
                action = "repaired"
                copy = active  # running but unhealthy: configure again (idempotent) and wait
                inst.backend.configure(copy, progress=progress)
            else:
                if active is not None:
                    action = "repaired"
                    progress(name, "repair", "a container is missing or stopped; recreating the site")
                    inst.backend.remove_copy(active)
                # Leftovers of an interrupted run that never got routed are not worth keeping. Ready spares
                # and warm copies are kept, and so is a spare a replenisher is booting right now: it holds
                # the site's spare lock (and removes leftovers itself when it is done).
                try:
                    with locked(f"spare.{inst.name}.{name}", wait=False):
                        inst.remove_strays(name, inst.table())
                except Busy:
                    pass
                images, golden = snapshots.golden_images(inst, name)
                with locked(inst.boot_lock(name)):  # a replenisher's cleanup leaves it alone until routed
                    copy = inst.boot_copy(name, role="active", images=images, golden=golden, progress=progress,
                                          timings=timings)
                    with inst.routing() as table:
                        inst.route(table, copy)
                booted = True
                fresh = not golden  # configured here: pristine, without the in-place tier's saved state
            if not booted:
                with inst.routing() as table:
                    inst.route(table, copy)
                    # a copy that ran before, restarted alone, may have a new address
                    moved = proxy.refresh(inst.name, table, [c.name for c in copy.containers.values()])
                    if moved:
                        progress(name, "repair", f"the proxy routes {', '.join(moved)} at its new address")
            if not wait:
                return SiteResult(name, True, action, url, timings)
            t = time.monotonic()
            progress(name, "wait", "waiting for health probes")
            results = inst.wait_healthy(copy, check=lambda: inst.probe(name))
            timings["healthy"] = time.monotonic() - t
            self._record_pristine(inst, copy, fresh=fresh, booted=booted)
            if fresh:
                t = time.monotonic()
                if inst.save_inplace(copy, progress):
                    timings["save"] = time.monotonic() - t
            progress(name, "healthy", f"healthy at {url}")
            return SiteResult(name, True, action, url, timings, probes=[r.to_dict() for r in results])
        except Cancelled:
            return SiteResult(name, False, "interrupted", url, timings, "interrupted; run 'envctl up' again to finish")
        except EnvctlError as exc:
            progress(name, "failed", str(exc).splitlines()[0])
            return SiteResult(name, False, "failed", url, timings, str(exc))

    @staticmethod
    def _record_pristine(inst: Instance, copy: Copy, *, fresh: bool, booted: bool) -> None:
        """Record what 'pristine' means for ``copy``'s site after 'up' made or repaired it.

        A fresh configured copy (no golden), fingerprinted before any login, defines it. A copy booted
        from a golden image takes the golden's own label. A copy that ran before (repaired in place)
        may have been written to: it never defines pristine, whatever it was booted from."""
        site = copy.site
        fp: Fingerprint | None = None
        if fresh:
            fp = inst.fingerprint(copy)
        elif copy.golden and not copy.golden.startswith("snapshot:"):
            fp = snapshots.golden_fingerprint(inst, site, copy.golden)
            if fp is None and booted and site not in inst.table().pristine:
                fp = inst.fingerprint(copy)  # an unlabelled golden: the copy just booted from it is its state
        if fp is not None:
            with inst.routing() as table:
                table.pristine[site] = fp.to_json()

    # -- login state -----------------------------------------------------------------------------
    def login(self, sites: list[str] | None = None, *, out: str | Path | None = None,
              max_age: float | None = None) -> dict[str, Path]:
        """Write (or keep, if younger than ``max_age`` seconds and valid) the login state files."""
        self._check_login_output(out)
        return login_sites(self, sites, out=out, max_age=max_age)

    def login_report(self, sites: list[str] | None = None, *, out: str | Path | None = None,
                     check_only: bool = False, max_age: str | float | None = None) -> Report:
        """Log in (or, with ``check_only``, probe the existing files); one result per state file."""
        if isinstance(max_age, str):
            max_age = validate_duration(max_age, "--max-age")
        self._check_login_output(out, write=not check_only)
        if self.settings() is None:
            raise NoSuchInstance(self.instance)
        target = Target.of_lab(self, out)
        if check_only:
            return check(target, sites)
        return log_in(target, sites, max_age=max_age)

    def _check_login_output(self, out: str | Path | None, *, write: bool = True) -> None:
        """Before any browser starts: the folder the files go to is a folder (not a file, not under
        one) and writable, and ``$ENVCTL_CHROMIUM``, when set, is an executable file."""
        usable_dir(out or self.auth_dir, "--out" if out else "auth directory", writable=write,
                   hint="give --out a folder you can write")
        chromium = env_value("ENVCTL_CHROMIUM") if write else None
        if chromium:  # a directory or a file without the x bit: one line, not a launch log per site
            executable_file(chromium, "ENVCTL_CHROMIUM")

    def _seed_logins(self, sites: list[str], progress: Progress) -> list[str]:
        """Seed login state after 'up'; a failure is reported, it does not undo healthy sites."""
        with_login = [s for s in sites if self.catalog.site(s).login]
        if not with_login:
            return []
        progress("*", "login", f"seeding login state for {', '.join(with_login)}")
        try:
            return sorted(login_sites(self, with_login))
        except EnvctlError as exc:
            self.login_error = str(exc)
        except Exception as exc:  # noqa: BLE001 - the browser stack (Playwright driver) failing
            self.login_error = (f"the browser could not run ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
                                "check 'envctl doctor', or pass --no-login and run 'envctl login' where a browser works")
        progress("*", "failed", f"login state: {self.login_error.splitlines()[0]}")
        return []

    # -- state: reset, verify, snapshots ---------------------------------------------------------
    def _up_sites(self, inst: Instance, sites: list[str] | None, all_sites: bool) -> list[str]:
        up = inst.sites_up(inst.table())
        if sites:
            self.catalog.resolve(sites)  # unknown names are a usage error, with a suggestion
            missing = [n for n in sites if n not in up]
            if missing:
                raise UsageError(f"not up in instance '{self.instance}': {', '.join(missing)}", "run 'envctl up' first")
        return [n for n in self.catalog.resolve(sites, all_sites=all_sites or not sites) if n in up]

    def reset(self, sites: list[str] | None = None, *, all_sites: bool = False, tier: str | None = None,
              wait: bool = True, progress: Progress = _noop, replenish_async: bool = True) -> list[ResetResult]:
        """Reset sites to their pristine state (fastest tier first), each ending verified."""
        if sites:
            self.catalog.resolve(sites)  # a typo is a usage error before anything else
        inst = self.running()
        names = self._up_sites(inst, sites, all_sites)
        # Sites reset side by side: login files pairing two of them (gitlab.reddit_state.json) are
        # made once every site has its final copy, not while the partner is being swapped.
        defer = sum(1 for n in names if self.catalog.site(n).login) > 1
        with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
            futures = [pool.submit(resets.reset_site, inst, self.logins, n, tier=tier, wait=wait, progress=progress,
                                   replenish_async=replenish_async, defer_login=defer) for n in names]
            results = [f.result() for f in futures]
        renew = [r.site for r in results
                 if r.ok and r.tier in ("recreate", "spare", "inplace") and self.catalog.site(r.site).login]
        if defer and renew:
            t = time.monotonic()
            progress("*", "login", "renewing the login files of " + ", ".join(renew))
            try:
                resets.login(inst, self.logins, renew)
            except NoBrowser as exc:  # a machine without a browser (a lab host): the sites are pristine anyway
                for r in results:
                    if r.site in renew:
                        r.note = f"login files not renewed: {str(exc).splitlines()[0]}"
            for r in results:
                if r.site in renew:
                    r.phases["login"] = time.monotonic() - t
        return results

    def verify(self, site: str) -> VerifyResult:
        return resets.verify(self.running(), site)

    def replenish(self, site: str, want: int | None = None, progress: Progress = _noop, *,
                  wait: bool = True) -> list[str]:
        """Boot spares of ``site`` until ``want`` (default: the instance's setting) are ready; returns the
        slots booted. A background replenisher already at work is waited for (``wait=False``: return at once)."""
        self.catalog.site(site)
        return resets.replenish(self.running(), self.logins, site, want, progress, wait=wait)

    def snapshot_create(self, site: str, name: str = "golden", progress: Progress = _noop, *, warm: bool = False,
                        clean_stop: bool = False) -> SnapshotResult:
        """Commit the active copy (volumes included) as golden or as a named snapshot.

        A named snapshot freezes the copy for the commit only (the site keeps serving; requests wait,
        none fails), unless ``clean_stop`` or the site's catalog asks for a clean stop (see
        :mod:`envctl.state.snapshots`). Golden images keep the clean stop. ``warm``: also boot a copy
        from the snapshot, verified, and keep it ready so that a restore is a route swap."""
        if name == "golden" and warm:
            raise UsageError("golden has no warm copies: its ready copies are the spares",
                             f"use 'envctl up {site} --spares 1', or name the snapshot")
        snapshots.validate_name(name)  # a bad name is refused before anything runs
        inst = self.running()
        t = time.monotonic()
        timings: dict[str, float] = {}
        method, attempts, note = "stop", 1, ""
        with locked(f"reset.{self.instance}.{site}"):
            copy = inst.active_copy(site, inst.table())
            if copy is None:
                raise SiteNotUp(site, self.instance)
            if snapshots.thaw(inst, copy):
                progress(site, "snapshot", "unpaused containers a killed capture had left frozen")
            if name == "golden":
                tf = time.monotonic()
                fp = inst.fingerprint(copy)
                timings["fingerprint"] = time.monotonic() - tf
                # Pristine is redefined as this state: the in-place tier must restore it, not the state
                # saved when the copy was configured (the golden then carries it to every copy).
                tf = time.monotonic()
                if inst.save_inplace(copy, progress):
                    timings["save"] = time.monotonic() - tf
                progress(site, "snapshot", "clean stop, commit, start")
                tf = time.monotonic()
                key = snapshots.commit_golden(inst, copy, fp)
                timings["stop_commit_start"] = time.monotonic() - tf
                tags = snapshots.golden_tags(inst, site, key)
                with inst.routing() as table:
                    table.pristine[site] = fp.to_json()
                inst.wait_healthy(copy, progress, check=lambda: inst.probe(site))
            else:
                cap = snapshots.capture_live(inst, copy, name, progress, clean_stop=clean_stop)
                tags, fp, method, attempts, note = cap.tags, cap.fingerprint, cap.method, cap.attempts, cap.note
                timings.update(cap.timings)
                if method == "stop":
                    inst.wait_healthy(copy, progress, check=lambda: inst.probe(site))
                warm_mod.stash_logins(self.logins, site, name)
            timings["capture"] = time.monotonic() - t
        slots: list[str] = []
        if name != "golden":
            # warm copies booted from the images this snapshot replaces are stale
            stale = warm_mod.drop(inst, site, name)
            if stale:
                progress(site, "warm", f"removed {len(stale)} warm copies of the replaced snapshot")
            if warm:
                tw = time.monotonic()
                warm_mod.want(inst, site, name)
                warm_mod.replenish(inst, self.logins, site, progress)
                slots = inst.table().warm.get(site, {}).get(name, [])
                timings["warm"] = time.monotonic() - tw
                if not slots:
                    raise ResetFailed(f"{site}: no warm copy of '{name}' became ready",
                                      f"see 'envctl status' and 'envctl logs {site}'")
        return SnapshotResult(site, name, tags, fp.digest, round(time.monotonic() - t, 3),
                              {k: round(v, 3) for k, v in timings.items()}, method, attempts, slots, note=note)

    def snapshot_restore(self, site: str, name: str, progress: Progress = _noop, *,
                         background: bool = True) -> SnapshotResult:
        """Make SITE's state the named snapshot's: swap in its warm copy when one is ready (else boot one
        from the images), verified by probes and fingerprint, login files valid; the old copy is removed
        and the next warm copy booted in the background (``background``) or before returning."""
        snapshots.validate_name(name)
        inst = self.running()
        tags = snapshots.snapshot_tags(inst, site, name)
        if not all(dk.image_exists(t) for t in tags.values()):
            raise UsageError(f"no snapshot '{name}' of {site} in instance '{self.instance}'", "see 'envctl snapshot list'")
        t = time.monotonic()
        res = warm_mod.restore(inst, self.logins, site, name, progress, background=background)
        return SnapshotResult(site, name, tags, res.fingerprint, round(time.monotonic() - t, 3),
                              {k: round(v, 3) for k, v in res.phases.items()}, "warm" if res.warm else "cold",
                              warm=[res.copy.slot] if res.warm else [], login=res.login)

    def snapshot_warm(self, site: str, progress: Progress = _noop) -> list[str]:
        """Remove replaced copies of ``site`` and boot the warm copies its snapshots want; the new slots."""
        return warm_mod.replenish(self.running(), self.logins, site, progress)

    def snapshots(self, site: str | None = None) -> list[snapshots.SnapshotInfo]:
        return snapshots.list_snapshots(self.instance, site)

    def snapshot_remove(self, name: str, site: str | None = None) -> list[str]:
        """Remove a named snapshot's images, its warm copies and the login files kept with it."""
        snapshots.validate_name(name)  # as create and restore do, before the engine is asked
        inst = self.find()
        if inst is not None:
            table = inst.table()
            for s in [site] if site else list(table.warm):
                if name in table.warm.get(s, {}):
                    warm_mod.drop(inst, s, name)
        removed = snapshots.remove_snapshot(self.instance, name, site)
        for s in [site] if site else list(self.catalog.sites):
            warm_mod.drop_stash(self.logins, s, name)
        return removed

    # -- smoke suite -----------------------------------------------------------------------------
    def smoke(self, task_set: str = "mini", *, sites: list[str] | None = None, agent: str = "reference",
              report_dir: str | Path | None = None, parallel: int = 3,
              progress: Callable[[TaskResult], None] | None = None,
              announce: Callable[[str], None] = lambda _m: None) -> SmokeResult:
        """Seed logins, run the reference (or LLM) agent through ``task_set``, score it, reset between tasks."""
        load_task_set(task_set)  # a missing or malformed task set is named before anything else
        if report_dir:  # so is a report folder that is a file (or under one) or read-only
            usable_dir(report_dir, "report folder", hint="give --report a folder you can write")
        up = self.sites_up()
        if not up:
            raise UsageError(f"instance '{self.instance}' has no site up", "run 'envctl up --flavor mini' first")
        wanted = self.catalog.resolve(sites) if sites else up
        missing = [s for s in wanted if s not in up]
        if missing:
            raise UsageError(f"not up in instance '{self.instance}': {', '.join(missing)}",
                             f"run 'envctl up {' '.join(missing)}'")
        tasks = load_task_set(task_set, sites=wanted)
        with_login = [s for s in wanted if self.catalog.site(s).login]
        if with_login:
            announce(f"seeding login state for {', '.join(with_login)}")
            self.login(with_login)
        env = {**self.env("visualwebarena"), **self.env("webarena")}  # WebArena's WIKIPEDIA (landing URL) wins

        def reset(names: list[str]) -> None:
            bad = [r for r in self.reset(names) if not r.ok]
            if bad:
                raise ResetFailed(f"reset of {', '.join(r.site for r in bad)} failed: {bad[0].error}")

        admin = self.catalog.account_with_role("rest-admin")
        return run_smoke(tasks, env=env, auth_dir=self.auth_dir, reset=reset, sites=wanted, agent=agent,
                         report_dir=Path(report_dir) if report_dir else None, progress=progress,
                         judge=Judge.from_env(), max_parallel=parallel, task_set=task_set,
                         coupled=self.catalog.coupled(),
                         rest_admin=(admin.username, admin.password) if admin else None)

    # -- probes and status ----------------------------------------------------------------------
    def health(self, sites: list[str] | None = None, *, wait: bool = False) -> dict[str, list[ProbeResult]]:
        inst = self.running()
        names = sites or inst.sites_up(inst.table())
        out = {}
        for n in self.catalog.resolve(names):
            if wait:
                def check(n: str = n) -> tuple[bool, list[ProbeResult]]:
                    return inst.probe(n)

                _, out[n] = wait_for(check, timeout=self.catalog.site(n).health.timeout, cancel=self.cancel)
            else:
                out[n] = inst.probe(n)[1]
        return out

    def status(self) -> Status:
        inst = self.running()
        table = inst.table()
        copies = inst.backend.copies()
        rows = []
        for site_name in self.catalog.sites:
            slots = [slot for (s, slot) in copies if s == site_name]
            if not slots:
                continue
            site = self.catalog.site(site_name)
            active_slot = table.active.get(site_name)
            ok, probes = inst.probe(site_name) if active_slot and (site_name, active_slot) in copies else (False, [])
            containers = []
            for slot in slots:
                cp = copies[(site_name, slot)]
                role = ("active" if slot == active_slot else
                        "spare" if slot in table.spares.get(site_name, []) else
                        "warm" if slot in table.warm_slots(site_name) else "booting")
                for svc, c in cp.containers.items():
                    try:
                        containers.append(ContainerStatus(c.name, svc, slot, role, c.state.status or "",
                                                          dk.label(c, "image"), dk.label(c, "golden") or None,
                                                          round(time.time() - float(dk.label(c, "created", "0")), 1)))
                    except dk.NoSuchContainer:
                        continue  # removed since the listing (a replenisher's cleanup)
            planned = table.planned.get(site_name) or {}
            note = str(planned.get("why") or "") if capacity.short(table, site_name) else ""
            rows.append(SiteStatus(site_name, inst.settings.deployment.url(site) + site.url_path, inst.flavor, ok,
                                   [p.to_dict() for p in probes], containers, len(table.spares.get(site_name, [])),
                                   int(planned.get("wanted", table.wanted.get(site_name, 0))), note))
        s = inst.settings
        lease: dict[str, Any] = {k: table.lease[k] for k in ("pool", "state", "holder", "sites", "expires", "max_seconds")
                 if k in table.lease}
        if table.lease.get("id"):
            lease["id"] = str(table.lease["id"])[:8] + "…"  # enough to tell leases apart; the id releases it
        return Status(self.instance, s.flavor, s.public_host, s.bind, s.port_offset, rows, lease=lease)

    # -- down ----------------------------------------------------------------------------------
    def down(self, sites: list[str] | None = None, *, volumes: bool = False) -> DownResult:
        """Remove exactly what envctl made for this instance (by label); all of it when no site is named."""
        dk.engine_info()
        removed: list[str] = []
        kept: list[str] = []
        pname = proxy.proxy_name(self.instance)
        names = self.catalog.resolve(sites) if sites else None
        resets.stop_replenishers(self.instance, names)  # a spare booting in the background would appear later
        warm_mod.stop_warmers(self.instance, names)  # so would a warm copy of a snapshot
        with locked(f"instance.{self.instance}"):
            for c in dk.containers(instance=self.instance):
                got = dk.seen(c)  # None: removed meanwhile (a replenisher's stray cleanup)
                if got and got[0] != pname and (names is None or got[1].get("envctl.site") in names):
                    removed.append(got[0])
            dk.remove(removed, volumes=True)
            if names is None:
                if dk.inspect(pname) is not None:
                    removed.append(pname)
                proxy.remove(self.instance)
                if not dk.remove_network(network_name(self.instance)):
                    kept.append(network_name(self.instance))
            else:
                inst = self.find()
                table = proxy.read_state(self.instance)
                if inst is not None and table is not None:
                    for n in names:
                        table.active.pop(n, None)
                        table.spares.pop(n, None)
                        table.warm.pop(n, None)  # its warm copies are among the containers removed above
                        for port in self.catalog.site(n).public_ports().values():
                            table.routes.pop(str(inst.settings.deployment.port(port)), None)
                    proxy.apply(self.instance, table, table.ports or None)
            if volumes:
                vols = (dk.volumes(instance=self.instance) if names is None else
                        [v for n in names for v in dk.volumes(instance=self.instance, site=n)])
                refused = dk.remove_volumes(vols)
                if refused:
                    raise DockerError(
                        "down: could not remove volume" + ("s" if len(refused) > 1 else "") + " "
                        + "; ".join(f"'{v}' ({why})" for v, why in sorted(refused.items()))
                        + f"; the rest of instance '{self.instance}' is removed",
                        "see what still uses it with 'docker ps -a --filter volume=" + sorted(refused)[0]
                        + f"', remove that container, then run 'envctl down --volumes --instance {self.instance}' again")
        return DownResult(self.instance, sorted(set(removed)), kept)

    # -- env for harnesses ---------------------------------------------------------------------------
    def env(self, benchmark: str = "webarena", settings: InstanceSettings | None = None) -> dict[str, str]:
        """The harness environment variables for ``benchmark`` (WebArena or VisualWebArena names)."""
        if benchmark not in ("webarena", "visualwebarena"):
            raise UsageError(f"unknown benchmark '{benchmark}'", "choose webarena or visualwebarena")
        settings = settings or self.settings()
        if settings is None:
            raise NoSuchInstance(self.instance)
        out: dict[str, str] = {}
        for name, site in self.catalog.sites.items():
            if benchmark in site.benchmarks and settings.flavor in site.flavors:
                out.update(Renderer(self.catalog, name, settings.deployment).env(benchmark))
        if benchmark == "visualwebarena":
            out["DATASET"] = "visualwebarena"
        return {k: v.rstrip("/") for k, v in out.items()}

    # -- debugging -------------------------------------------------------------------------------
    def container(self, site: str, service: str | None = None) -> str:
        s = self.catalog.site(site)
        svc = s.entry if service is None else service
        if svc not in s.services:
            raise UsageError(f"site '{site}' has no service '{svc}'", f"services: {', '.join(s.services)}")
        inst = self.running()
        copy = inst.active_copy(site, inst.table())
        if copy is None:
            raise SiteNotUp(site, self.instance)
        if svc not in copy.containers:
            raise UsageError(f"site '{site}' has no service '{svc}' in flavor {inst.flavor}",
                             f"services: {', '.join(copy.containers)}")
        return copy.containers[svc].name

    def logs(self, site: str, *, service: str | None = None, tail: int = 100) -> str:
        return dk.logs(self.container(site, service), tail)

    def follow_logs(self, site: str, *, service: str | None = None) -> Iterator[str]:
        return dk.stream_logs(self.container(site, service))

    def exec(self, site: str, argv: list[str], *, service: str | None = None) -> tuple[int, str]:
        return dk.exec_argv(self.container(site, service), argv)

    @classmethod
    def instances(cls, catalog: Catalog | None = None) -> list[InstanceInfo]:
        out = []
        for c in dk.containers(role="proxy"):
            got = dk.seen(c)  # labels and status together: read later, a proxy removed meanwhile would raise
            if got is None:
                continue  # removed (its instance downed) since the listing
            _, labels, status = got
            s = InstanceSettings.from_labels(labels)
            lab = cls(catalog, instance=s.name)
            try:
                sites = lab.sites_up()
            except (EnvctlError, dk.NoSuchContainer):
                # another process is bringing this instance up or down right now (its proxy runs, its table
                # is not there yet or any more), or its proxy is not one this envctl can read: listed, no sites
                sites, state = [], "unreadable"
            else:
                state = status
            out.append(InstanceInfo(s.name, s.flavor, s.public_host, s.bind, s.port_offset, state,
                                    sites, lab.env("webarena", s), lab.env("visualwebarena", s)))
        return out

    # -- leases (docs/architecture.md, "Leases") --------------------------------------------------
    @classmethod
    def lease(cls, sites: list[str] | None = None, *, pool: str | None = None, ttl: float = 600.0,
              server: str | None = None, wait: float = 0.0, holder: str = "",
              max_seconds: float | None = None) -> Any:
        """Lease an isolated, verified-pristine instance for a ``with`` block; released when it ends::

            with Lab.lease(sites=["reddit"]) as lease:
                lease.env["WA_REDDIT"], lease.auth["reddit_state.json"], lease.instance
                lease.check()  # raises LeaseLost at once if the lease ended under us

        From the lease server at ``server`` (or ``$ENVCTL_LEASE_SERVER``; its URL with the token path,
        if any), else the running ``envctl serve --instances N`` of pool ``pool`` (``$ENVCTL_POOL``,
        default "default"). A thread heartbeats every ttl/3; ``LeaseLost`` is raised when the lease
        expired, was reclaimed (``max_seconds``, ``serve --max-lease``) or released by someone else;
        a release the server refuses is an error. See :mod:`envctl.leases.client`."""
        from envctl.leases.client import LeaseClient, find_server, held

        client = LeaseClient(find_server(server, pool))
        return held(client, sites, ttl=ttl, wait=wait, holder=holder, max_seconds=max_seconds)
