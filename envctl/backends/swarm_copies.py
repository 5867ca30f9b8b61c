"""The Swarm backend's copies and images (docs/architecture.md, "The two backends"): each member a service pinned to
the instance's node, steps and captures through that node's engine, images through the swarm's registry. What the
parts share (the manager, the nodes, their engines, how services read) is :class:`envctl.backends.swarm.Swarm`."""
from __future__ import annotations

import dataclasses
import re
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from envctl.backends.base import (Capture, Copies, Copy, CopySpec, DataItem, ImageInfo, Images, InstanceSettings, Member,
                                  Progress, ServiceSpec, noop, await_accepting, network_name)
from envctl.backends.docker import Capture as EngineCapture, Engine
from envctl.backends.swarm import HELPER, RESTART, Swarm, size_bytes
from envctl.backends.swarm_data import SwarmData
from envctl.errors import DockerError, EnvctlError


@dataclass
class SwarmCapture(Capture):
    engine: Engine
    raw: EngineCapture


class SwarmCopies(Copies):
    """Copies as services pinned to the instance's node; steps through that node's engine."""

    def __init__(self, swarm: Swarm) -> None:
        self.swarm = swarm

    def _service_args(self, svc: ServiceSpec, spec: CopySpec, settings: InstanceSettings,
                      hosts: dict[str, str]) -> list[str]:
        # --no-healthcheck: Swarm holds a task in 'starting' until an image's HEALTHCHECK passes (30 s for the mini
        # images); envctl probes readiness itself, as it does on one engine.
        args = ["service", "create", "--detach", "--quiet", "--no-healthcheck", "--name", svc.name, "--endpoint-mode", "dnsrr",
                "--network", network_name(spec.instance), "--constraint", f"node.id=={settings.node}",
                "--restart-condition", RESTART.get(svc.restart, "none")]
        for k, v in {**svc.labels, "envctl.node": settings.node}.items():
            args += ["--label", f"{k}={v}", "--container-label", f"{k}={v}"]
        for k, v in svc.env.items():
            args += ["--env", f"{k}={v}"]
        for source, target, mode in svc.volumes:
            ro = ",readonly" if mode == "ro" else ""
            if source.startswith("/"):
                args += ["--mount", f"type=bind,source={source},target={target}{ro}"]
            else:
                vl = "".join(f",volume-label={k}={v}" for k, v in spec.volume_labels.items())
                args += ["--mount", f"type=volume,source={source},target={target}{ro}{vl}"]
        for t in svc.tmpfs:
            path, _, opts = t.partition(":")
            size = re.search(r"size=([0-9]+[kmg]?)", opts)
            raw = size.group(1) if size else ""
            args += ["--mount", f"type=tmpfs,target={path}" + (f",tmpfs-size={size_bytes(raw) or raw}" if raw else "")]
        for alias, ip in hosts.items():
            args += ["--host", f"{alias}:{ip}"]
        if svc.memory:
            args += ["--limit-memory", svc.memory.upper(), "--reserve-memory", svc.memory.upper()]
        if svc.user:
            args += ["--user", svc.user]
        if svc.stop_timeout:
            args += ["--stop-grace-period", f"{svc.stop_timeout}s"]
        return [*args, self.swarm.ref(svc.image), *(svc.command or [])]

    def _bind_sources(self, spec: CopySpec, node: str) -> None:
        """Make the bind-mounted directories on the node (Swarm refuses a task whose source is missing)."""
        paths = sorted({s for svc in spec.services for s, _, _ in svc.volumes if s.startswith("/")})
        if not paths:
            return
        eng = self.swarm.engine(node)
        argv = eng.argv("run", "--rm", "--network", "none", "-v", "/:/host", HELPER, "mkdir", "-p",
                        *[f"/host{p}" for p in paths])
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=eng.timeout)
        if proc.returncode != 0:
            raise DockerError(f"could not make {', '.join(paths)} on the node: {proc.stderr.strip()[-200:]}")

    def boot(self, spec: CopySpec, settings: InstanceSettings, *, progress: Progress = noop,
             cancel: threading.Event | None = None, timings: dict[str, float] | None = None) -> Copy:
        copy = Copy(spec.site, spec.slot)
        timings = timings if timings is not None else {}
        t0 = time.monotonic()
        made: list[str] = []
        try:
            self.swarm.helper_image(settings.node)
            self._bind_sources(spec, settings.node)
            for svc in spec.services:
                hosts = {alias: copy.members[dep].address for alias, dep_name in svc.links.items()
                         for dep, m in copy.members.items() if m.name == dep_name}
                progress(spec.site, "create", f"{svc.service}: docker service create {svc.image}")
                self.swarm.manager.run_cli(self._service_args(svc, spec, settings, hosts), what=f"service create {svc.name}")
                made.append(svc.name)
                task = self.swarm.await_task(svc.name, spec.timeout, cancel)
                copy.members[svc.service] = Member(svc.service, svc.name, task.container, {**svc.labels,
                                                   "envctl.node": settings.node}, "running", svc.image, task.node,
                                                   task.addresses.get(network_name(spec.instance), ""))
            timings["create"] = time.monotonic() - t0
            t1 = time.monotonic()
            await_accepting(self, spec, copy, progress, cancel)
            timings["boot"] = time.monotonic() - t1
            return copy
        except BaseException:
            self.remove(made)
            raise

    def of(self, instance: str, site: str | None = None) -> dict[tuple[str, str], Copy]:
        svcs = [s for s in self.swarm.services(instance=instance, **({"site": site} if site else {}))
                if ((s.get("Spec") or {}).get("Labels") or {}).get("envctl.role") != "proxy"]
        tasks = self.swarm.tasks([s["ID"] for s in svcs])
        found: dict[tuple[str, str], Copy] = {}
        for s in svcs:
            m = self.swarm.member_of(s, tasks.get(s["ID"]))
            key = (m.label("site"), m.label("slot"))
            found.setdefault(key, Copy(*key)).members[m.service] = m
        return found

    def member(self, name: str) -> Member | None:
        svc = self.swarm.manager.json_cli(["service", "inspect", name], what="service inspect")
        if not svc:
            return None
        return self.swarm.member_of(svc[0], self.swarm.tasks([svc[0]["ID"]]).get(svc[0]["ID"]))

    def remove(self, names: list[str]) -> None:
        existing = [n for n in names if n]
        if not existing:
            return
        listed = set(self.swarm.manager.run_cli(["service", "ls", "--format", "{{.Name}}"], what="service ls").split())
        gone = [n for n in existing if n in listed]
        if gone:
            self.swarm.manager.run_cli(["service", "rm", *gone], what="service rm")

    def exec(self, member: Member, argv: list[str]) -> tuple[int, str]:
        eng, cid = self.swarm.live(member)
        try:
            return eng.exec(cid, argv)
        except DockerError:  # its task was replaced since the listing: the current one
            live = self.member(member.name)
            if live is None or not live.id or live.id == cid:
                raise
            return self.swarm.engine(live.node).exec(live.id, argv)

    def logs(self, member: Member, tail: int = 30) -> str:
        try:
            eng, cid = self.swarm.live(member)
            return eng.logs(cid, tail)
        except EnvctlError:
            return ""

    def follow(self, member: Member) -> Iterator[str]:
        eng, cid = self.swarm.live(member)
        return eng.stream_logs(cid)

    def stop(self, member: Member, timeout: int | None = None) -> None:
        eng, cid = self.swarm.live(member)
        eng.stop(cid, timeout=timeout)

    def start(self, copy: Copy, images: dict[str, str] | None = None) -> Copy:
        """Start a stopped copy again: each service's task is replaced (Swarm cannot start a finished task's container
        again), from ``images`` (what a clean-stop commit just made: the same state) when given."""
        out = Copy(copy.site, copy.slot)
        for svc, m in copy.members.items():
            args = ["service", "update", "--detach", "--quiet", "--force"]
            if images and svc in images:
                args += ["--image", self.swarm.ref(images[svc])]
            self.swarm.manager.run_cli([*args, m.name], what=f"service update {m.name}")
            task = self.swarm.await_task(m.name, 300)
            out.members[svc] = dataclasses.replace(m, id=task.container, node=task.node, status="running",
                                                   address=task.addresses.get(network_name(m.label("instance")), ""))
        return out

    def freeze(self, members: list[Member]) -> None:
        for m in members:
            eng, cid = self.swarm.live(m)
            eng.pause([cid])

    def thaw(self, members: list[Member]) -> None:
        for m in members:
            eng, cid = self.swarm.live(m)
            eng.unpause([cid])


class SwarmImages(Images):
    """Images through the swarm's registry (every node pulls from it); captures pushed from their node; a site's data
    fetched on the node that runs it (:class:`envctl.backends.swarm_data.SwarmData`)."""

    moves_data = True

    def __init__(self, swarm: Swarm, data: SwarmData) -> None:
        self.swarm = swarm
        self.data = data

    def place(self, settings: InstanceSettings, items: Sequence[DataItem], progress: Progress = noop, *,
              helper: str = "") -> dict[str, tuple[str, int]]:
        return self.data.place(settings, items, progress, helper=helper)

    def held(self, items: Sequence[DataItem]) -> dict[str, dict[str, bool]]:
        return self.data.held(items)

    def exists(self, ref: str) -> bool:
        return self.swarm.registry.manifest(self.swarm.ref(ref)[len(self.swarm.registry_address) + 1:]) is not None

    def info(self, ref: str) -> ImageInfo:
        found = self.swarm.registry.stored(self.swarm.ref(ref)[len(self.swarm.registry_address) + 1:])
        if found is None:
            raise DockerError(f"the swarm's registry has no image {ref}", "see 'envctl snapshot list'")
        return ImageInfo(found.image_id, [ref], dict(found.labels), found.size)

    def labelled(self, label_key: str) -> list[ImageInfo]:
        """The goldens and snapshots in the registry carrying ``label_key``."""
        out = []
        for repo in self.swarm.registry.repositories():
            if not repo.startswith(("envctl-golden/", "envctl-snap/")):
                continue
            for tag in self.swarm.registry.tags(repo):
                found = self.swarm.registry.stored(f"{repo}:{tag}")
                if found is not None and label_key in found.labels:
                    out.append(ImageInfo(found.image_id, [f"{repo}:{tag}"], dict(found.labels), found.size))
        return out

    def remove(self, ref: str) -> None:
        self.swarm.registry.delete(self.swarm.ref(ref)[len(self.swarm.registry_address) + 1:])

    def distribute(self, refs: list[str], progress: Progress = noop) -> None:
        """Push to the registry every image of ``refs`` it lacks (and the helper image the nodes use), from the
        manager's engine (where 'images build' and 'images get' put them when DOCKER_HOST names the manager)."""
        for ref in [*refs, HELPER]:
            if self.exists(ref):
                continue
            if not self.swarm.manager.image_exists(ref):
                continue  # neither here nor there: 'up' names it as missing
            progress("*", "images", f"pushing {ref} to the swarm's registry {self.swarm.registry_address}")
            self.swarm.push_from(self.swarm.manager, ref)

    def capture(self, member: Member, tag: str, labels: dict[str, str], workdir: Path) -> Capture:
        eng, cid = self.swarm.live(member)
        return SwarmCapture(tag, member.name, eng, eng.capture(cid, tag, labels, workdir))

    def finish(self, capture: Capture) -> str:
        assert isinstance(capture, SwarmCapture)
        image_id = capture.engine.finish_capture(capture.raw)
        self.swarm.push_from(capture.engine, capture.tag)
        return str(image_id)

    def discard(self, capture: Capture) -> None:
        assert isinstance(capture, SwarmCapture)
        capture.engine.discard_capture(capture.raw)

    def volumes(self, instance: str, site: str | None = None) -> list[str]:
        out: list[str] = []
        for node in self.swarm.nodes().values():
            if node.state != "ready":
                continue
            try:
                out += self.swarm.engine(node.id).volumes(instance=instance, **({"site": site} if site else {}))
            except EnvctlError:
                continue
        return sorted(set(out))

    def remove_volumes(self, names: list[str]) -> dict[str, str]:
        refused: dict[str, str] = {}
        for node in self.swarm.nodes().values():
            if node.state == "ready":
                try:
                    eng = self.swarm.engine(node.id)
                    here = set(eng.volumes()) & set(names)
                    refused.update(eng.remove_volumes(sorted(here)))
                except EnvctlError:
                    continue
        return refused



__all__ = ["SwarmCopies", "SwarmImages", "SwarmCapture"]
