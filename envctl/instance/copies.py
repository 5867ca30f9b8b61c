"""An instance's copies (docs/architecture.md, "The engine seam"): what booting a copy of a site means here (the
catalog rendered for a new slot), the one boot-wait-or-remove, steps inside a copy (configure, in-place save and
restore), clean stops, commits and captures. Part of :class:`envctl.instance.Instance` (``inst.copies``)."""
from __future__ import annotations

import secrets
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from envctl.backends.base import Copy, CopySpec, DataItem, ServiceSpec, capture_all, finish_all, member_name
from envctl.catalog import Renderer, Step
from envctl.errors import DockerError
from envctl.images import data as site_data
from envctl.images.build import NODEDATA_IMAGE, build_nodedata
from envctl.instance.checks import Checks
from envctl.instance.core import Core, Progress, noop
from envctl.instance.front import Front
from envctl.instance.routing import Routing


class InstanceCopies:
    """The copies of one instance, and what runs inside them."""

    def __init__(self, core: Core, routing: Routing, checks: Checks, front: Front) -> None:
        self.core, self.routing, self.checks, self.front = core, routing, checks, front
        self.part = core.backend.copies

    def of(self, site: str | None = None) -> dict[tuple[str, str], Copy]:
        """The instance's copies (of ``site``), by (site, slot), as the backend lists them."""
        return self.part.of(self.core.name, site)

    def images_of(self, site: str) -> dict[str, str]:
        s = self.core.catalog.site(site)
        return {svc: s.services[svc].flavors[self.core.flavor].image for svc in s.services_for(self.core.flavor)}

    def missing_images(self, sites: list[str]) -> list[tuple[str, str, str | None]]:
        """(site, image, build dir or None) for every image of ``sites`` the backend does not have."""
        out, seen = [], set()
        for site in sites:
            s = self.core.catalog.site(site)
            for svc in s.services_for(self.core.flavor):
                sf = s.services[svc].flavors[self.core.flavor]
                if sf.image not in seen and not self.core.backend.images.exists(sf.image):
                    out.append((site, sf.image, sf.build))
                seen.add(sf.image)
        return out

    def data_of(self, sites: list[str]) -> tuple[DataItem, ...]:
        """What copies of ``sites`` mount from the data directory (their flavor's data artifacts, with their pins)."""
        return site_data.items(self.core.catalog, sites, self.core.flavor, self.core.settings.data_dir, self.core.name)

    def prepare_data(self, sites: list[str], progress: Progress = noop) -> None:
        """Before anything is made for ``sites``: where data is only checked (this machine), ImageMissing naming
        what 'envctl images get' must fetch; where it travels to the copies (a swarm), the node-data helper image
        built on the engine 'envctl images' uses and made reachable to every node."""
        items = self.data_of(sites)
        if not items:
            return
        images = self.core.backend.images
        if not images.moves_data:
            images.place(self.core.settings, items, progress)
            return
        if not images.exists(NODEDATA_IMAGE):
            build_nodedata()
            images.distribute([NODEDATA_IMAGE], progress)

    def renderer(self, site: str, slot: str, state: str = "pristine") -> Renderer:
        s = self.core.catalog.site(site)
        names = {svc: member_name(self.core.name, site, svc, slot) for svc in s.services}
        return Renderer(self.core.catalog, site, self.core.settings.deployment, names, state)

    def spec(self, site: str, *, role: str, images: dict[str, str] | None = None, golden: str = "") -> CopySpec:
        """What booting a copy of ``site`` means here: each service's image, command, env, volumes, links,
        limits and labels, rendered for a new slot (the same on every flavor but for images and limits)."""
        core = self.core
        s = core.catalog.site(site)
        slot = secrets.token_hex(3)
        r = self.renderer(site, slot)
        services = []
        for svc_name in s.services_for(core.flavor):
            svc, sf = s.services[svc_name], s.services[svc_name].flavors[core.flavor]
            labels = {**core.settings.labels(), "envctl.site": site, "envctl.service": svc_name, "envctl.slot": slot,
                      "envctl.role": role, "envctl.image": sf.image, "envctl.public_url": r("{public_url}"),
                      "envctl.created": f"{time.time():.3f}", **({"envctl.golden": golden} if golden else {})}
            links = {alias: r.containers[dep] for dep in svc.depends_on for alias in s.services[dep].aliases
                     if dep in s.services_for(core.flavor)}
            services.append(ServiceSpec(
                svc_name, r.containers[svc_name], (images or {}).get(svc_name, sf.image), labels,
                list(svc.command) if svc.command else None, {k: r(v) for k, v in svc.env.items()},
                [(r.volume_source(v.source), v.target, "ro" if v.read_only else "rw") for v in svc.volumes], links,
                sf.memory or svc.memory, list(svc.tmpfs), svc.user, svc.stop_timeout, svc.restart,
                tuple(svc.ready or ())))
        return CopySpec(core.name, site, slot, services, s.health.timeout, {**core.settings.labels(), "envctl.site": site},
                        self.data_of([site]))

    def boot(self, site: str, *, role: str, images: dict[str, str] | None = None, golden: str = "",
             progress: Progress = noop, timings: dict[str, float] | None = None) -> Copy:
        """Boot a copy (from ``images`` when given, e.g. a golden) and configure it unless it booted from a golden
        image; not routed, not yet healthy. Nothing is left behind on failure."""
        spec = self.spec(site, role=role, images=images, golden=golden)
        if spec.data:  # where the copy boots holds its data before it starts (fetched there on a swarm node)
            t = time.monotonic()
            fetched = self.core.backend.images.place(self.core.settings, spec.data, progress, helper=NODEDATA_IMAGE)
            site_data.pin_unpinned(spec.data, fetched)
            if timings is not None:
                timings["data"] = time.monotonic() - t
        copy = self.part.boot(spec, self.core.settings, progress=progress, cancel=self.core.cancel, timings=timings)
        try:
            t = time.monotonic()
            if not golden:
                self.configure(copy, progress=progress)
            if timings is not None:
                timings["configure"] = time.monotonic() - t
            return copy
        except BaseException:
            self.remove(copy)
            raise

    @contextmanager
    def booting(self, site: str, *, role: str, images: dict[str, str] | None = None, golden: str = "",
                progress: Progress = noop) -> Iterator[Copy]:
        """A healthy new copy (booted, configured unless from a golden, passing its probes through the proxy
        header) for the block; removed when the block raises: the one boot-wait-or-remove of envctl."""
        copy = self.boot(site, role=role, images=images, golden=golden, progress=progress)
        try:
            self.checks.wait_healthy(copy, progress)
            yield copy
        except BaseException:
            self.remove(copy)
            raise

    def configure(self, copy: Copy, *, progress: Progress = noop) -> int:
        """Run the site's post-start steps in order (idempotent); returns how many ran."""
        return len(self.run_steps(copy, self.core.catalog.site(copy.site).steps(self.core.flavor), "configure",
                                  progress=progress))

    def run_steps(self, copy: Copy, steps: Sequence[Step], what: str, *, progress: Progress = noop,
                  state: str = "pristine") -> list[str]:
        """Run catalog steps (configure, in-place save/restore of saved ``state``) in ``copy``, in order; what each
        printed (masked)."""
        s = self.core.catalog.site(copy.site)
        r = self.renderer(copy.site, copy.slot, state)
        printed = []
        for i, step in enumerate(steps, 1):
            argv = r.argv(step.run)
            shown = self.checks.mask(copy.site, " ".join(argv))
            progress(copy.site, what, f"step {i}/{len(steps)}: {shown[:90]}")
            rc, out = self.exec(copy, step.service or s.entry, argv)
            if rc != 0:
                raise DockerError(f"{copy.site}: {what} step {i} ({shown[:160]}) failed with exit {rc}: "
                                  f"{self.checks.mask(copy.site, out)[-300:]}", f"see 'envctl logs {copy.site}'")
            printed.append(self.checks.mask(copy.site, out))
        return printed

    def exec(self, copy: Copy, service: str, argv: list[str]) -> tuple[int, str]:
        """Run argv in one member of ``copy``, wherever it runs; (exit code, output)."""
        m = copy.members.get(service)
        if m is None:
            raise DockerError(f"{copy.site}: copy {copy.slot} has no service '{service}'")
        return self.part.exec(m, argv)

    def save_inplace(self, copy: Copy, progress: Progress = noop, *, state: str = "pristine") -> bool:
        """Save ``copy``'s state inside it as ``state`` (``reset.inplace.save``: 'pristine' is what the in-place tier
        restores); False when the site declares no in-place tier."""
        inplace = self.core.catalog.site(copy.site).reset.inplace
        if inplace is None:
            return False
        self.run_steps(copy, inplace.save, "save", progress=progress, state=state)
        return True

    def has_saved(self, copy: Copy, state: str) -> bool:
        """Whether ``copy`` holds saved state ``state`` (``reset.inplace.has``; False when the site cannot say)."""
        spec = self.core.catalog.site(copy.site)
        if spec.reset.inplace is None or not spec.reset.inplace.has:
            return False
        r = self.renderer(copy.site, copy.slot, state)
        return all(self.exec(copy, st.service or spec.entry, r.argv(st.run))[0] == 0 for st in spec.reset.inplace.has)

    def remove(self, copy: Copy) -> None:
        self.part.remove(copy.names)

    def stop(self, copy: Copy) -> None:
        """Stop every member of ``copy`` cleanly: dependents first, databases last; each service's own stop
        command (e.g. 'gitlab-ctl stop') before the engine's signal."""
        site = self.core.catalog.site(copy.site)
        for svc in reversed([s for s in site.service_order() if s in copy.members]):
            spec = site.services[svc]
            if spec.stop:
                rc, out = self.part.exec(copy.members[svc], list(spec.stop))
                if rc != 0:
                    raise DockerError(f"{copy.site}: '{' '.join(spec.stop)}' in {svc} failed (exit {rc}): "
                                      f"{self.checks.mask(copy.site, out)[-200:]}", f"see 'envctl logs {copy.site}'")
            self.part.stop(copy.members[svc], timeout=spec.stop_timeout)

    def commit(self, copy: Copy, tags: dict[str, str], labels: dict[str, str], *, restart: bool = True) -> Copy:
        """Clean stop, commit every member (its declared volumes' contents too) as ``tags``, start again (the site
        is down meanwhile); the copy as it runs now. The proxy's servers of it follow it to its new addresses."""
        self.stop(copy)
        images = self.core.backend.images
        with tempfile.TemporaryDirectory(prefix="envctl-commit-") as tmp:
            caps = capture_all(images, [(m, tags[svc], {**labels, "envctl.service": svc}, Path(tmp) / svc)
                                        for svc, m in copy.members.items()])
            finish_all(images, caps)
        if not restart:
            return copy
        order = [s for s in self.core.catalog.site(copy.site).service_order() if s in copy.members]
        started = self.part.start(Copy(copy.site, copy.slot, {s: copy.members[s] for s in order}), tags)
        self.routing.refresh_addresses(started)
        return started

    def capture(self, copy: Copy, tags: dict[str, str], labels: dict[str, str], timings: dict[str, float]) -> None:
        """Freeze every member of ``copy`` at once, commit each (volumes copied out too), thaw; then build the
        volume layers while the copy runs on. ``timings``: freeze (the site's pause), build."""
        images = self.core.backend.images
        with tempfile.TemporaryDirectory(prefix="envctl-snap-") as tmp:
            members = list(copy.members.items())
            t = time.monotonic()
            try:
                self.part.freeze([m for _, m in members])  # in the try: a freeze interrupted half-way is thawed
                caps = capture_all(images, [(m, tags[svc], {**labels, "envctl.service": svc}, Path(tmp) / svc)
                                            for svc, m in members])  # all or none (a full disk, an interrupt)
            finally:
                self.part.thaw([m for _, m in members])
                timings["freeze"] = timings.get("freeze", 0.0) + time.monotonic() - t
            t = time.monotonic()
            finish_all(images, caps)  # all or none: a snapshot is whole or absent
            timings["build"] = timings.get("build", 0.0) + time.monotonic() - t

    def thaw_leftovers(self, copy: Copy) -> list[str]:
        """Thaw members of ``copy`` a capture killed mid-freeze left frozen; their names."""
        frozen = [m for m in (self.part.member(n) for n in copy.names) if m is not None and m.status == "paused"]
        self.part.thaw(frozen)
        return [m.name for m in frozen]

    def logs(self, copy: Copy, service: str, tail: int = 100) -> str:
        return self.part.logs(copy.members[service], tail)

    def follow(self, copy: Copy, service: str) -> Iterator[str]:
        return self.part.follow(copy.members[service])

    def remove_all(self, sites: list[str] | None) -> tuple[list[str], list[str]]:
        """Remove every member of the instance (of ``sites``), the proxy and network too when no site is named;
        (the names removed, what the engine kept: the network, for a stale endpoint)."""
        core = self.core
        names = [m.name for (s, _), c in self.of().items() if sites is None or s in sites for m in c.members.values()]
        self.part.remove(names)
        kept = []
        if sites is None:
            info = core.backend.proxy.find(core.name)
            if info is not None:
                names.append(info.name)
            self.front.remove()
            if not core.backend.placement.remove_network(core.name):
                kept.append(core.network)
        elif self.routing.exists():
            self.routing.unroute(sites)
        return sorted(set(names)), kept


__all__ = ["InstanceCopies"]
