"""``docker pull`` with progress, through an optional registry mirror, failing fast when unreachable.

Before pulling, the registry host of the reference is resolved and a TCP connection to it is
tried with a short timeout, so an offline host or a blocked registry costs seconds, not the
engine's long retry loop, and the caller can fall through to the next source.

A registry mirror (``ENVCTL_REGISTRY_MIRROR``, e.g. ``registry.lab:5000``) holds copies of the
upstream repositories under their paths: ``mysql:8.1`` is pulled as
``<mirror>/library/mysql:8.1``, ``ghcr.io/project-osrm/osrm-backend:v5.27.1`` as
``<mirror>/project-osrm/osrm-backend:v5.27.1``; the result is tagged with the upstream reference,
so everything else sees the image under the name the catalog uses. Docker talks plain HTTP only
to mirrors on 127.0.0.0/8 or listed in the engine's ``insecure-registries``.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Callable

from envctl.errors import ChecksumMismatch, DockerError, FetchError, UsageError
from envctl.backends.docker import ENGINE as dk

DOCKER_HUB = "registry-1.docker.io"
MIRROR_ENV = "ENVCTL_REGISTRY_MIRROR"


@dataclass(frozen=True)
class PullResult:
    ref: str  # the upstream reference asked for
    image_id: str
    digest: str | None  # "repo@sha256:..." when the registry reported one
    pulled: str = ""  # the reference actually pulled (the mirror's, when one was used)


def registry_host(ref: str) -> str:
    """Registry host of an image reference: ``ghcr.io/x/y:1`` -> ghcr.io, ``mysql:8.1`` -> Docker Hub."""
    first, sep, _ = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return DOCKER_HUB


def split_ref(ref: str) -> tuple[str | None, str, str]:
    """(registry host or None, repository path, ``:tag`` / ``@digest`` / '')."""
    host = registry_host(ref)
    rest = ref[len(host) + 1:] if host != DOCKER_HUB else ref
    if "@" in rest:
        path, _, digest = rest.partition("@")
        suffix = "@" + digest
    else:
        head, _, last = rest.rpartition("/")
        name, colon, tag = last.partition(":")
        path, suffix = (f"{head}/{name}" if head else name), (f":{tag}" if colon else "")
    return (None if host == DOCKER_HUB else host), path, suffix


def mirror_setting(explicit: str | None = None) -> str | None:
    """The registry mirror to use: ``explicit``, else ``$ENVCTL_REGISTRY_MIRROR``, else None."""
    raw = explicit if explicit is not None else os.environ.get(MIRROR_ENV, "")
    raw = raw.strip().removeprefix("https://").removeprefix("http://").rstrip("/")
    if not raw:
        return None
    from envctl.validate import validate_registry_mirror

    try:
        return validate_registry_mirror(raw, MIRROR_ENV if explicit is None else "--registry-mirror")
    except UsageError:
        raise UsageError(f"registry mirror {raw!r} is not a registry host[:port][/path]",
                         f"set {MIRROR_ENV} (or --registry-mirror) to e.g. registry.lab:5000") from None


def mirror_ref(ref: str, mirror: str) -> str:
    """``ref`` as a copy on ``mirror``: Docker Hub official images get ``library/``, other hosts are dropped."""
    host, path, suffix = split_ref(ref)
    if host is None and "/" not in path:
        path = "library/" + path
    return f"{mirror}/{path}{suffix}"


def check_reachable(host: str, timeout: float = 5.0) -> None:
    name, _, port = host.partition(":")
    try:
        with socket.create_connection((name, int(port or 443)), timeout=timeout):
            return
    except OSError as exc:
        raise FetchError(f"registry {host} is unreachable ({exc})", "falling back to the next source; "
                         "pick a tarball mirror with --mirror NAME") from exc


def pull(ref: str, *, mirror: str | None = None, progress: Callable[[str], None] | None = None,
         timeout: float = 5.0, pinned: str | None = None) -> PullResult:
    """Pull ``ref`` (from ``mirror`` when given, then tagged ``ref``); ``progress`` gets docker's lines.

    ``pinned`` (``repo@sha256:...`` or ``sha256:...``, the digest ``images.lock`` holds for a reference
    without one) makes it a pull by that digest: the engine verifies the content, so a mirror or a moved
    tag cannot hand over another image; one that does not hold the pinned digest is refused
    (ChecksumMismatch) and nothing is tagged. Raises FetchError when it cannot.
    """
    want = digest_of(pinned) if pinned and "@" not in ref else None
    by_digest = repository(ref)
    asked = f"{by_digest}@{want}" if want else ref
    actual = mirror_ref(asked, mirror) if mirror else asked
    host = mirror.split("/")[0] if mirror else registry_host(ref)
    check_reachable(host, timeout)
    try:
        for line in dk.pull_lines(actual):
            if progress:
                progress(line)
        image_id = dk.image_id_or_none(actual)
        if image_id is None:
            raise DockerError(f"docker pull {actual} reported success but the image is not there")
    except DockerError as exc:
        where = f"mirror {mirror}" if mirror else f"registry {host}"
        if want and ("manifest unknown" in exc.message or "not found" in exc.message):
            raise ChecksumMismatch(f"{where} has no {by_digest}@{want}, the digest images.lock pins for {ref}: it serves "
                                   "another image under that name, or none; refused, nothing pulled or tagged",
                                   "if upstream really changed the image, remove its entry from images.lock and retry"
                                   ) from None
        via = f" (mirror {mirror} for {ref})" if mirror else ""
        raise FetchError(f"{exc.message}{via}", "falling back to the next source") from exc
    repo = actual.partition("@")[0] if "@" in actual else split_ref(actual)[1]
    digests = dk.image_repo_digests(image_id)
    ours = next((d for d in digests if d.partition("@")[0].endswith(repo)), None)
    digest = ours or (digests[0] if digests else None)
    if want and ours and digest_of(ours) != want:  # the engine checks a pull by digest; this is a second look
        raise ChecksumMismatch(f"{actual} has digest {digest_of(digest)}, but images.lock pins {want} for {ref}; refused",
                               "if upstream really changed the image, remove its entry from images.lock and retry")
    if actual != ref and "@" not in ref:
        try:
            dk.tag_image(image_id, ref)  # the upstream name, which the catalog and 'docker run' use
        except DockerError as exc:
            raise FetchError(exc.message, "falling back to the next source") from exc
    return PullResult(ref, image_id, digest, actual)


def repository(ref: str) -> str:
    """``ref`` without its tag or digest: ``mysql:8.1`` -> mysql, ``ghcr.io/a/b:1`` -> ghcr.io/a/b."""
    host, path, _ = split_ref(ref)
    return f"{host}/{path}" if host else path


def digest_of(value: str | None) -> str | None:
    """The content digest (``sha256:...``) of ``repo@sha256:...`` or of a bare digest."""
    if not value:
        return None
    return value.rpartition("@")[2] or None
