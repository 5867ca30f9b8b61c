"""An instance's routing table (docs/architecture.md, "The routing table"): read once per operation, changed only
here, each change a read-modify-write under the lock ``proxy.<instance>``, applied atomically in the front proxy.
Part of :class:`envctl.instance.Instance` (``inst.routing``): the one writer of the table."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from envctl.backends.base import Copy, Member, member_name
from envctl.errors import DockerError, NotReady
from envctl.healthchecks.fingerprint import Fingerprint
from envctl.instance.core import Core
from envctl.instance.front import Front
from envctl.locks import locked
from envctl.routing import proxy
from envctl.routing.table import GOLDEN, Ready, Route, RoutingTable


class Routing:
    """Reads of the routing table, and every change to it."""

    def __init__(self, core: Core, front: Front) -> None:
        self.core, self.front = core, front
        self._lock = threading.Lock()

    # -- reads ------------------------------------------------------------------------------------------
    def table(self) -> RoutingTable:
        """The live routing table (one read); an instance whose proxy is down has an empty one."""
        return self.front.read() or RoutingTable()

    def exists(self) -> bool:
        """Whether the instance's proxy runs and holds a table."""
        return self.front.read() is not None

    def sites_up(self, table: RoutingTable) -> list[str]:
        return [s for s in self.core.catalog.sites if s in table.routes.active]

    @staticmethod
    def pristine(site: str, table: RoutingTable) -> Fingerprint | None:
        raw = table.pristine.get(site)
        return Fingerprint.from_json(raw) if raw else None

    def active_copy(self, site: str, table: RoutingTable) -> Copy | None:
        slot = table.routes.active.get(site)
        return self.core.backend.copies.of(self.core.name, site).get((site, slot)) if slot else None

    # -- the one writer -----------------------------------------------------------------------------------
    @contextmanager
    def _routing(self) -> Iterator[RoutingTable]:
        """Read-modify-write the table under a cross-process lock; applied when the block ends (when changed)."""
        with self._lock, locked(f"proxy.{self.core.name}"):
            table = self.front.read()
            if table is None:
                raise NotReady(f"instance '{self.core.name}' has no running front proxy", "run 'envctl up' to repair it")
            before = table.to_json()
            yield table
            if table.to_json() != before:
                self._apply(table)

    def _apply(self, table: RoutingTable) -> None:
        """Put ``table`` in force in the proxy; the addresses of routed members it lacks are looked up first."""
        ctl = self.front.control()
        if ctl is None:
            raise DockerError(f"the front proxy of '{self.core.name}' is not running", "run 'envctl up' to recreate it")
        self.front.resolve(table, [r.backend for r in table.routes.by_port.values() if r.backend not in table.routes.addrs])
        unknown = proxy.apply(ctl, table)
        if unknown and self.front.resolve(table, unknown, again=True):
            proxy.apply(ctl, table)

    def _route(self, table: RoutingTable, site_name: str, slot: str) -> dict[str, str]:
        """Point the site's public ports at the copy in ``slot`` (its members' names follow from it); service -> name."""
        core = self.core
        site = core.catalog.site(site_name)
        d = core.settings.deployment
        names = {svc: member_name(core.name, site_name, svc, slot) for svc in site.services_for(core.flavor)}
        for svc, name in names.items():
            ports = site.services[svc].ports
            if ports is None:
                continue
            public = d.port(ports.public)
            allow = member_name(core.name, site_name, svc, "SLOT").replace("SLOT", "[0-9a-f]{6}")
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
                for port in self.core.catalog.site(n).public_ports().values():
                    table.routes.by_port.pop(str(self.core.settings.deployment.port(port)), None)

    def refresh_addresses(self, copy: Copy) -> list[str]:
        """Point the proxy's servers of ``copy`` at where its members are now (a member restarted alone may have
        a new address); the names that moved."""
        try:
            with self._routing() as table:
                ctl = self.front.control()
                found = {n: self.core.backend.proxy.address(self.core.name, n) for n in copy.names}
                table.routes.addrs.update({n: ip for n, ip in found.items() if ip})
                return proxy.refresh(ctl, found) if ctl is not None else []
        except NotReady:
            return []  # no proxy running: the next 'up' makes one, from the members as they are


__all__ = ["Routing"]
