"""Site copies on the local Docker engine.

A *copy* of a site is one container per service of the site's flavor, sharing a random ``slot``
id: ``envctl-<instance>-<site>-<service>-<slot>``. Copies publish no host ports; the instance's
front proxy routes to the active one. Everything about a copy is in its containers' labels.
"""
from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from envctl.catalog import Catalog, Deployment, Renderer, Site, Step
from envctl.errors import DockerError, NotReady
from envctl.healthchecks.wait import TargetDied, wait_ready
from envctl.provision import docker as dk
from envctl.provision.docker import Container, NoSuchContainer
from envctl.secrets import mask_text

Progress = Callable[[str, str, str], None]  # (site, phase, detail)


def _noop(site: str, phase: str, detail: str) -> None:
    pass


@dataclass(frozen=True)
class InstanceSettings:
    name: str = "default"
    flavor: str = "full"
    public_host: str = "127.0.0.1"
    bind: str = "127.0.0.1"
    port_offset: int = 0
    scheme: str = "http"
    data_dir: str = ""

    @property
    def deployment(self) -> Deployment:
        return Deployment(self.public_host, self.scheme, self.port_offset, self.data_dir, self.name)

    def labels(self) -> dict[str, str]:
        return {"envctl.instance": self.name, "envctl.flavor": self.flavor, "envctl.public_host": self.public_host,
                "envctl.bind": self.bind, "envctl.port_offset": str(self.port_offset), "envctl.scheme": self.scheme}

    @classmethod
    def from_labels(cls, labels: dict[str, str], data_dir: str = "") -> "InstanceSettings":
        return cls(labels["envctl.instance"], labels.get("envctl.flavor", "full"),
                   labels.get("envctl.public_host", "127.0.0.1"), labels.get("envctl.bind", "127.0.0.1"),
                   int(labels.get("envctl.port_offset", "0")), labels.get("envctl.scheme", "http"), data_dir)


@dataclass
class Copy:
    site: str
    slot: str
    containers: dict[str, Container] = field(default_factory=dict)  # service -> container

    @property
    def names(self) -> list[str]:
        out = []
        for c in self.containers.values():
            try:
                out.append(c.name)
            except NoSuchContainer:  # removed since it was listed: its id still addresses it
                out.append(c.id)
        return out

    def running(self) -> bool:
        try:
            return bool(self.containers) and all(c.state.running for c in self.containers.values())
        except NoSuchContainer:  # removed since it was listed
            return False

    @property
    def golden(self) -> str:
        return next((dk.label(c, "golden") for c in self.containers.values() if dk.label(c, "golden")), "")

    @property
    def created(self) -> float:
        return min((float(dk.label(c, "created", "0")) for c in self.containers.values()), default=0.0)


def mask(site: Site, text: str) -> str:
    """Hide the site's passwords and secret settings in text meant for humans or logs."""
    return mask_text(site, text)


class LocalBackend:
    """Creates, configures, lists and removes site copies for one instance."""

    def __init__(self, catalog: Catalog, settings: InstanceSettings) -> None:
        self.catalog, self.settings = catalog, settings

    @property
    def network(self) -> str:
        return f"envctl-{self.settings.name}"

    def container_name(self, site: str, service: str, slot: str) -> str:
        return f"envctl-{self.settings.name}-{site}-{service}-{slot}".replace("_", "-")

    def renderer(self, site: str, slot: str) -> Renderer:
        s = self.catalog.site(site)
        names = {svc: self.container_name(site, svc, slot) for svc in s.services}
        return Renderer(self.catalog, site, self.settings.deployment, names)

    # -- listing -----------------------------------------------------------------------------
    def copies(self, site: str | None = None) -> dict[tuple[str, str], Copy]:
        filt = {"instance": self.settings.name}
        if site:
            filt["site"] = site
        found: dict[tuple[str, str], Copy] = {}
        for c in dk.containers(**filt):
            try:
                if dk.label(c, "role") == "proxy":
                    continue
                key = (dk.label(c, "site"), dk.label(c, "slot"))
                found.setdefault(key, Copy(*key)).containers[dk.label(c, "service")] = c
            except NoSuchContainer:  # python-on-whales re-inspects lazily; a background removal won the race
                continue
        return found

    # -- images ------------------------------------------------------------------------------
    def images(self, site: str) -> dict[str, str]:
        s = self.catalog.site(site)
        return {svc: s.services[svc].flavors[self.settings.flavor].image for svc in s.services_for(self.settings.flavor)}

    def missing_images(self, sites: list[str]) -> list[tuple[str, str, str | None]]:
        """(site, image, build dir or None) for every image that is not present locally."""
        out = []
        seen = set()
        for site in sites:
            s = self.catalog.site(site)
            for svc in s.services_for(self.settings.flavor):
                sf = s.services[svc].flavors[self.settings.flavor]
                if sf.image not in seen and not dk.image_exists(sf.image):
                    out.append((site, sf.image, sf.build))
                seen.add(sf.image)
        return out

    # -- create ------------------------------------------------------------------------------
    def create_copy(self, site: str, *, role: str, images: dict[str, str] | None = None, golden: str = "",
                    progress: Progress = _noop, cancel: threading.Event | None = None,
                    timings: dict[str, float] | None = None) -> Copy:
        """Start every service of ``site`` (dependencies first) and wait until each is ready to configure.

        On failure the containers made so far are removed: nothing half-done is left behind.
        """
        s = self.catalog.site(site)
        slot = secrets.token_hex(3)
        r = self.renderer(site, slot)
        flavor = self.settings.flavor
        copy = Copy(site, slot)
        timings = timings if timings is not None else {}
        t0 = time.monotonic()
        try:
            for svc_name in s.services_for(flavor):
                svc = s.services[svc_name]
                sf = svc.flavors[flavor]
                name = r.containers[svc_name]
                # The service's command, env and volumes are the site's, the same on every flavor.
                command = list(svc.command) if svc.command else None
                env = {k: r(v) for k, v in svc.env.items()}
                volumes = [(r(v.source), v.target, "ro" if v.read_only else "rw") for v in svc.volumes]
                for source, _, _ in volumes:
                    # A named volume nothing has filled (the tile cache) is made here with the instance's
                    # labels, so 'down --volumes' finds it; Docker would make it unlabelled.
                    if not source.startswith("/") and not dk.volume_exists(source):
                        dk.volume_create(source, {**self.settings.labels(), "envctl.site": site})
                links = []
                for dep in svc.depends_on:
                    for alias in s.services[dep].aliases:
                        if dep in copy.containers:
                            links.append(f"{r.containers[dep]}:{alias}")
                labels = {**self.settings.labels(), "envctl.site": site, "envctl.service": svc_name,
                          "envctl.slot": slot, "envctl.role": role, "envctl.image": sf.image,
                          "envctl.public_url": r("{public_url}"), "envctl.created": f"{time.time():.3f}"}
                if golden:
                    labels["envctl.golden"] = golden
                progress(site, "create", f"{svc_name}: docker run {(images or {}).get(svc_name, sf.image)}")
                dk.run(dk.RunSpec(
                    name=name, image=(images or {}).get(svc_name, sf.image), labels=labels, network=self.network,
                    command=command, env=env, volumes=volumes, links=links, memory=sf.memory or svc.memory,
                    tmpfs=list(svc.tmpfs), user=svc.user, stop_timeout=svc.stop_timeout, restart=svc.restart,
                ))
                copy.containers[svc_name] = dk.wait_running(name)
            timings["create"] = time.monotonic() - t0
            t1 = time.monotonic()
            for svc_name in s.services_for(flavor):
                ready = s.services[svc_name].ready
                if not ready:
                    continue
                progress(site, "boot", f"waiting for {svc_name} to accept commands")
                name = r.containers[svc_name]
                def accepts(name: str = name, ready: tuple[str, ...] = ready) -> tuple[bool, str]:
                    rc, out = dk.exec_argv(name, list(ready))
                    return rc == 0, out

                try:
                    ok, out = wait_ready(accepts, timeout=s.health.timeout, died=lambda: self.died(copy),
                                         cancel=cancel)
                except TargetDied as exc:
                    raise DockerError(f"{site}: {exc}", f"see 'envctl logs {site}'") from None
                if not ok:
                    raise NotReady(f"{site}: {svc_name} not ready after {s.health.timeout:.0f}s ({mask(s, out[-200:])})",
                                   f"see 'envctl logs {site}'")
            timings["boot"] = time.monotonic() - t1
            return copy
        except BaseException:
            # by the names it was given (a container removed meanwhile has no name to look up)
            dk.remove([r.containers[n] for n in s.services], volumes=True)
            raise

    def configure(self, copy: Copy, *, progress: Progress = _noop) -> int:
        """Run the site's post-start steps in order (idempotent); returns how many ran."""
        steps = self.catalog.site(copy.site).steps(self.settings.flavor)
        return self.run_steps(copy, steps, "configure", progress=progress)

    def run_steps(self, copy: Copy, steps: Sequence[Step], what: str, *, progress: Progress = _noop) -> int:
        """Run catalog steps (configure, in-place save/restore) in ``copy``, in order; returns how many ran."""
        s = self.catalog.site(copy.site)
        r = self.renderer(copy.site, copy.slot)
        for i, step in enumerate(steps, 1):
            svc = step.service or s.entry
            argv = r.argv(step.run)
            progress(copy.site, what, f"step {i}/{len(steps)}: {mask(s, ' '.join(argv))[:90]}")
            rc, out = dk.exec_argv(copy.containers[svc], argv)
            if rc != 0:
                raise DockerError(
                    f"{copy.site}: {what} step {i} ({mask(s, ' '.join(argv))[:160]}) failed with exit {rc}: "
                    f"{mask(s, out)[-300:]}", f"see 'envctl logs {copy.site}'")
        return len(steps)

    def remove_copy(self, copy: Copy) -> None:
        dk.remove(copy.names, volumes=True)

    def stop_copy(self, copy: Copy) -> None:
        """Stop every container of ``copy`` cleanly: dependents first, databases last; each service's
        own stop command (e.g. 'gitlab-ctl stop') before Docker's signal."""
        site = self.catalog.site(copy.site)
        order = [s for s in site.service_order() if s in copy.containers]
        for svc in reversed(order):
            spec = site.services[svc]
            if spec.stop:
                rc, out = dk.exec_argv(copy.containers[svc], list(spec.stop))
                if rc != 0:
                    raise DockerError(f"{copy.site}: '{' '.join(spec.stop)}' in {svc} failed (exit {rc}): "
                                      f"{mask(site, out)[-200:]}", f"see 'envctl logs {copy.site}'")
            dk.stop(copy.containers[svc], timeout=spec.stop_timeout)

    def start_copy(self, copy: Copy) -> None:
        site = self.catalog.site(copy.site)
        for svc in [s for s in site.service_order() if s in copy.containers]:
            dk.start(copy.containers[svc])
            dk.wait_running(copy.containers[svc].name)

    def died(self, copy: Copy) -> str:
        """Why ``copy`` cannot become healthy any more (a container gone or stopped, with its last log
        lines), or '' while every container runs."""
        site = self.catalog.site(copy.site)
        for svc, c in copy.containers.items():
            try:
                name = c.name  # a python-on-whales object reloads itself: the container may be gone by now
            except dk.NoSuchContainer:
                return f"the {svc} container of {copy.site} copy {copy.slot} was removed"
            live = dk.inspect(name)
            if live is None or not live.state.running:
                return (f"container {name} ({svc}) stopped\n--- last log lines ---\n"
                        f"{mask(site, dk.logs(name, 15))}")
        return ""

    def exec(self, copy: Copy, service: str, argv: list[str]) -> tuple[int, str]:
        """Run argv in one service's container of ``copy``; (exit code, output)."""
        c = copy.containers.get(service)
        if c is None:
            raise DockerError(f"{copy.site}: copy {copy.slot} has no service '{service}'")
        return dk.exec_argv(c, argv)

