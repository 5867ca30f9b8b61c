"""An instance's front proxy (docs/architecture.md, "The routing table"): found or made, its control service, what
it holds and counts. Part of :class:`envctl.instance.Instance` (``inst.front``)."""
from __future__ import annotations

import dataclasses
from typing import Any

from envctl.backends.base import Copy, member_name
from envctl.errors import DockerError
from envctl.instance.core import Core
from envctl.routing import proxy
from envctl.routing.table import RoutingTable


class Front:
    """The instance's front proxy and its control service."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def control(self) -> proxy.Control | None:
        """The control service of the instance's running proxy (None: no proxy of this envctl's kind runs). No
        engine call when this machine reached it a moment ago."""
        return proxy.known(self.core.name) or proxy.locate(self.core.name, self.core.backend.proxy.find(self.core.name))

    def read(self) -> RoutingTable | None:
        """The routing table as the proxy holds it (None: no proxy runs)."""
        ctl = self.control()
        return proxy.load(ctl) if ctl is not None else None

    def ports(self) -> list[int]:
        info = self.core.backend.proxy.find(self.core.name)
        return info.ports if info is not None else []

    def resolve(self, table: RoutingTable, names: list[str], *, again: bool = False) -> bool:
        """Look up ``names``' addresses on the instance's network into ``table`` (engine calls); whether any was found."""
        found = False
        for n in dict.fromkeys(names):
            ip = self.core.backend.proxy.address(self.core.name, n)
            if ip and (again or n not in table.routes.addrs):
                table.routes.addrs[n] = ip
                found = True
        return found

    def ensure(self, ports: list[int], image: str) -> bool:
        """A running front proxy of this envctl's kind publishing ``ports`` (recreated, keeping its table, when it
        publishes fewer, or is an older kind without a control service); whether one was made."""
        core, part = self.core, self.core.backend.proxy
        info = part.find(core.name)
        if info is not None and not info.running:  # stopped (a reboot, an engine restart): its table is inside it
            part.start(core.name)
            proxy.locate(core.name, part.find(core.name), wait=30.0)
        table = self.read() if info is not None else None
        if table is not None and set(ports) <= set(self.ports()):
            return False
        proxy.forget(core.name)
        state = table or RoutingTable()
        part.remove(core.name)
        try:
            part.boot(proxy.spec(core.settings, ports, state, image), core.settings)
            ctl = proxy.locate(core.name, part.find(core.name), wait=30.0)
            if ctl is None:
                raise DockerError(f"the front proxy of '{core.name}' did not start", f"see 'envctl status -i {core.name}'")
            self.resolve(state, [r.backend for r in state.routes.by_port.values()])
            proxy.settle(ctl, state)
        except BaseException:
            self.remove()  # a proxy that could not publish its ports is worth nothing: leave none behind
            raise
        return True

    def remove(self) -> None:
        self.core.backend.proxy.remove(self.core.name)
        proxy.forget(self.core.name)

    def port_problems(self, ports: list[int]) -> dict[int, str]:
        """Port -> who holds it, for those of ``ports`` the instance could not publish now."""
        owned = set(self.ports())
        out = {}
        for p in sorted(ports):
            why = self.core.backend.placement.port_problem(self.core.settings, p, owned)
            if why:
                out[p] = why
        return out

    def _control_or_none(self) -> proxy.Control | None:
        try:
            return self.control()
        except DockerError:
            return None

    def site_ports(self, site: str) -> list[int]:
        d = self.core.settings.deployment
        return [d.port(p) for p in self.core.catalog.site(site).public_ports().values()]

    def hold(self, site: str) -> Any:
        """Hold new requests on the site's ports while its database is restored in place (a context)."""
        return proxy.hold(self._control_or_none(), self.site_ports(site))

    def addressed(self, site: str, slot: str) -> int:
        """Requests the proxy has passed to the copy in ``slot`` by ``X-Envctl-Backend`` (-1: unknown)."""
        ctl = self.control()
        return proxy.addressed(ctl, self.backend_keys(site, slot)) if ctl is not None else -1

    def retire(self, names: list[str]) -> None:
        """Before members are removed: let the requests in flight on them end (they take no new ones)."""
        ctl = self._control_or_none()
        if ctl is not None:
            proxy.retire(ctl, names)

    def backend_keys(self, site: str, slot: str) -> dict[str, str]:
        """Public port -> the X-Envctl-Backend value that addresses this copy there."""
        spec, core = self.core.catalog.site(site), self.core
        d = core.settings.deployment
        keys = {}
        for svc in spec.services_for(core.flavor):
            ports = spec.services[svc].ports
            if ports is not None:
                public = d.port(ports.public)
                keys[str(public)] = f"{member_name(core.name, site, svc, slot)}:{ports.container_port(public)}"
        return keys

    def backend_header(self, copy: Copy, service: str) -> dict[str, str]:
        """The proxy header that addresses ``copy`` on the public port of ``service``."""
        ports = self.core.catalog.site(copy.site).services[service].ports
        if ports is None or service not in copy.members:
            return {}
        public = self.core.settings.deployment.port(ports.public)
        return {proxy.BACKEND_HEADER: f"{copy.members[service].name}:{ports.container_port(public)}"}

    def own_headers(self) -> dict[str, str]:
        """What marks a request as envctl's own on this instance's proxy (not counted as a site's use: see
        :meth:`activity`); {} without a proxy."""
        ctl = self._control_or_none()
        return {proxy.OWN_HEADER: proxy.own_token(ctl.token)} if ctl is not None else {}

    def activity(self, sites: list[str]) -> proxy.Activity | None:
        """Requests (not envctl's own) the proxy has passed to ``sites``' public ports, and the copies routed there
        (None without a proxy). Two readings with the same counts and routes mean nothing but envctl reached them."""
        ctl = self.control()
        if ctl is None:
            return None
        by_site = {s: sorted(str(p) for p in self.site_ports(s)) for s in sites}
        act = proxy.activity(ctl, sorted({int(p) for ports in by_site.values() for p in ports}))
        return dataclasses.replace(act, sites=by_site)


__all__ = ["Front"]
