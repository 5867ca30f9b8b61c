"""``Lab``: the Python API behind every envctl command.

A harness can use it directly between episodes::

    from envctl import Lab
    lab = Lab(instance="default")
    lab.up(["shopping", "reddit"], flavor="mini")
    urls = lab.env("webarena")          # {"SHOPPING": "http://127.0.0.1:7770", ...}
    lab.down()
"""
from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from envctl.catalog import Catalog, Site, load_catalog
from envctl.errors import EnvctlError, ImageMissing, NotReady, PortInUse, UsageError
from envctl.healthchecks.probes import ProbeResult, run_probe
from envctl.healthchecks.wait import Cancelled, wait_for
from envctl.locks import locked
from envctl.provision import docker as dk
from envctl.provision import proxy
from envctl.provision.local import Copy, InstanceSettings, LocalBackend, Progress, _noop, mask


def data_dir() -> Path:
    """Where downloaded data files live (``{data_dir}`` in catalog templates): the images layer's data/."""
    from envctl.images.lock import data_dir as root

    return root() / "data"


@dataclass
class SiteResult:
    site: str
    ok: bool
    action: str  # created | kept | repaired | failed
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

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.sites) and not self.login_error

    def to_dict(self) -> dict[str, Any]:
        return {"instance": self.instance, "flavor": self.flavor, "ok": self.ok, "seconds": round(self.seconds, 3),
                "sites": [asdict(s) for s in self.sites], "login_files": self.login_files,
                "login_error": self.login_error}


class Lab:
    """One envctl instance on the local Docker engine."""

    def __init__(self, catalog: Catalog | None = None, *, catalog_path: str | None = None,
                 instance: str = "default", auth_dir: str | Path | None = None) -> None:
        if not instance.replace("-", "").isalnum() or not instance[0].isalnum():
            raise UsageError(f"invalid instance name '{instance}'", "use letters, digits and dashes")
        self.catalog = catalog or load_catalog(catalog_path)
        self.catalog_path = catalog_path or os.environ.get("ENVCTL_CATALOG")
        self.instance = instance
        self.auth_dir = Path(auth_dir) if auth_dir else Path(".auth") if instance == "default" else Path(".auth") / instance
        self.cancel = threading.Event()
        self._proxy_lock = threading.Lock()

    # -- instance settings -------------------------------------------------------------------
    def settings(self) -> InstanceSettings | None:
        """The running instance's settings (from the proxy's labels), or None if it does not exist."""
        c = dk.inspect(proxy.proxy_name(self.instance))
        if c is not None:
            return InstanceSettings.from_labels(c.config.labels or {}, str(data_dir()))
        # The proxy is gone (removed by hand, crashed): the network carries the same settings.
        for net in dk.networks(instance=self.instance):
            if net.name == f"envctl-{self.instance}":
                return InstanceSettings.from_labels(net.labels or {}, str(data_dir()))
        return None

    def _settings_for_up(self, flavor: str | None, public_host: str | None, bind: str | None,
                         port_offset: int | None) -> InstanceSettings:
        current = self.settings()
        if current is None:
            return InstanceSettings(self.instance, flavor or "full", public_host or "127.0.0.1", bind or "127.0.0.1",
                                    port_offset or 0, "http", str(data_dir()))
        wanted = {"flavor": flavor, "public_host": public_host, "bind": bind, "port_offset": port_offset}
        clash = [f"{k}={getattr(current, k)}" for k, v in wanted.items() if v is not None and v != getattr(current, k)]
        if clash:
            raise UsageError(f"instance '{self.instance}' already runs with {', '.join(clash)}",
                             f"run 'envctl down --instance {self.instance}' first, or use another --instance")
        return current

    def backend(self, settings: InstanceSettings | None = None) -> LocalBackend:
        settings = settings or self.settings()
        if settings is None:
            raise UsageError(f"instance '{self.instance}' is not running", "start it with 'envctl up'")
        return LocalBackend(self.catalog, settings)

    # -- checks before creating anything -----------------------------------------------------
    def _ports(self, sites: list[str], settings: InstanceSettings) -> list[int]:
        d = settings.deployment
        return sorted(d.port(p) for s in sites for svc, p in self.catalog.site(s).public_ports().items()
                      if settings.flavor in self.catalog.site(s).services[svc].flavors)

    def check_ports(self, ports: list[int], bind: str) -> None:
        owned = set(proxy.published_ports(self.instance))
        for port in ports:
            if port in owned or port_bindable(bind, port):
                continue
            raise PortInUse(f"port {port} on {bind} is in use by {_port_holder(port)}",
                            "stop it, or pass --port-offset N (e.g. --port-offset 100) or another --instance")

    def check_images(self, sites: list[str], backend: LocalBackend) -> None:
        missing = backend.missing_images(sites)
        if not missing:
            return
        names = ", ".join(f"{img} ({site})" for site, img, _ in missing)
        if all(build for _, _, build in missing):
            hint = f"build them with 'envctl images build --flavor {backend.settings.flavor}'"
        else:
            hint = "get them with 'envctl images get " + " ".join(sorted({s for s, _, _ in missing})) + "'"
        raise ImageMissing(f"missing images: {names}", hint)

    # -- up ----------------------------------------------------------------------------------
    def up(self, sites: list[str] | None = None, *, all_sites: bool = False, flavor: str | None = None,
           public_host: str | None = None, bind: str | None = None, port_offset: int | None = None,
           wait: bool = True, login: bool = False, spares: int | None = None,
           progress: Progress = _noop) -> UpResult:
        """Bring sites to a healthy, configured, reachable state; check and repair what already runs."""
        start = time.monotonic()
        names = self.catalog.resolve(sites, all_sites=all_sites or not sites)
        if flavor is not None and flavor not in self.catalog.flavors():
            raise UsageError(f"unknown flavor '{flavor}'", f"choose one of {', '.join(self.catalog.flavors())}")
        dk.engine_info()
        with locked(f"instance.{self.instance}"):
            settings = self._settings_for_up(flavor, public_host, bind, port_offset)
            names = [n for n in names if settings.flavor in self.catalog.site(n).flavors]
            backend = LocalBackend(self.catalog, settings)
            self.check_images(names, backend)
            ports = sorted(set(self._ports(names, settings)) | set(proxy.published_ports(self.instance)))
            self.check_ports(ports, settings.bind)
            self._ensure_proxy(settings, ports, progress)
            results: dict[str, SiteResult] = {}
            done: dict[str, threading.Event] = {n: threading.Event() for n in names}

            def one(name: str) -> SiteResult:
                for dep in self.catalog.site(name).depends_on:
                    if dep in done:
                        done[dep].wait()
                try:
                    return self._ensure_site(name, backend, wait=wait, progress=progress)
                finally:
                    done[name].set()

            with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
                futures = {n: pool.submit(one, n) for n in names}
                try:
                    for n, f in futures.items():
                        results[n] = f.result()
                except KeyboardInterrupt:
                    self.cancel.set()
                    raise
        result = UpResult(self.instance, settings.flavor, [results[n] for n in names], time.monotonic() - start)
        if login and result.ok and wait:
            result.login_files = self._seed_logins([s.site for s in result.sites], progress)
            result.login_error = getattr(self, "login_error", "")
        if spares is not None:
            # Spares are booted by a detached process: 'up' returns when the active copies are healthy.
            spare_sites = [n for n in names if self.catalog.site(n).reset.tier == "spare"]
            with self.proxy_state() as st:
                for n in spare_sites:
                    st.wanted[n] = spares
            if spares > 0 and result.ok:
                from envctl.state.reset import spawn_replenish

                progress("*", "spares", f"booting {spares} spare(s) per site in the background")
                spawn_replenish(self, spare_sites)
        return result

    # -- state: reset, verify, snapshots ---------------------------------------------------------
    def reset(self, sites: list[str] | None = None, *, all_sites: bool = False, tier: str | None = None,
              wait: bool = True, progress: Progress = _noop, replenish_async: bool = True) -> list[Any]:
        """Reset sites to their pristine state (fastest tier first), each ending verified."""
        from envctl.state.reset import reset_site

        up = self.sites_up()
        names = [n for n in self.catalog.resolve(sites, all_sites=all_sites or not sites) if n in up]
        if sites:
            missing = [n for n in sites if n not in up]
            if missing:
                raise UsageError(f"not up in instance '{self.instance}': {', '.join(missing)}", "run 'envctl up' first")
        with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
            futures = [pool.submit(reset_site, self, n, tier=tier, wait=wait, progress=progress,
                                   replenish_async=replenish_async) for n in names]
            return [f.result() for f in futures]

    def verify(self, site: str) -> dict[str, Any]:
        from envctl.state.reset import verify

        return verify(self, site)

    def replenish(self, site: str, want: int | None = None, progress: Progress = _noop) -> list[str]:
        from envctl.state.reset import replenish

        return replenish(self, site, want, progress)

    def snapshot_create(self, site: str, name: str = "golden", progress: Progress = _noop) -> dict[str, Any]:
        """Stop the active copy cleanly, commit it (golden or a named snapshot), start it again."""
        from envctl.state import snapshots
        from envctl.state.fingerprint import take

        backend = self.backend()
        with locked(f"reset.{self.instance}.{site}"):
            copy = self.active_copy(site, backend)
            if copy is None:
                raise UsageError(f"site '{site}' is not up in instance '{self.instance}'", f"run 'envctl up {site}'")
            fp = take(self.catalog, backend.settings.flavor, copy)
            progress(site, "snapshot", "clean stop, commit, start")
            if name == "golden":
                key = snapshots.commit_golden(self, backend, copy, fp)
                tags = snapshots.golden_tags(self, site, backend, key)
                with self.proxy_state() as st:
                    st.pristine[site] = fp.to_json()
            else:
                tags = snapshots.commit_snapshot(self, backend, copy, name, fp)
            ok, results = wait_for(lambda: self.probe(site, backend), timeout=self.catalog.site(site).health.timeout,
                                   cancel=self.cancel)
            if not ok:
                raise NotReady(f"{site}: not healthy again after the snapshot", f"see 'envctl logs {site}'")
        return {"site": site, "name": name, "images": tags, "fingerprint": fp.digest}

    def snapshot_restore(self, site: str, name: str, progress: Progress = _noop) -> dict[str, Any]:
        """Boot a copy from a named snapshot, verify it, swap it in; the old copy is removed."""
        from envctl.state import snapshots
        from envctl.state.reset import _cleanup_strays, _login, wait_copy_healthy

        backend = self.backend()
        tags = snapshots.snapshot_tags(self, site, name, backend)
        missing = [t for t in tags.values() if not dk.image_exists(t)]
        if missing:
            raise UsageError(f"no snapshot '{name}' of {site} in instance '{self.instance}'", "see 'envctl snapshot list'")
        t = time.monotonic()
        with locked(f"reset.{self.instance}.{site}"):
            copy = backend.create_copy(site, role="active", images=tags, golden=f"snapshot:{name}", progress=progress,
                                       cancel=self.cancel)
            wait_copy_healthy(self, backend, copy, progress)
            self._route(copy, backend)
            with locked(f"spare.{self.instance}.{site}"):
                _cleanup_strays(self, backend, site)
            _login(self, [site])
        return {"site": site, "name": name, "seconds": round(time.monotonic() - t, 3)}

    def login(self, sites: list[str] | None = None, *, out: str | Path | None = None,
              max_age: float | None = None) -> dict[str, Path]:
        """Write (or keep, if younger than ``max_age`` seconds and valid) the login state files."""
        from envctl.auth import login_sites

        return login_sites(self, sites, out=out, max_age=max_age)

    def _seed_logins(self, sites: list[str], progress: Progress) -> list[str]:
        """Seed login state after 'up'; a failure is reported, it does not undo healthy sites."""
        from envctl.auth import login_sites

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

    def _ensure_proxy(self, settings: InstanceSettings, ports: list[int], progress: Progress) -> None:
        labels = {**settings.labels()}
        dk.ensure_network(f"envctl-{self.instance}", labels)
        current = proxy.published_ports(self.instance)
        c = dk.inspect(proxy.proxy_name(self.instance))
        if c is not None and c.state.running and set(ports) <= set(current):
            return
        state = proxy.read_state(self.instance) if c is not None and c.state.running else None
        progress("*", "proxy", f"front proxy on {settings.bind}: ports {', '.join(map(str, ports))}")
        proxy.create(self.instance, f"envctl-{self.instance}", settings.bind, ports, labels, state)

    @contextmanager
    def proxy_state(self) -> Iterator[proxy.ProxyState]:
        """Read-modify-write the routing table under a cross-process lock; applied when the block ends."""
        with self._proxy_lock, locked(f"proxy.{self.instance}"):
            state = proxy.read_state(self.instance)
            if state is None:
                raise UsageError(f"instance '{self.instance}' has no running proxy", "run 'envctl up' to repair it")
            before = state.to_json()
            yield state
            if state.to_json() != before:
                proxy.apply(self.instance, state, state.ports or None)

    def _route(self, copy: Copy, backend: LocalBackend, pristine: str | None = None) -> None:
        """Point the site's public ports at ``copy`` (atomic, graceful reload)."""
        site = self.catalog.site(copy.site)
        d = backend.settings.deployment
        with self.proxy_state() as state:
            for svc, c in copy.containers.items():
                ports = site.services[svc].ports
                if ports is None:
                    continue
                public = d.port(ports.public)
                allow = backend.container_name(copy.site, svc, "SLOT").replace("SLOT", "[0-9a-f]{6}")
                state.routes[str(public)] = proxy.Route(c.name, ports.container_port(public), allow)
            state.active[copy.site] = copy.slot
            spares = state.spares.get(copy.site, [])
            if copy.slot in spares:
                spares.remove(copy.slot)
            if pristine:
                state.pristine[copy.site] = pristine

    def active_copy(self, site: str, backend: LocalBackend) -> Copy | None:
        state = proxy.read_state(self.instance)
        slot = state.active.get(site) if state else None
        if not slot:
            return None
        return backend.copies(site).get((site, slot))

    def _ensure_site(self, name: str, backend: LocalBackend, *, wait: bool, progress: Progress) -> SiteResult:
        site = self.catalog.site(name)
        url = backend.settings.deployment.url(site) + site.url_path
        timings: dict[str, float] = {}
        action = "created"
        try:
            state = proxy.read_state(self.instance)
            known_slot = state.active.get(name) if state else None
            active = self.active_copy(name, backend)
            if active is None and known_slot:
                action = "repaired"  # routed before, but its containers are gone
                progress(name, "repair", "the active copy's containers are gone; recreating the site")
            expected = set(site.services_for(backend.settings.flavor))
            if active is not None and active.running() and set(active.containers) == expected:
                progress(name, "check", "running; checking health")
                ok, results = self.probe(name, backend)
                if ok:
                    progress(name, "healthy", "already healthy")
                    return SiteResult(name, True, "kept", url, timings, probes=[r.to_dict() for r in results])
                action = "repaired"
                copy = active  # running but unhealthy: configure again (idempotent) and wait
            else:
                if active is not None:
                    action = "repaired"
                    progress(name, "repair", "a container is missing or stopped; recreating the site")
                    backend.remove_copy(active)
                # Leftovers of an interrupted run that never got routed are not worth keeping.
                state = proxy.read_state(self.instance)
                ready_spares = set(state.spares.get(name, [])) if state else set()
                for (s, slot), c in backend.copies(name).items():
                    if slot not in ready_spares and (active is None or slot != active.slot):
                        backend.remove_copy(c)
                images, golden = self._boot_images(name, backend)
                copy = backend.create_copy(name, role="active", images=images, golden=golden, progress=progress,
                                           cancel=self.cancel, timings=timings)
            t = time.monotonic()
            if not copy.golden:
                backend.configure(copy, progress=progress)
            timings["configure"] = time.monotonic() - t
            self._route(copy, backend)
            if not wait:
                return SiteResult(name, True, action, url, timings)
            t = time.monotonic()
            progress(name, "wait", "waiting for health probes")

            def check() -> tuple[bool, list[ProbeResult]]:
                for svc, c in copy.containers.items():
                    live = dk.inspect(c.name)
                    if live is None or not live.state.running:
                        raise NotReady(f"{name}: container {c.name} ({svc}) stopped while waiting for health"
                                       f"\n--- last log lines ---\n{mask(site, dk.logs(c.name, 15))}",
                                       f"see 'envctl logs {name}'")
                return self.probe(name, backend)

            ok, results = wait_for(check, timeout=site.health.timeout, cancel=self.cancel)
            timings["healthy"] = time.monotonic() - t
            if not ok:
                bad = next(r for r in results if not r.ok)
                logs = mask(site, dk.logs(copy.containers[site.entry], 15))
                raise NotReady(f"{name}: probe '{bad.name}' ({bad.url}) still failing after {site.health.timeout:.0f}s: "
                               f"{bad.detail or bad.status}\n--- last log lines of {name} ---\n{logs}",
                               f"see 'envctl logs {name}'")
            if action != "kept" and (copy.golden or not self._has_pristine(name)):
                self._record_pristine(copy, backend)
            progress(name, "healthy", f"healthy at {url}")
            return SiteResult(name, True, action, url, timings, probes=[r.to_dict() for r in results])
        except Cancelled:
            return SiteResult(name, False, "interrupted", url, timings, "interrupted; run 'envctl up' again to finish")
        except EnvctlError as exc:
            progress(name, "failed", str(exc).splitlines()[0])
            return SiteResult(name, False, "failed", url, timings, str(exc))

    def _has_pristine(self, site: str) -> bool:
        state = proxy.read_state(self.instance)
        return bool(state and site in state.pristine)

    def _record_pristine(self, copy: Copy, backend: LocalBackend) -> None:
        """The fingerprint of a fresh, configured copy is what 'pristine' means for this site."""
        from envctl.state.fingerprint import take

        fp = take(self.catalog, backend.settings.flavor, copy)
        with self.proxy_state() as state:
            state.pristine[copy.site] = fp.to_json()

    def _boot_images(self, site: str, backend: LocalBackend) -> tuple[dict[str, str] | None, str]:
        """Golden images for this site, flavor and public URL when they exist (boot already configured)."""
        try:
            from envctl.state.snapshots import golden_images
        except ImportError:
            return None, ""
        return golden_images(self, site, backend)

    # -- probes and status ----------------------------------------------------------------------
    def probe(self, name: str, backend: LocalBackend | None = None) -> tuple[bool, list[ProbeResult]]:
        backend = backend or self.backend()
        site = self.catalog.site(name)
        d = backend.settings.deployment
        results = [run_probe(p, d.url(site, p.service)) for p in site.health.probes]
        return all(r.ok for r in results), results

    def health(self, sites: list[str] | None = None, *, wait: bool = False) -> dict[str, list[ProbeResult]]:
        backend = self.backend()
        state = proxy.read_state(self.instance)
        names = [n for n in self.catalog.resolve(sites) if not sites and state and n in state.active or sites]
        out = {}
        for n in names:
            if wait:
                _, out[n] = wait_for(lambda n=n: self.probe(n, backend), timeout=self.catalog.site(n).health.timeout,
                                     cancel=self.cancel)
            else:
                out[n] = self.probe(n, backend)[1]
        return out

    def status(self) -> dict[str, Any]:
        settings = self.settings()
        if settings is None:
            return {"instance": self.instance, "running": False, "sites": []}
        backend = LocalBackend(self.catalog, settings)
        state = proxy.read_state(self.instance) or proxy.ProxyState()
        copies = backend.copies()
        rows = []
        for site_name in self.catalog.sites:
            slots = [slot for (s, slot) in copies if s == site_name]
            if not slots:
                continue
            site = self.catalog.site(site_name)
            active_slot = state.active.get(site_name)
            active = copies.get((site_name, active_slot)) if active_slot else None
            ok, probes = self.probe(site_name, backend) if active else (False, [])
            containers = []
            for slot in slots:
                cp = copies[(site_name, slot)]
                role = "active" if slot == active_slot else ("spare" if slot in state.spares.get(site_name, []) else "booting")
                for svc, c in cp.containers.items():
                    containers.append({"name": c.name, "service": svc, "slot": slot, "role": role,
                                       "state": c.state.status, "image": dk.label(c, "image"),
                                       "golden": dk.label(c, "golden") or None,
                                       "uptime_s": round(time.time() - float(dk.label(c, "created", "0")), 1)})
            rows.append({"site": site_name, "url": settings.deployment.url(site) + site.url_path,
                         "flavor": settings.flavor, "healthy": ok, "probes": [p.to_dict() for p in probes],
                         "containers": containers,
                         "spares_ready": len(state.spares.get(site_name, []))})
        return {"instance": self.instance, "running": True, "flavor": settings.flavor,
                "public_host": settings.public_host, "bind": settings.bind, "port_offset": settings.port_offset,
                "sites": rows}

    # -- down ----------------------------------------------------------------------------------
    def down(self, sites: list[str] | None = None, *, volumes: bool = False) -> dict[str, Any]:
        """Remove exactly what envctl made for this instance (by label); all of it when no site is named."""
        dk.engine_info()
        removed: list[str] = []
        with locked(f"instance.{self.instance}"):
            names = [self.catalog.site(s) and s for s in sites] if sites else None
            for c in dk.containers(instance=self.instance):
                if names is None or dk.label(c, "site") in names:
                    removed.append(c.name)
            if names is None:
                removed.append(proxy.proxy_name(self.instance)) if proxy.proxy_name(self.instance) not in removed else None
            dk.remove([n for n in removed if n != proxy.proxy_name(self.instance)], volumes=True)
            if names is None:
                proxy.remove(self.instance)
                dk.remove_network(f"envctl-{self.instance}")
            else:
                state = proxy.read_state(self.instance)
                if state:
                    for n in names:
                        state.active.pop(n, None)
                        state.spares.pop(n, None)
                        site = self.catalog.site(n)
                        settings = self.settings()
                        for port in site.public_ports().values():
                            state.routes.pop(str(settings.deployment.port(port) if settings else port), None)
                    proxy.apply(self.instance, state)
            if volumes:
                for v in _named_volumes(self.instance):
                    subprocess.run(["docker", "volume", "rm", "-f", v], capture_output=True)
        return {"instance": self.instance, "removed": sorted(set(removed))}

    # -- env for harnesses ---------------------------------------------------------------------------
    def env(self, benchmark: str = "webarena", settings: InstanceSettings | None = None) -> dict[str, str]:
        """The harness environment variables for ``benchmark`` (WebArena or VisualWebArena names)."""
        from envctl.catalog import Renderer

        if benchmark not in ("webarena", "visualwebarena"):
            raise UsageError(f"unknown benchmark '{benchmark}'", "choose webarena or visualwebarena")
        settings = settings or self.settings() or InstanceSettings(self.instance)
        out: dict[str, str] = {}
        for name, site in self.catalog.sites.items():
            if benchmark in site.benchmarks and settings.flavor in site.flavors:
                out.update(Renderer(self.catalog, name, settings.deployment).env(benchmark))
        if benchmark == "visualwebarena":
            out["DATASET"] = "visualwebarena"
        return {k: v.rstrip("/") for k, v in out.items()}

    def sites_up(self) -> list[str]:
        state = proxy.read_state(self.instance)
        return [s for s in self.catalog.sites if state and s in state.active]

    # -- debugging -------------------------------------------------------------------------------
    def container(self, site: str, service: str | None = None) -> str:
        backend = self.backend()
        s = self.catalog.site(site)
        copy = self.active_copy(site, backend)
        if copy is None:
            raise UsageError(f"site '{site}' is not up in instance '{self.instance}'", f"run 'envctl up {site}'")
        svc = service or s.entry
        if svc not in copy.containers:
            raise UsageError(f"site '{site}' has no service '{svc}'", f"services: {', '.join(copy.containers)}")
        return copy.containers[svc].name

    def logs(self, site: str, *, service: str | None = None, tail: int = 100) -> str:
        return dk.logs(self.container(site, service), tail)

    def exec(self, site: str, argv: list[str], *, service: str | None = None) -> tuple[int, str]:
        return dk.exec_argv(self.container(site, service), argv)

    @staticmethod
    def instances() -> list[dict[str, Any]]:
        out = []
        for c in dk.containers(role="proxy"):
            labels = c.config.labels or {}
            lab = Lab(instance=labels["envctl.instance"])
            s = InstanceSettings.from_labels(labels)
            out.append({"instance": s.name, "flavor": s.flavor, "public_host": s.public_host, "bind": s.bind,
                        "port_offset": s.port_offset, "state": c.state.status, "sites": lab.sites_up(),
                        "webarena": lab.env("webarena", s), "visualwebarena": lab.env("visualwebarena", s)})
        return out


def port_bindable(bind: str, port: int) -> bool:
    """Whether a server could listen on ``bind:port`` now."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((bind, port))
            return True
        except OSError:
            return False


def _port_holder(port: int) -> str:
    """Name what holds a port: an envctl instance, another container, or a process."""
    for c in dk.containers():
        if c.state.running and str(port) in dk.label(c, "ports").split(","):
            return f"envctl instance '{dk.label(c, 'instance')}' (container {c.name})"
    try:
        out = subprocess.run(["docker", "ps", "--filter", f"publish={port}", "--format", "{{.Names}}"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        if out:
            return f"container '{out.splitlines()[0]}'"
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        # every TCP state, not only listeners: a connected client's own end holds a port too
        out = subprocess.run(["ss", "-Htanp", f"sport = :{port}"], capture_output=True, text=True, timeout=5).stdout
        if 'users:(("' in out:
            proc = out.split('users:(("', 1)[1].split('"', 1)[0]
            pid = out.split("pid=", 1)[1].split(",", 1)[0] if "pid=" in out else "?"
            return f"process '{proc}' (pid {pid})"
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    return "another process"


def _named_volumes(instance: str) -> list[str]:
    out = subprocess.run(["docker", "volume", "ls", "-q", "--filter", f"label=envctl.instance={instance}"],
                         capture_output=True, text=True).stdout
    return out.split()
