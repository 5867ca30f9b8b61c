"""Golden images and user snapshots of site copies (``docker commit`` after a clean stop).

Each works on an :class:`~envctl.instance.Instance`; declared volumes are captured too
(:func:`envctl.provision.docker.commit`).

- *golden*: the pristine, configured state of a site for one flavor and public URL. Spares and
  recreates boot from it already configured. Tag ``envctl-golden/<site>-<service>:<key>`` where
  ``key`` hashes the base image ids, the public URL and the rendered configure steps, so a change
  of any of them makes a new golden instead of reusing a stale one.
- *named snapshots*: any state a user wants back later (e.g. tree-search agents that backtrack):
  ``envctl-snap/<site>-<service>:<instance>-<name>``.
Images carry labels with site, service, flavor, public URL and the state's fingerprint.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass

from envctl.errors import UsageError
from envctl.healthchecks.fingerprint import Fingerprint
from envctl.instance import Instance
from envctl.provision import docker as dk
from envctl.provision.local import Copy


def golden_key(inst: Instance, site: str) -> str:
    s = inst.catalog.site(site)
    backend = inst.backend
    r = backend.renderer(site, "x")
    h = hashlib.sha256()
    h.update(backend.settings.flavor.encode() + b"\0" + r("{public_url}").encode())
    for svc, image in sorted(backend.images(site).items()):
        h.update(svc.encode() + b"\0" + (dk.image_id(image) if dk.image_exists(image) else image).encode())
    for step in s.steps(backend.settings.flavor):
        # container names differ per copy; the rendered public values are what matters
        h.update(json.dumps([a.replace(r.containers.get(step.service or s.entry, ""), "") for a in r.argv(step.run)]).encode())
    return h.hexdigest()[:12]


def _tag(repo: str, site: str, service: str, tag: str) -> str:
    return f"{repo}/{site.replace('_', '-')}-{service.replace('_', '-')}:{tag}"


def golden_tags(inst: Instance, site: str, key: str | None = None) -> dict[str, str]:
    key = key or golden_key(inst, site)
    return {svc: _tag("envctl-golden", site, svc, key) for svc in inst.catalog.site(site).services_for(inst.flavor)}


def golden_images(inst: Instance, site: str) -> tuple[dict[str, str] | None, str]:
    """(service -> golden image, key) when a golden exists for this site/flavor/URL, else (None, "")."""
    key = golden_key(inst, site)
    tags = golden_tags(inst, site, key)
    if all(dk.image_exists(t) for t in tags.values()):
        return tags, key
    return None, ""


def golden_fingerprint(tag: str) -> Fingerprint | None:
    for img in dk.images(golden=tag.rsplit(":", 1)[1]):
        raw = (img.config.labels or {}).get("envctl.fingerprint")
        if raw:
            return Fingerprint.from_json(raw)
    return None


def _stop_commit_start(inst: Instance, copy: Copy, tags: dict[str, str], labels: dict[str, str],
                       restart: bool = True) -> None:
    """Clean stop (each service's own stop command first), commit every container with its volumes' contents,
    start again."""
    inst.backend.stop_copy(copy)
    for svc, c in copy.containers.items():
        dk.commit(c, tags[svc], {**labels, "envctl.service": svc})
    if restart:
        inst.backend.start_copy(copy)


def commit_golden(inst: Instance, copy: Copy, fp: Fingerprint, *, restart: bool = True) -> str:
    """Stop ``copy`` cleanly and commit it as the site's golden state; returns the key."""
    key = golden_key(inst, copy.site)
    tags = golden_tags(inst, copy.site, key)
    labels = {"envctl.golden": key, "envctl.site": copy.site, "envctl.flavor": inst.flavor,
              "envctl.public_url": inst.backend.renderer(copy.site, copy.slot)("{public_url}"),
              "envctl.fingerprint": fp.to_label(), "envctl.created": f"{time.time():.0f}"}
    _stop_commit_start(inst, copy, tags, labels, restart)
    return key


_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


def snapshot_tags(inst: Instance, site: str, name: str) -> dict[str, str]:
    if not _NAME.match(name):
        raise UsageError(f"invalid snapshot name '{name}'", "use lower-case letters, digits, '.', '_' and '-'")
    return {svc: _tag("envctl-snap", site, svc, f"{inst.name}-{name}")
            for svc in inst.catalog.site(site).services_for(inst.flavor)}


def commit_snapshot(inst: Instance, copy: Copy, name: str, fp: Fingerprint) -> dict[str, str]:
    tags = snapshot_tags(inst, copy.site, name)
    labels = {"envctl.snapshot": name, "envctl.instance": inst.name, "envctl.site": copy.site,
              "envctl.flavor": inst.flavor,
              "envctl.public_url": inst.backend.renderer(copy.site, copy.slot)("{public_url}"),
              "envctl.fingerprint": fp.to_label(), "envctl.created": f"{time.time():.0f}"}
    _stop_commit_start(inst, copy, tags, labels)
    return tags


@dataclass
class SnapshotInfo:
    name: str
    kind: str  # golden | snapshot
    site: str
    service: str
    image: str
    flavor: str
    public_url: str
    fingerprint: str
    created: str
    size_mb: float


def list_snapshots(instance: str, site: str | None = None) -> list[SnapshotInfo]:
    """Golden images (any instance) and the named snapshots of ``instance``."""
    out = []
    for kind, label in (("golden", "golden"), ("snapshot", "snapshot")):
        for img in dk.images_labelled(f"envctl.{label}"):
            lb = img.config.labels or {}
            if kind == "snapshot" and lb.get("envctl.instance") != instance:
                continue
            if site and lb.get("envctl.site") != site:
                continue
            raw = lb.get("envctl.fingerprint")
            fp = Fingerprint.from_json(raw).digest if raw else ""
            for tag in img.repo_tags or [img.id[:19]]:
                out.append(SnapshotInfo(lb.get(f"envctl.{label}", ""), kind, lb.get("envctl.site", ""),
                                        lb.get("envctl.service", ""), tag, lb.get("envctl.flavor", ""),
                                        lb.get("envctl.public_url", ""), fp[:12], lb.get("envctl.created", ""),
                                        round(img.size / 1e6, 1)))
    return sorted(out, key=lambda s: (s.site, s.kind, s.name, s.service))


def remove_snapshot(instance: str, name: str, site: str | None = None) -> list[str]:
    removed = [s.image for s in list_snapshots(instance, site) if s.name == name]
    if not removed:
        raise UsageError(f"no snapshot named '{name}'", "see 'envctl snapshot list'")
    for tag in removed:
        dk.remove_image(tag)
    return removed

