"""One envctl instance: its settings, its routing table, its copies — the one user of the backend and the one
writer of the table (docs/architecture.md, "The engine seam", "The routing table").

Everything above (reset tiers, ready copies, snapshots, logins, leases) asks an :class:`Instance`; nothing
else reaches the backend or writes the table. Settings are read once from the backend's labels when the
instance is found. Read the table with :meth:`Instance.table` once per operation and pass it along; change
it only through the methods here, each one read-modify-write applied atomically::

    inst = Instance.find(catalog, "default"); table = inst.table()
    ok, results = inst.probe_copy(inst.active_copy("reddit", table))
"""
from __future__ import annotations

import dataclasses
import os
import secrets
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from envctl.backends import default_kind, get as get_backend
from envctl.backends.base import (Backend, Copy, CopySpec, InstanceSettings, Member, ServiceSpec, member_name,
                                  network_name)
from envctl.catalog import Catalog, Renderer, Step
from envctl.errors import DockerError, EnvctlError, NoSuchInstance, NotReady
from envctl.healthchecks.fingerprint import Fingerprint, hashed, mismatch
from envctl.healthchecks.probes import ProbeResult, run_probe
from envctl.healthchecks.wait import attempts
from envctl.locks import locked, one_of
from envctl.paths import data_dir
from envctl.plan import EngineMemory, Held, copy_memory
from envctl.routing import proxy
from envctl.routing.table import GOLDEN, Ready, Route, RoutingTable
from envctl.secrets import mask_text

Progress = Callable[[str, str, str], None]  # (site, phase, detail)
VERIFY_SLOTS = max(2, 2 * (os.cpu_count() or 1))  # fingerprints run at once on this machine
ROLES = ("active", "spare", "warm", "proxy")  # envctl.role of a member: routed, ready (golden / snapshot), the proxy


def _noop(*_: str) -> None:
    pass


def ready_role(source: str) -> str:
    """The envctl.role a ready copy of ``source`` carries."""
    return "spare" if source == GOLDEN else "warm"


def _with_data_dir(settings: InstanceSettings) -> InstanceSettings:
    return dataclasses.replace(settings, data_dir=str(data_dir(settings.flavor)))


def find_settings(name: str, backend: Backend | None = None) -> InstanceSettings | None:
    """An instance's settings from its labels (its proxy's, or its network's if the proxy is gone)."""
    labels = (backend or get_backend()).instance_labels(name)
    return None if labels is None else _with_data_dir(InstanceSettings.from_labels(labels))


class Instance:
    """One instance: what runs, what is routed, and how to check it."""

    def __init__(self, catalog: Catalog, settings: InstanceSettings, *, cancel: threading.Event | None = None,
                 backend: Backend | None = None) -> None:
        self.catalog = catalog
        self.settings = settings
        self.backend = backend or get_backend(settings.backend)
        self.cancel = cancel or threading.Event()
        self._table_lock = threading.Lock()

    @classmethod
    def find(cls, catalog: Catalog, name: str, *, cancel: threading.Event | None = None,
             backend: Backend | None = None) -> "Instance | None":
        backend = backend or get_backend()
        settings = find_settings(name, backend)
        return cls(catalog, settings, cancel=cancel, backend=backend) if settings else None

    @classmethod
    def get(cls, catalog: Catalog, name: str, *, cancel: threading.Event | None = None) -> "Instance":
        inst = cls.find(catalog, name, cancel=cancel)
        if inst is None:
            raise NoSuchInstance(name)
        return inst

    @classmethod
    def create(cls, catalog: Catalog, settings: InstanceSettings, *, cancel: threading.Event | None = None,
               sites: list[str] | None = None) -> tuple["Instance", bool]:
        """An instance about to be brought up: its network made (and, on a swarm, its node chosen, with the memory
        ``sites``' copies reserve); (it, whether the network existed before)."""
        backend = get_backend(settings.backend)
        need = sum(copy_memory(catalog, s, settings.flavor) for s in sites or [])
        placed, existed = backend.prepare(settings, need)
        return cls(catalog, placed, cancel=cancel, backend=backend), existed

    @staticmethod
    def listed(backend: Backend | None = None) -> list[tuple[InstanceSettings, str, list[int]]]:
        """(settings, state, published ports) of every instance whose front proxy the backend has."""
        out = []
        for labels, state in (backend or get_backend()).proxies():
            if labels.get("envctl.instance"):
                ports = [int(p) for p in labels.get("envctl.ports", "").split(",") if p.isdigit()]
                out.append((_with_data_dir(InstanceSettings.from_labels(labels)), state, ports))
        return out

    @staticmethod
    def backend_kind() -> str:
        """The backend a new instance runs on (``$ENVCTL_BACKEND``, default local)."""
        return default_kind()

    @staticmethod
    def check_engine() -> dict[str, object]:
        """The backend's engine facts (version, storage driver, data root, CPUs); EngineUnavailable with the fix
        when it cannot be used now."""
        return get_backend().info()

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def flavor(self) -> str:
        return self.settings.flavor

    @property
    def network(self) -> str:
        return network_name(self.name)

    def where(self) -> str:
        return self.backend.where(self.settings)

    def node_name(self) -> str:
        return self.backend.node_name(self.settings)

    def problem(self) -> str:
        """Why the instance cannot serve now ('' when it can): its node down or drained (a swarm), or its front proxy
        gone. A site copy that stopped or was removed is not such a problem: a heal replaces it, URLs unchanged."""
        why = self.backend.problem(self.settings)
        if why:
            return why
        return "" if self.has_table() else "front proxy gone"

    def oom_kills(self, since: float, until: float | None = None) -> list[tuple[str, str, float]]:
        """Copies' members the kernel killed for their memory limit since ``since`` (Unix time): (site, member, when)."""
        return self.backend.oom_kills(self.settings, since, time.time() if until is None else until)

    @staticmethod
    def node_states() -> dict[str, str]:
        """The backend's nodes and their states ({} on one machine)."""
        return get_backend().node_states()

    # -- the front proxy's control service ----------------------------------------------------------------
    def control(self) -> proxy.Control | None:
        """The control service of the instance's running proxy (None: no proxy of this envctl's kind runs). No
        engine call when this machine reached it a moment ago."""
        return proxy.known(self.name) or proxy.locate(self.name, self.backend.proxy(self.name))

    def _read(self) -> RoutingTable | None:
        ctl = self.control()
        return proxy.load(ctl) if ctl is not None else None

    def _apply(self, table: RoutingTable) -> None:
        """Put ``table`` in force in the proxy; the addresses of routed members it lacks are looked up first."""
        ctl = self.control()
        if ctl is None:
            raise DockerError(f"the front proxy of '{self.name}' is not running", "run 'envctl up' to recreate it")
        self._resolve(table, [r.backend for r in table.routes.by_port.values() if r.backend not in table.routes.addrs])
        unknown = proxy.apply(ctl, table)
        if unknown and self._resolve(table, unknown, again=True):
            proxy.apply(ctl, table)

    def _resolve(self, table: RoutingTable, names: list[str], *, again: bool = False) -> bool:
        """Look up ``names``' addresses on the instance's network into ``table`` (engine calls); whether any was found."""
        found = False
        for n in dict.fromkeys(names):
            ip = self.backend.address(self.name, n)
            if ip and (again or n not in table.routes.addrs):
                table.routes.addrs[n] = ip
                found = True
        return found

    # -- the routing table: read --------------------------------------------------------------------
    def table(self) -> RoutingTable:
        """The live routing table (one read); an instance whose proxy is down has an empty one."""
        return self._read() or RoutingTable()

    def has_table(self) -> bool:
        return self._read() is not None

    def sites_up(self, table: RoutingTable) -> list[str]:
        return [s for s in self.catalog.sites if s in table.routes.active]

    def pristine(self, site: str, table: RoutingTable) -> Fingerprint | None:
        raw = table.pristine.get(site)
        return Fingerprint.from_json(raw) if raw else None

    def active_copy(self, site: str, table: RoutingTable) -> Copy | None:
        slot = table.routes.active.get(site)
        return self.backend.copies(self.name, site).get((site, slot)) if slot else None

    # -- the routing table: the one writer ------------------------------------------------------------
    @contextmanager
    def _routing(self) -> Iterator[RoutingTable]:
        """Read-modify-write the table under a cross-process lock; applied when the block ends (when changed)."""
        with self._table_lock, locked(f"proxy.{self.name}"):
            table = self._read()
            if table is None:
                raise NotReady(f"instance '{self.name}' has no running front proxy", "run 'envctl up' to repair it")
            before = table.to_json()
            yield table
            if table.to_json() != before:
                self._apply(table)

    def _route(self, table: RoutingTable, site_name: str, slot: str) -> dict[str, str]:
        """Point the site's public ports at the copy in ``slot`` (its members' names follow from it); service -> name."""
        site = self.catalog.site(site_name)
        d = self.settings.deployment
        names = {svc: member_name(self.name, site_name, svc, slot) for svc in site.services_for(self.flavor)}
        for svc, name in names.items():
            ports = site.services[svc].ports
            if ports is None:
                continue
            public = d.port(ports.public)
            allow = member_name(self.name, site_name, svc, "SLOT").replace("SLOT", "[0-9a-f]{6}")
            table.routes.by_port[str(public)] = Route(name, ports.container_port(public), allow)
        table.routes.active[site_name] = slot
        for source in list(table.ready.slots.get(site_name, {})):
            table.ready.slots[site_name][source] = [r for r in table.ready.of(site_name, source) if r.slot != slot]
        return names

    def route(self, copy: Copy) -> str:
        """Route ``copy``'s site to it (one write); returns the slot it replaced ('' for none)."""
        with self._routing() as table:
            dirty = table.routes.active.get(copy.site, "")
            self._route(table, copy.site, copy.slot)
            return dirty

    def take_ready(self, site: str, source: str = GOLDEN) -> tuple[str, Copy, Fingerprint | None, Ready] | None:
        """Route ``site`` to its first ready copy of ``source``: one read and one write of the table (a flip of the
        proxy's live route, no engine call). Returns (replaced slot, the copy now routed, the pristine fingerprint,
        its ready record), or None when none is ready. A copy that died after it was listed fails the probe that follows."""
        with self._routing() as table:
            ready = table.ready.of(site, source)
            if not ready:
                return None
            first = ready[0]
            dirty = table.routes.active.get(site, "")
            names = self._route(table, site, first.slot)
            pristine = self.pristine(site, table)
        members = {svc: Member(svc, n, "", {}, "running") for svc, n in names.items()}
        return dirty, Copy(site, first.slot, members), pristine, first

    def add_ready(self, copy: Copy, source: str, *, seen: int, addrs: dict[str, str]) -> bool:
        """List ``copy`` as ready for ``source`` (verified now); False when ``source`` no longer wants copies
        (a snapshot replaced or dropped meanwhile: the caller removes it)."""
        with self._routing() as table:
            if source != GOLDEN and source not in table.ready.wanted.get(copy.site, {}):
                return False
            table.ready.slots.setdefault(copy.site, {}).setdefault(source, []).append(Ready(copy.slot, time.time(), seen))
            table.routes.addrs.update({k: v for k, v in addrs.items() if v})
            return True

    def want_ready(self, site: str, source: str, count: int, *, planned: dict[str, Any] | None = None,
                   keep_planned: bool = False) -> None:
        """How many ready copies of ``source`` ``site`` keeps. For spares: ``planned`` is the capacity plan's
        outcome (the plan decides the site from now on); without it (``--spares K``) the plan no longer does,
        unless ``keep_planned``."""
        with self._routing() as table:
            table.ready.wanted.setdefault(site, {})[source] = count
            if source == GOLDEN:
                if planned is not None:
                    table.ready.planned[site] = planned
                elif not keep_planned:
                    table.ready.planned.pop(site, None)

    def raise_planned(self, site: str, granted: int, planned: dict[str, Any]) -> int | None:
        """A re-plan's outcome for a site the plan decides (never lowers its spares); None when '--spares K'
        took it out of the plan meanwhile."""
        with self._routing() as table:
            if site not in table.ready.planned:
                return None
            table.ready.planned[site] = planned
            have = table.ready.want(site, GOLDEN)
            table.ready.wanted.setdefault(site, {})[GOLDEN] = max(have, granted)
            return max(have, granted)

    def drop_ready(self, site: str, source: str | None = None) -> list[str]:
        """Forget ``site``'s ready copies of ``source`` (every snapshot's when None) and that it wants any; their slots."""
        with self._routing() as table:
            by = table.ready.slots.get(site, {})
            sources = [source] if source is not None else [s for s in table.ready.sources(site) if s != GOLDEN]
            slots = [r.slot for s in sources for r in by.pop(s, [])]
            for s in sources:
                table.ready.wanted.get(site, {}).pop(s, None)
            for part in (table.ready.slots, table.ready.wanted):
                if not part.get(site):
                    part.pop(site, None)
        return slots

    def set_pristine(self, site: str, fp: Fingerprint, *, only_if_missing: bool = False) -> None:
        with self._routing() as table:
            if not (only_if_missing and site in table.pristine):
                table.pristine[site] = fp.to_json()

    def lease_record(self) -> dict[str, Any]:
        return dict(self.table().lease.data)

    def write_lease(self, update: Callable[[dict[str, Any]], dict[str, Any] | None]) -> dict[str, Any]:
        """Read-modify-write the lease record: ``update`` gets the current record and returns the new one (None:
        unchanged, or raises to refuse); returns the record in force."""
        with self._routing() as table:
            new = update(dict(table.lease.data))
            if new is not None:
                table.lease.data = new
            return dict(table.lease.data)

    def unroute(self, sites: list[str]) -> None:
        """Stop serving ``sites`` (their ports answer 503): 'down SITE'."""
        with self._routing() as table:
            for n in sites:
                table.routes.active.pop(n, None)
                table.ready.slots.pop(n, None)
                table.ready.wanted.pop(n, None)
                for port in self.catalog.site(n).public_ports().values():
                    table.routes.by_port.pop(str(self.settings.deployment.port(port)), None)

    def refresh_addresses(self, copy: Copy) -> list[str]:
        """Point the proxy's servers of ``copy`` at where its members are now (a member restarted alone may have
        a new address); the names that moved."""
        try:
            with self._routing() as table:
                ctl = self.control()
                found = {n: self.backend.address(self.name, n) for n in copy.names}
                table.routes.addrs.update({n: ip for n, ip in found.items() if ip})
                return proxy.refresh(ctl, found) if ctl is not None else []
        except NotReady:
            return []  # no proxy running: the next 'up' makes one, from the members as they are

    # -- the front proxy ------------------------------------------------------------------------------
    def proxy_ports(self) -> list[int]:
        info = self.backend.proxy(self.name)
        return info.ports if info is not None else []

    def ensure_proxy(self, ports: list[int], image: str) -> bool:
        """A running front proxy of this envctl's kind publishing ``ports`` (recreated, keeping its table, when it
        publishes fewer, or is an older kind without a control service); whether one was made."""
        info = self.backend.proxy(self.name)
        if info is not None and not info.running:  # stopped (a reboot, an engine restart): its table is inside it
            self.backend.start_proxy(self.name)
            proxy.locate(self.name, self.backend.proxy(self.name), wait=30.0)
        table = self._read() if info is not None else None
        if table is not None and set(ports) <= set(self.proxy_ports()):
            return False
        proxy.forget(self.name)
        state = table or RoutingTable()
        self.backend.remove_proxy(self.name)
        try:
            self.backend.boot_proxy(proxy.spec(self.settings, ports, state, image), self.settings)
            ctl = proxy.locate(self.name, self.backend.proxy(self.name), wait=30.0)
            if ctl is None:
                raise DockerError(f"the front proxy of '{self.name}' did not start", f"see 'envctl status -i {self.name}'")
            self._resolve(state, [r.backend for r in state.routes.by_port.values()])
            proxy.settle(ctl, state)
        except BaseException:
            self.remove_proxy()  # a proxy that could not publish its ports is worth nothing: leave none behind
            raise
        return True

    def port_problems(self, ports: list[int]) -> dict[int, str]:
        """Port -> who holds it, for those of ``ports`` the instance could not publish now."""
        owned = set(self.proxy_ports())
        out = {}
        for p in sorted(ports):
            why = self.backend.port_problem(self.settings, p, owned)
            if why:
                out[p] = why
        return out

    def hold(self, site: str) -> Any:
        """Hold new requests on the site's ports while its database is restored in place (a context)."""
        d = self.settings.deployment
        ports = [d.port(p) for p in self.catalog.site(site).public_ports().values()]
        try:
            ctl = self.control()
        except DockerError:
            ctl = None
        return proxy.hold(ctl, ports)

    def addressed(self, site: str, slot: str) -> int:
        """Requests the proxy has passed to the copy in ``slot`` by ``X-Envctl-Backend`` (-1: unknown)."""
        ctl = self.control()
        return proxy.addressed(ctl, self.backend_keys(site, slot)) if ctl is not None else -1

    def retire(self, names: list[str]) -> None:
        """Before members are removed: let the requests in flight on them end (they take no new ones)."""
        try:
            ctl = self.control()
        except DockerError:
            return
        if ctl is not None:
            proxy.retire(ctl, names)

    def backend_keys(self, site: str, slot: str) -> dict[str, str]:
        """Public port -> the X-Envctl-Backend value that addresses this copy there."""
        spec = self.catalog.site(site)
        d = self.settings.deployment
        keys = {}
        for svc in spec.services_for(self.flavor):
            ports = spec.services[svc].ports
            if ports is not None:
                public = d.port(ports.public)
                keys[str(public)] = f"{member_name(self.name, site, svc, slot)}:{ports.container_port(public)}"
        return keys

    def backend_header(self, copy: Copy, service: str) -> dict[str, str]:
        """The proxy header that addresses ``copy`` on the public port of ``service``."""
        ports = self.catalog.site(copy.site).services[service].ports
        if ports is None or service not in copy.members:
            return {}
        public = self.settings.deployment.port(ports.public)
        return {proxy.BACKEND_HEADER: f"{copy.members[service].name}:{ports.container_port(public)}"}

    def remove_proxy(self) -> None:
        self.backend.remove_proxy(self.name)
        proxy.forget(self.name)

    # -- probes ----------------------------------------------------------------------------------------
    def own_headers(self) -> dict[str, str]:
        """What marks a request as envctl's own on this instance's proxy (not counted as a site's use: see
        :meth:`activity`); {} without a proxy."""
        try:
            ctl = self.control()
        except DockerError:
            ctl = None
        return {proxy.OWN_HEADER: proxy.own_token(ctl.token)} if ctl is not None else {}

    def activity(self, sites: list[str]) -> proxy.Activity | None:
        """Requests (not envctl's own) the proxy has passed to ``sites``' public ports, and the copies routed there
        (None without a proxy). Two readings with the same counts and routes mean nothing but envctl reached them."""
        ctl = self.control()
        if ctl is None:
            return None
        d = self.settings.deployment
        by_site = {s: sorted(str(d.port(p)) for p in self.catalog.site(s).public_ports().values()) for s in sites}
        act = proxy.activity(ctl, sorted({int(p) for ports in by_site.values() for p in ports}))
        return dataclasses.replace(act, sites=by_site)

    def probe(self, site: str) -> tuple[bool, list[ProbeResult]]:
        """The site's probes on its public URLs (whatever copy is routed), marked as envctl's own."""
        spec = self.catalog.site(site)
        d = self.settings.deployment
        own = self.own_headers()
        results = [run_probe(p, d.url(spec, p.service), headers=own) for p in spec.health.probes]
        return all(r.ok for r in results), results

    def probe_copy(self, copy: Copy) -> tuple[bool, list[ProbeResult]]:
        """The site's probes against one copy, through the proxy, on the public URL (routed or not)."""
        spec = self.catalog.site(copy.site)
        d = self.settings.deployment
        results = []
        for p in spec.health.probes:
            svc = p.service or spec.entry
            results.append(run_probe(p, d.url(spec, svc), headers={**self.own_headers(), **self.backend_header(copy, svc)}))
        return all(r.ok for r in results), results

    def wait_healthy(self, copy: Copy, progress: Progress = _noop, *, public: bool = False) -> list[ProbeResult]:
        """Wait until ``copy`` passes its probes (through the proxy header; ``public``: on the public URL, as
        routed), failing fast when one of its members stops."""
        spec = self.catalog.site(copy.site)
        progress(copy.site, "wait", f"waiting for copy {copy.slot} to pass its probes")
        ok, results = False, list[ProbeResult]()
        for _ in attempts(spec.health.timeout, cancel=self.cancel):
            why = self.died(copy)
            if why:
                raise NotReady(f"{copy.site}: {why}", f"see 'envctl logs {copy.site}'")
            ok, results = self.probe(copy.site) if public else self.probe_copy(copy)
            if ok:
                break
        if not ok:
            bad = next(r for r in results if not r.ok)
            logs = self.mask(copy.site, self.backend.logs(copy.members[spec.entry], 15)) if spec.entry in copy.members else ""
            raise NotReady(f"{copy.site}: probe '{bad.name}' ({bad.url}) still failing after {spec.health.timeout:.0f}s: "
                           f"{bad.detail or bad.status}" + (f"\n--- last log lines ---\n{logs}" if logs else ""),
                           f"see 'envctl logs {copy.site}'")
        return results

    def died(self, copy: Copy) -> str:
        """Why ``copy`` cannot become healthy any more (a member gone or stopped, with its last log lines), or ''."""
        for svc, m in copy.members.items():
            live = self.backend.member(m.name)
            if live is None:
                return f"the {svc} member of {copy.site} copy {copy.slot} was removed"
            if not live.running:
                why = " (killed: out of memory)" if live.oom_killed else ""
                return (f"{m.name} ({svc}) stopped{why}\n--- last log lines ---\n"
                        f"{self.mask(copy.site, self.backend.logs(live, 15))}")
        return ""

    def mask(self, site: str, text: str) -> str:
        """Hide the site's passwords and secret settings in text meant for humans or logs."""
        return mask_text(self.catalog.site(site), text)

    # -- fingerprints -------------------------------------------------------------------------------------
    def fingerprint(self, copy: Copy) -> Fingerprint:
        """Run the site's fingerprint queries in ``copy`` and hash what they print; at most ``VERIFY_SLOTS`` at once
        on this machine (many resets at once share the CPU instead of timing each other out)."""
        spec, outputs = self.catalog.site(copy.site), {}
        with one_of("fingerprint", VERIFY_SLOTS, timeout=600):
            for q in spec.fingerprint_queries(self.flavor):
                rc, out = self.exec(copy, q.service or spec.entry, list(q.run))
                if rc != 0:
                    raise DockerError(f"{spec.title}: fingerprint query '{q.name}' failed (exit {rc}): "
                                      f"{self.mask(copy.site, out)[-200:]}")
                outputs[q.name] = out
        return hashed(outputs)

    def not_pristine(self, copy: Copy, expected: Fingerprint | None) -> str:
        """'' when ``copy`` matches the pristine fingerprint ``expected``, else why not."""
        return mismatch(expected, self.fingerprint(copy))

    def save_inplace(self, copy: Copy, progress: Progress = _noop, *, state: str = "pristine") -> bool:
        """Save ``copy``'s state inside it as ``state`` (``reset.inplace.save``: 'pristine' is what the in-place tier
        restores); False when the site declares no in-place tier."""
        inplace = self.catalog.site(copy.site).reset.inplace
        if inplace is None:
            return False
        self.run_steps(copy, inplace.save, "save", progress=progress, state=state)
        return True

    def has_saved(self, copy: Copy, state: str) -> bool:
        """Whether ``copy`` holds saved state ``state`` (``reset.inplace.has``; False when the site cannot say)."""
        inplace = self.catalog.site(copy.site).reset.inplace
        if inplace is None or not inplace.has:
            return False
        r = self.renderer(copy.site, copy.slot, state)
        return all(self.exec(copy, st.service or self.catalog.site(copy.site).entry, r.argv(st.run))[0] == 0
                   for st in inplace.has)

    # -- copies -----------------------------------------------------------------------------------------
    def copies(self, site: str | None = None) -> dict[tuple[str, str], Copy]:
        return self.backend.copies(self.name, site)

    def images(self, site: str) -> dict[str, str]:
        s = self.catalog.site(site)
        return {svc: s.services[svc].flavors[self.flavor].image for svc in s.services_for(self.flavor)}

    def missing_images(self, sites: list[str]) -> list[tuple[str, str, str | None]]:
        """(site, image, build dir or None) for every image of ``sites`` the backend does not have."""
        out, seen = [], set()
        for site in sites:
            s = self.catalog.site(site)
            for svc in s.services_for(self.flavor):
                sf = s.services[svc].flavors[self.flavor]
                if sf.image not in seen and not self.backend.image_exists(sf.image):
                    out.append((site, sf.image, sf.build))
                seen.add(sf.image)
        return out

    def renderer(self, site: str, slot: str, state: str = "pristine") -> Renderer:
        s = self.catalog.site(site)
        names = {svc: member_name(self.name, site, svc, slot) for svc in s.services}
        return Renderer(self.catalog, site, self.settings.deployment, names, state)

    def spec(self, site: str, *, role: str, images: dict[str, str] | None = None, golden: str = "") -> CopySpec:
        """What booting a copy of ``site`` means here: each service's image, command, env, volumes, links,
        limits and labels, rendered for a new slot (the same on every flavor but for images and limits)."""
        s = self.catalog.site(site)
        slot = secrets.token_hex(3)
        r = self.renderer(site, slot)
        services = []
        for svc_name in s.services_for(self.flavor):
            svc, sf = s.services[svc_name], s.services[svc_name].flavors[self.flavor]
            labels = {**self.settings.labels(), "envctl.site": site, "envctl.service": svc_name, "envctl.slot": slot,
                      "envctl.role": role, "envctl.image": sf.image, "envctl.public_url": r("{public_url}"),
                      "envctl.created": f"{time.time():.3f}", **({"envctl.golden": golden} if golden else {})}
            links = {alias: r.containers[dep] for dep in svc.depends_on for alias in s.services[dep].aliases
                     if dep in s.services_for(self.flavor)}
            services.append(ServiceSpec(
                svc_name, r.containers[svc_name], (images or {}).get(svc_name, sf.image), labels,
                list(svc.command) if svc.command else None, {k: r(v) for k, v in svc.env.items()},
                [(r.volume_source(v.source), v.target, "ro" if v.read_only else "rw") for v in svc.volumes], links,
                sf.memory or svc.memory, list(svc.tmpfs), svc.user, svc.stop_timeout, svc.restart,
                tuple(svc.ready or ())))
        return CopySpec(self.name, site, slot, services, s.health.timeout, {**self.settings.labels(), "envctl.site": site})

    def boot_copy(self, site: str, *, role: str, images: dict[str, str] | None = None, golden: str = "",
                  progress: Progress = _noop, timings: dict[str, float] | None = None) -> Copy:
        """Boot a copy (from ``images`` when given, e.g. a golden) and configure it unless it booted from a golden
        image; not routed, not yet healthy. Nothing is left behind on failure."""
        copy = self.backend.boot(self.spec(site, role=role, images=images, golden=golden), self.settings,
                                 progress=progress, cancel=self.cancel, timings=timings)
        try:
            t = time.monotonic()
            if not golden:
                self.configure(copy, progress=progress)
            if timings is not None:
                timings["configure"] = time.monotonic() - t
            return copy
        except BaseException:
            self.remove_copy(copy)
            raise

    @contextmanager
    def booting(self, site: str, *, role: str, images: dict[str, str] | None = None, golden: str = "",
                progress: Progress = _noop) -> Iterator[Copy]:
        """A healthy new copy (booted, configured unless from a golden, passing its probes through the proxy
        header) for the block; removed when the block raises: the one boot-wait-or-remove of envctl."""
        copy = self.boot_copy(site, role=role, images=images, golden=golden, progress=progress)
        try:
            self.wait_healthy(copy, progress)
            yield copy
        except BaseException:
            self.remove_copy(copy)
            raise

    def configure(self, copy: Copy, *, progress: Progress = _noop) -> int:
        """Run the site's post-start steps in order (idempotent); returns how many ran."""
        return self.run_steps(copy, self.catalog.site(copy.site).steps(self.flavor), "configure", progress=progress)

    def run_steps(self, copy: Copy, steps: Sequence[Step], what: str, *, progress: Progress = _noop,
                  state: str = "pristine") -> int:
        """Run catalog steps (configure, in-place save/restore of saved ``state``) in ``copy``, in order; returns how
        many ran."""
        s = self.catalog.site(copy.site)
        r = self.renderer(copy.site, copy.slot, state)
        for i, step in enumerate(steps, 1):
            svc = step.service or s.entry
            argv = r.argv(step.run)
            shown = self.mask(copy.site, " ".join(argv))
            progress(copy.site, what, f"step {i}/{len(steps)}: {shown[:90]}")
            rc, out = self.exec(copy, svc, argv)
            if rc != 0:
                raise DockerError(f"{copy.site}: {what} step {i} ({shown[:160]}) failed with exit {rc}: "
                                  f"{self.mask(copy.site, out)[-300:]}", f"see 'envctl logs {copy.site}'")
        return len(steps)

    def exec(self, copy: Copy, service: str, argv: list[str]) -> tuple[int, str]:
        """Run argv in one member of ``copy``, wherever it runs; (exit code, output)."""
        m = copy.members.get(service)
        if m is None:
            raise DockerError(f"{copy.site}: copy {copy.slot} has no service '{service}'")
        return self.backend.exec(m, argv)

    def remove_copy(self, copy: Copy) -> None:
        self.backend.remove(copy.names)

    def stop_copy(self, copy: Copy) -> None:
        """Stop every member of ``copy`` cleanly: dependents first, databases last; each service's own stop
        command (e.g. 'gitlab-ctl stop') before the engine's signal."""
        site = self.catalog.site(copy.site)
        for svc in reversed([s for s in site.service_order() if s in copy.members]):
            spec = site.services[svc]
            if spec.stop:
                rc, out = self.backend.exec(copy.members[svc], list(spec.stop))
                if rc != 0:
                    raise DockerError(f"{copy.site}: '{' '.join(spec.stop)}' in {svc} failed (exit {rc}): "
                                      f"{self.mask(copy.site, out)[-200:]}", f"see 'envctl logs {copy.site}'")
            self.backend.stop(copy.members[svc], timeout=spec.stop_timeout)

    def commit_copy(self, copy: Copy, tags: dict[str, str], labels: dict[str, str], *, restart: bool = True) -> Copy:
        """Clean stop, commit every member (its declared volumes' contents too) as ``tags``, start again (the site
        is down meanwhile); the copy as it runs now. The proxy's servers of it follow it to its new addresses."""
        self.stop_copy(copy)
        for svc, m in copy.members.items():
            self.backend.commit(m, tags[svc], {**labels, "envctl.service": svc})
        if not restart:
            return copy
        order = [s for s in self.catalog.site(copy.site).service_order() if s in copy.members]
        started = self.backend.start(Copy(copy.site, copy.slot, {s: copy.members[s] for s in order}), tags)
        self.refresh_addresses(started)
        return started

    def capture(self, copy: Copy, tags: dict[str, str], labels: dict[str, str], timings: dict[str, float]) -> None:
        """Freeze every member of ``copy`` at once, commit each (volumes copied out too), thaw; then build the
        volume layers while the copy runs on. ``timings``: freeze (the site's pause), build."""
        with tempfile.TemporaryDirectory(prefix="envctl-snap-") as tmp:
            members = list(copy.members.items())
            t = time.monotonic()
            try:
                self.backend.freeze([m for _, m in members])  # in the try: a freeze interrupted half-way is thawed
                caps = self.backend.commits([(m, tags[svc], {**labels, "envctl.service": svc}, Path(tmp) / svc)
                                             for svc, m in members])  # all or none (a full disk, an interrupt)
            finally:
                self.backend.thaw([m for _, m in members])
                timings["freeze"] = timings.get("freeze", 0.0) + time.monotonic() - t
            t = time.monotonic()
            self.backend.finish_commits(caps)  # all or none: a snapshot is whole or absent
            timings["build"] = timings.get("build", 0.0) + time.monotonic() - t

    def thaw_leftovers(self, copy: Copy) -> list[str]:
        """Thaw members of ``copy`` a capture killed mid-freeze left frozen; their names."""
        frozen = [m for m in (self.backend.member(n) for n in copy.names) if m is not None and m.status == "paused"]
        self.backend.thaw(frozen)
        return [m.name for m in frozen]

    def logs(self, copy: Copy, service: str, tail: int = 100) -> str:
        return self.backend.logs(copy.members[service], tail)

    def follow_logs(self, copy: Copy, service: str) -> Iterator[str]:
        return self.backend.follow(copy.members[service])

    # -- images -----------------------------------------------------------------------------------------
    def image_exists(self, ref: str) -> bool:
        return self.backend.image_exists(ref)

    def image_id(self, ref: str) -> str:
        return self.backend.image_id(ref)

    def image_labels(self, ref: str) -> dict[str, str]:
        return self.backend.image_labels(ref)

    def images_labelled(self, label_key: str) -> list[tuple[str, list[str], dict[str, str], int]]:
        return self.backend.images_labelled(label_key)

    def remove_image(self, ref: str) -> None:
        self.backend.remove_image(ref)

    def distribute(self, refs: list[str], progress: Progress = _noop) -> None:
        """Make images reachable wherever the instance's copies may boot (a no-op on one engine)."""
        self.backend.distribute(refs, progress)

    # -- what this instance leaves behind --------------------------------------------------------------
    def remove_all(self, sites: list[str] | None) -> tuple[list[str], list[str]]:
        """Remove every member of the instance (of ``sites``), the proxy and network too when no site is named;
        (the names removed, what the engine kept: the network, for a stale endpoint)."""
        names = [m.name for (s, _), c in self.copies().items() if sites is None or s in sites for m in c.members.values()]
        self.backend.remove(names)
        kept = []
        if sites is None:
            if self.backend.proxy(self.name) is not None:
                names.append(proxy.proxy_name(self.name))
            self.remove_proxy()
            if not self.backend.remove_network(self.name):
                kept.append(self.network)
        elif self.has_table():
            self.unroute(sites)
        return sorted(set(names)), kept

    def remove_network(self) -> bool:
        return self.backend.remove_network(self.name)

    def volumes(self, site: str | None = None) -> list[str]:
        return self.backend.volumes(self.name, site)

    def remove_volumes(self, names: list[str]) -> dict[str, str]:
        return self.backend.remove_volumes(names)

    # -- locks ------------------------------------------------------------------------------------------
    def ready_lock(self, site: str) -> str:
        """The lock a process holds while it boots or cleans up ``site``'s ready copies (or a copy it is about
        to route: a recreate, a cold snapshot restore): cleanups leave ready-role copies alone while it is held."""
        return f"ready.{self.name}.{site}"

    def reset_lock(self, site: str) -> str:
        """The lock a reset, a snapshot or a restore of ``site`` holds: one at a time per site."""
        return f"reset.{self.name}.{site}"

    def boot_lock(self, site: str) -> str:
        """The lock 'up' holds while it boots an active copy of ``site`` and routes it: until it is routed,
        that copy is neither active nor ready, and a cleanup must not take it for a stray."""
        return f"boot.{self.name}.{site}"

    @staticmethod
    def held(lock: str) -> bool:
        """Does another process hold ``lock`` right now?"""
        try:
            with locked(lock, wait=False):
                return False
        except EnvctlError:
            return True


def measure(backend: Backend | None = None) -> EngineMemory:
    """Every envctl member's limit and measured use (one read for all), and each instance's routing (side
    by side): what the capacity plan counts. Raises the engine's errors (EngineUnavailable)."""
    backend = backend or get_backend()
    every, used, source = backend.memory()
    held = [Held(h.labels["envctl.instance"], h.labels.get("envctl.site", ""), h.labels.get("envctl.slot", ""),
                 h.labels.get("envctl.role", ""), h.labels.get("envctl.flavor", ""), h.limit, h.measured)
            for h in every if h.labels.get("envctl.instance")]

    def table(n: str) -> tuple[str, RoutingTable | None]:
        try:
            ctl = proxy.known(n) or proxy.locate(n, backend.proxy(n))
            return n, proxy.load(ctl) if ctl is not None else None
        except EnvctlError:
            return n, None

    names = sorted({h.instance for h in held})
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(names)))) as pool:
        tables = dict(pool.map(table, names))
    return EngineMemory(tuple(held), {n: dict(t.routes.active) for n, t in tables.items() if t is not None},
                        {n: {s: w.get(GOLDEN, 0) for s, w in t.ready.wanted.items()}
                         for n, t in tables.items() if t is not None}, used, source)


__all__ = ["Instance", "Progress", "find_settings", "measure", "ready_role", "ROLES"]
