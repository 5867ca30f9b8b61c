"""Rendering catalog templates for one deployment of one instance (:class:`Deployment`, :class:`Renderer`)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

from envctl.errors import UnknownSite
from envctl.paths import confined
from envctl.catalog.model import Catalog, Site
from envctl.secrets import mask_data, mask_text


# -- rendering ----------------------------------------------------------------------------------

_TOKEN = re.compile(r"\{(public_url|public_host|public_port|scheme|data_dir|instance|state|sites\.[a-z0-9_]+\.public_url|"
                    r"service\.[a-z0-9_]+|service_url\.[a-z0-9_]+|service_port\.[a-z0-9_]+|"
                    r"setting\.[a-z0-9_]+)\}")


@dataclass(frozen=True)
class Deployment:
    """Where one instance's sites are published: scheme, host, and a port offset."""

    public_host: str = "127.0.0.1"
    scheme: str = "http"
    port_offset: int = 0
    data_dir: str = ""
    instance: str = "default"  # {instance}: instance-scoped names (data volumes)

    def port(self, base: int) -> int:
        return base + self.port_offset

    def url(self, site: Site, service: str | None = None) -> str:
        svc = site.services[service or site.entry]
        assert svc.ports is not None
        return f"{self.scheme}://{self.public_host}:{self.port(svc.ports.public)}"


@dataclass
class Renderer:
    """Renders catalog templates for one site copy of one deployment."""

    catalog: Catalog
    site_name: str
    deployment: Deployment
    containers: Mapping[str, str] = field(default_factory=dict)  # service -> container name
    state: str = "pristine"  # {state}: the saved state an in-place step saves or restores (an identifier)

    @cached_property
    def site(self) -> Site:
        return self.catalog.site(self.site_name)

    def value(self, token: str) -> str:
        d = self.deployment
        if token == "public_url":
            return d.url(self.site)
        if token == "public_host":
            return d.public_host
        if token == "public_port":
            return str(d.port(self.site.entry_service.ports.public))  # type: ignore[union-attr]
        if token == "scheme":
            return d.scheme
        if token == "data_dir":
            return d.data_dir
        if token == "instance":
            return d.instance
        if token == "state":
            return self.state
        kind, _, rest = token.partition(".")
        if kind == "sites":
            return d.url(self.catalog.site(rest.split(".")[0]))
        if kind in ("service", "service_url", "service_port"):
            if rest not in self.site.services:
                raise UnknownSite(rest, self.site.services, kind="service")
            if kind == "service":
                return self.containers.get(rest, rest)
            if kind == "service_url":
                return d.url(self.site, rest)
            return str(d.port(self.site.services[rest].ports.public))  # type: ignore[union-attr]
        if kind == "setting":
            if rest not in self.site.settings:
                raise UnknownSite(rest, self.site.settings, kind="setting")
            return self.site.settings[rest]
        raise AssertionError(token)

    def __call__(self, template: str) -> str:
        return _TOKEN.sub(lambda m: self.value(m.group(1)), template)

    def argv(self, argv: tuple[str, ...]) -> list[str]:
        return [self(a) for a in argv]

    def volume_source(self, source: str) -> str:
        """A volume's source as a copy is booted with it: a named volume rendered, a ``{data_dir}/<path>``
        bind mount confined again now, at use (the loader checked the text; a symbolic link put under the data
        directory since, e.g. by another user or a restored backup, must not give a container a host path
        outside it): resolved with links followed, refused in one line unless it stays inside."""
        if not source.startswith("{data_dir}/") or not self.deployment.data_dir:
            return self(source)
        return str(confined(Path(self.deployment.data_dir), source[len("{data_dir}/"):],
                            f"{self.site_name}: the bind-mount source"))

    def env(self, benchmark: str) -> dict[str, str]:
        return {k: self(v) for k, v in self.site.env.get(benchmark, {}).items()}


def describe(catalog: Catalog, site: str) -> dict[str, Any]:
    """Everything about ``site``, secrets masked, with its configure steps rendered for 127.0.0.1."""
    s = catalog.site(site)
    data = mask_data(s.model_dump(mode="json"), site=s)
    r = Renderer(catalog, site, Deployment())
    data["rendered_for_127.0.0.1"] = {f: [mask_text(s, " ".join(r.argv(st.run))) for st in s.steps(f)]
                                      for f in s.flavors}
    return data
