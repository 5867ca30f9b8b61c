"""One Docker engine, as envctl talks to it (through python-on-whales and, for streams, the docker CLI).

An :class:`Engine` is one daemon: the one ``DOCKER_HOST`` / docker context points at (:data:`ENGINE`, what
the local backend and the image getters use), or a node of a swarm (``Engine("tcp://10.0.0.5:2375")``,
``Engine("ssh://admin@node2")``), which the Swarm backend uses for what only a node can do (run a step
in a task's container, commit it). Only the backends in ``envctl.backends`` and the image getters in
``envctl.images`` use it; everything above goes through an :class:`envctl.instance.Instance`.

Every container, network and image envctl makes carries labels under ``envctl.`` so that state is read
back from the engine, never from a side file. Docker failures become ``DockerError`` with the command and
the tail of its output; an unreachable engine becomes ``EngineUnavailable``, and so does one that does not
answer a control call within ``ENVCTL_ENGINE_TIMEOUT`` seconds (default 120: a stalled daemon must not
hang a command forever; image loads, pulls, builds and commits are not bounded by it).
"""
from __future__ import annotations

import errno
import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from python_on_whales import Container, DockerClient, DockerException
from python_on_whales.exceptions import NoSuchContainer, NoSuchImage, NoSuchNetwork

from envctl.errors import DockerError, EngineUnavailable
from envctl.paths import disk_full, is_disk_full

__all__ = ["Engine", "ENGINE", "RunSpec", "ContainerSeen", "ContainerMemory", "ImageSeen", "Capture",
           "NoSuchContainer", "engine_timeout"]

LABEL = "envctl"  # namespace: envctl.instance, envctl.site, envctl.service, envctl.slot, envctl.role ...
HELPER_IMAGE = "debian:bookworm-slim"  # for work inside volumes: present wherever envctl builds images
T = TypeVar("T")
_TIMEOUT_EXIT = 124  # timeout(1)'s exit status when it stopped the docker client


def engine_timeout() -> float:
    """Seconds a control call to the engine may take (``ENVCTL_ENGINE_TIMEOUT``, default 120)."""
    raw = os.environ.get("ENVCTL_ENGINE_TIMEOUT", "")
    try:
        value = float(raw) if raw else 120.0
    except ValueError:
        value = 120.0
    return value if 1 <= value <= 86400 else 120.0


def _engine_down(err: str) -> bool:
    return ("Cannot connect to the Docker daemon" in err or "connect: no such file" in err
            or ("permission denied" in err.lower() and "docker.sock" in err)
            or "connection refused" in err.lower() and "docker" in err.lower())


def _wrap(fn: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(fn)
    def inner(self: "Engine", *args: Any, **kwargs: Any) -> T:
        try:
            return fn(self, *args, **kwargs)
        except DockerException as exc:
            raise self._error(exc) from None

    return inner


@dataclass
class RunSpec:
    """Everything needed to create one container."""

    name: str
    image: str
    labels: dict[str, str]
    network: str
    command: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    volumes: list[tuple[str, str, str]] = field(default_factory=list)
    links: list[str] = field(default_factory=list)  # "container:alias", scoped to this container
    publish: list[tuple[str, int]] = field(default_factory=list)  # ("127.0.0.1:7770", 7770)
    memory: str | None = None
    tmpfs: list[str] = field(default_factory=list)
    user: str | None = None
    stop_timeout: int | None = None
    network_aliases: list[str] = field(default_factory=list)
    restart: str = "no"
    sysctls: dict[str, str] = field(default_factory=dict)  # namespaced kernel settings (net.*)


@dataclass(frozen=True)
class ContainerSeen:
    """A container's id, name, labels, state, image and address on its networks, read together."""

    id: str
    name: str
    labels: dict[str, str]
    status: str  # running | exited | paused | created | dead | restarting
    image: str  # the image id it runs
    addresses: dict[str, str] = field(default_factory=dict)  # network -> IPv4
    exit_code: int = 0
    oom_killed: bool = False

    @property
    def running(self) -> bool:
        return self.status in ("running", "paused")

    def label(self, key: str, default: str = "") -> str:
        return self.labels.get(f"{LABEL}.{key}", default)


def _seen(c: Container) -> ContainerSeen:
    nets = c.network_settings.networks or {}
    return ContainerSeen(c.id, c.name, dict(c.config.labels or {}), c.state.status or "", c.image,
                         {k: str(v.ip_address) for k, v in nets.items() if getattr(v, "ip_address", None)},
                         int(c.state.exit_code or 0), bool(c.state.oom_killed))


@dataclass(frozen=True)
class ImageSeen:
    """An image's id, tags, labels and size, read together right after the listing."""
    id: str
    tags: list[str]
    labels: dict[str, str]
    size: int


@dataclass
class Capture:
    """One container's state as of one instant: its committed layer and, when its image declares
    VOLUMEs, a build context (in a caller-owned folder) that adds their contents on top."""

    container: str
    tag: str
    committed: str  # image id of the container's own layer
    context: Path | None = None
    image: str = ""  # the finished image's id, once tagged (finish_capture)


@dataclass(frozen=True)
class ContainerMemory:
    """One container's labels, memory limit (bytes, 0: none) and whether it runs: one inspect for all."""

    id: str
    name: str
    labels: dict[str, str]
    limit: int
    running: bool


_CGROUP_DIRS = ("/sys/fs/cgroup/memory/docker/{id}", "/sys/fs/cgroup/memory/system.slice/docker-{id}.scope",
                "/sys/fs/cgroup/system.slice/docker-{id}.scope", "/sys/fs/cgroup/docker/{id}")


def _cgroup_use(cid: str) -> int | None:
    """Resident use of a local container from its cgroup, as ``docker stats`` reports it (usage less
    inactive page cache); None when this host has no such cgroup (a remote engine)."""
    for d in _CGROUP_DIRS:
        base = Path(d.format(id=cid))
        for usage, inactive in (("memory.usage_in_bytes", "total_inactive_file"), ("memory.current", "inactive_file")):
            try:
                used = int((base / usage).read_text())
                stat = dict(line.split() for line in (base / "memory.stat").read_text().splitlines() if " " in line)
            except (OSError, ValueError):
                continue
            return max(0, used - int(stat.get(inactive, 0)))
    return None


class Engine:
    """One Docker daemon: ``host`` None is the one the environment names (``DOCKER_HOST``, the docker context)."""

    def __init__(self, host: str | None = None, *, timeout: float | None = None) -> None:
        self.host = host
        self.timeout = timeout if timeout is not None else engine_timeout()
        bounded = ["timeout", "-k", "5", f"{self.timeout:g}", "docker"] if shutil.which("timeout") else ["docker"]
        self.docker = DockerClient(host=host, client_call=bounded)  # control calls: bounded
        self.unbounded = DockerClient(host=host)  # builds, pulls, commits: as long as they take

    def __repr__(self) -> str:
        return f"Engine({self.host or 'local'})"

    @property
    def where(self) -> str:
        host = self.host or os.environ.get("DOCKER_HOST", "")
        return f"the Docker engine at {host}" if host else "the Docker engine"

    def argv(self, *args: str) -> list[str]:
        """A docker CLI command line for this engine (streams python-on-whales cannot do)."""
        return ["docker", *(["--host", self.host] if self.host else []), *args]

    @staticmethod
    def _shown(command: list[str]) -> str:
        """``docker <verb> ...`` of a python-on-whales command line (without the timeout and --host prefix)."""
        words = [str(w) for w in command]
        words = words[words.index("docker") + 1:] if "docker" in words else words
        if words[:1] == ["--host"]:
            words = words[2:]
        return "docker " + " ".join(words[:5])

    def _error(self, exc: DockerException) -> Exception:
        err = (exc.stderr or "").strip()
        if exc.return_code == _TIMEOUT_EXIT:  # timeout(1) stopped the client (which may have printed why)
            return EngineUnavailable(f"{self.where} did not answer '{self._shown(exc.docker_command)}' within "
                                     f"{self.timeout:g}s (stalled?)")
        if _engine_down(err):
            return EngineUnavailable(err.splitlines()[-1] if err else "")
        cmd = self._shown(exc.docker_command)
        tail = " | ".join((err or (exc.stdout or "")).strip().splitlines()[-3:])
        return DockerError(f"'{cmd} ...' failed (exit {exc.return_code}): {tail}")

    def _cli(self, args: list[str], *, what: str | None = None, check: bool = True, input: bytes | None = None,
             timeout: float | None = -1.0) -> subprocess.CompletedProcess[str]:
        limit = self.timeout if timeout == -1.0 else timeout
        try:
            proc = subprocess.run(self.argv(*args), capture_output=True, timeout=limit, input=input)
        except FileNotFoundError:
            raise EngineUnavailable("the docker client is not installed") from None
        except subprocess.TimeoutExpired:
            raise EngineUnavailable(f"{self.where} did not answer 'docker {what or ' '.join(args[:3])}' within "
                                    f"{limit:g}s (stalled?)") from None
        out = subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(errors="replace"),
                                          proc.stderr.decode(errors="replace"))
        if check and out.returncode != 0:
            err = out.stderr.strip()
            if _engine_down(err):
                raise EngineUnavailable(err.splitlines()[-1])
            raise DockerError(f"'docker {what or ' '.join(args[:4])}' failed (exit {out.returncode}): {err[-300:]}")
        return out

    def run_cli(self, args: list[str], *, what: str | None = None, timeout: float | None = -1.0) -> str:
        """A docker CLI command on this engine (what python-on-whales cannot say: ``service create --name``,
        ``node ps``); its standard output. DockerError naming it when it fails."""
        return self._cli(args, what=what, timeout=timeout).stdout

    def json_cli(self, args: list[str], *, what: str | None = None) -> Any:
        """A docker CLI command printing JSON (``inspect``), parsed; [] when it printed nothing."""
        out = self._cli(args, what=what, check=False)
        if out.returncode != 0 and not out.stdout.strip().startswith("["):
            err = out.stderr.strip()
            if _engine_down(err):
                raise EngineUnavailable(err.splitlines()[-1])
            if "No such" in err or "not found" in err:
                return []
            raise DockerError(f"'docker {what or ' '.join(args[:3])}' failed (exit {out.returncode}): {err[-300:]}")
        try:
            return json.loads(out.stdout or "[]")
        except ValueError:
            raise DockerError(f"'docker {what or ' '.join(args[:3])}' printed no JSON: {out.stdout[:200]}") from None

    def oom_events(self, labels: dict[str, str], since: float, until: float) -> list[tuple[dict[str, str], float]]:
        """The containers with ``labels`` the kernel killed for their memory limit between ``since`` and ``until``
        (Unix times; the engine keeps recent events): (their labels, when)."""
        args = ["events", "--since", f"{since:.3f}", "--until", f"{until:.3f}", "--filter", "type=container",
                "--filter", "event=oom", "--format", "{{json .}}"]
        for k, v in labels.items():
            args += ["--filter", f"label={k}={v}"]
        out = []
        for line in self.run_cli(args, what="events").splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            attrs = (ev.get("Actor") or {}).get("Attributes") or {}
            out.append(({k: str(v) for k, v in attrs.items()}, float(ev.get("timeNano", 0)) / 1e9 or float(ev.get("time", 0))))
        return out

    def ping(self, timeout: float = 5.0) -> bool:
        """Whether the engine answers at all within ``timeout`` seconds."""
        try:
            return self._cli(["version", "--format", "{{.Server.Version}}"], check=False, timeout=timeout).returncode == 0
        except EngineUnavailable:
            return False

    # -- the engine ---------------------------------------------------------------------------------
    @_wrap
    def info(self) -> dict[str, Any]:
        """Version, storage driver, data root and swarm role of the engine; EngineUnavailable when it is down."""
        try:
            info = self.docker.system.info()
        except FileNotFoundError:
            raise EngineUnavailable("the docker client is not installed") from None
        swarm = info.swarm
        return {
            "server_version": info.server_version,
            "storage_driver": info.driver,
            "docker_root_dir": str(info.docker_root_dir),
            "mem_total": info.mem_total,
            "ncpu": info.n_cpu,
            "swarm": (swarm.local_node_state or "") if swarm else "",
            "swarm_manager": bool(swarm and swarm.control_available),
            "node_id": (swarm.node_id or "") if swarm else "",
        }

    def root_dir(self) -> str | None:
        """The engine's data root (``DockerRootDir``), or None when the engine cannot be asked."""
        try:
            out = self._cli(["info", "--format", "{{.DockerRootDir}}"], check=False)
        except EngineUnavailable:
            return None
        return out.stdout.strip() or None if out.returncode == 0 else None

    # -- containers -------------------------------------------------------------------------------
    @_wrap
    def run(self, spec: RunSpec) -> str:
        """Create and start one container; its id."""
        c = self.docker.run(
            spec.image, spec.command or [], name=spec.name, detach=True, labels=spec.labels, envs=spec.env,
            networks=[spec.network], network_aliases=spec.network_aliases, link=spec.links, publish=spec.publish,
            volumes=spec.volumes, memory=spec.memory, tmpfs=spec.tmpfs, user=spec.user,
            stop_timeout=spec.stop_timeout, restart=spec.restart, sysctl=spec.sysctls, pull="never")
        return str(c.id)

    @_wrap
    def containers(self, **labels: str) -> list[ContainerSeen]:
        """Every container (running or not) carrying every given envctl label (``site="shopping"``), each read
        right after the listing (one removed in between is left out)."""
        filters: Any = [("label", f"{LABEL}.{k}={v}") for k, v in labels.items()] or [("label", f"{LABEL}.instance")]
        found = []
        for c in self.docker.container.list(all=True, filters=filters):
            try:
                found.append(_seen(c))
            except NoSuchContainer:  # listed, then removed by another process before it was inspected
                continue
        return found

    @_wrap
    def container(self, name: str) -> ContainerSeen | None:
        try:
            return _seen(self.docker.container.inspect(name))
        except NoSuchContainer:
            return None

    @_wrap
    def remove(self, names: list[str], *, volumes: bool = True) -> None:
        if names:
            try:
                self.docker.container.remove(names, force=True, volumes=volumes)
            except NoSuchContainer:
                pass

    @_wrap
    def stop(self, name: str, timeout: int | None = None) -> None:
        self.unbounded.container.stop(name, time=timeout)

    @_wrap
    def start(self, name: str) -> None:
        self.docker.container.start(name)

    def exec(self, name: str, argv: list[str], *, user: str | None = None,
             timeout: float | None = None) -> tuple[int, str]:
        """Run argv inside a container; returns (exit code, combined output). Never raises for rc != 0; a step
        that runs longer than ``timeout`` (default: the engine's control bound x 10) is stopped."""
        limit = timeout or self.timeout * 10
        try:
            proc = subprocess.run(self.argv("exec", *(["--user", user] if user else []), name, *argv),
                                  capture_output=True, timeout=limit)
        except FileNotFoundError:
            raise EngineUnavailable("the docker client is not installed") from None
        except subprocess.TimeoutExpired:
            return 124, f"'{' '.join(argv)[:80]}' in {name} did not end within {limit:g}s"
        if proc.returncode == 0:  # what the step printed (its warnings on stderr are not its answer), less one newline
            out = proc.stdout.decode(errors="replace")
            return 0, out[:-1] if out.endswith("\n") else out
        err = proc.stderr.decode(errors="replace")
        if "No such container" in err:
            raise DockerError(f"container {name} does not exist")
        if _engine_down(err):
            raise EngineUnavailable(err.strip().splitlines()[-1])
        return proc.returncode, (proc.stdout.decode(errors="replace") + err).strip()

    @_wrap
    def logs(self, name: str, tail: int = 30) -> str:
        try:
            return str(self.docker.container.logs(name, tail=tail))
        except NoSuchContainer:
            return ""

    def stream_logs(self, name: str, follow: bool = True) -> Iterator[str]:
        stream: Any = self.unbounded.container.logs(name, follow=follow, stream=True)
        for _source, chunk in stream:
            yield chunk.decode(errors="replace")

    def wait_running(self, name: str, timeout: float = 30) -> ContainerSeen:
        deadline = time.monotonic() + timeout
        while True:
            c = self.container(name)
            if c is not None and c.status == "running":
                return c
            if c is not None and c.status in ("exited", "dead"):
                raise DockerError(f"container {name} exited with code {c.exit_code}: {self.logs(name, 5)}")
            if time.monotonic() > deadline:
                raise DockerError(f"container {name} did not start within {timeout:.0f}s")
            time.sleep(0.1)

    @_wrap
    def pause(self, names: list[str]) -> None:
        """Freeze every process of the containers (cgroup freezer): they keep their sockets, and clients
        connecting meanwhile wait in the kernel's accept queue until :meth:`unpause`."""
        if names:
            self.docker.container.pause(names)

    @_wrap
    def unpause(self, names: list[str]) -> None:
        if names:
            try:
                self.docker.container.unpause(names)
            except DockerException:  # not every one frozen (a pause interrupted half-way): thaw those that are
                frozen = self.paused(names)
                if frozen:
                    self.docker.container.unpause(frozen)

    def paused(self, names: list[str]) -> list[str]:
        """Those of ``names`` that are frozen now (e.g. left so by a process killed mid-capture)."""
        return [n for n in names if (c := self.container(n)) is not None and c.status == "paused"]

    # -- commits: a container's state as an image ------------------------------------------------------
    def commit(self, container: str, tag: str, labels: dict[str, str], *, with_volumes: bool = True) -> str:
        """Commit a container to an image with labels, the contents of its declared volumes included.

        ``docker commit`` leaves out every path the image declares as ``VOLUME`` (mysql:8.1's
        /var/lib/mysql, GitLab's /var/opt/gitlab): those are copied out of the container and added
        as a layer on top, so a container made from the image starts with the same data (Docker seeds
        a new volume from the image's files at that path).
        """
        with tempfile.TemporaryDirectory(prefix="envctl-commit-") as tmp:
            return self.finish_capture(self.capture(container, tag, labels, Path(tmp), with_volumes=with_volumes))

    def capture(self, container: str, tag: str, labels: dict[str, str], workdir: Path, *,
                with_volumes: bool = True) -> Capture:
        """The part of :meth:`commit` that must see one instant of the container: ``docker commit`` of its
        layer (never pausing it: the caller decides) and a tar of each declared VOLUME into ``workdir``.
        :meth:`finish_capture` then builds the image, while the container runs on."""
        args = ["commit", "--pause=false"]
        for k, v in labels.items():
            args += ["--change", f"LABEL {k}={json.dumps(v)}"]
        # untagged until finish_capture: a capture that fails half-way (a full disk under the volumes' tars)
        # leaves no image under the tag, and its layer is removed here
        committed = self._cli([*args, container], what=f"commit {container} {tag}", timeout=None).stdout.strip()
        try:
            declared = self.image_volumes(committed) if with_volumes else []
            if not declared:
                return Capture(container, tag, committed)
            workdir.mkdir(parents=True, exist_ok=True)
            lines = [f"FROM {committed}"]
            for i, path in enumerate(declared):
                path = path.rstrip("/") or "/"
                self.archive_out(container, path, workdir / f"volume{i}.tar")
                lines.append(f"ADD volume{i}.tar {str(Path(path).parent).rstrip('/')}/")
            (workdir / "Dockerfile").write_text("\n".join(lines) + "\n")
        except BaseException as exc:
            self.discard_capture(Capture(container, tag, committed))
            if is_disk_full(exc):
                raise disk_full(workdir, what="to copy the volumes of", kept="nothing was committed",
                                hint="free space there (or set TMPDIR to a directory on a bigger disk) and run the "
                                     "command again") from None
            raise
        return Capture(container, tag, committed, workdir)

    def discard_capture(self, cap: Capture) -> None:
        """Remove what a capture made: its untagged layer, and its image once finished (while its tag still names
        it: a snapshot another member's failure leaves half-made is removed whole)."""
        if cap.image and self.image_id(cap.tag) == cap.image:
            self.remove_images_quietly([cap.tag])
        self.remove_images_quietly([cap.committed])

    def finish_capture(self, cap: Capture) -> str:
        """Tag the image of a :class:`Capture` (building the volume layer when there is one); its id."""
        if cap.context is None:
            self.tag_image(cap.committed, cap.tag)
            cap.image = cap.committed
            return cap.committed
        try:
            self.build(cap.context, cap.tag)
        except BaseException:
            self.discard_capture(cap)
            raise
        cap.image = self.image_id(cap.tag)
        return cap.image

    def archive_out(self, name: str, path: str, dest: Path) -> None:
        """Write a tar of ``path`` in a (stopped or running) container, volumes included, to ``dest``."""
        with open(dest, "wb") as out:
            proc = subprocess.run(self.argv("cp", f"{name}:{path}", "-"), stdout=out, stderr=subprocess.PIPE)
        if proc.returncode != 0:
            dest.unlink(missing_ok=True)
            if b"no space left on device" in proc.stderr.lower():
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dest))
            raise DockerError(f"'docker cp {name}:{path} -' failed: {proc.stderr.decode(errors='replace').strip()[-300:]}")

    # -- images ---------------------------------------------------------------------------------------
    @_wrap
    def image_exists(self, ref: str) -> bool:
        return self.docker.image.exists(ref)

    @_wrap
    def image_id(self, ref: str) -> str:
        return str(self.docker.image.inspect(ref).id)

    def image_id_or_none(self, ref: str) -> str | None:
        """The image id ``ref`` resolves to, or None when there is no such image."""
        out = self._cli(["image", "inspect", "--format", "{{.Id}}", ref], check=False)
        return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None

    @_wrap
    def image_labels(self, ref: str) -> dict[str, str]:
        return dict(self.docker.image.inspect(ref).config.labels or {})

    @_wrap
    def image_seen(self, ref: str) -> ImageSeen:
        """An image's id, tags, labels and size in one read (DockerError when there is none)."""
        img = self.docker.image.inspect(ref)
        return ImageSeen(str(img.id), list(img.repo_tags or []), dict(img.config.labels or {}), int(img.size or 0))

    @_wrap
    def image_volumes(self, ref: str) -> list[str]:
        """The paths an image declares as ``VOLUME`` (``docker commit`` does not capture their contents)."""
        return sorted((self.docker.image.inspect(ref).config.volumes or {}).keys())

    def image_repo_tags(self, ref: str) -> tuple[str, ...]:
        out = self._cli(["image", "inspect", "--format", "{{join .RepoTags \"\\n\"}}", ref], check=False)
        return tuple(t for t in out.stdout.split() if t) if out.returncode == 0 else ()

    def image_repo_digests(self, ref: str) -> tuple[str, ...]:
        """``repo@sha256:...`` entries of an image (empty for images never pulled or pushed)."""
        out = self._cli(["image", "inspect", "--format", "{{join .RepoDigests \"\\n\"}}", ref], check=False)
        return tuple(t for t in out.stdout.split() if t) if out.returncode == 0 else ()

    @_wrap
    def images_labelled(self, label_key: str) -> list[ImageSeen]:
        """Images carrying label ``label_key`` (any value); one removed between the listing and the read of its
        labels (python-on-whales inspects again after 0.2 s; another process may have removed it) is left out."""
        out = []
        for img in self.docker.image.list(filters=[("label", label_key)]):
            try:
                out.append(ImageSeen(img.id, list(img.repo_tags or []), dict(img.config.labels or {}), int(img.size or 0)))
            except NoSuchImage:
                continue
        return out

    @_wrap
    def remove_image(self, ref: str) -> None:
        self.docker.image.remove(ref, force=True)

    def tag_image(self, ref: str, tag: str) -> None:
        """``docker tag ref tag``; DockerError naming both when it fails."""
        self._cli(["tag", ref, tag], what=f"tag {ref} {tag}")

    def remove_images_quietly(self, refs: list[str]) -> list[str]:
        """Remove each image (not forced); returns those removed. Failures are ignored."""
        return [r for r in refs if self._cli(["image", "rm", r], check=False).returncode == 0]

    def dangling_image_ids(self, *, label: str | None = None) -> list[str]:
        args = ["images", "--filter", "dangling=true", "--no-trunc", "--format", "{{.ID}}"]
        if label:
            args[3:3] = ["--filter", f"label={label}"]
        return self._cli(args, check=False).stdout.split()

    def build(self, context: Path, tag: str, labels: dict[str, str] | None = None, file: Path | None = None) -> None:
        """Build an image with the classic builder (Debian's docker.io ships no buildx)."""
        try:
            self.unbounded.legacy_build(context, file=file, tags=[tag], labels=labels or {})
        except DockerException as exc:
            raise self._error(exc) from None

    def build_lines(self, context: Path, tag: str, *, file: Path | None = None,
                    labels: dict[str, str] | None = None) -> list[str] | None:
        """Build with the classic builder; None on success, else the failed build's output lines."""
        try:
            self.unbounded.legacy_build(context, file=file, tags=[tag], labels=labels or {})
            return None
        except DockerException as exc:
            return (exc.stderr or exc.stdout or "").strip().splitlines()

    def load_process(self) -> subprocess.Popen[bytes]:
        """A ``docker load`` process reading an archive on stdin (the caller streams, checks and waits)."""
        return subprocess.Popen(self.argv("load"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def save_process(self, ref: str) -> subprocess.Popen[bytes]:
        """A ``docker save ref`` process writing the archive to stdout."""
        return subprocess.Popen(self.argv("save", ref), stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def pull_lines(self, ref: str) -> Iterator[str]:
        """``docker pull ref``, yielding its progress lines; DockerError with the engine's last line on failure."""
        try:
            for _, line in self.unbounded.image.pull(ref, stream_logs=True):  # type: ignore[misc,union-attr]
                yield line.decode(errors="replace").rstrip()
        except DockerException as exc:
            err = (exc.stderr or str(exc)).strip().splitlines()
            raise DockerError(f"docker pull {ref} failed: {err[-1] if err else 'unknown error'}") from None

    def push(self, ref: str) -> None:
        """``docker push ref`` (to the registry the reference names)."""
        self._cli(["push", ref], what=f"push {ref}", timeout=None)

    # -- networks and volumes ----------------------------------------------------------------------------
    def _network_exists(self, name: str) -> bool:
        # Not docker.network.exists(): it recognises only newer clients' "network X not found" wording,
        # while Debian's docker.io 20.10 client says "No such network".
        return any(n.name == name for n in self.docker.network.list(filters={"name": name}))

    @_wrap
    def ensure_network(self, name: str, labels: dict[str, str], *, driver: str | None = None,
                       attachable: bool = False) -> bool:
        """Make the network unless it exists; whether it existed."""
        if self._network_exists(name):
            return True
        try:
            self.docker.network.create(name, labels=labels, driver=driver, attachable=attachable)
        except DockerException as exc:
            if "already exists" not in (exc.stderr or ""):
                raise
            return True
        return False

    @_wrap
    def networks(self, **labels: str) -> dict[str, dict[str, str]]:
        """Name -> labels of the networks carrying every given envctl label, read right after the listing (a
        network removed in between is left out)."""
        filters: Any = [("label", f"{LABEL}.{k}={v}") for k, v in labels.items()]
        out = {}
        for net in self.docker.network.list(filters=filters):
            try:
                out[net.name] = dict(net.labels or {})
            except NoSuchNetwork:
                continue
        return out

    @_wrap
    def remove_network(self, name: str) -> bool:
        """Remove a network; False when the engine keeps it for a stale endpoint (a container removed while
        it was being attached, an engine bug), which a later 'up' of the same instance simply reuses."""
        if not self._network_exists(name):
            return True
        try:
            self.docker.network.remove(name)
            return True
        except DockerException as exc:
            if "active endpoints" not in (exc.stderr or ""):
                raise
        for c in self.docker.network.inspect(name).containers or {}:
            try:
                self.docker.network.disconnect(name, c, force=True)
            except DockerException:
                pass
        try:
            self.docker.network.remove(name)
            return True
        except DockerException:
            return False

    @_wrap
    def volumes(self, **labels: str) -> list[str]:
        """Names of the volumes carrying every given envctl label."""
        filters: Any = [("label", f"{LABEL}.{k}={v}") for k, v in labels.items()] or [("label", f"{LABEL}.instance")]
        return [v.name for v in self.docker.volume.list(filters=filters)]

    def volume_exists(self, name: str) -> bool:
        return self._cli(["volume", "inspect", name], check=False).returncode == 0

    def volume_create(self, name: str, labels: dict[str, str]) -> None:
        args = ["volume", "create"]
        for k, v in labels.items():
            args += ["--label", f"{k}={v}"]
        self._cli([*args, name], what=f"volume create {name}")

    def remove_volumes(self, names: list[str]) -> dict[str, str]:
        """Remove volumes; returns volume -> the engine's reason for each it refused (e.g. in use by a
        container). A volume already gone is not a failure."""
        failed = {}
        for n in names:
            out = self._cli(["volume", "rm", n], check=False)
            if out.returncode == 0:
                continue
            err = (out.stderr or out.stdout or "").strip()
            if "no such volume" in err.lower():
                continue
            if _engine_down(err):
                raise EngineUnavailable(err.splitlines()[-1])
            failed[n] = err.splitlines()[-1] if err else f"'docker volume rm' exited {out.returncode}"
        return failed

    def helper_run(self, volumes: dict[str, str], argv: list[str], *, timeout: float = 120) -> tuple[int, str]:
        """Run ``argv`` in a throwaway helper container with named volumes mounted ({volume: path}).

        Returns (exit code, stdout); DockerError when the container cannot be started."""
        mounts = [a for v, p in volumes.items() for a in ("-v", f"{v}:{p}")]
        out = self._cli(["run", "--rm", "--network", "none", *mounts, HELPER_IMAGE, *argv], check=False, timeout=timeout)
        if out.returncode == 125:
            raise DockerError(f"could not start a helper container from {HELPER_IMAGE}: {out.stderr.strip()[-300:]}",
                              f"make sure {HELPER_IMAGE} is present ('envctl images build' or scripts/docker-engine.sh)")
        return out.returncode, out.stdout

    def helper_stdin_process(self, volumes: dict[str, str], argv: list[str]) -> subprocess.Popen[bytes]:
        """A helper container with named volumes mounted, reading stdin (e.g. a tar stream to unpack)."""
        mounts = [a for v, p in volumes.items() for a in ("-v", f"{v}:{p}")]
        return subprocess.Popen(self.argv("run", "-i", "--rm", "--network", "none", *mounts, HELPER_IMAGE, *argv),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    # -- ports ------------------------------------------------------------------------------------------
    def published_host_ports(self) -> dict[int, str]:
        """Host port -> name of the running container that publishes it (on any address); one engine call."""
        proc = self._cli(["ps", "--format", "{{.Names}}\t{{.Ports}}"], what="ps")
        out: dict[int, str] = {}
        for line in proc.stdout.splitlines():
            name, _, ports = line.partition("\t")
            for host_port in re.findall(r":(\d+)->", ports):
                out.setdefault(int(host_port), name)
        return out

    # -- memory: what containers really use (the capacity plan, envctl.plan) -----------------------------
    def container_memory(self) -> list[ContainerMemory]:
        """Every container on the engine (envctl's or not), read with one ``docker ps`` and one ``docker
        inspect`` (not one inspect per container: a pool of 16 instances has ~50)."""
        ids = self._cli(["ps", "-aq", "--no-trunc"], what="ps").stdout.split()
        if not ids:
            return []
        out = self._cli(["container", "inspect", *ids], what="container inspect", check=False)  # one gone since: the rest
        try:
            raw = json.loads(out.stdout or "[]")
        except ValueError:
            raise DockerError(f"'docker container inspect' printed no JSON: {out.stderr.strip()[-300:]}") from None
        return [ContainerMemory(c["Id"], c.get("Name", "").lstrip("/"), (c.get("Config") or {}).get("Labels") or {},
                                int((c.get("HostConfig") or {}).get("Memory") or 0),
                                bool((c.get("State") or {}).get("Running"))) for c in raw]

    def memory_use(self, running: list[str]) -> tuple[dict[str, int], str]:
        """Resident bytes of each running container id: read from the cgroups when the engine is local
        (microseconds; found by the container ids, so a remote engine's containers are never found here),
        else from one ``docker stats --no-stream`` for all of them (~2 s). Returns ({id: bytes},
        "cgroup" | "stats"); a container gone meanwhile is left out."""
        if not running:
            return {}, ""
        local = {cid: _cgroup_use(cid) for cid in running} if self.host is None else {}
        if local and all(v is not None for v in local.values()):
            return {k: v for k, v in local.items() if v is not None}, "cgroup"
        try:
            stats = self.docker.stats(containers=running)
        except (DockerException, NoSuchContainer):
            try:  # one of them was removed between the listing and the read: all running ones instead
                stats = self.docker.stats()
            except DockerException as exc:
                raise DockerError(f"'docker stats' failed: {(exc.stderr or '').strip()[-300:]}") from None
        wanted = set(running)
        return {s.container_id: int(s.memory_used) for s in stats if s.container_id in wanted}, "stats"


ENGINE = Engine()  # the engine the environment names: the local backend's, and where images are got and built
