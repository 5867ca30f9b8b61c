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
from python_on_whales.exceptions import NoSuchContainer

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
        pull="never",
    )


@_wrap
def containers(**labels: str) -> list[Container]:
    """All containers (running or not) carrying every given envctl label (``site="shopping"``)."""
    filters = [("label", f"{LABEL}.{k}={v}") for k, v in labels.items()] or [("label", f"{LABEL}.instance")]
    for attempt in range(5):
        try:
            return docker.container.list(all=True, filters=filters)
        except NoSuchContainer:
            # listed, then removed (e.g. by a background replenisher) before it was inspected
            if attempt == 4:
                raise
    return []


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
        return 0, out or ""
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
def inspect(name: str | Container) -> Container | None:
    try:
        return docker.container.inspect(name)
    except NoSuchContainer:
        return None


@_wrap
def logs(name: str | Container, tail: int = 30) -> str:
    try:
        return docker.container.logs(name, tail=tail)
    except NoSuchContainer:
        return ""


def stream_logs(name: str, follow: bool = True) -> Iterator[str]:
    for _source, chunk in docker.container.logs(name, follow=follow, stream=True):
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
def networks(**labels: str) -> list[Any]:
    filters = [("label", f"{LABEL}.{k}={v}") for k, v in labels.items()]
    return docker.network.list(filters=filters)


@_wrap
def remove_network(name: str) -> None:
    if _network_exists(name):
        docker.network.remove(name)


def commit(container: str | Container, tag: str, labels: dict[str, str]) -> str:
    """Commit a container to an image with labels (python-on-whales' commit has no --change)."""
    import json
    import subprocess

    name = container if isinstance(container, str) else container.name
    argv = ["docker", "commit", "--pause=false"]
    for k, v in labels.items():
        argv += ["--change", f"LABEL {k}={json.dumps(v)}"]
    proc = subprocess.run([*argv, name, tag], capture_output=True, text=True)
    if proc.returncode != 0:
        raise DockerError(f"'docker commit {name} {tag}' failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
    return proc.stdout.strip()


@_wrap
def images(**labels: str) -> list[Any]:
    filters = [("label", f"{LABEL}.{k}={v}") for k, v in labels.items()] or [("label", f"{LABEL}.golden")]
    return docker.image.list(filters=filters)


@_wrap
def remove_image(ref: str) -> None:
    docker.image.remove(ref, force=True)


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
