"""``docker pull`` with progress, failing fast when the registry cannot be reached.

Before pulling, the registry host of the reference is resolved and a TCP connection to it is
tried with a short timeout, so an offline host or a blocked registry costs seconds, not the
engine's long retry loop, and the caller can fall through to the next source.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Callable

from python_on_whales import DockerException, docker

from envctl.errors import FetchError

DOCKER_HUB = "registry-1.docker.io"


@dataclass(frozen=True)
class PullResult:
    ref: str
    image_id: str
    digest: str | None  # "repo@sha256:..." when the registry reported one


def registry_host(ref: str) -> str:
    """Registry host of an image reference: ``ghcr.io/x/y:1`` -> ghcr.io, ``mysql:8.1`` -> Docker Hub."""
    first, sep, _ = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return DOCKER_HUB


def check_reachable(host: str, timeout: float = 5.0) -> None:
    name, _, port = host.partition(":")
    try:
        with socket.create_connection((name, int(port or 443)), timeout=timeout):
            return
    except OSError as exc:
        raise FetchError(f"registry {host} is unreachable ({exc})", "falling back to the next source; "
                         "pick a tarball mirror with --mirror NAME") from exc


def pull(ref: str, *, progress: Callable[[str], None] | None = None, timeout: float = 5.0) -> PullResult:
    """Pull ``ref``; ``progress`` gets docker's progress lines. Raises FetchError when it cannot."""
    check_reachable(registry_host(ref), timeout)
    try:
        for _, line in docker.image.pull(ref, stream_logs=True):  # type: ignore[misc]
            if progress:
                progress(line.decode(errors="replace").rstrip())
        image = docker.image.inspect(ref)
    except DockerException as exc:
        err = (exc.stderr or str(exc)).strip().splitlines()
        raise FetchError(f"docker pull {ref} failed: {err[-1] if err else 'unknown error'}",
                         "falling back to the next source") from exc
    return PullResult(ref, image.id, image.repo_digests[0] if image.repo_digests else None)
