"""Warm copies of named snapshots: ``snapshot restore`` as a route swap.

``snapshot create SITE NAME --warm`` boots a copy from the snapshot's images, checks that it passes its
probes and that its fingerprint is the one the images are labelled with, and lists it in the routing
table (``warm: {site: {name: [slots]}}``) without routing it, like a spare. ``snapshot restore`` then
only rewrites the routing table; the replaced copy is removed and the next warm copy booted by a
detached ``envctl snapshot _warm`` process, so repeated restores stay fast. Without a warm copy a
restore boots one from the images (the cold path) and swaps it in the same way.

A site's session store is part of its state (the mini sites and Postmill keep sessions in the
database), so the browser's login state from before the snapshot is valid again after a restore.
The login files are checked with one HTTP request each (the upstream expiry probe, cookies from the
file); a file that no longer logs in (made after the snapshot) is replaced by the copy stashed when
the snapshot was taken, and only when that fails too is the site logged in again (a browser run).

Warm copies carry ``envctl.role=warm``. One being booted is not in the table yet: its booter holds the
site's warm lock (:meth:`Instance.warm_lock`), and cleanups keep warm-role copies while it is held.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

import requests

from envctl.auth.check import ProbeSpec
from envctl.auth.files import combo_of
from envctl.errors import EnvctlError, NoBrowser, ResetFailed
from envctl.healthchecks.fingerprint import Fingerprint, mismatch
from envctl.healthchecks.wait import wait_for
from envctl.instance import WARM_ROLE, Instance
from envctl.locks import Busy, locked
from envctl.provision import docker as dk
from envctl.provision.local import Copy
from envctl.state import reset as resets
from envctl.state import workers
from envctl.state.reset import Logins
from envctl.state.snapshots import snapshot_fingerprint, snapshot_tags

Progress = Callable[[str, str, str], None]
WARM_CMD = b"_warm"  # argv marker of the detached warm-copy booter


def _noop(*_: str) -> None:
    pass


# -- login state kept with a snapshot -------------------------------------------------------------

def stash_dir(logins: Logins, site: str, name: str) -> Path:
    return logins.auth_dir / ".snapshots" / f"{site}-{name}"


def site_files(folder: Path, site: str) -> list[Path]:
    """The login state files in ``folder`` that log ``site`` in (alone or paired)."""
    if not folder.is_dir():
        return []
    return sorted(f for f in folder.glob("*_state.json") if site in combo_of(f.name))


def stash_logins(logins: Logins, site: str, name: str) -> int:
    """Keep a copy of ``site``'s login files as of the snapshot (their sessions are in it); returns how many."""
    dest = stash_dir(logins, site, name)
    shutil.rmtree(dest, ignore_errors=True)
    files = site_files(logins.auth_dir, site)
    if not files:
        return 0
    dest.mkdir(parents=True, mode=0o700)
    for f in files:
        shutil.copyfile(f, dest / f.name)
        os.chmod(dest / f.name, 0o600)
    return len(files)


def drop_stash(logins: Logins, site: str, name: str) -> None:
    shutil.rmtree(stash_dir(logins, site, name), ignore_errors=True)


def session_problem(inst: Instance, path: Path, headers: dict[str, str] | None = None) -> str:
    """'' when the state file at ``path`` logs each of its sites in (the upstream expiry probe, made
    with one HTTP request per site carrying the file's cookies), else what was seen instead."""
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return f"{path.name}: unreadable ({exc})"
    for site in combo_of(path.name):
        if site not in inst.catalog.sites or inst.catalog.site(site).login is None:
            continue
        spec = ProbeSpec.of(inst.catalog, site, inst.settings.deployment)
        u = urlsplit(spec.url)
        host, upath = u.hostname or "", u.path or "/"
        jar = "; ".join(
            f"{c['name']}={c['value']}" for c in state.get("cookies", [])
            if (host == str(c.get("domain", "")).lstrip(".") or host.endswith("." + str(c.get("domain", "")).lstrip(".")))
            and upath.startswith(str(c.get("path") or "/")))
        try:
            r = requests.get(spec.url, headers={**({"Cookie": jar} if jar else {}), **(headers or {})}, timeout=15)
        except requests.RequestException as exc:
            return f"{site}: {spec.url} did not answer ({type(exc).__name__})"
        if spec.keyword and spec.keyword not in r.text:
            return f"{site}: keyword {spec.keyword!r} not on {spec.url} (landed on {r.url})"
        if not spec.keyword and r.url != spec.url:
            return f"{site}: {spec.url} redirected to {r.url}"
    return ""


def restore_logins(inst: Instance, logins: Logins, site: str, name: str) -> str:
    """Make ``site``'s login files valid for the restored copy: kept | stash | renewed | none."""
    files = site_files(logins.auth_dir, site)
    if not files or inst.catalog.site(site).login is None:
        return "none"
    action = "kept"
    bad = []
    for f in files:
        if not session_problem(inst, f):
            continue
        stashed = stash_dir(logins, site, name) / f.name
        if stashed.is_file() and not session_problem(inst, stashed):
            tmp = f.with_name(f".{f.name}.{os.getpid()}.tmp")
            shutil.copyfile(stashed, tmp)
            os.chmod(tmp, 0o600)
            os.replace(tmp, f)
            action = "stash"
        else:
            bad.append(f.name)
    if bad:
        try:
            resets.login(inst, logins, [site])
            action = "renewed"
        except NoBrowser:
            action = "not renewed: no browser on this machine"
    return action


# -- booting and keeping warm copies ----------------------------------------------------------------

def want(inst: Instance, site: str, name: str, keep: bool = True) -> list[str]:
    """Record that snapshot ``name`` of ``site`` wants a warm copy (``keep``) or none; returns the slots of
    warm copies it had (the caller removes them when ``keep`` is False)."""
    with inst.routing() as table:
        by_name = table.warm.setdefault(site, {})
        slots = by_name.pop(name, []) if not keep else list(by_name.get(name, []))
        if keep:
            by_name.setdefault(name, [])
        if not by_name:
            table.warm.pop(site, None)
    return slots


def drop(inst: Instance, site: str, name: str | None = None) -> list[str]:
    """Forget and remove the warm copies of snapshot ``name`` (every snapshot when None); their slots."""
    with inst.routing() as table:
        by_name = table.warm.get(site, {})
        names = [name] if name is not None else list(by_name)
        slots = [slot for n in names for slot in by_name.pop(n, [])]
        if not by_name:
            table.warm.pop(site, None)
    copies = inst.backend.copies(site) if slots else {}
    for slot in slots:
        if (site, slot) in copies:
            inst.backend.remove_copy(copies[(site, slot)])
    return slots


def _images_current(copy: Copy, tags: dict[str, str]) -> bool:
    """Whether ``copy`` runs the images the snapshot's tags name now (not those of a replaced snapshot)."""
    try:
        return all(dk.image_id(tags[svc]) == c.image for svc, c in copy.containers.items())
    except EnvctlError:
        return False


def boot_warm(inst: Instance, site: str, name: str, progress: Progress = _noop) -> Copy | None:
    """Boot a copy from snapshot ``name``, check probes and fingerprint, list it as warm (not routed).

    The caller holds the site's warm lock. None when the snapshot stopped wanting one meanwhile."""
    tags = snapshot_tags(inst, site, name)
    expected = snapshot_fingerprint(tags)
    copy = inst.boot_copy(site, role=WARM_ROLE, images=tags, golden=f"snapshot:{name}", progress=progress)
    try:
        inst.wait_healthy(copy, progress)
        why = mismatch(expected, inst.fingerprint(copy)) if expected else ""
        if why:
            raise ResetFailed(f"{site}: a copy booted from snapshot '{name}' does not match it: {why}",
                              f"take the snapshot again: envctl snapshot create {site} {name}")
        with inst.routing() as table:
            slots = table.warm.get(site, {}).get(name)
            if slots is None or not _images_current(copy, tags):
                inst.backend.remove_copy(copy)
                return None
            slots.append(copy.slot)
        progress(site, "warm", f"warm copy {copy.slot} of '{name}' ready")
        return copy
    except BaseException:
        inst.backend.remove_copy(copy)
        raise


def _cleanup(inst: Instance, logins: Logins, site: str) -> None:
    """Remove ``site``'s stray copies under its spare lock: a recreate, a snapshot restore or a replenisher
    holds that lock while its copy is neither active nor a spare, and would lose it to this cleanup. A
    holder that keeps it too long cleans up after itself; this one is skipped then."""
    try:
        with locked(f"spare.{inst.name}.{site}", timeout=inst.catalog.site(site).health.timeout * 2):
            resets.cleanup_strays(inst, logins, site)
    except Busy:
        pass


def replenish(inst: Instance, logins: Logins, site: str, progress: Progress = _noop) -> list[str]:
    """Remove dirty copies, then boot a warm copy for every snapshot of ``site`` that wants one and has
    none ready. Waits for another booter of the site (it may be booting what is wanted)."""
    _cleanup(inst, logins, site)
    booted = []
    with locked(inst.warm_lock(site), timeout=inst.catalog.site(site).health.timeout * 4):
        while not inst.cancel.is_set():
            table = inst.table()
            todo = [n for n, slots in sorted(table.warm.get(site, {}).items()) if not slots]
            if not todo:
                break
            copy = boot_warm(inst, site, todo[0], progress)
            if copy is None:
                continue
            booted.append(copy.slot)
    _cleanup(inst, logins, site)
    return booted


def spawn(inst: Instance, logins: Logins, site: str) -> subprocess.Popen[bytes]:
    """:func:`replenish` in a detached process that outlives the caller (log: <lock dir>/warm-<inst>.log)."""
    return workers.spawn(["snapshot", WARM_CMD.decode()], inst.name, logins.auth_dir, ["--site", site],
                         log_name="warm", catalog_path=logins.catalog_path)


def warmer_pids(instance: str, sites: list[str] | None = None) -> list[int]:
    """The running warm-copy booters of ``instance`` (of any of ``sites``), found in /proc."""
    return workers.pids(WARM_CMD, instance, sites)


def stop_warmers(instance: str, sites: list[str] | None = None, timeout: float = 20.0) -> list[int]:
    """SIGTERM the booters (the copy being booted is removed as the process unwinds), SIGKILL after ``timeout``."""
    return workers.stop(WARM_CMD, instance, sites, timeout)


# -- restore ------------------------------------------------------------------------------------------

@dataclass
class Restored:
    copy: Copy
    warm: bool  # a warm copy was swapped in (else one was booted: the cold path)
    fingerprint: str
    login: str  # kept | stash | renewed | none
    phases: dict[str, float] = field(default_factory=dict)


def _take_warm(inst: Instance, site: str, name: str) -> Copy | None:
    """Route ``site`` to a ready warm copy of ``name``: one read and one write of the routing table (no
    listing of containers: a warm copy that died meanwhile fails the check that follows)."""
    with inst.routing() as table:
        ready = table.warm.get(site, {}).get(name, [])
        if not ready:
            return None
        slot = ready.pop(0)
        names = inst.route_slot(table, site, slot)
    return Copy(site, slot, dict(names))  # type: ignore[arg-type]  # names address containers


def _check(inst: Instance, copy: Copy, expected: Fingerprint | None, phases: dict[str, float]) -> str:
    """'' when the routed ``copy`` passes its probes on the public URL and has the snapshot's fingerprint."""
    t = time.monotonic()
    try:
        # nginx's old workers may answer a request or two with the previous table right after the reload
        ok, results = wait_for(lambda: inst.probe(copy.site), timeout=10, cancel=inst.cancel)
        if not ok:
            bad = next(r for r in results if not r.ok)
            return f"probe '{bad.name}' failed: {bad.detail}"
        return mismatch(expected, inst.fingerprint(copy)) if expected else ""
    finally:
        phases["verify"] = phases.get("verify", 0.0) + time.monotonic() - t


def restore(inst: Instance, logins: Logins, site: str, name: str, progress: Progress = _noop, *,
            background: bool = True) -> Restored:
    """Make ``site``'s state snapshot ``name``'s: swap in a warm copy if one is ready (else boot one), check
    it, make the login files valid for it. The replaced copy is removed and, when the snapshot wants
    warm copies, the next one booted: by a detached process (``background``) or before returning."""
    tags = snapshot_tags(inst, site, name)
    expected = snapshot_fingerprint(tags)
    phases: dict[str, float] = {}
    with locked(f"reset.{inst.name}.{site}"):
        t = time.monotonic()
        copy = _take_warm(inst, site, name)
        phases["swap"] = time.monotonic() - t
        warm = copy is not None
        if copy is not None:
            why = _check(inst, copy, expected, phases)
            if why:
                progress(site, "escalate", f"the warm copy did not verify ({why}); booting a new one")
                copy, warm = None, False
        if copy is None:
            t = time.monotonic()
            # Booted as a warm-role copy under the warm lock, so no cleanup takes it for a stray before
            # it is routed; a booter that holds the lock now may just be finishing a warm copy of it.
            with locked(inst.warm_lock(site), timeout=inst.catalog.site(site).health.timeout * 4):
                copy = _take_warm(inst, site, name)
                warm = copy is not None
                if copy is None:
                    progress(site, "boot", f"no warm copy of '{name}': booting one from its images")
                    copy = inst.boot_copy(site, role=WARM_ROLE, images=tags, golden=f"snapshot:{name}",
                                          progress=progress)
                    try:
                        inst.wait_healthy(copy, progress)
                    except BaseException:
                        inst.backend.remove_copy(copy)
                        raise
                    with inst.routing() as table:
                        inst.route(table, copy)
            phases["boot"] = time.monotonic() - t
            why = _check(inst, copy, expected, phases)
            if why:
                raise ResetFailed(f"{site}: the copy restored from snapshot '{name}' does not match it: {why}",
                                  f"take the snapshot again: envctl snapshot create {site} {name}")
        t = time.monotonic()
        login = restore_logins(inst, logins, site, name)
        phases["login"] = time.monotonic() - t
        digest = expected.digest if expected else inst.fingerprint(copy).digest
    if background:
        spawn(inst, logins, site)
    else:
        replenish(inst, logins, site, progress)
    return Restored(copy, warm, digest, login, phases)
