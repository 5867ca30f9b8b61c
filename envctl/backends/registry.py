"""A Docker registry (HTTP API v2) as the Swarm backend uses it: where images reach every node.

Goldens and named snapshots are committed on the node a copy runs on and pushed here, so a copy can boot
from them on any node; ``images build/get`` results are pushed here from the manager. This client asks the
registry what it holds (a manifest, an image's config and labels, the repositories and tags) and deletes
a manifest (``snapshot rm``; the registry must allow deletes). Plain HTTP: the registry is the lab's own,
on its private network (Debian's ``docker-registry``), and every node's engine trusts it as insecure.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import requests

from envctl.errors import DockerError

MANIFESTS = ", ".join(("application/vnd.docker.distribution.manifest.v2+json",
                       "application/vnd.oci.image.manifest.v1+json"))


def split(ref: str) -> tuple[str, str]:
    """``repo:tag`` -> (repo, tag); the tag defaults to ``latest``."""
    name, _, tag = ref.rpartition(":")
    if not name or "/" in tag:
        return ref, "latest"
    return name, tag


@dataclass(frozen=True)
class Stored:
    """An image the registry holds: its reference, manifest digest, image id (its config's digest), labels, size."""

    ref: str
    digest: str
    image_id: str
    labels: dict[str, str]
    size: int


class Registry:
    """The registry at ``address`` (``host:port``)."""

    def __init__(self, address: str, timeout: float = 15.0) -> None:
        self.address = address
        self.timeout = timeout
        self.session = requests.Session()

    def _get(self, path: str, **headers: str) -> requests.Response:
        url = f"http://{self.address}/v2/{path}"
        try:
            return self.session.get(url, headers=headers, timeout=self.timeout)
        except requests.RequestException as exc:
            raise DockerError(f"the swarm's registry at {self.address} did not answer ({type(exc).__name__})",
                              "check ENVCTL_SWARM_REGISTRY and that this machine reaches it") from None

    def alive(self) -> bool:
        try:
            return self._get("").status_code in (200, 401)
        except DockerError:
            return False

    def manifest(self, ref: str) -> tuple[str, dict[str, Any]] | None:
        """(digest, manifest) of ``ref`` (``repo:tag``), None when the registry has no such image."""
        repo, tag = split(ref)
        r = self._get(f"{repo}/manifests/{tag}", Accept=MANIFESTS)
        if r.status_code == 404:
            return None
        if r.status_code != 200:
            raise DockerError(f"the swarm's registry answered {r.status_code} for {ref}: {r.text[:200]}")
        return r.headers.get("Docker-Content-Digest", ""), r.json()

    def stored(self, ref: str) -> Stored | None:
        """What the registry holds under ``ref`` (labels read from its config blob), None when nothing."""
        found = self.manifest(ref)
        if found is None:
            return None
        digest, manifest = found
        config = manifest.get("config") or {}
        image_id = str(config.get("digest", ""))
        repo, _ = split(ref)
        labels: dict[str, str] = {}
        if image_id:
            blob = self._get(f"{repo}/blobs/{image_id}")
            if blob.status_code == 200:
                try:
                    labels = dict((json.loads(blob.content).get("config") or {}).get("Labels") or {})
                except ValueError:
                    labels = {}
        size = sum(int(layer.get("size", 0)) for layer in manifest.get("layers") or [])
        return Stored(ref, digest, image_id, labels, size)

    def repositories(self) -> list[str]:
        """Every repository, page by page (the registry caps a page at 1000 and links the next one)."""
        out: list[str] = []
        path = "_catalog?n=1000"
        while path:
            r = self._get(path)
            if r.status_code != 200:
                break
            out += list(r.json().get("repositories") or [])
            nxt = r.links.get("next", {}).get("url", "")
            path = nxt.split("/v2/", 1)[1] if "/v2/" in nxt else ""
        return out

    def tags(self, repo: str) -> list[str]:
        r = self._get(f"{repo}/tags/list")
        return list(r.json().get("tags") or []) if r.status_code == 200 else []

    def delete(self, ref: str) -> bool:
        """Delete the manifest ``ref`` points at; False when there was none."""
        found = self.manifest(ref)
        if found is None:
            return False
        repo, _ = split(ref)
        try:
            r = self.session.delete(f"http://{self.address}/v2/{repo}/manifests/{found[0]}", timeout=self.timeout)
        except requests.RequestException as exc:
            raise DockerError(f"the swarm's registry at {self.address} did not answer ({type(exc).__name__})") from None
        if r.status_code not in (202, 404):
            raise DockerError(f"the swarm's registry refused to delete {ref} ({r.status_code})",
                              "enable deletes in its config (storage.delete.enabled: true)")
        return r.status_code == 202


__all__ = ["Registry", "Stored", "split"]
