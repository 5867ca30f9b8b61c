"""One running envctl instance: its settings, routing table, site copies, probes and boots.

An :class:`Instance` is what ``state`` (reset tiers, spares, snapshots) works on, the way ``auth``
works on a frozen ``Target``; ``Lab`` is the facade above both. Settings are read once from the
engine's labels when the instance is found. The routing table lives in the front proxy; read it
with :meth:`Instance.table` once per operation and pass it along, or change it with
:meth:`Instance.routing`, which applies the new table atomically when the block ends::

    inst = Instance.find(catalog, "default")
    with inst.routing() as table:
        copy = inst.active_copy("reddit", table)
        ok, results = inst.probe_copy(copy)
"""
from __future__ import annotations

import dataclasses
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from envctl.catalog import Catalog
from envctl.errors import EnvctlError, NoSuchInstance, NotReady
from envctl.healthchecks.fingerprint import Fingerprint, mismatch, take
from envctl.healthchecks.probes import ProbeResult, run_probe
from envctl.healthchecks.wait import TargetDied, wait_ready
from envctl.locks import locked
from envctl.paths import data_dir
from envctl.provision import docker as dk
from envctl.provision import proxy
from envctl.provision.local import Copy, InstanceSettings, LocalBackend, mask
from envctl.provision.proxy import ProxyState

Progress = Callable[[str, str, str], None]  # (site, phase, detail)
WARM_ROLE = "warm"  # the envctl.role of a copy booted from a named snapshot and kept ready (envctl.state.warm)


def _noop(*_: str) -> None:
    pass


def _with_data_dir(settings: InstanceSettings) -> InstanceSettings:
    """``settings`` with its flavor's data directory (``{data_dir}``)."""
    return dataclasses.replace(settings, data_dir=str(data_dir(settings.flavor)))


def read_settings(name: str) -> InstanceSettings | None:
    """An instance's settings from its proxy's labels (or its network's, if the proxy is gone)."""
    c = dk.inspect(proxy.proxy_name(name))
    if c is not None:
        return _with_data_dir(InstanceSettings.from_labels(c.config.labels or {}))
    labels = dk.networks(instance=name).get(network_name(name))
    return None if labels is None else _with_data_dir(InstanceSettings.from_labels(labels))


def network_name(instance: str) -> str:
    return f"envctl-{instance}"


class Instance:
    """One instance on the local Docker engine: what runs, what is routed, and how to check it."""

    def __init__(self, catalog: Catalog, settings: InstanceSettings, *,
                 cancel: threading.Event | None = None) -> None:
        self.catalog = catalog
        self.settings = settings
        self.backend = LocalBackend(catalog, settings)
        self.cancel = cancel or threading.Event()
        self._table_lock = threading.Lock()

    @classmethod
    def find(cls, catalog: Catalog, name: str, *, cancel: threading.Event | None = None) -> "Instance | None":
        settings = read_settings(name)
        return cls(catalog, settings, cancel=cancel) if settings else None

    @classmethod
    def get(cls, catalog: Catalog, name: str, *, cancel: threading.Event | None = None) -> "Instance":
        inst = cls.find(catalog, name, cancel=cancel)
        if inst is None:
            raise NoSuchInstance(name)
        return inst

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def flavor(self) -> str:
        return self.settings.flavor

    # -- the routing table ---------------------------------------------------------------------
    def table(self) -> ProxyState:
        """The live routing table (one read); an instance whose proxy is down has an empty one."""
        return proxy.read_state(self.name) or ProxyState()

    @contextmanager
    def routing(self) -> Iterator[ProxyState]:
        """Read-modify-write the routing table under a cross-process lock; applied when the block ends."""
        with self._table_lock, locked(f"proxy.{self.name}"):
            table = proxy.read_state(self.name)
            if table is None:
                raise NotReady(f"instance '{self.name}' has no running front proxy", "run 'envctl up' to repair it")
            before = table.to_json()
            yield table
            if table.to_json() != before:
                proxy.apply(self.name, table, table.ports or None)

    def route(self, table: ProxyState, copy: Copy) -> None:
        """Point the site's public ports at ``copy`` in ``table`` (applied by :meth:`routing`)."""
        site = self.catalog.site(copy.site)
        d = self.settings.deployment
        for svc, c in copy.containers.items():
            ports = site.services[svc].ports
            if ports is None:
                continue
            public = d.port(ports.public)
            allow = self.backend.container_name(copy.site, svc, "SLOT").replace("SLOT", "[0-9a-f]{6}")
            table.routes[str(public)] = proxy.Route(c.name, ports.container_port(public), allow)
        table.active[copy.site] = copy.slot
        spares = table.spares.get(copy.site, [])
        if copy.slot in spares:
            spares.remove(copy.slot)

    def route_slot(self, table: ProxyState, site_name: str, slot: str) -> dict[str, str]:
        """:meth:`route` by slot, without looking the containers up (the names follow from the slot); returns
        service -> container name."""
        site = self.catalog.site(site_name)
        d = self.settings.deployment
        names = {svc: self.backend.container_name(site_name, svc, slot) for svc in site.services_for(self.flavor)}
        for svc, name in names.items():
            ports = site.services[svc].ports
            if ports is None:
                continue
            public = d.port(ports.public)
            allow = self.backend.container_name(site_name, svc, "SLOT").replace("SLOT", "[0-9a-f]{6}")
            table.routes[str(public)] = proxy.Route(name, ports.container_port(public), allow)
        table.active[site_name] = slot
        spares = table.spares.get(site_name, [])
        if slot in spares:
            spares.remove(slot)
        return names

    def active_copy(self, site: str, table: ProxyState) -> Copy | None:
        slot = table.active.get(site)
        return self.backend.copies(site).get((site, slot)) if slot else None

    def sites_up(self, table: ProxyState) -> list[str]:
        return [s for s in self.catalog.sites if s in table.active]

    # -- probes ----------------------------------------------------------------------------------
    def probe(self, site: str) -> tuple[bool, list[ProbeResult]]:
        """The site's probes on its public URLs (whatever copy is routed)."""
        spec = self.catalog.site(site)
        d = self.settings.deployment
        results = [run_probe(p, d.url(spec, p.service)) for p in spec.health.probes]
        return all(r.ok for r in results), results

    def backend_header(self, copy: Copy, service: str) -> dict[str, str]:
        """The proxy header that addresses ``copy`` on the public port of ``service``."""
        ports = self.catalog.site(copy.site).services[service].ports
        if ports is None or service not in copy.containers:
            return {}
        public = self.settings.deployment.port(ports.public)
        return {proxy.BACKEND_HEADER: f"{copy.containers[service].name}:{ports.container_port(public)}"}

    def probe_copy(self, copy: Copy) -> tuple[bool, list[ProbeResult]]:
        """The site's probes against one copy, through the proxy, on the public URL (routed or not)."""
        spec = self.catalog.site(copy.site)
        d = self.settings.deployment
        results = []
        for p in spec.health.probes:
            svc = p.service or spec.entry
            results.append(run_probe(p, d.url(spec, svc), headers=self.backend_header(copy, svc)))
        return all(r.ok for r in results), results

    def wait_healthy(self, copy: Copy, progress: Progress = _noop, *,
                     check: Callable[[], tuple[bool, list[ProbeResult]]] | None = None) -> list[ProbeResult]:
        """Wait until ``copy`` passes its probes (``check``, default: through the proxy header), failing
        fast when one of its containers stops."""
        spec = self.catalog.site(copy.site)
        progress(copy.site, "wait", f"waiting for copy {copy.slot} to pass its probes")
        try:
            ok, results = wait_ready(check or (lambda: self.probe_copy(copy)), timeout=spec.health.timeout,
                                     died=lambda: self.backend.died(copy), cancel=self.cancel)
        except TargetDied as exc:
            raise NotReady(f"{copy.site}: {exc}", f"see 'envctl logs {copy.site}'") from None
        if not ok:
            bad = next(r for r in results if not r.ok)
            logs = mask(spec, dk.logs(copy.containers[spec.entry], 15)) if spec.entry in copy.containers else ""
            raise NotReady(f"{copy.site}: probe '{bad.name}' ({bad.url}) still failing after {spec.health.timeout:.0f}s: "
                           f"{bad.detail or bad.status}" + (f"\n--- last log lines ---\n{logs}" if logs else ""),
                           f"see 'envctl logs {copy.site}'")
        return results

    # -- fingerprints ----------------------------------------------------------------------------
    def fingerprint(self, copy: Copy) -> Fingerprint:
        spec = self.catalog.site(copy.site)
        return take(spec, self.flavor, lambda svc, argv: self.backend.exec(copy, svc, argv),
                    lambda text: mask(spec, text))

    def pristine(self, site: str, table: ProxyState) -> Fingerprint | None:
        raw = table.pristine.get(site)
        return Fingerprint.from_json(raw) if raw else None

    def not_pristine(self, copy: Copy, expected: Fingerprint | None) -> str:
        """'' when ``copy`` matches the pristine fingerprint ``expected``, else why not."""
        return mismatch(expected, self.fingerprint(copy))

    def save_inplace(self, copy: Copy, progress: Progress = _noop) -> bool:
        """Save, in a pristine ``copy``, the state the in-place tier restores (``reset.inplace.save``);
        False when the site declares no in-place tier."""
        inplace = self.catalog.site(copy.site).reset.inplace
        if inplace is None:
            return False
        self.backend.run_steps(copy, inplace.save, "save", progress=progress)
        return True

    # -- copies ----------------------------------------------------------------------------------
    def boot_copy(self, site: str, *, role: str, images: dict[str, str] | None = None, golden: str = "",
                  progress: Progress = _noop, timings: dict[str, float] | None = None) -> Copy:
        """Create a copy (from ``images`` when given, e.g. golden) and configure it unless it booted
        from a golden image; not routed, not yet healthy. Nothing is left behind on failure."""
        copy = self.backend.create_copy(site, role=role, images=images, golden=golden, progress=progress,
                                        cancel=self.cancel, timings=timings)
        try:
            t = time.monotonic()
            if not golden:
                self.backend.configure(copy, progress=progress)
            if timings is not None:
                timings["configure"] = time.monotonic() - t
            return copy
        except BaseException:
            self.backend.remove_copy(copy)
            raise

    def remove_strays(self, site: str, table: ProxyState) -> list[Copy]:
        """Remove copies of ``site`` that are neither active, ready spares nor ready warm copies of a
        snapshot; returns them. A warm copy still booting is kept while its booter holds the site's
        warm lock (a booter killed mid-way leaves one that the next cleanup removes)."""
        keep = {table.active.get(site)} | set(table.spares.get(site, [])) | set(table.warm_slots(site))
        booting = None
        activating = None
        removed = []
        for (_, slot), c in self.backend.copies(site).items():
            if slot in keep:
                continue
            roles = {dk.label(x, "role") for x in c.containers.values()}
            if WARM_ROLE in roles:
                if booting is None:
                    booting = self.warm_booting(site)
                if booting:
                    continue
            if "active" in roles:  # perhaps the copy an 'up' (repair) is booting, not yet routed
                if activating is None:
                    activating = self._held(self.boot_lock(site))
                if activating:
                    continue
            # A copy a route just left is drained: it takes no new request; let those in flight end.
            proxy.retire(self.name, c.names)
            self.backend.remove_copy(c)
            removed.append(c)
        return removed

    def warm_lock(self, site: str) -> str:
        """The lock a process holds while it boots warm copies of ``site`` (envctl.state.warm)."""
        return f"warm.{self.name}.{site}"

    def warm_booting(self, site: str) -> bool:
        return self._held(self.warm_lock(site))

    def boot_lock(self, site: str) -> str:
        """The lock 'up' holds while it boots an active copy of ``site`` and routes it: until it is routed,
        that copy is neither active nor spare, and a replenisher's cleanup must not take it for a stray."""
        return f"boot.{self.name}.{site}"

    @staticmethod
    def _held(lock: str) -> bool:
        """Does another process hold ``lock`` right now?"""
        try:
            with locked(lock, wait=False):
                return False
        except EnvctlError:
            return True
