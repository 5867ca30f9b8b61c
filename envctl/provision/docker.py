"""The one place envctl talks to the Docker engine (through python-on-whales).

Every container, network and image envctl makes carries labels under ``envctl.`` so that state
is read back from the engine, never from a side file. Docker failures become ``DockerError``
with the command and the tail of its output; an unreachable engine becomes ``EngineUnavailable``.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from python_on_whales import Container, DockerException, docker
from python_on_whales.exceptions import NoSuchContainer, NoSuchImage, NoSuchNetwork

__all__ = ["Container", "NoSuchContainer"]  # re-exported: callers never import python-on-whales

from envctl.errors import DockerError, EngineUnavailable

LABEL = "envctl"  # namespace: envctl.instance, envctl.site, envctl.service, envctl.slot, envctl.role ...
T = TypeVar("T")


def _wrap(fn: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(fn)
    def inner(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except DockerException as exc:
            err = (exc.stderr or "").strip()
            if "Cannot connect to the Docker daemon" in err or "connect: no such file" in err or "permission denied" in err.lower() and "docker.sock" in err:
                raise EngineUnavailable(err.splitlines()[-1] if err else "") from None
            cmd = " ".join(exc.docker_command[:6])
            tail = " | ".join((err or (exc.stdout or "")).strip().splitlines()[-3:])
            raise DockerError(f"'{cmd} ...' failed (exit {exc.return_code}): {tail}") from None

    return inner


@_wrap
def engine_info() -> dict[str, Any]:
    """Version, storage driver and data root of the engine; EngineUnavailable when it is down."""
    try:
        info = docker.system.info()
    except FileNotFoundError:
        raise EngineUnavailable("the docker client is not installed") from None
    return {
        "server_version": info.server_version,
        "storage_driver": info.driver,
        "docker_root_dir": str(info.docker_root_dir),
        "mem_total": info.mem_total,
        "ncpu": info.n_cpu,
    }


def engine_ok() -> bool:
    try:
        engine_info()
        return True
    except (EngineUnavailable, DockerError):
        return False


@_wrap
def image_exists(ref: str) -> bool:
    return docker.image.exists(ref)


@_wrap
def image_id(ref: str) -> str:
    return docker.image.inspect(ref).id


@dataclass
class RunSpec:
    """Everything needed to create one container; built by the lab from catalog objects."""

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


@_wrap
def run(spec: RunSpec) -> Container:
    return docker.run(
        spec.image,
        spec.command or [],
        name=spec.name,
        detach=True,
        labels=spec.labels,
        envs=spec.env,
        networks=[spec.network],
        network_aliases=spec.network_aliases,
        link=spec.links,
        publish=spec.publish,
        volumes=spec.volumes,
        memory=spec.memory,
        tmpfs=spec.tmpfs,
        user=spec.user,
        stop_timeout=spec.stop_timeout,
        restart=spec.restart,
        sysctl=spec.sysctls,
        pull="never",
    )


@_wrap
def containers(**labels: str) -> list[Container]:
    """All containers (running or not) carrying every given envctl label (``site="shopping"``)."""
    filters: Any = [("label", f"{LABEL}.{k}={v}") for k, v in labels.items()] or [("label", f"{LABEL}.instance")]
    for attempt in range(5):
        try:
            found = []
            for c in docker.container.list(all=True, filters=filters):
                try:
                    c.name  # inspect now: a container removed since the listing is left out
                except NoSuchContainer:
                    continue
                found.append(c)
            return found
        except NoSuchContainer:
            # listed, then removed (e.g. by a background replenisher) before it was inspected
            if attempt == 4:
                raise
    return []


def seen(c: Container) -> tuple[str, dict[str, str], str] | None:
    """(name, labels, status) of a listed container, read together; None when it was removed since the
    listing (python-on-whales inspects again after 0.2 s, and another process may have removed it)."""
    try:
        return c.name, dict(c.config.labels or {}), c.state.status or ""
    except NoSuchContainer:
        return None


def label(c: Container, key: str, default: str = "") -> str:
    return (c.config.labels or {}).get(f"{LABEL}.{key}", default)


@_wrap
def remove(names: list[str] | list[Container], *, volumes: bool = True) -> None:
    if names:
        try:
            docker.container.remove(names, force=True, volumes=volumes)
        except NoSuchContainer:
            pass


@_wrap
def stop(name: str | Container, timeout: int | None = None) -> None:
    docker.container.stop(name, time=timeout)


@_wrap
def start(name: str | Container) -> None:
    docker.container.start(name)


def exec_argv(name: str | Container, argv: list[str], *, user: str | None = None) -> tuple[int, str]:
    """Run argv inside a container; returns (exit code, combined output). Never raises for rc != 0."""
    try:
        out = docker.container.execute(name, argv, user=user)
        return 0, str(out or "")
    except DockerException as exc:
        if exc.return_code in (125, 126, 127) and "No such container" in (exc.stderr or ""):
            raise DockerError(f"container {name} does not exist") from None
        return exc.return_code, ((exc.stdout or "") + (exc.stderr or "")).strip()


def exec_stdin(name: str | Container, argv: list[str], data: bytes, timeout: float = 60) -> tuple[int, str]:
    """Run argv inside a container with ``data`` on its stdin (python-on-whales has no stdin for exec)."""
    import subprocess

    cname = name if isinstance(name, str) else name.name
    proc = subprocess.run(["docker", "exec", "-i", cname, *argv], input=data, capture_output=True, timeout=timeout)
    return proc.returncode, (proc.stdout + proc.stderr).decode(errors="replace").strip()


@_wrap
def signal(name: str | Container, sig: str) -> None:
    """Send ``sig`` to a container's main process (e.g. a graceful reload)."""
    docker.container.kill(name, signal=sig)


@_wrap
def inspect(name: str | Container) -> Container | None:
    try:
        return docker.container.inspect(name)
    except NoSuchContainer:
        return None


@_wrap
def logs(name: str | Container, tail: int = 30) -> str:
    try:
        return str(docker.container.logs(name, tail=tail))
    except NoSuchContainer:
        return ""


def stream_logs(name: str, follow: bool = True) -> Iterator[str]:
    stream: Any = docker.container.logs(name, follow=follow, stream=True)
    for _source, chunk in stream:
        yield chunk.decode(errors="replace")


@_wrap
def copy_to(name: str | Container, local: Path, remote: str) -> None:
    docker.container.copy(str(local), (name, remote))


def _network_exists(name: str) -> bool:
    # Not docker.network.exists(): it recognises only newer clients' "network X not found" wording,
    # while Debian's docker.io 20.10 client says "No such network".
    return any(n.name == name for n in docker.network.list(filters={"name": name}))


@_wrap
def ensure_network(name: str, labels: dict[str, str]) -> None:
    if not _network_exists(name):
        try:
            docker.network.create(name, labels=labels)
        except DockerException as exc:
            if "already exists" not in (exc.stderr or ""):
                raise


@_wrap
def networks(**labels: str) -> dict[str, dict[str, str]]:
    """Name -> labels of the networks carrying every given envctl label, read right after the listing (a
    network removed in between is left out)."""
    filters: Any = [("label", f"{LABEL}.{k}={v}") for k, v in labels.items()]
    out = {}
    for net in docker.network.list(filters=filters):
        try:
            out[net.name] = dict(net.labels or {})
        except NoSuchNetwork:
            continue
    return out


@_wrap
def remove_network(name: str) -> bool:
    """Remove a network; False when the engine keeps it for a stale endpoint (a container removed while
    it was being attached, an engine bug), which a later 'up' of the same instance simply reuses."""
    if not _network_exists(name):
        return True
    try:
        docker.network.remove(name)
        return True
    except DockerException as exc:
        if "active endpoints" not in (exc.stderr or ""):
            raise
    for c in docker.network.inspect(name).containers or {}:
        try:
            docker.network.disconnect(name, c, force=True)
        except DockerException:
            pass
    try:
        docker.network.remove(name)
        return True
    except DockerException:
        return False


def commit(container: str | Container, tag: str, labels: dict[str, str], *, with_volumes: bool = True) -> str:
    """Commit a container to an image with labels, the contents of its declared volumes included.

    ``docker commit`` leaves out every path the image declares as ``VOLUME`` (mysql:8.1's
    /var/lib/mysql, GitLab's /var/opt/gitlab): those are copied out of the container and added
    as a layer on top, so a container made from the image starts with the same data (Docker seeds
    a new volume from the image's files at that path).
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="envctl-commit-") as tmp:
        return finish_capture(capture(container, tag, labels, Path(tmp), with_volumes=with_volumes))


@dataclass
class Capture:
    """One container's state as of one instant: its committed layer and, when its image declares
    VOLUMEs, a build context (in a caller-owned folder) that adds their contents on top."""

    container: str
    tag: str
    committed: str  # image id of the container's own layer
    context: Path | None = None


def capture(container: str | Container, tag: str, labels: dict[str, str], workdir: Path, *,
            with_volumes: bool = True) -> Capture:
    """The part of :func:`commit` that must see one instant of the container: ``docker commit`` of its
    layer (never pausing it: the caller decides, e.g. :func:`pause` for a crash-consistent copy of a
    running site) and a tar of each declared VOLUME into ``workdir``. :func:`finish_capture` then
    builds the image, while the container runs on."""
    name = container if isinstance(container, str) else container.name
    committed = _commit(name, tag, labels)
    declared = image_volumes(tag) if with_volumes else []
    if not declared:
        return Capture(name, tag, committed)
    workdir.mkdir(parents=True, exist_ok=True)
    lines = [f"FROM {committed}"]
    for i, path in enumerate(declared):
        path = path.rstrip("/") or "/"
        archive_out(name, path, workdir / f"volume{i}.tar")
        parent = str(Path(path).parent)
        lines.append(f"ADD volume{i}.tar {parent.rstrip('/')}/")
    (workdir / "Dockerfile").write_text("\n".join(lines) + "\n")
    return Capture(name, tag, committed, workdir)


def finish_capture(cap: Capture) -> str:
    """Tag the image of a :class:`Capture` (building the volume layer when there is one); its id."""
    if cap.context is None:
        return cap.committed
    build_context(cap.context, cap.tag)
    return image_id(cap.tag)


@_wrap
def pause(names: list[str]) -> None:
    """Freeze every process of the containers (cgroup freezer): they keep their sockets, and clients
    connecting meanwhile wait in the kernel's accept queue until :func:`unpause`."""
    if names:
        docker.container.pause(names)


@_wrap
def unpause(names: list[str]) -> None:
    if names:
        docker.container.unpause(names)


def paused(names: list[str]) -> list[str]:
    """Those of ``names`` that are frozen now (e.g. left so by a process killed mid-capture)."""
    out = []
    for n in names:
        c = inspect(n)
        if c is not None and c.state.paused:
            out.append(n)
    return out


def _commit(name: str, tag: str, labels: dict[str, str]) -> str:
    import json
    import subprocess

    argv = ["docker", "commit", "--pause=false"]
    for k, v in labels.items():
        argv += ["--change", f"LABEL {k}={json.dumps(v)}"]
    proc = subprocess.run([*argv, name, tag], capture_output=True, text=True)
    if proc.returncode != 0:
        raise DockerError(f"'docker commit {name} {tag}' failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
    return proc.stdout.strip()


@dataclass(frozen=True)
class ImageSeen:
    """An image's id, tags, labels and size, read together right after the listing."""
    id: str
    tags: list[str]
    labels: dict[str, str]
    size: int


@_wrap
def images_labelled(label_key: str) -> list[ImageSeen]:
    """Images carrying label ``label_key`` (any value). An image removed between the listing and the read of
    its labels (python-on-whales inspects again after 0.2 s; another process may have removed it) is left out."""
    out = []
    for img in docker.image.list(filters=[("label", label_key)]):
        try:
            out.append(ImageSeen(img.id, list(img.repo_tags or []), dict(img.config.labels or {}), int(img.size or 0)))
        except NoSuchImage:
            continue
    return out


@_wrap
def remove_image(ref: str) -> None:
    docker.image.remove(ref, force=True)


@_wrap
def image_volumes(ref: str) -> list[str]:
    """The paths an image declares as ``VOLUME`` (``docker commit`` does not capture their contents)."""
    img = docker.image.inspect(ref)
    return sorted((img.config.volumes or {}).keys())


@_wrap
def image_labels(ref: str) -> dict[str, str]:
    return dict(docker.image.inspect(ref).config.labels or {})


@_wrap
def volumes(**labels: str) -> list[str]:
    """Names of the volumes carrying every given envctl label."""
    filters: Any = [("label", f"{LABEL}.{k}={v}") for k, v in labels.items()] or [("label", f"{LABEL}.instance")]
    return [v.name for v in docker.volume.list(filters=filters)]


def remove_volumes(names: list[str]) -> dict[str, str]:
    """Remove volumes; returns volume -> the engine's reason for each it refused (e.g. in use by a
    container). A volume already gone is not a failure."""
    failed = {}
    for n in names:
        try:
            docker.volume.remove(n)
        except DockerException as exc:
            err = (exc.stderr or exc.stdout or "").strip()
            if "no such volume" in err.lower():
                continue
            if "Cannot connect to the Docker daemon" in err:
                raise EngineUnavailable(err.splitlines()[-1]) from None
            failed[n] = err.splitlines()[-1] if err else f"'docker volume rm' exited {exc.return_code}"
    return failed


def published_host_ports() -> dict[int, str]:
    """Host port -> name of the running container that publishes it (on any address); one engine call."""
    import re
    import subprocess

    proc = subprocess.run(["docker", "ps", "--format", "{{.Names}}\t{{.Ports}}"], capture_output=True, text=True,
                          timeout=30)
    if proc.returncode != 0:
        raise DockerError(f"'docker ps' failed: {proc.stderr.strip()[-300:]}")
    out: dict[int, str] = {}
    for line in proc.stdout.splitlines():
        name, _, ports = line.partition("\t")
        for host_port in re.findall(r":(\d+)->", ports):
            out.setdefault(int(host_port), name)
    return out


def publishers(port: int) -> list[str]:
    """Names of running containers that publish host port ``port`` (on any address)."""
    holder = published_host_ports().get(port)
    return [holder] if holder else []


def archive_out(name: str | Container, path: str, dest: Path) -> None:
    """Write a tar of ``path`` in a (stopped or running) container, volumes included, to ``dest``."""
    import subprocess

    cname = name if isinstance(name, str) else name.name
    with open(dest, "wb") as out:
        proc = subprocess.run(["docker", "cp", f"{cname}:{path}", "-"], stdout=out, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        raise DockerError(f"'docker cp {cname}:{path} -' failed: {proc.stderr.decode(errors='replace').strip()[-300:]}")


@_wrap
def build_context(context: Path, tag: str, labels: dict[str, str] | None = None, file: Path | None = None) -> None:
    """Build an image with the classic builder (Debian's docker.io ships no buildx)."""
    docker.legacy_build(context, file=file, tags=[tag], labels=labels or {})


def build_image(context: Path, tag: str, *, file: Path | None = None,
                labels: dict[str, str] | None = None) -> list[str] | None:
    """Build with the classic builder; None on success, else the failed build's output lines."""
    try:
        docker.legacy_build(context, file=file, tags=[tag], labels=labels or {})
        return None
    except DockerException as exc:
        return (exc.stderr or exc.stdout or "").strip().splitlines()


def wait_running(name: str, timeout: float = 30) -> Container:
    deadline = time.monotonic() + timeout
    while True:
        c = inspect(name)
        if c is not None and c.state.running:
            return c
        if c is not None and c.state.status in ("exited", "dead"):
            raise DockerError(f"container {name} exited with code {c.state.exit_code}: {logs(name, 5)}")
        if time.monotonic() > deadline:
            raise DockerError(f"container {name} did not start within {timeout:.0f}s")
        time.sleep(0.1)


# -- images layer --
# Calls made by envctl.images (load, get, registry, disk, extract). Streaming ones (docker load /
# save, helper containers fed on stdin) use the docker CLI through subprocess: python-on-whales
# has no stdin streaming.

import subprocess  # noqa: E402 (this section is appended; the module above imports it locally)

HELPER_IMAGE = "debian:bookworm-slim"  # for work inside volumes: present wherever envctl builds images


def _cli(argv: list[str], *, what: str | None = None, check: bool = True,
         input: bytes | None = None, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(["docker", *argv], capture_output=True, timeout=timeout, input=input)
    except FileNotFoundError:
        raise EngineUnavailable("the docker client is not installed") from None
    out = subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(errors="replace"),
                                      proc.stderr.decode(errors="replace"))
    if check and out.returncode != 0:
        err = out.stderr.strip()
        if "Cannot connect to the Docker daemon" in err:
            raise EngineUnavailable(err.splitlines()[-1])
        raise DockerError(f"'docker {what or ' '.join(argv[:4])}' failed (exit {out.returncode}): {err[-300:]}")
    return out


def image_id_or_none(ref: str) -> str | None:
    """The image id ``ref`` resolves to, or None when there is no such image."""
    out = _cli(["image", "inspect", "--format", "{{.Id}}", ref], check=False)
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def image_repo_tags(ref: str) -> tuple[str, ...]:
    out = _cli(["image", "inspect", "--format", "{{join .RepoTags \"\\n\"}}", ref], check=False)
    return tuple(t for t in out.stdout.split() if t) if out.returncode == 0 else ()


def image_repo_digests(ref: str) -> tuple[str, ...]:
    """``repo@sha256:...`` entries of an image (empty for images never pulled or pushed)."""
    out = _cli(["image", "inspect", "--format", "{{join .RepoDigests \"\\n\"}}", ref], check=False)
    return tuple(t for t in out.stdout.split() if t) if out.returncode == 0 else ()


def tag_image(ref: str, tag: str) -> None:
    """``docker tag ref tag``; DockerError naming both when it fails."""
    _cli(["tag", ref, tag], what=f"tag {ref} {tag}")


def remove_images_quietly(refs: list[str]) -> list[str]:
    """Remove each image (not forced); returns those removed. Failures are ignored."""
    return [r for r in refs if _cli(["image", "rm", r], check=False).returncode == 0]


def dangling_image_ids(*, label: str | None = None) -> list[str]:
    argv = ["images", "--filter", "dangling=true", "--no-trunc", "--format", "{{.ID}}"]
    if label:
        argv[3:3] = ["--filter", f"label={label}"]
    return _cli(argv, check=False).stdout.split()


def docker_root_dir() -> str | None:
    """The engine's data root (``DockerRootDir``), or None when the engine cannot be asked."""
    try:
        out = _cli(["info", "--format", "{{.DockerRootDir}}"], check=False)
    except EngineUnavailable:
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def load_process() -> subprocess.Popen[bytes]:
    """A ``docker load`` process reading an archive on stdin (the caller streams, checks and waits)."""
    return subprocess.Popen(["docker", "load"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def save_process(ref: str) -> subprocess.Popen[bytes]:
    """A ``docker save ref`` process writing the archive to stdout."""
    return subprocess.Popen(["docker", "save", ref], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def pull_lines(ref: str) -> Iterator[str]:
    """``docker pull ref``, yielding its progress lines; DockerError with the engine's last line on failure."""
    try:
        for _, line in docker.image.pull(ref, stream_logs=True):  # type: ignore[misc,union-attr]
            yield line.decode(errors="replace").rstrip()
    except DockerException as exc:
        err = (exc.stderr or str(exc)).strip().splitlines()
        raise DockerError(f"docker pull {ref} failed: {err[-1] if err else 'unknown error'}") from None


def volume_exists(name: str) -> bool:
    return _cli(["volume", "inspect", name], check=False).returncode == 0


def volume_create(name: str, labels: dict[str, str]) -> None:
    argv = ["volume", "create"]
    for k, v in labels.items():
        argv += ["--label", f"{k}={v}"]
    _cli([*argv, name], what=f"volume create {name}")


def helper_run(volumes: dict[str, str], argv: list[str], *, timeout: float = 120) -> tuple[int, str]:
    """Run ``argv`` in a throwaway helper container with named volumes mounted ({volume: path}).

    Returns (exit code, stdout); DockerError when the container cannot be started.
    """
    mounts = [a for v, p in volumes.items() for a in ("-v", f"{v}:{p}")]
    out = _cli(["run", "--rm", "--network", "none", *mounts, HELPER_IMAGE, *argv], check=False, timeout=timeout)
    if out.returncode == 125:
        raise DockerError(f"could not start a helper container from {HELPER_IMAGE}: {out.stderr.strip()[-300:]}",
                          f"make sure {HELPER_IMAGE} is present ('envctl images build' or scripts/docker-engine.sh)")
    return out.returncode, out.stdout


def helper_stdin_process(volumes: dict[str, str], argv: list[str]) -> subprocess.Popen[bytes]:
    """A helper container with named volumes mounted, reading stdin (e.g. a tar stream to unpack)."""
    mounts = [a for v, p in volumes.items() for a in ("-v", f"{v}:{p}")]
    return subprocess.Popen(["docker", "run", "-i", "--rm", "--network", "none", *mounts, HELPER_IMAGE, *argv],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


# -- memory: what containers really use (the capacity plan, envctl.plan) -----------------------------

@dataclass(frozen=True)
class ContainerMemory:
    """One container's labels, memory limit (bytes, 0: none) and whether it runs: one inspect for all."""

    id: str
    name: str
    labels: dict[str, str]
    limit: int
    running: bool


def container_memory() -> list[ContainerMemory]:
    """Every container on the engine (envctl's or not), read with one ``docker ps`` and one ``docker
    inspect`` (not one inspect per container: a pool of 16 instances has ~50)."""
    import json

    ids = _cli(["ps", "-aq", "--no-trunc"], what="ps").stdout.split()
    if not ids:
        return []
    out = _cli(["container", "inspect", *ids], what="container inspect", check=False)  # one gone since: the rest
    try:
        raw = json.loads(out.stdout or "[]")
    except ValueError:
        raise DockerError(f"'docker container inspect' printed no JSON: {out.stderr.strip()[-300:]}") from None
    return [ContainerMemory(c["Id"], c.get("Name", "").lstrip("/"), (c.get("Config") or {}).get("Labels") or {},
                            int((c.get("HostConfig") or {}).get("Memory") or 0),
                            bool((c.get("State") or {}).get("Running"))) for c in raw]


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


def memory_use(running: list[str]) -> tuple[dict[str, int], str]:
    """Resident bytes of each running container id: read from the cgroups when the engine is local
    (microseconds; found by the container ids, so a remote DOCKER_HOST's containers are never found
    here), else from one ``docker stats --no-stream`` for all of them (~2 s). Returns ({id: bytes},
    "cgroup" | "stats"); a container gone meanwhile is left out."""
    if not running:
        return {}, ""
    local = {cid: _cgroup_use(cid) for cid in running}
    if all(v is not None for v in local.values()):
        return {k: v for k, v in local.items() if v is not None}, "cgroup"
    try:
        stats = docker.stats(containers=running)
    except (DockerException, NoSuchContainer):
        try:  # one of them was removed between the listing and the read: all running ones instead
            stats = docker.stats()
        except DockerException as exc:
            raise DockerError(f"'docker stats' failed: {(exc.stderr or '').strip()[-300:]}") from None
    wanted = set(running)
    return {s.container_id: int(s.memory_used) for s in stats if s.container_id in wanted}, "stats"
