"""Reset tiers (DESIGN.md §5): spare swap, app endpoint, recreate, none — each ends verified.

*Verified* means: every health probe passes through the public URL, and the copy's fingerprint
equals the site's pristine fingerprint. On a mismatch a reset escalates to the next tier
(spare/endpoint/none -> recreate) and says so.

Spares are whole site copies booted from the golden image, verified through the front proxy
(``X-Envctl-Backend`` addresses one copy on the real public port, Host header and all), logged in,
and only then listed as ready in the proxy's state. A swap only rewrites the proxy's routing table
and moves the spare's pre-made login files into place; the dirty copy is removed and a new spare
booted by a detached ``envctl _replenish`` process, so the caller does not wait for it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import requests

from envctl.errors import EnvctlError, NotReady, ResetFailed, UsageError
from envctl.healthchecks.probes import ProbeResult, run_probe
from envctl.healthchecks.wait import wait_for
from envctl.locks import lock_dir, locked
from envctl.provision import docker as dk
from envctl.provision import proxy
from envctl.provision.local import Copy, LocalBackend, mask
from envctl.state import snapshots
from envctl.state.fingerprint import Fingerprint, diff, take

if TYPE_CHECKING:
    from envctl.lab import Lab

TIERS = ("spare", "endpoint", "recreate", "none")
Progress = Callable[[str, str, str], None]


def _noop(*_: str) -> None:
    pass


@dataclass
class ResetResult:
    site: str
    ok: bool
    tier: str  # the tier that produced the verified state
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)
    escalations: list[str] = field(default_factory=list)
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["seconds"] = round(self.seconds, 4)
        d["phases"] = {k: round(v, 4) for k, v in self.phases.items()}
        return d


# -- probing and verifying one copy -------------------------------------------------------------

def _header(lab: "Lab", backend: LocalBackend, copy: Copy, service: str) -> dict[str, str]:
    site = lab.catalog.site(copy.site)
    ports = site.services[service].ports
    if ports is None or service not in copy.containers:
        return {}
    public = backend.settings.deployment.port(ports.public)
    return {proxy.BACKEND_HEADER: f"{copy.containers[service].name}:{ports.container_port(public)}"}


def probe_copy(lab: "Lab", backend: LocalBackend, copy: Copy) -> tuple[bool, list[ProbeResult]]:
    """The site's probes against one copy, through the proxy, on the public URL."""
    site = lab.catalog.site(copy.site)
    d = backend.settings.deployment
    results = []
    for p in site.health.probes:
        svc = p.service or site.entry
        results.append(run_probe(p, d.url(site, svc), headers=_header(lab, backend, copy, svc)))
    return all(r.ok for r in results), results


def wait_copy_healthy(lab: "Lab", backend: LocalBackend, copy: Copy, progress: Progress = _noop) -> None:
    site = lab.catalog.site(copy.site)

    def check() -> tuple[bool, list[ProbeResult]]:
        for c in copy.containers.values():
            live = dk.inspect(c.name)
            if live is None or not live.state.running:
                raise NotReady(f"{copy.site}: container {c.name} stopped while booting: {mask(site, dk.logs(c.name, 10))}")
        return probe_copy(lab, backend, copy)

    progress(copy.site, "wait", f"waiting for copy {copy.slot} to pass its probes")
    ok, results = wait_for(check, timeout=site.health.timeout, cancel=lab.cancel)
    if not ok:
        bad = next(r for r in results if not r.ok)
        raise NotReady(f"{copy.site}: copy {copy.slot} failed probe '{bad.name}': {bad.detail}")


def pristine_of(lab: "Lab", site: str) -> Fingerprint | None:
    state = proxy.read_state(lab.instance)
    raw = state.pristine.get(site) if state else None
    return Fingerprint.from_json(raw) if raw else None


def verify(lab: "Lab", site: str, backend: LocalBackend | None = None, copy: Copy | None = None) -> dict[str, Any]:
    """Compare the live (or given) copy with the pristine fingerprint; returns ok, digests and differences."""
    backend = backend or lab.backend()
    copy = copy or lab.active_copy(site, backend)
    if copy is None:
        raise UsageError(f"site '{site}' is not up in instance '{lab.instance}'", f"run 'envctl up {site}'")
    expected = pristine_of(lab, site)
    actual = take(lab.catalog, backend.settings.flavor, copy)
    if expected is None:
        return {"site": site, "ok": False, "expected": None, "actual": actual.digest,
                "differences": ["no pristine fingerprint recorded for this site (bring it up fresh or reset it)"]}
    diffs = diff(expected, actual)
    return {"site": site, "ok": expected.digest == actual.digest, "expected": expected.digest,
            "actual": actual.digest, "differences": diffs}


# -- login state -------------------------------------------------------------------------------

def _login(lab: "Lab", sites: list[str], *, out_dir: Path | None = None, headers: dict[str, str] | None = None) -> bool:
    """Renew login state files for ``sites`` (into ``out_dir``, through ``headers``); False if unsupported."""
    with_login = [s for s in sites if lab.catalog.site(s).login]
    if not with_login:
        return True
    try:
        from envctl.auth import login_sites
    except ImportError:
        return False
    login_sites(lab, with_login, out=out_dir, extra_headers=headers or None)
    return True


def _staged_dir(lab: "Lab", site: str, slot: str) -> Path:
    return lab.auth_dir / ".spares" / f"{site}-{slot}"


def _install_staged(lab: "Lab", site: str, slot: str) -> bool:
    """Move a spare's pre-made login files into the auth dir (atomic renames); False if none."""
    staged = _staged_dir(lab, site, slot)
    files = sorted(staged.glob("*_state.json")) if staged.is_dir() else []
    for f in files:
        os.replace(f, lab.auth_dir / f.name)
    shutil.rmtree(staged, ignore_errors=True)
    return bool(files)


# -- spares ------------------------------------------------------------------------------------

def boot_copy(lab: "Lab", backend: LocalBackend, site: str, *, role: str, progress: Progress = _noop) -> Copy:
    """A new, configured, verified-pristine copy of ``site``, not routed. Makes the golden image if missing."""
    images, key = snapshots.golden_images(lab, site, backend)
    copy = backend.create_copy(site, role=role, images=images, golden=key, progress=progress, cancel=lab.cancel)
    try:
        if not images:
            backend.configure(copy, progress=progress)
        wait_copy_healthy(lab, backend, copy, progress)
        fp = take(lab.catalog, backend.settings.flavor, copy)
        expected = pristine_of(lab, site)
        if expected is not None and expected.digest != fp.digest:
            raise ResetFailed(f"{site}: a fresh copy is not pristine: {'; '.join(diff(expected, fp)[:3])}",
                              "the golden image is stale: 'envctl snapshot rm golden' and reset again")
        if not images:
            progress(site, "golden", "committing the golden image (clean stop, commit, start)")
            snapshots.commit_golden(lab, backend, copy, fp)
            copy = backend.copies(site)[(site, copy.slot)]
            wait_copy_healthy(lab, backend, copy, progress)
        if expected is None:
            with lab.proxy_state() as st:
                st.pristine.setdefault(site, fp.to_json())
        return copy
    except BaseException:
        backend.remove_copy(copy)
        raise


def _cleanup_strays(lab: "Lab", backend: LocalBackend, site: str) -> list[str]:
    """Remove copies that are neither active nor ready spares (dirty ones, leftovers of a killed boot)."""
    state = proxy.read_state(lab.instance)
    if state is None:
        return []
    keep = {state.active.get(site)} | set(state.spares.get(site, []))
    removed = []
    for (s, slot), c in backend.copies(site).items():
        if slot not in keep:
            backend.remove_copy(c)
            shutil.rmtree(_staged_dir(lab, site, slot), ignore_errors=True)
            removed.append(slot)
    return removed


def replenish(lab: "Lab", site: str, want: int | None = None, progress: Progress = _noop) -> list[str]:
    """Remove dirty copies and boot spares until ``want`` (default: the instance's setting) are ready.

    Holds the site's spare lock; if another process holds it, returns at once (it is doing the job).
    """
    backend = lab.backend()
    if want is not None:  # an explicit number is the new setting: background refills keep it
        with lab.proxy_state() as st:
            st.wanted[site] = want
    try:
        ctx = locked(f"spare.{lab.instance}.{site}", wait=False)
        ctx.__enter__()
    except EnvctlError:
        return []
    try:
        _cleanup_strays(lab, backend, site)
        state = proxy.read_state(lab.instance)
        if want is None:
            want = state.wanted.get(site, 0) if state else 0
        booted = []
        while len((proxy.read_state(lab.instance) or proxy.ProxyState()).spares.get(site, [])) < want:
            _cleanup_strays(lab, backend, site)  # resets since the last pass left dirty copies
            copy = boot_copy(lab, backend, site, role="spare", progress=progress)
            headers = _header(lab, backend, copy, lab.catalog.site(site).entry)
            staged = _staged_dir(lab, site, copy.slot)
            staged.mkdir(parents=True, exist_ok=True, mode=0o700)
            if lab.catalog.site(site).login and not _login(lab, [site], out_dir=staged, headers=headers):
                shutil.rmtree(staged, ignore_errors=True)
            with lab.proxy_state() as st:
                st.spares.setdefault(site, []).append(copy.slot)
            progress(site, "spare", f"spare {copy.slot} ready")
            booted.append(copy.slot)
        _cleanup_strays(lab, backend, site)
        return booted
    finally:
        ctx.__exit__(None, None, None)


def spawn_replenish(lab: "Lab", sites: list[str]) -> subprocess.Popen | None:
    """Replenish in a detached process that outlives the caller (its log: <lock dir>/replenish-<inst>.log)."""
    if not sites:
        return None
    log = open(lock_dir() / f"replenish-{lab.instance}.log", "ab")
    argv = [sys.executable, "-m", "envctl", "_replenish", "--instance", lab.instance, "--auth-dir", str(lab.auth_dir), *sites]
    env = dict(os.environ)
    if lab.catalog_path:
        env["ENVCTL_CATALOG"] = str(lab.catalog_path)
    return subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True, env=env)


# -- the tiers ---------------------------------------------------------------------------------

def _swap_to_spare(lab: "Lab", backend: LocalBackend, site: str,
                   phases: dict[str, float]) -> tuple[str, Copy, str] | None:
    """Route the site to its first ready spare: one read and one write of the proxy's table.

    Returns (dirty slot, the new active copy, pristine fingerprint JSON), or None when no spare is ready.
    A spare that died after it was marked ready is caught by the verification that follows.
    """
    t = time.monotonic()
    spec = lab.catalog.site(site)
    d = backend.settings.deployment
    with lab.proxy_state() as st:
        ready = st.spares.get(site, [])
        if not ready:
            return None
        slot = ready[0]
        names = {svc: backend.container_name(site, svc, slot) for svc in spec.services_for(backend.settings.flavor)}
        dirty = st.active.get(site, "")
        for svc, name in names.items():
            ports = spec.services[svc].ports
            if ports is not None:
                public = d.port(ports.public)
                route = st.routes.get(str(public))
                st.routes[str(public)] = proxy.Route(name, ports.container_port(public), route.allow if route else "")
        st.active[site] = slot
        st.spares[site] = ready[1:]
        pristine = st.pristine.get(site, "")
    phases["swap"] = time.monotonic() - t
    return dirty, Copy(site, slot, dict(names)), pristine  # type: ignore[arg-type]


def _check(lab: "Lab", backend: LocalBackend, copy: Copy, pristine: str, phases: dict[str, float]) -> str:
    """'' when ``copy`` (routed) passes its probes on the public URL and matches ``pristine``, else why not."""
    t = time.monotonic()
    try:
        ok, results = lab.probe(copy.site, backend)
        if not ok:
            bad = next(r for r in results if not r.ok)
            return f"probe '{bad.name}' failed: {bad.detail}"
        if not pristine:
            return "no pristine fingerprint recorded"
        expected = Fingerprint.from_json(pristine)
        actual = take(lab.catalog, backend.settings.flavor, copy)
        return "" if actual.digest == expected.digest else "fingerprint differs: " + "; ".join(diff(expected, actual)[:3])
    finally:
        phases["verify"] = time.monotonic() - t


def _endpoint(lab: "Lab", backend: LocalBackend, site: str, phases: dict[str, float]) -> None:
    spec = lab.catalog.site(site)
    t = time.monotonic()
    url = backend.settings.deployment.url(spec) + (spec.reset.endpoint or "")
    token = spec.settings.get("reset_token", "")
    try:
        resp = requests.post(url, data={"token": token}, timeout=60)
    except requests.RequestException as exc:
        raise ResetFailed(f"{site}: reset endpoint unreachable: {exc}") from None
    phases["endpoint"] = time.monotonic() - t
    # Errors come back with HTTP 200 too ("Error: Invalid token"): the body decides.
    if spec.reset.success_text and spec.reset.success_text not in resp.text:
        raise ResetFailed(f"{site}: reset endpoint answered {resp.status_code}: {mask(spec, resp.text.strip())[:200]}")


def _recreate(lab: "Lab", backend: LocalBackend, site: str, phases: dict[str, float], progress: Progress) -> str:
    # The spare lock keeps replenishers' cleanup away from this copy while it is neither active nor spare.
    with locked(f"spare.{lab.instance}.{site}", timeout=lab.catalog.site(site).health.timeout * 2):
        t = time.monotonic()
        copy = boot_copy(lab, backend, site, role="active", progress=progress)
        phases["boot"] = time.monotonic() - t
        t = time.monotonic()
        with lab.proxy_state() as st:
            dirty = st.active.get(site, "")
        lab._route(copy, backend)
        phases["swap"] = time.monotonic() - t
    return dirty


def _verified(lab: "Lab", backend: LocalBackend, site: str, phases: dict[str, float]) -> str:
    """'' when the active copy passes its probes and matches the pristine fingerprint, else why not."""
    t = time.monotonic()
    ok, results = lab.probe(site, backend)
    if not ok:
        bad = next(r for r in results if not r.ok)
        phases["verify"] = time.monotonic() - t
        return f"probe '{bad.name}' failed: {bad.detail}"
    v = verify(lab, site, backend)
    phases["verify"] = time.monotonic() - t
    return "" if v["ok"] else "fingerprint differs: " + "; ".join(v["differences"][:3])


def reset_site(lab: "Lab", site: str, *, tier: str | None = None, wait: bool = True,
               progress: Progress = _noop, replenish_async: bool = True) -> ResetResult:
    spec = lab.catalog.site(site)
    if tier is not None and tier not in TIERS:
        raise UsageError(f"unknown tier '{tier}'", f"choose one of {', '.join(TIERS)}")
    start = time.monotonic()
    phases: dict[str, float] = {}
    escalations: list[str] = []
    first = tier or spec.reset.tier
    chain = [first] if first == "recreate" else [first, "recreate"]
    backend = lab.backend()
    with locked(f"reset.{lab.instance}.{site}", wait=wait):
        for t in chain:
            try:
                dirty = None
                if t == "spare":
                    swapped = _swap_to_spare(lab, backend, site, phases)
                    if swapped is None:
                        escalations.append("spare: no spare ready")
                        progress(site, "escalate", "no spare ready; recreating")
                        continue
                    dirty, copy, pristine = swapped
                    why = _check(lab, backend, copy, pristine, phases)
                else:
                    if t == "endpoint":
                        _endpoint(lab, backend, site, phases)
                    elif t == "recreate":
                        dirty = _recreate(lab, backend, site, phases, progress)
                    why = _verified(lab, backend, site, phases)
                if why:
                    escalations.append(f"{t}: {why}")
                    progress(site, "escalate", f"{t} did not verify ({why}); escalating")
                    continue
                tl = time.monotonic()
                # New copies need new login state (pre-made for spares); the endpoint restores listings,
                # not sessions, and 'none' changes nothing, so their login files stay valid.
                if t == "recreate" or (t == "spare" and not _install_staged(lab, site, copy.slot)):
                    _login(lab, [site])
                phases["login"] = time.monotonic() - tl
                if replenish_async:
                    spawn_replenish(lab, [site])
                elif dirty:
                    _cleanup_strays(lab, backend, site)
                return ResetResult(site, True, t, time.monotonic() - start, phases, escalations)
            except EnvctlError as exc:
                escalations.append(f"{t}: {exc}")
                progress(site, "escalate", f"{t} failed: {str(exc).splitlines()[0]}")
        return ResetResult(site, False, chain[-1], time.monotonic() - start, phases, escalations,
                           escalations[-1] if escalations else "no tier worked")
