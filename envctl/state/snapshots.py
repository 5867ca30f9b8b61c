"""Golden images and user snapshots of site copies (``docker commit``, declared volumes included).

Each works on an :class:`~envctl.instance.Instance`; declared volumes are captured too
(the backend's commit). Two ways to get one consistent instant of a copy:

- *clean stop* (:func:`commit_golden`): each service's stop command, ``docker stop``, commit, start.
  The golden image is made so, on a fresh copy nobody uses yet: every spare and recreate then boots
  from a cleanly shut-down state, with no crash recovery on its boot path.
- *freeze* (:func:`capture_live`, named snapshots of a live site): ``docker pause`` every container of
  the copy (cgroup freezer), commit them and copy their volumes, unpause. That is the state a power
  cut would leave, which the databases recover from through their WAL / redo log; the site keeps its
  connections, and requests arriving meanwhile wait in the kernel's accept queue instead of failing.
  The fingerprint is taken before and after; when a write slipped in between, it is done once more,
  and if that too races with writes it falls back to the clean stop, so the label is always right.
  A site whose service declares a ``stop`` command in the catalog (GitLab's ``gitlab-ctl stop``) says
  its state is safe to boot only after that command: it keeps the clean stop.

- *golden*: the pristine, configured state of a site for one flavor and public URL. Spares and
  recreates boot from it already configured. Tag ``envctl-golden/<site>-<service>:<key>`` where
  ``key`` hashes the flavor, the base image ids, the public URL, the rendered configure steps and the
  in-place save steps, so a change of any of them makes a new golden instead of reusing a stale one.
- *named snapshots*: any state a user wants back later (e.g. tree-search agents that backtrack):
  ``envctl-snap/<site>-<service>:<instance>-<name>``.
Images carry labels with site, service, flavor, public URL and the state's fingerprint.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Callable

from envctl.backends.base import Copy
from envctl.errors import EnvctlError, UsageError
from envctl.healthchecks.fingerprint import Fingerprint
from envctl.instance import Instance


def golden_key(inst: Instance, site: str) -> str:
    s = inst.catalog.site(site)
    r = inst.copies.renderer(site, "x")
    h = hashlib.sha256()
    h.update(inst.flavor.encode() + b"\0" + r("{public_url}").encode())
    for svc, image in sorted(inst.copies.images_of(site).items()):
        h.update(svc.encode() + b"\0" + (inst.images.info(image).id if inst.images.exists(image) else image).encode())
    # The in-place tier's save steps run before a golden is committed: the golden carries their result.
    for step in (*s.steps(inst.flavor), *(s.reset.inplace.save if s.reset.inplace else ())):
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
    if all(inst.images.exists(t) for t in tags.values()):
        return tags, key
    return None, ""


def golden_fingerprint(inst: Instance, site: str, key: str) -> Fingerprint | None:
    """The fingerprint the golden images of ``key`` are labelled with; None when they are gone."""
    tags = golden_tags(inst, site, key)
    if not all(inst.images.exists(t) for t in tags.values()):
        return None
    return labelled_fingerprint(inst, tags)


def commit_golden(inst: Instance, copy: Copy, fp: Fingerprint) -> Copy:
    """Stop ``copy`` cleanly and commit it as the site's golden state; the copy as it runs again."""
    key = golden_key(inst, copy.site)
    tags = golden_tags(inst, copy.site, key)
    labels = {"envctl.golden": key, "envctl.site": copy.site, "envctl.flavor": inst.flavor,
              "envctl.public_url": inst.copies.renderer(copy.site, copy.slot)("{public_url}"),
              "envctl.fingerprint": fp.to_label(), "envctl.created": f"{time.time():.0f}"}
    return inst.copies.commit(copy, tags, labels)


_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


def validate_name(name: str) -> str:
    if not _NAME.fullmatch(name):  # fullmatch: '$' would let a trailing newline through
        shown = repr(name[:60] + ("…" if len(name) > 60 else ""))
        raise UsageError(f"invalid snapshot name {shown}", "use lower-case letters, digits, '.', '_' and '-'")
    return name


def saved_state(name: str) -> str:
    """The name snapshot ``name`` is saved under inside a copy (an in-place ``{state}``: an SQL identifier)."""
    return f"snap_{re.sub(r'[^a-z0-9_]', '_', name)[:24]}_{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def save_in_place(inst: Instance, copy: Copy, name: str, progress: Callable[[str, str, str], None]) -> bool:
    """Save the routed ``copy``'s state inside it as snapshot ``name`` (the site's in-place steps, requests held
    meanwhile), so that a restore without a warm copy can put it back in place; False when the site cannot."""
    inplace = inst.catalog.site(copy.site).reset.inplace
    if inplace is None or not inplace.has:
        return False
    progress(copy.site, "snapshot", "saving the state inside the copy too (an in-place restore)")
    with inst.front.hold(copy.site):
        inst.copies.save_inplace(copy, progress, state=saved_state(name))
    return True


def snapshot_tags(inst: Instance, site: str, name: str) -> dict[str, str]:
    validate_name(name)
    return {svc: _tag("envctl-snap", site, svc, f"{inst.name}-{name}")
            for svc in inst.catalog.site(site).services_for(inst.flavor)}


def _snapshot_labels(inst: Instance, copy: Copy, name: str, fp: Fingerprint) -> dict[str, str]:
    return {"envctl.snapshot": name, "envctl.instance": inst.name, "envctl.site": copy.site,
            "envctl.flavor": inst.flavor,
            "envctl.public_url": inst.copies.renderer(copy.site, copy.slot)("{public_url}"),
            "envctl.fingerprint": fp.to_label(), "envctl.created": f"{time.time():.0f}"}


def needs_clean_stop(inst: Instance, site: str) -> str:
    """Why ``site`` cannot be frozen for a snapshot ('' when it can): a service of it declares a stop
    command, i.e. its state is bootable only after that command (not after a crash)."""
    spec = inst.catalog.site(site)
    for svc in spec.services_for(inst.flavor):
        if spec.services[svc].stop:
            return f"its service '{svc}' declares a clean stop command ({' '.join(spec.services[svc].stop or ())})"
    return ""


@dataclass
class LiveCapture:
    tags: dict[str, str]
    fingerprint: Fingerprint
    method: str  # freeze | stop
    attempts: int
    timings: dict[str, float] = field(default_factory=dict)
    note: str = ""


def capture_live(inst: Instance, copy: Copy, name: str,
                 progress: Callable[[str, str, str], None] = lambda *_: None, *,
                 clean_stop: bool = False) -> LiveCapture:
    """Snapshot the routed ``copy`` as ``name`` while it serves (freeze; see the module's docstring).

    The caller holds the site's reset lock (no swap meanwhile). Fingerprint, freeze + commit, unpause,
    fingerprint again: equal means no write came between, so the label describes the image; else once
    more, then the clean stop."""
    site = copy.site
    tags = snapshot_tags(inst, site, name)
    drop_leftovers(inst, site)
    timings: dict[str, float] = {}
    why = "clean stop asked for" if clean_stop else needs_clean_stop(inst, site)
    t = time.monotonic()
    if save_in_place(inst, copy, name, progress):  # before the commit: copies booted from the snapshot hold it too
        timings["save"] = time.monotonic() - t
    t = time.monotonic()
    fp = inst.checks.fingerprint(copy)
    timings["fingerprint"] = time.monotonic() - t
    if not why:
        for attempt in (1, 2):
            progress(site, "snapshot", f"freeze, commit, unpause (attempt {attempt})")
            inst.copies.capture(copy, tags, _snapshot_labels(inst, copy, name, fp), timings)
            t = time.monotonic()
            after = inst.checks.fingerprint(copy)
            timings["fingerprint"] += time.monotonic() - t
            if after.digest == fp.digest:
                return LiveCapture(tags, fp, "freeze", attempt, timings)
            progress(site, "snapshot", "a write came in during the capture; capturing again")
            fp = after
        why = "writes came in during two captures in a row"
    progress(site, "snapshot", f"clean stop, commit, start ({why})")
    t = time.monotonic()
    fp = inst.checks.fingerprint(copy)
    inst.copies.commit(copy, tags, _snapshot_labels(inst, copy, name, fp))
    timings["stop_commit_start"] = time.monotonic() - t
    return LiveCapture(tags, fp, "stop", 1, timings, f"clean stop: {why}")


def drop_leftovers(inst: Instance, site: str) -> list[str]:
    """Remove the untagged snapshot images of ``site`` in ``inst``: a capture whose process was killed while the
    engine committed (the engine finishes a commit its client left), or a snapshot's former images once it was taken
    again. The caller holds the site's reset lock, so no capture of the site is in flight. Their ids."""
    gone = []
    for img in inst.images.labelled("envctl.snapshot"):
        if not img.tags and img.labels.get("envctl.instance") == inst.name and img.labels.get("envctl.site") == site:
            try:
                inst.images.remove(img.id)
                gone.append(img.id)
            except EnvctlError:  # still in use (a warm copy booted from a former snapshot): its removal's business
                continue
    return gone


def labelled_fingerprint(inst: Instance, tags: dict[str, str]) -> Fingerprint | None:
    """The fingerprint a golden's or a snapshot's images were labelled with."""
    for tag in tags.values():
        raw = inst.images.info(tag).labels.get("envctl.fingerprint")
        if raw:
            return Fingerprint.from_json(raw)
    return None


def exists(inst: Instance, tags: dict[str, str]) -> bool:
    return all(inst.images.exists(t) for t in tags.values())


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


def list_snapshots(inst: Instance, site: str | None = None) -> list[SnapshotInfo]:
    """Golden images (any instance) and the named snapshots of ``inst`` (running or not)."""
    out = []
    for kind, label in (("golden", "golden"), ("snapshot", "snapshot")):
        for img in inst.images.labelled(f"envctl.{label}"):
            img_id, img_tags, lb, size = img.id, img.tags, img.labels, img.size
            if kind == "snapshot" and lb.get("envctl.instance") != inst.name:
                continue
            if kind == "golden" and lb.get("envctl.snapshot"):
                continue  # a snapshot of a copy booted from a golden keeps that copy's labels: it is no golden
            if site and lb.get("envctl.site") != site:
                continue
            raw = lb.get("envctl.fingerprint")
            fp = Fingerprint.from_json(raw).digest if raw else ""
            for tag in img_tags or [img_id[:19]]:
                out.append(SnapshotInfo(lb.get(f"envctl.{label}", ""), kind, lb.get("envctl.site", ""),
                                        lb.get("envctl.service", ""), tag, lb.get("envctl.flavor", ""),
                                        lb.get("envctl.public_url", ""), fp[:12], lb.get("envctl.created", ""),
                                        round(size / 1e6, 1)))
    return sorted(out, key=lambda s: (s.site, s.kind, s.name, s.service))


def remove_snapshot(inst: Instance, name: str, site: str | None = None) -> list[str]:
    removed = [s.image for s in list_snapshots(inst, site) if s.name == name]
    if not removed:
        raise UsageError(f"no snapshot named '{name}'", "see 'envctl snapshot list'")
    for tag in removed:
        inst.images.remove(tag)
    return removed

