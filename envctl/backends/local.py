"""The local backend: an instance's copies are containers on one Docker engine (``DOCKER_HOST``, the docker
context, or this machine's). Its members are containers named as :func:`member_name` says, on the
instance's bridge network; its front proxy is a container publishing the sites' ports on ``bind``.
Its four parts share the one :class:`Engine`; each method is what the part means on one engine.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator, Sequence

from envctl.backends.base import (Backend, Capture, Copies, Copy, CopySpec, DataItem, FrontProxy, ImageInfo, Images,
                                  InstanceSettings, Member, MemberMemory, Placement, Progress, ProxyInfo, ProxySpec, noop,
                                  await_accepting, network_name, proxy_name)
from envctl.backends.docker import ENGINE, Capture as EngineCapture, ContainerSeen, Engine, RunSpec
from envctl.errors import EnvctlError, ImageMissing


def member_of(c: ContainerSeen, instance: str = "") -> Member:
    return Member(c.label("service"), c.name, c.id, c.labels, c.status, c.image,
                  address=c.addresses.get(network_name(instance or c.label("instance")), ""),
                  exit_code=c.exit_code, oom_killed=c.oom_killed)


def port_bindable(bind: str, port: int) -> bool:
    """Whether a server could listen on ``bind:port`` on this machine now."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((bind, port))
            return True
        except OSError:
            return False


class LocalCopies(Copies):
    """Copies as containers on one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def boot(self, spec: CopySpec, settings: InstanceSettings, *, progress: Progress = noop,
             cancel: threading.Event | None = None, timings: dict[str, float] | None = None) -> Copy:
        copy = Copy(spec.site, spec.slot)
        timings = timings if timings is not None else {}
        t0 = time.monotonic()
        try:
            for svc in spec.services:
                for source, _, _ in svc.volumes:
                    # A named volume nothing has filled (the tile cache) is made here with the instance's labels,
                    # so 'down --volumes' finds it; Docker would make it unlabelled.
                    if not source.startswith("/") and not self.engine.volume_exists(source):
                        self.engine.volume_create(source, spec.volume_labels)
                progress(spec.site, "create", f"{svc.service}: docker run {svc.image}")
                self.engine.run(RunSpec(
                    name=svc.name, image=svc.image, labels=svc.labels, network=network_name(spec.instance),
                    command=svc.command, env=svc.env, volumes=svc.volumes,
                    links=[f"{target}:{alias}" for alias, target in svc.links.items()], memory=svc.memory,
                    tmpfs=svc.tmpfs, user=svc.user, stop_timeout=svc.stop_timeout, restart=svc.restart))
                copy.members[svc.service] = member_of(self.engine.wait_running(svc.name), spec.instance)
            timings["create"] = time.monotonic() - t0
            t1 = time.monotonic()
            await_accepting(self, spec, copy, progress, cancel)
            timings["boot"] = time.monotonic() - t1
            return copy
        except BaseException:
            self.remove([s.name for s in spec.services])  # by the names it was given
            raise

    def died(self, copy: Copy) -> str:
        """Why ``copy`` cannot become healthy any more, or '' while every member runs."""
        for svc, m in copy.members.items():
            live = self.engine.container(m.name)
            if live is None:
                return f"the {svc} container of {copy.site} copy {copy.slot} was removed"
            if live.status not in ("running", "paused"):
                why = " (killed: out of memory)" if live.oom_killed else ""
                return f"container {m.name} ({svc}) stopped{why}\n--- last log lines ---\n{self.engine.logs(m.name, 15)}"
        return ""

    def of(self, instance: str, site: str | None = None) -> dict[tuple[str, str], Copy]:
        filt = {"instance": instance, **({"site": site} if site else {})}
        found: dict[tuple[str, str], Copy] = {}
        for c in self.engine.containers(**filt):
            if c.label("role") == "proxy":
                continue
            key = (c.label("site"), c.label("slot"))
            found.setdefault(key, Copy(*key)).members[c.label("service")] = member_of(c, instance)
        return found

    def member(self, name: str) -> Member | None:
        c = self.engine.container(name)
        return member_of(c) if c is not None else None

    def remove(self, names: list[str]) -> None:
        self.engine.remove(names, volumes=True)

    def exec(self, member: Member, argv: list[str]) -> tuple[int, str]:
        return self.engine.exec(member.name, argv)

    def logs(self, member: Member, tail: int = 30) -> str:
        return self.engine.logs(member.name, tail)

    def follow(self, member: Member) -> Iterator[str]:
        return self.engine.stream_logs(member.name)

    def stop(self, member: Member, timeout: int | None = None) -> None:
        self.engine.stop(member.name, timeout=timeout)

    def start(self, copy: Copy, images: dict[str, str] | None = None) -> Copy:
        out = Copy(copy.site, copy.slot)
        for svc, m in copy.members.items():
            self.engine.start(m.name)
            out.members[svc] = member_of(self.engine.wait_running(m.name))
        return out

    def freeze(self, members: list[Member]) -> None:
        self.engine.pause([m.name for m in members])

    def thaw(self, members: list[Member]) -> None:
        self.engine.unpause([m.name for m in members])


@dataclass
class LocalCapture(Capture):
    raw: EngineCapture


class LocalImages(Images):
    """Images and volumes on one engine: already where every copy boots."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def exists(self, ref: str) -> bool:
        return self.engine.image_exists(ref)

    def info(self, ref: str) -> ImageInfo:
        i = self.engine.image_seen(ref)
        return ImageInfo(i.id, i.tags, i.labels, i.size)

    def labelled(self, label_key: str) -> list[ImageInfo]:
        return [ImageInfo(i.id, i.tags, i.labels, i.size) for i in self.engine.images_labelled(label_key)]

    def remove(self, ref: str) -> None:
        self.engine.remove_image(ref)

    def capture(self, member: Member, tag: str, labels: dict[str, str], workdir: Path) -> Capture:
        return LocalCapture(tag, member.name, self.engine.capture(member.name, tag, labels, workdir))

    def finish(self, capture: Capture) -> str:
        assert isinstance(capture, LocalCapture)
        return self.engine.finish_capture(capture.raw)

    def discard(self, capture: Capture) -> None:
        assert isinstance(capture, LocalCapture)
        self.engine.discard_capture(capture.raw)

    def place(self, settings: InstanceSettings, items: Sequence[DataItem], progress: Progress = noop, *,
              helper: str = "") -> dict[str, tuple[str, int]]:
        """Check that ``items`` are in this machine's data directory ('envctl images get' puts them there)."""
        missing = [i for i in items if not _held_here(i)]
        if missing:
            sites = sorted({i.site for i in missing})
            raise ImageMissing(f"missing data: {', '.join(f'{i.name} ({i.site})' for i in missing)} not in "
                               f"{missing[0].data_root}", f"run 'envctl images get --flavor {settings.flavor} "
                               f"{' '.join(sites)}'")
        return {}

    def held(self, items: Sequence[DataItem]) -> dict[str, dict[str, bool]]:
        return {"": {i.name: _held_here(i) for i in items}}

    def volumes(self, instance: str, site: str | None = None) -> list[str]:
        return self.engine.volumes(instance=instance, **({"site": site} if site else {}))

    def remove_volumes(self, names: list[str]) -> dict[str, str]:
        return self.engine.remove_volumes(names)


class LocalProxy(FrontProxy):
    """The front proxy as a container publishing on the instance's bind address."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def boot(self, spec: ProxySpec, settings: InstanceSettings) -> ProxyInfo:
        name = proxy_name(spec.instance)
        self.engine.remove([name])
        self.engine.run(RunSpec(name=name, image=spec.image, labels=spec.labels, network=network_name(spec.instance),
                                env=spec.env, publish=[(f"{spec.bind}:{p}", p) for p in sorted(spec.ports)],
                                memory=spec.memory))
        c = self.engine.wait_running(name)
        return ProxyInfo(name, c.labels, True, _reach(spec.bind))

    def find(self, instance: str) -> ProxyInfo | None:
        c = self.engine.container(proxy_name(instance))
        if c is None:
            return None
        return ProxyInfo(c.name, c.labels, c.status == "running", _reach(c.labels.get("envctl.bind", "127.0.0.1")))

    def all(self) -> list[tuple[dict[str, str], str]]:
        return [(c.labels, c.status) for c in self.engine.containers(role="proxy")]

    def remove(self, instance: str) -> None:
        self.engine.remove([proxy_name(instance)])

    def start(self, instance: str) -> None:
        self.engine.start(proxy_name(instance))

    def address(self, instance: str, name: str) -> str | None:
        c = self.engine.container(name)
        if c is None or c.status != "running":
            return None
        return c.addresses.get(network_name(instance)) or next(iter(c.addresses.values()), None)

    def instance_labels(self, instance: str) -> dict[str, str] | None:
        c = self.engine.container(proxy_name(instance))
        if c is not None:
            return c.labels
        return self.engine.networks(instance=instance).get(network_name(instance))


class LocalPlacement(Placement):
    """Every instance on this one engine: its bridge network, this machine's memory and ports."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def prepare(self, settings: InstanceSettings, need: int = 0,
                data: Sequence[DataItem] = ()) -> tuple[InstanceSettings, bool]:
        if not settings.public_host:
            settings = dataclasses.replace(settings, public_host="127.0.0.1")
        existed = self.engine.ensure_network(network_name(settings.name), settings.labels())
        return settings, existed

    def remove_network(self, instance: str) -> bool:
        return self.engine.remove_network(network_name(instance))

    def info(self) -> dict[str, object]:
        return self.engine.info()

    def answers(self, timeout: float) -> str:
        return "" if self.engine.ping(timeout) else f"{self.engine.where} did not answer within {timeout:g}s (stalled or down)"

    def oom_kills(self, settings: InstanceSettings, since: float, until: float) -> list[tuple[str, str, float]]:
        return [(lab.get("envctl.site", ""), lab.get("name", ""), t)
                for lab, t in self.engine.oom_events({"envctl.instance": settings.name}, since, until)]

    def port_problem(self, settings: InstanceSettings, port: int, owned: set[int]) -> str:
        if port in owned:
            return ""
        # Docker's own allocations too: a container that fails to publish can leave a stale endpoint behind in
        # the network (an engine bug), so a clash must be refused before anything is made.
        if port_bindable(settings.bind, port) and port not in self.engine.published_host_ports():
            return ""
        return port_holder(self.engine, port)

    def memory(self) -> tuple[list[MemberMemory], int, str]:
        every = self.engine.container_memory()
        use, source = self.engine.memory_use([c.id for c in every if c.running])
        held = [MemberMemory(c.labels, c.limit, use.get(c.id), c.running) for c in every if c.labels.get("envctl.instance")]
        return held, sum(use.values()), source


def _held_here(item: DataItem) -> bool:
    """The file is in this machine's data directory whole (its pinned size, when pinned)."""
    p = Path(item.dest)
    try:
        return p.is_file() and (item.size is None or p.stat().st_size == item.size)
    except OSError:
        return False


def local_backend(engine: Engine | None = None) -> Backend:
    """The local backend: its four parts on ``engine`` (default: the one ``DOCKER_HOST`` names)."""
    engine = engine or ENGINE
    return Backend("local", LocalCopies(engine), LocalImages(engine), LocalProxy(engine), LocalPlacement(engine))


def _reach(bind: str) -> str:
    """Where this machine reaches ports published on ``bind`` (loopback for every address)."""
    return "127.0.0.1" if bind in ("", "0.0.0.0") else "::1" if bind == "::" else bind


def port_holder(engine: Engine, port: int) -> str:
    """Name what holds a port: an envctl instance, another container, or a process."""
    for c in engine.containers():
        if c.status == "running" and str(port) in c.labels.get("envctl.ports", "").split(","):
            return f"envctl instance '{c.labels.get('envctl.instance', '')}' (container {c.name})"
    try:
        holder = engine.published_host_ports().get(port)
        if holder:
            return f"container '{holder}'"
    except EnvctlError:
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
