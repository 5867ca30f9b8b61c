"""Login state around resets: where it goes, how a reset renews it, and the copies kept with snapshots.

Resets renew login files with ``auth`` (over HTTP where the site declares ``login.http``: no browser);
a ready copy's files are made before it is listed ready (staged), and moved into place when it is
routed; a snapshot keeps the files of its instant (its sessions are in it) to put back on restore.
"""
from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from pathlib import Path
from typing import Iterator

from envctl.auth import Target, combo_of, login_combos, login_sites, state_name
from envctl.auth.files import login_order, write_private
from envctl.auth.check import ProbeSpec
from envctl.auth.httplogin import probe_state
from envctl.errors import NoBrowser
from envctl.instance import Instance
from envctl.paths import disk_full, is_disk_full
from envctl.routing.table import RoutingTable


@dataclass(frozen=True)
class Logins:
    """Where resets write login state, and the catalog a detached worker must load."""

    auth_dir: Path
    catalog_path: str | None = None

    def staged(self, site: str, slot: str) -> Path:
        """Pre-made login files of a ready copy, moved into ``auth_dir`` when it is routed."""
        return self.auth_dir / ".spares" / f"{site}-{slot}"

    def stash(self, site: str, name: str) -> Path:
        """The login files kept with snapshot ``name`` of ``site``."""
        return self.auth_dir / ".snapshots" / f"{site}-{name}"


def renew(inst: Instance, logins: Logins, sites: list[str], *, out_dir: Path | None = None,
          headers: dict[str, str] | None = None, table: RoutingTable | None = None, pairs: bool = True) -> None:
    """Renew login state files for ``sites`` (into ``out_dir``, through ``headers``); ``pairs=False``: only each
    site's own file (pairs are then composed from the single files: :func:`compose_pairs`).

    Sites whose login is a plain form post (catalog ``login.http``) are renewed over HTTP, with no
    browser; Chromium is started only for files touching a site that needs it."""
    with_login = [s for s in sites if inst.catalog.site(s).login]
    if not with_login:
        return
    table = table or inst.routing.table()
    up = tuple(s for s in inst.routing.sites_up(table) if inst.catalog.site(s).login) if pairs else ()
    target = Target(inst.catalog, inst.settings.deployment, Path(out_dir or logins.auth_dir), inst.flavor, up,
                    tuple(sorted({**inst.front.own_headers(), **(headers or {})}.items())))
    login_sites(target, with_login, http=True)


def renew_or_note(inst: Instance, logins: Logins, sites: list[str], *, pairs: bool = True) -> str:
    """:func:`renew`; on a machine without a browser, why the files were not renewed ('' when they were)."""
    try:
        renew(inst, logins, sites, pairs=pairs)
        return ""
    except NoBrowser as exc:  # a lab host: the sites are pristine, their login files not renewed
        return f"login files not renewed: {str(exc).splitlines()[0]}"


def compose_pairs(inst: Instance, logins: Logins, sites: list[str], table: RoutingTable | None = None) -> list[str]:
    """Write every pair file touching ``sites`` (with the other login sites up) from the single-site files in the
    auth dir, no login: their cookies merged in the sites' login order, a later site's cookie replacing an earlier
    one of the same domain, path and name (what one session logging in to both keeps). Returns the sites whose
    pairs could not be composed (a single file missing): they need a login."""
    catalog = inst.catalog
    up = [s for s in inst.routing.sites_up(table or inst.routing.table()) if catalog.site(s).login]
    lacking: list[str] = []
    for combo in login_combos(catalog, [s for s in sites if catalog.site(s).login], up):
        if len(combo) < 2:
            continue
        singles = [logins.auth_dir / state_name((s,)) for s in login_order(catalog, combo)]
        try:
            parts = [json.loads(f.read_text()) for f in singles]
        except (OSError, ValueError):
            lacking += [s for s in combo if s in sites and s not in lacking]
            continue
        cookies: dict[tuple[str, str, str], Any] = {}
        for part in parts:
            for c in part.get("cookies", []):
                cookies[(c.get("domain", ""), c.get("path", "/"), c.get("name", ""))] = c
        write_private(logins.auth_dir / state_name(combo),
                      {"cookies": list(cookies.values()), "origins": [o for part in parts for o in part.get("origins", [])]})
    return lacking


def install_staged(logins: Logins, site: str, slot: str) -> bool:
    """Move a ready copy's pre-made login files into the auth dir (atomic renames); False if none."""
    staged = logins.staged(site, slot)
    files = sorted(staged.glob("*_state.json")) if staged.is_dir() else []
    for f in files:
        os.replace(f, logins.auth_dir / f.name)
    shutil.rmtree(staged, ignore_errors=True)
    return bool(files)


def drop_staged(logins: Logins, site: str, slot: str) -> None:
    shutil.rmtree(logins.staged(site, slot), ignore_errors=True)


def site_files(folder: Path, site: str) -> list[Path]:
    """The login state files in ``folder`` that log ``site`` in (alone or paired)."""
    if not folder.is_dir():
        return []
    return sorted(f for f in folder.glob("*_state.json") if site in combo_of(f.name))


def stash(logins: Logins, site: str, name: str) -> int:
    """Keep a copy of ``site``'s login files as of snapshot ``name`` (their sessions are in it); how many."""
    with stashing(logins, site, name) as count:
        return count


@contextmanager
def stashing(logins: Logins, site: str, name: str) -> Iterator[int]:
    """Copy ``site``'s login files for snapshot ``name`` into a folder beside its stash *before* the block
    (the capture) runs, and put it in place of the old stash only when the block succeeds; yields how
    many files. A failure on either side leaves the old stash and no part of the new one; a full disk is
    a DiskSpaceError naming it, before anything is captured."""
    dest = logins.stash(site, name)
    staged = dest.with_name(f".{dest.name}.new")
    shutil.rmtree(staged, ignore_errors=True)
    files = site_files(logins.auth_dir, site)
    try:
        if files:
            staged.mkdir(parents=True, mode=0o700)
            for f in files:
                shutil.copyfile(f, staged / f.name)
                os.chmod(staged / f.name, 0o600)
    except BaseException as exc:
        shutil.rmtree(staged, ignore_errors=True)
        if is_disk_full(exc):
            raise disk_full(dest, sum(f.stat().st_size for f in files), what="stashing the login files of the snapshot in",
                            hint="free space there (or give --auth-dir a folder on a bigger disk) and create the "
                                 "snapshot again: nothing was captured") from None
        raise
    try:
        yield len(files)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    shutil.rmtree(dest, ignore_errors=True)
    if files:
        os.replace(staged, dest)


def drop_stash(logins: Logins, site: str, name: str) -> None:
    shutil.rmtree(logins.stash(site, name), ignore_errors=True)


def file_problem(inst: Instance, path: Path, headers: dict[str, str] | None = None) -> str:
    """'' when the state file at ``path`` logs each of its sites in (the upstream expiry probe over HTTP:
    :func:`envctl.auth.httplogin.probe_state`, the one cookie rule envctl has), else what was seen instead."""
    specs = [ProbeSpec.of(inst.catalog, s, inst.settings.deployment) for s in combo_of(path.name)
             if s in inst.catalog.sites and inst.catalog.site(s).login is not None]
    try:
        problems = probe_state(specs, path, {**inst.front.own_headers(), **(headers or {})}, timeout=15)
    except (OSError, ValueError) as exc:
        return f"{path.name}: unreadable ({exc})"
    return "; ".join(problems)


def after_restore(inst: Instance, logins: Logins, site: str, name: str) -> str:
    """Make ``site``'s login files valid for the copy restored from snapshot ``name``: kept | stash | renewed | none.

    A site's session store is part of its state, so a file made before the snapshot is valid again; one
    that no longer logs in (made after it) is replaced by the copy stashed with the snapshot, and only when
    that fails too is the site logged in again."""
    files = site_files(logins.auth_dir, site)
    if not files or inst.catalog.site(site).login is None:
        return "none"
    action = "kept"
    bad = []
    for f in files:
        if not file_problem(inst, f):
            continue
        stashed = logins.stash(site, name) / f.name
        if stashed.is_file() and not file_problem(inst, stashed):
            tmp = f.with_name(f".{f.name}.{os.getpid()}.tmp")
            try:
                shutil.copyfile(stashed, tmp)
                os.chmod(tmp, 0o600)
                os.replace(tmp, f)
            except BaseException as exc:
                tmp.unlink(missing_ok=True)
                if is_disk_full(exc):
                    raise disk_full(f, stashed.stat().st_size) from None
                raise
            action = "stash"
        else:
            bad.append(f.name)
    if bad:
        note = renew_or_note(inst, logins, [site])
        action = "renewed" if not note else "not renewed: no browser on this machine"
    return action


__all__ = ["Logins", "renew", "renew_or_note", "install_staged", "drop_staged", "site_files", "stash", "stashing", "drop_stash",
           "file_problem", "after_restore"]
