"""``Lab``: the Python API behind every envctl command, a thin facade over :class:`Instance`.

A harness can use it directly between episodes::

    from envctl import Lab
    lab = Lab(instance="default")
    lab.up(["shopping", "reddit"], flavor="mini")
    urls = lab.env("webarena")          # {"SHOPPING": "http://127.0.0.1:7770", ...}
    lab.reset(["shopping"])
    lab.down()

The work is done below: :mod:`envctl.instance` (one instance: routing table, copies, probes; the only
user of the backend), :mod:`envctl.state` (bring-up, reset tiers, ready copies, snapshots),
:mod:`envctl.auth` (login state). Leasing isolated instances from a pool is :func:`envctl.leases.lease`.
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

from envctl.auth import Report, Target, check, login_sites
from envctl.auth import login as log_in
from envctl.backends.base import InstanceSettings
from envctl.catalog import Catalog, Renderer, load_catalog
from envctl.errors import (DockerError, EnvctlError, NoSuchInstance, PortInUse, ResetFailed, SiteNotUp,
                           UsageError)
from envctl.healthchecks.probes import ProbeResult
from envctl.healthchecks.wait import gather, wait_for
from envctl.images.build import PROXY_IMAGE, build as build_image, proxy_build
from envctl.instance import Instance, Progress, noop, find_settings, measure
from envctl.locks import locked
from envctl.paths import data_dir, executable_file, usable_dir
from envctl.routing.table import GOLDEN, snapshot_source
from envctl.smoke import SmokeResult, TaskResult, load_task_set, run_smoke
from envctl.smoke.judge import Judge
from envctl.state import capacity, ready, snapshots, tiers
from envctl.state import logins as login_state
from envctl.state.logins import Logins
from envctl.state.create import create as create_snapshot
from envctl.state.restore import restore as restore_snapshot
from envctl.state.tiers import ResetResult, VerifyResult
from envctl.results import (ContainerStatus, DownResult, InstanceInfo, SiteStatus, SnapshotResult,  # noqa: F401
                             Status, UpResult)
from envctl.state.up import SiteResult, check_images, choose_flavor, ensure_site, spares_wanted
from envctl.validate import env_value, validate_duration, validate_host, validate_instance_name, validate_port_offset


TIERS: tuple[str, ...] = tuple(tiers.TIERS)  # the reset tiers envctl has ('envctl reset --tier')


def engine_memory() -> Any:
    """What every envctl copy on the backend uses, measured (``envctl plan``): :func:`envctl.instance.measure`."""
    return measure()


def _clock(when: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))


class Lab:
    """One envctl instance (it need not be running yet), on the backend ``$ENVCTL_BACKEND`` names."""

    def __init__(self, catalog: Catalog | None = None, *, catalog_path: str | None = None,
                 instance: str = "default", auth_dir: str | Path | None = None) -> None:
        self.instance = validate_instance_name(instance)
        self.catalog = catalog or load_catalog(catalog_path)
        self.catalog_path = catalog_path or os.environ.get("ENVCTL_CATALOG")
        if auth_dir:  # every command that takes one writes login files there: refuse a file (or under one) now
            usable_dir(auth_dir, "auth directory", hint="give --auth-dir a folder you can write")
        self.auth_dir = Path(auth_dir) if auth_dir else Path(".auth") if instance == "default" else Path(".auth") / instance
        self.cancel = threading.Event()
        self.login_error = ""
        self._leased: Instance | None = None  # the instance as a lease pool last found it (_leasing)

    # -- the running instance ------------------------------------------------------------------
    def settings(self, *, quick: bool = False) -> InstanceSettings | None:
        """The running instance's settings (its proxy's table or labels), or None if it does not exist (``quick``:
        also None when only the engine could say and it does not answer within a few seconds)."""
        if quick and self._probe("full").engine_problem():
            return find_settings(self.instance, engine=False)
        return find_settings(self.instance)

    def find(self) -> Instance | None:
        return Instance.find(self.catalog, self.instance, cancel=self.cancel)

    def _probe(self, flavor: str) -> Instance:
        """An instance of this name and ``flavor`` on the backend new instances use (nothing is made)."""
        return Instance(self.catalog, InstanceSettings(self.instance, flavor, data_dir=str(data_dir(flavor)),
                                                       backend=Instance.backend_kind()), cancel=self.cancel)

    def data_travels(self) -> bool:
        """Whether a site's data is fetched where its copies boot (a swarm node), not read from this machine."""
        return self._probe("full").images.moves_data

    def data_held(self, sites: list[str], flavor: str) -> dict[str, dict[str, bool]]:
        """Where the data of ``sites`` in ``flavor`` is held: {place (a node, or '' for this machine): {file: held}}."""
        probe = self._probe(flavor)
        items = probe.copies.data_of([s for s in sites if flavor in self.catalog.site(s).flavors])
        return probe.images.held(items) if items else {}

    def running(self) -> Instance:
        """The running instance; NoSuchInstance when there is none."""
        return Instance.get(self.catalog, self.instance, cancel=self.cancel)

    @property
    def logins(self) -> Logins:
        return Logins(self.auth_dir, self.catalog_path)

    def sites_up(self) -> list[str]:
        inst = self.find()
        return inst.routing.sites_up(inst.routing.table()) if inst else []

    # -- up ----------------------------------------------------------------------------------
    def choose_flavor(self, sites: list[str]) -> tuple[str, str]:
        """The flavor a new instance of ``sites`` gets when none is given, and why (:func:`envctl.state.up.choose_flavor`)."""
        return choose_flavor(self.catalog, self.instance, sites)

    def _sites_had(self) -> list[str]:
        """The sites an existing instance has: copies of, running or stopped (a reboot), or routes to (a copy
        removed by hand is still the instance's site, to repair) ([] for none)."""
        inst = self.find()
        if inst is None:
            return []
        had = {s for (s, _) in inst.copies.of()}
        try:
            had.update(inst.routing.sites_up(inst.routing.table()))
        except EnvctlError:  # no running proxy (a reboot stops it): the copies say it
            pass
        return sorted(had)

    def _settings_for_up(self, flavor: str | None, public_host: str | None, bind: str | None, port_offset: int | None,
                         names: list[str], progress: Progress) -> tuple[InstanceSettings, str]:
        """The settings 'up' runs with, and why its flavor when none was given for a new instance (said in progress)."""
        current = self.settings()
        if current is None:
            reason = ""
            if flavor is None:
                flavor, reason = self.choose_flavor(names)
                progress("*", "flavor", f"flavor {flavor}: {reason} (--flavor chooses)")
            return InstanceSettings(self.instance, flavor, public_host or "", bind or "127.0.0.1", port_offset or 0,
                                    "http", str(data_dir(flavor)), Instance.backend_kind()), reason
        wanted = {"flavor": flavor, "public_host": public_host, "bind": bind, "port_offset": port_offset}
        clash = [f"{k}={getattr(current, k)}" for k, v in wanted.items() if v is not None and v != getattr(current, k)]
        if clash:
            raise UsageError(f"instance '{self.instance}' already runs with {', '.join(clash)}",
                             f"run 'envctl down --instance {self.instance}' first, or use another --instance")
        return current, ""

    def _check_ports(self, sites: list[str], inst: Instance) -> list[int]:
        d = inst.settings.deployment
        ports = {d.port(p) for s in sites for svc, p in self.catalog.site(s).public_ports().items()
                 if inst.flavor in self.catalog.site(s).services[svc].flavors}
        for port, holder in inst.front.port_problems(sorted(ports)).items():
            raise PortInUse(f"port {port} on {inst.settings.bind} is in use by {holder}",
                            "stop it, or pass --port-offset N (e.g. --port-offset 100) or another --instance")
        return sorted(ports | set(inst.front.ports()))

    def check_images(self, sites: list[str], flavor: str) -> None:
        """ImageMissing, in one line naming the command that gets or builds them, unless every image of ``sites`` in
        ``flavor`` is on the backend (a swarm: pushed to its registry first)."""
        probe = Instance(self.catalog, InstanceSettings(self.instance, flavor, backend=Instance.backend_kind()))
        names = [n for n in sites if flavor in self.catalog.site(n).flavors]
        probe.images.distribute(sorted({img for n in names for img in probe.copies.images_of(n).values()}))
        check_images(probe, names)

    def _ensure_proxy(self, inst: Instance, ports: list[int], existed: bool, progress: Progress) -> None:
        try:
            if not inst.images.exists(PROXY_IMAGE):
                build_image(proxy_build())
                inst.images.distribute([PROXY_IMAGE])
            if inst.front.ensure(ports, PROXY_IMAGE):
                progress("*", "proxy", f"front proxy on {inst.settings.bind}: ports {', '.join(map(str, ports))}"
                         + (f" ({inst.where()[1]})" if inst.where()[1] else ""))
        except BaseException:
            if not existed:
                inst.remove_network()  # a refused 'up' of a new instance leaves nothing behind
            raise

    def up(self, sites: list[str] | None = None, *, all_sites: bool = False, flavor: str | None = None,
           public_host: str | None = None, bind: str | None = None, port_offset: int | None = None,
           wait: bool = True, login: bool = False, spares: int | None = None,
           progress: Progress = noop) -> UpResult:
        """Bring sites to a healthy, configured, reachable state; check and repair what already runs."""
        start = time.monotonic()
        if sites and all_sites:
            raise UsageError("name sites or pass --all, not both", "e.g. 'envctl up shopping' or 'envctl up --all'")
        had = [] if sites or all_sites else self._sites_had()  # an existing instance: what it has (after a reboot)
        names = self.catalog.resolve(sites or had or None, all_sites=all_sites or not (sites or had))
        if flavor is not None and flavor not in self.catalog.flavors():
            raise UsageError(f"unknown flavor '{flavor}'", f"choose one of {', '.join(self.catalog.flavors())}")
        for value, what in ((public_host, "--public-host"), (bind, "--bind")):
            if value is not None:
                validate_host(value, what)
        if port_offset is not None:
            validate_port_offset(port_offset, [p for n in names for p in self.catalog.site(n).public_ports().values()])
        Instance.check_engine()
        with locked(f"instance.{self.instance}"):
            settings, reason = self._settings_for_up(flavor, public_host, bind, port_offset, names, progress)
            self.catalog.require_flavor(sites if sites and not all_sites else (), settings.flavor)
            lacking = [n for n in names if settings.flavor not in self.catalog.site(n).flavors]
            names = [n for n in names if n not in lacking]
            if not names:
                raise UsageError(f"no site asked for has the flavor '{settings.flavor}'", "see 'envctl sites list'")
            for n in lacking:  # --all or a dependency: the sites this flavor does not have are left out, and said so
                progress(n, "skip", f"no {settings.flavor} flavor: left out (see 'envctl sites show {n}')")
            where = Instance(self.catalog, settings, cancel=self.cancel)
            # where copies boot on other machines (a swarm), the images go where those reach them first
            where.images.distribute(sorted({img for n in names for img in where.copies.images_of(n).values()}), progress)
            check_images(where, names)
            where.copies.prepare_data(names, progress)
            inst, existed = Instance.create(self.catalog, settings, cancel=self.cancel, sites=names)
            try:
                ports = self._check_ports(names, inst)
            except BaseException:
                if not existed:
                    inst.remove_network()
                raise
            self._ensure_proxy(inst, ports, existed, progress)
            done: dict[str, threading.Event] = {n: threading.Event() for n in names}

            def one(name: str) -> SiteResult:
                for dep in self.catalog.site(name).depends_on:
                    if dep in done:
                        done[dep].wait()
                try:
                    return ensure_site(inst, name, wait=wait, progress=progress)
                finally:
                    done[name].set()

            with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
                futures = {n: pool.submit(one, n) for n in names}
                results = dict(zip(futures, gather(futures.values(), self.cancel)))
        result = UpResult(self.instance, settings.flavor, [results[n] for n in names], time.monotonic() - start,
                          flavor_reason=reason)
        if login and result.ok and wait:
            result.login_files = self._seed_logins([s.site for s in result.sites], progress)
            result.login_error = self.login_error
        want, planned = spares_wanted(inst, names, spares)
        if want:
            # Spares are booted by a detached worker: 'up' returns when the active copies are healthy. The plan's
            # sites are re-planned by the worker; '--spares K' sites are not.
            for n, k in want.items():
                inst.routing.want_ready(n, GOLDEN, k, planned=planned.get(n))
            result.spares = want
            result.spares_short = {n: e["why"] for n, e in planned.items() if e["why"]}
            for why in result.spares_short.values():
                progress("*", "spares", f"fewer spares than the catalog wants: {why}")
            boot = [n for n, k in want.items() if k > 0]
            if boot and result.ok:
                progress("*", "spares", "booting spares in the background: "
                         + ", ".join(f"{n} {want[n]}" for n in boot))
                ready.spawn(inst, self.logins, boot)
        return result

    # -- login state -----------------------------------------------------------------------------
    def activity(self, sites: list[str]) -> Any:
        """What reached ``sites`` through the proxy (:class:`envctl.routing.proxy.Activity`), None when it cannot be
        read: compare two readings with ``untouched``/``same_copy`` to know whether a site may have changed."""
        try:
            return self.running().front.activity(sites)
        except EnvctlError:
            return None

    def own_headers(self) -> dict[str, str]:
        """The header that marks envctl's own requests to the sites (probes, logins): not counted as their use."""
        try:
            return self.running().front.own_headers()
        except EnvctlError:
            return {}

    def login(self, sites: list[str] | None = None, *, out: str | Path | None = None,
              max_age: float | None = None) -> dict[str, Path]:
        """Write (or keep, if younger than ``max_age`` seconds and valid) the login state files."""
        self._check_login_output(out)
        return login_sites(self, sites, out=out, max_age=max_age)

    def login_report(self, sites: list[str] | None = None, *, out: str | Path | None = None,
                     check_only: bool = False, max_age: str | float | None = None) -> Report:
        """Log in (or, with ``check_only``, probe the existing files); one result per state file."""
        if isinstance(max_age, str):
            max_age = validate_duration(max_age, "--max-age")
        self._check_login_output(out, write=not check_only)
        if self.settings() is None:
            raise NoSuchInstance(self.instance)
        target = Target.of_lab(self, out)
        if check_only:
            return check(target, sites)
        return log_in(target, sites, max_age=max_age)

    def _check_login_output(self, out: str | Path | None, *, write: bool = True) -> None:
        """Before any browser starts: the folder the files go to is a folder (not a file, not under
        one) and writable, and ``$ENVCTL_CHROMIUM``, when set, is an executable file."""
        usable_dir(out or self.auth_dir, "--out" if out else "auth directory", writable=write,
                   hint="give --out a folder you can write")
        chromium = env_value("ENVCTL_CHROMIUM") if write else None
        if chromium:  # a directory or a file without the x bit: one line, not a launch log per site
            executable_file(chromium, "ENVCTL_CHROMIUM")

    def _seed_logins(self, sites: list[str], progress: Progress) -> list[str]:
        """Seed login state after 'up'; a failure is reported, it does not undo healthy sites."""
        with_login = [s for s in sites if self.catalog.site(s).login]
        if not with_login:
            return []
        progress("*", "login", f"seeding login state for {', '.join(with_login)}")
        try:
            return sorted(login_sites(self, with_login))
        except EnvctlError as exc:
            self.login_error = str(exc)
        except Exception as exc:  # noqa: BLE001 - the browser stack (Playwright driver) failing
            self.login_error = (f"the browser could not run ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
                                "check 'envctl doctor', or pass --no-login and run 'envctl login' where a browser works")
        progress("*", "failed", f"login state: {self.login_error.splitlines()[0]}")
        return []

    # -- state: reset, verify, snapshots ---------------------------------------------------------
    def _up_sites(self, inst: Instance, sites: list[str] | None, all_sites: bool) -> list[str]:
        up = inst.routing.sites_up(inst.routing.table())
        if sites:
            self.catalog.resolve(sites)  # unknown names are a usage error, with a suggestion
            missing = [n for n in sites if n not in up]
            if missing:
                raise UsageError(f"not up in instance '{self.instance}': {', '.join(missing)}", "run 'envctl up' first")
        return [n for n in self.catalog.resolve(sites, all_sites=all_sites or not sites) if n in up]

    def reset(self, sites: list[str] | None = None, *, all_sites: bool = False, tier: str | None = None,
              wait: bool = True, progress: Progress = noop, refill: bool = True,
              cheapest: bool = False) -> list[ResetResult]:
        """Reset sites to their pristine state (fastest tier first), each ending verified. ``cheapest`` (what a lease
        pool asks): when this machine's CPUs are short, a site that can restore in place does so before taking a
        spare, whose refill would boot a whole copy out of the agents' share."""
        if sites:
            self.catalog.resolve(sites)  # a typo is a usage error before anything else
        inst = self.running()
        names = self._up_sites(inst, sites, all_sites)
        # Sites reset side by side: login files pairing two of them (gitlab.reddit_state.json) are
        # made once every site has its final copy, not while the partner is being swapped.
        defer = sum(1 for n in names if self.catalog.site(n).login) > 1
        with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
            futures = [pool.submit(tiers.reset_site, inst, self.logins, n, tier=tier, wait=wait, progress=progress,
                                   refill=refill, defer_login=defer, cheapest=cheapest) for n in names]
            results = gather(futures, self.cancel)  # interrupted: the resets stop at their next wait
        fresh = [r for r in results if r.ok and tiers.renews_login(r.tier) and self.catalog.site(r.site).login]
        if defer and fresh:  # the copies' own files (staged, or a login each), then the pairs composed from them
            t = time.monotonic()
            login = [r.site for r in fresh if r.login != "staged"]
            progress("*", "login", "login files: " + ", ".join(f"{r.site} ({r.login or 'login'})" for r in fresh))
            note = login_state.renew_or_note(inst, self.logins, login, pairs=False) if login else ""
            lacking = login_state.compose_pairs(inst, self.logins, [r.site for r in fresh])
            note = (login_state.renew_or_note(inst, self.logins, lacking) if lacking else "") or note
            for r in fresh:
                r.phases["login"] = time.monotonic() - t
                r.note = note or r.note
        return results

    def refill(self, sites: list[str], progress: Progress = noop) -> list[str]:
        """Remove dirty copies and boot the ready copies ``sites`` keep, retrying what a crowded host makes late
        (what the detached worker runs); the sites that got nothing."""
        return ready.refill_retrying(self.running(), self.logins, sites, progress)

    def verify(self, site: str) -> VerifyResult:
        return tiers.verify(self.running(), site)

    def replenish(self, site: str, want: int | None = None, progress: Progress = noop, *,
                  wait: bool = True) -> list[str]:
        """Boot spares of ``site`` until ``want`` (default: the instance's setting) are ready; returns the
        slots booted. A worker already at it is waited for (``wait=False``: return at once)."""
        self.catalog.site(site)
        inst = self.running()
        if want is not None:  # an explicit number is the new setting ('--spares K'): the plan no longer decides
            inst.routing.want_ready(site, GOLDEN, want)
        return ready.refill(inst, self.logins, site, progress, wait=wait, sources=[GOLDEN])

    def snapshot_create(self, site: str, name: str = "golden", progress: Progress = noop, *, warm: bool = False,
                        clean_stop: bool = False) -> SnapshotResult:
        """Commit the active copy (volumes included) as golden or as a named snapshot.

        A named snapshot freezes the copy for the commit only (the site keeps serving; requests wait,
        none fails), unless ``clean_stop`` or the site's catalog asks for a clean stop (see
        :mod:`envctl.state.snapshots`). Golden images keep the clean stop. ``warm``: also boot a copy
        from the snapshot, verified, and keep it ready so that a restore is a route swap."""
        if name == "golden" and warm:
            raise UsageError("golden has no warm copies: its ready copies are the spares",
                             f"use 'envctl up {site} --spares 1', or name the snapshot")
        snapshots.validate_name(name)  # a bad name is refused before anything runs
        t = time.monotonic()
        made = create_snapshot(self.running(), self.logins, site, name, progress, warm=warm, clean_stop=clean_stop)
        tags, fp, method, attempts, slots, note, timings = (made.tags, made.fingerprint, made.method, made.attempts,
                                                           made.slots, made.note, made.timings)
        return SnapshotResult(site, name, tags, fp.digest, round(time.monotonic() - t, 3),
                              {k: round(v, 3) for k, v in timings.items()}, method, attempts, slots, note=note)

    def snapshot_restore(self, site: str, name: str, progress: Progress = noop, *,
                         background: bool = True) -> SnapshotResult:
        """Make SITE's state the named snapshot's: swap in its warm copy when one is ready, else restore it inside
        the routed copy when that copy holds it (in-place steps), else boot one from the images; verified by probes
        and fingerprint, login files valid; a replaced copy is removed and the next warm copy booted in the
        background (``background``) or before returning (:mod:`envctl.state.restore`)."""
        snapshots.validate_name(name)
        inst = self.running()
        tags = snapshots.snapshot_tags(inst, site, name)
        if not snapshots.exists(inst, tags):
            raise UsageError(f"no snapshot '{name}' of {site} in instance '{self.instance}'", "see 'envctl snapshot list'")
        t = time.monotonic()
        res = restore_snapshot(inst, self.logins, site, name, progress, background=background)
        return SnapshotResult(site, name, tags, res.fingerprint, round(time.monotonic() - t, 3),
                              {k: round(v, 3) for k, v in res.phases.items()}, res.how,
                              warm=[res.copy.slot] if res.warm else [], login=res.login)

    def _handle(self) -> Instance:
        """The instance, running or not: goldens, snapshots and volumes outlive it (what lists and removes them)."""
        return self.find() or Instance(self.catalog, InstanceSettings(self.instance, backend=Instance.backend_kind()),
                                      cancel=self.cancel)

    def snapshots(self, site: str | None = None) -> list[snapshots.SnapshotInfo]:
        return snapshots.list_snapshots(self._handle(), site)

    def snapshot_remove(self, name: str, site: str | None = None) -> list[str]:
        """Remove a named snapshot's images, its warm copies and the login files kept with it."""
        snapshots.validate_name(name)  # as create and restore do, before the engine is asked
        inst = self.find()
        if inst is not None and inst.routing.exists():
            table = inst.routing.table()
            for s in [site] if site else list(table.ready.slots) + list(table.ready.wanted):
                if snapshot_source(name) in table.ready.sources(s):
                    ready.drop(inst, self.logins, s, snapshot_source(name))
        removed = snapshots.remove_snapshot(self._handle(), name, site)
        for s in [site] if site else list(self.catalog.sites):
            login_state.drop_stash(self.logins, s, name)
        return removed

    # -- smoke suite -----------------------------------------------------------------------------
    def smoke(self, task_set: str = "mini", *, sites: list[str] | None = None, agent: str = "reference",
              report_dir: str | Path | None = None, parallel: int = 3,
              progress: Callable[[TaskResult], None] | None = None,
              announce: Callable[[str], None] = lambda _m: None) -> SmokeResult:
        """Seed logins, run the reference (or LLM) agent through ``task_set``, score it, reset between tasks."""
        load_task_set(task_set)  # a missing or malformed task set is named before anything else
        if report_dir:  # so is a report folder that is a file (or under one) or read-only
            usable_dir(report_dir, "report folder", hint="give --report a folder you can write")
        up = self.sites_up()
        if not up:
            raise UsageError(f"instance '{self.instance}' has no site up", "run 'envctl up --flavor mini' first")
        wanted = self.catalog.resolve(sites) if sites else up
        missing = [s for s in wanted if s not in up]
        if missing:
            raise UsageError(f"not up in instance '{self.instance}': {', '.join(missing)}",
                             f"run 'envctl up {' '.join(missing)}'")
        tasks = load_task_set(task_set, sites=wanted)
        with_login = [s for s in wanted if self.catalog.site(s).login]
        if with_login:
            announce(f"seeding login state for {', '.join(with_login)}")
            self.login(with_login)
        env = {**self.env("visualwebarena"), **self.env("webarena")}  # WebArena's WIKIPEDIA (landing URL) wins

        def reset(names: list[str]) -> None:
            bad = [r for r in self.reset(names) if not r.ok]
            if bad:
                raise ResetFailed(f"reset of {', '.join(r.site for r in bad)} failed: {bad[0].error}")

        admin = self.catalog.account_with_role("rest-admin")
        return run_smoke(tasks, env=env, auth_dir=self.auth_dir, reset=reset, sites=wanted, agent=agent,
                         report_dir=Path(report_dir) if report_dir else None, progress=progress,
                         judge=Judge.from_env(), max_parallel=parallel, task_set=task_set,
                         coupled=self.catalog.coupled(), catalog=self.catalog, flavor=self.running().flavor,
                         rest_admin=(admin.username, admin.password) if admin else None)

    # -- probes and status ----------------------------------------------------------------------
    def health(self, sites: list[str] | None = None, *, wait: bool = False) -> dict[str, list[ProbeResult]]:
        inst = self.running()
        names = sites or inst.routing.sites_up(inst.routing.table())
        out = {}
        for n in self.catalog.resolve(names):
            if wait:
                def check(n: str = n) -> tuple[bool, list[ProbeResult]]:
                    return inst.checks.probe(n)

                _, out[n] = wait_for(check, timeout=self.catalog.site(n).health.timeout, cancel=self.cancel)
            else:
                out[n] = inst.checks.probe(n)[1]
        return out

    def status(self) -> Status:
        """Each site's copies, probes and spares. The engine is asked only once it answers a ping within a few
        seconds: a stalled or absent engine leaves what the routing table (through the proxy) and the probes say,
        and which engine did not answer (``Status.engine``), in seconds rather than after the engine's timeout."""
        inst = self.running()
        table = inst.routing.table()
        stalled = inst.engine_problem()
        copies = {} if stalled else inst.copies.of()
        try:
            kills = [] if stalled else inst.oom_kills(time.time() - 86400)
        except EnvctlError:
            kills = []
        rows = []
        for site_name in self.catalog.sites:
            slots = [slot for (s, slot) in copies if s == site_name]
            if stalled and site_name in table.routes.active:
                slots = [table.routes.active[site_name]]  # the routed copy, as the table says (not listed)
            if not slots:
                continue
            site = self.catalog.site(site_name)
            active_slot = table.routes.active.get(site_name)
            routed = active_slot and ((site_name, active_slot) in copies or stalled)
            ok, probes = inst.checks.probe(site_name) if routed else (False, [])
            containers = []
            for slot in slots if not stalled else []:
                cp = copies[(site_name, slot)]
                source = table.ready.source_of(site_name, slot)
                role = ("active" if slot == active_slot else "booting" if source is None else
                        "spare" if source == GOLDEN else "warm")
                for svc, m in cp.members.items():
                    containers.append(ContainerStatus(m.name, svc, slot, role, m.status, m.label("image"),
                                                      m.label("golden") or None,
                                                      round(time.time() - float(m.label("created", "0")), 1)))
            planned = table.ready.planned.get(site_name) or {}
            note = str(planned.get("why") or "") if capacity.short(table, site_name) else ""
            rows.append(SiteStatus(site_name, inst.settings.deployment.url(site) + site.url_path, inst.flavor, ok,
                                   [p.to_dict() for p in probes], containers, len(table.ready.spares(site_name)),
                                   int(planned.get("wanted", table.ready.want(site_name, GOLDEN))), note,
                                   [f"{member} killed by its memory limit (out of memory) at {_clock(when)}"
                                    for site, member, when in kills if site == site_name]))
        s = inst.settings
        rec = table.lease.data
        lease: dict[str, Any] = {k: rec[k] for k in ("pool", "state", "holder", "sites", "expires", "max_seconds")
                                 if k in rec}
        if rec.get("id"):
            lease["id"] = str(rec["id"])[:8] + "…"  # enough to tell leases apart; the id releases it
        return Status(self.instance, s.flavor, s.public_host, s.bind, s.port_offset, rows, lease=lease,
                      backend=s.backend, where="" if stalled else inst.where()[1], engine=stalled)

    # -- down ----------------------------------------------------------------------------------
    def down(self, sites: list[str] | None = None, *, volumes: bool = False) -> DownResult:
        """Remove exactly what envctl made for this instance (by label); all of it when no site is named."""
        Instance.check_engine()
        names = self.catalog.resolve(sites) if sites else None
        ready.stop_workers(self.instance, names)  # a ready copy booting in the background would appear later
        with locked(f"instance.{self.instance}"):
            inst = self._handle()  # what carries its labels is removed even when its proxy and network are gone
            removed, kept = inst.copies.remove_all(names)
            if volumes:
                vols = inst.volumes() if names is None else [v for n in names for v in inst.volumes(n)]
                refused = inst.images.remove_volumes(vols)
                if refused:
                    raise DockerError(
                        "down: could not remove volume" + ("s" if len(refused) > 1 else "") + " "
                        + "; ".join(f"'{v}' ({why})" for v, why in sorted(refused.items()))
                        + f"; the rest of instance '{self.instance}' is removed",
                        "see what still uses it with 'docker ps -a --filter volume=" + sorted(refused)[0]
                        + f"', remove that container, then run 'envctl down --volumes --instance {self.instance}' again")
        return DownResult(self.instance, removed, kept)

    # -- what a lease pool asks of its members (envctl.leases) ---------------------------------------
    def lease_record(self) -> dict[str, Any]:
        """The instance's lease record (kept in its routing table: the engine, not a process, knows who holds it)."""
        return self._leasing().routing.lease_record()

    def write_lease(self, update: Callable[[dict[str, Any]], dict[str, Any] | None]) -> dict[str, Any]:
        """Read-modify-write the lease record (``update`` returns the new one, None to keep it, or raises)."""
        try:
            return self._leasing().routing.write_lease(update)
        except DockerError:  # the instance this Lab last saw is gone or another now: look it up again
            self._leased = None
            return self._leasing().routing.write_lease(update)

    def _leasing(self) -> Instance:
        """The running instance, as last found: its lease record is in the proxy's table, reached over HTTP, so a
        heartbeat goes through while the engine does not answer (a stalled daemon)."""
        if self._leased is None:
            self._leased = self.running()
        return self._leased

    def probe_site(self, site: str) -> tuple[bool, str]:
        """(healthy, why not) of ``site`` on its public URL."""
        ok, results = self.running().checks.probe(site)
        if ok:
            return True, ""
        bad = next(r for r in results if not r.ok)
        return False, f"{bad.name}: {bad.detail or bad.status}"

    def problems(self, sites: list[str]) -> list[str]:
        """Why ``sites`` are not healthy ([] when they are)."""
        return [f"{s}: probe {why}" for s in sites for ok, why in [self.probe_site(s)] if not ok]

    def not_pristine(self, sites: list[str]) -> dict[str, str]:
        """Site -> why it does not verify pristine, for those of ``sites`` that do not (one pass, side by side)."""
        if not sites:
            return {}

        def one(site: str) -> tuple[str, str]:
            try:
                v = self.verify(site)
                return site, "" if v.ok else "; ".join(v.differences[:2]) or "fingerprint differs"
            except EnvctlError as exc:
                return site, str(exc).splitlines()[0]

        with ThreadPoolExecutor(max_workers=len(sites)) as ex:
            return {s: why for s, why in ex.map(one, sites) if why}

    def signals(self, sites: list[str]) -> dict[str, str | None]:
        """Each site's change signal in its routed copy (None: the site declares none, or is not routed): read side by
        side, one step inside each copy. Equal signals at two moments mean its fingerprint's data did not change."""
        inst = self.running()
        table = inst.routing.table()

        def one(site: str) -> str | None:
            copy = inst.routing.active_copy(site, table)
            return inst.checks.changes(copy) if copy is not None else None

        with ThreadPoolExecutor(max_workers=max(1, min(8, len(sites)))) as pool:
            return dict(zip(sites, pool.map(one, sites)))

    def spares_ready(self) -> dict[str, int]:
        """Site -> ready spares, for the sites that keep spares (or have some)."""
        table = self.running().routing.table()
        return {s: len(table.ready.spares(s)) for s in table.sites_up()
                if table.ready.want(s, GOLDEN) or table.ready.spares(s)}

    def keeps_spares(self) -> bool:
        """Whether resets should start a refill worker (only when the instance keeps spares)."""
        try:
            table = self.running().routing.table()
        except EnvctlError:
            return False
        return any(table.ready.want(s, GOLDEN) > 0 for s in table.ready.wanted)

    def ports_free(self, ports: list[int], bind: str) -> bool:
        """Whether this instance could publish ``ports`` (absolute) on ``bind`` now."""
        settings = InstanceSettings(self.instance, bind=bind, backend=Instance.backend_kind())
        return not Instance(self.catalog, settings).front.port_problems(ports)

    def lost(self) -> str:
        """Why the instance cannot serve a holder any more ('' when it can): removed, its node down or drained, a
        routed site's copy gone. What a lease pool asks when a member's probes fail."""
        inst = self.find()
        if inst is None:
            return "instance removed"
        return inst.problem()

    def oom_kills(self, since: float, until: float | None = None) -> list[tuple[str, str, float]]:
        """Site copies killed by their memory limit since ``since`` (Unix time): (site, member, when); [] unknown."""
        try:
            return self.running().oom_kills(since, until)
        except EnvctlError:
            return []

    @staticmethod
    def nodes() -> dict[str, str]:
        """The nodes instances run on and their states (ready, down, drain); {} on one machine."""
        return Instance.node_states()

    def present(self) -> bool:
        """Whether the instance exists and its routing table can be read."""
        inst = self.find()
        return inst is not None and inst.routing.exists()

    def node(self) -> str:
        """The node the instance runs on ('' on one machine)."""
        inst = self.find()
        return inst.where()[0] if inst is not None else ""

    def harness(self, sites: list[str] | None = None, full_reset: str | None = None) -> dict[str, str]:
        """The environment a harness reads: WebArena's and VisualWebArena's names (WebArena's WIKIPEDIA, the landing
        URL, wins), BrowserGym's ``WA_*`` / ``VWA_*`` copies, ``WA_FULL_RESET`` / ``VWA_FULL_RESET`` when
        ``full_reset`` is given; only the variables of ``sites`` when given."""
        keep = None if sites is None else {k for s in sites for b in ("webarena", "visualwebarena")
                                           for k in self.catalog.site(s).env.get(b, {})} | {"DATASET"}
        wa = {k: v for k, v in self.env("webarena").items() if keep is None or k in keep}
        vwa = {k: v for k, v in self.env("visualwebarena").items() if keep is None or k in keep}
        out = {**vwa, **wa}
        out.update({f"WA_{k}": v for k, v in wa.items()})
        out.update({f"VWA_{k}": v for k, v in vwa.items() if k != "DATASET"})
        if full_reset:
            out["WA_FULL_RESET"] = out["VWA_FULL_RESET"] = full_reset
        return out

    # -- env for harnesses ---------------------------------------------------------------------------
    def env(self, benchmark: str = "webarena", settings: InstanceSettings | None = None) -> dict[str, str]:
        """The harness environment variables for ``benchmark`` (WebArena or VisualWebArena names)."""
        if benchmark not in ("webarena", "visualwebarena"):
            raise UsageError(f"unknown benchmark '{benchmark}'", "choose webarena or visualwebarena")
        settings = settings or self.settings()
        if settings is None:
            raise NoSuchInstance(self.instance)
        out: dict[str, str] = {}
        for name, site in self.catalog.sites.items():
            if benchmark in site.benchmarks and settings.flavor in site.flavors:
                out.update(Renderer(self.catalog, name, settings.deployment).env(benchmark))
        if benchmark == "visualwebarena":
            out["DATASET"] = "visualwebarena"
        return {k: v.rstrip("/") for k, v in out.items()}

    # -- debugging -------------------------------------------------------------------------------
    def _active(self, site: str, service: str | None) -> tuple[Instance, Any, str]:
        s = self.catalog.site(site)
        svc = s.entry if service is None else service
        if svc not in s.services:
            raise UsageError(f"site '{site}' has no service '{svc}'", f"services: {', '.join(s.services)}")
        inst = self.running()
        copy = inst.routing.active_copy(site, inst.routing.table())
        if copy is None:
            raise SiteNotUp(site, self.instance)
        if svc not in copy.members:
            raise UsageError(f"site '{site}' has no service '{svc}' in flavor {inst.flavor}",
                             f"services: {', '.join(copy.members)}")
        return inst, copy, svc

    def container(self, site: str, service: str | None = None) -> str:
        """The name of the routed copy's member of ``service`` (the site's entry service by default)."""
        _, copy, svc = self._active(site, service)
        return str(copy.members[svc].name)

    def logs(self, site: str, *, service: str | None = None, tail: int = 100) -> str:
        inst, copy, svc = self._active(site, service)
        return inst.copies.logs(copy, svc, tail)

    def follow_logs(self, site: str, *, service: str | None = None) -> Iterator[str]:
        inst, copy, svc = self._active(site, service)
        return inst.copies.follow(copy, svc)

    def exec(self, site: str, argv: list[str], *, service: str | None = None) -> tuple[int, str]:
        inst, copy, svc = self._active(site, service)
        return inst.copies.exec(copy, svc, argv)

    @classmethod
    def instances(cls, catalog: Catalog | None = None) -> list[InstanceInfo]:
        out = []
        for s, status, ports in Instance.listed():
            lab = cls(catalog, instance=s.name)
            try:
                sites = lab.sites_up()
            except EnvctlError:
                # another process is bringing this instance up or down right now (its proxy runs, its table
                # is not there yet or any more), or its proxy is not one this envctl can read: listed, no sites
                sites, status = [], "unreadable"
            out.append(InstanceInfo(s.name, s.flavor, s.public_host, s.bind, s.port_offset, status,
                                    sites, lab.env("webarena", s), lab.env("visualwebarena", s), s.backend, s.node,
                                    ports))
        return out
