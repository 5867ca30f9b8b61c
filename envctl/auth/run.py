"""Produce and check login-state files for a set of sites (the work behind ``envctl login``).

One headless Chromium; one browser context per file, like upstream (a pair file logs both sites
in within one context); files of different combinations are made concurrently. Every new file is
written to a private temporary name, checked with the expiry probes in a fresh context, and only
then renamed into place. A combination that fails leaves no file behind under its name, so a file
present after ``login`` is valid as of that run.

``http=True`` (the reset tiers' renewal): a combination whose every site declares ``login.http``
in the catalog is made by :mod:`envctl.auth.httplogin` instead (one cookie jar per file, a form
post per site, the expiry probes over HTTP), and Chromium is started only if some combination
still needs it. One the HTTP recipe does not fit (page changed, state rejected) is made again
with the browser when one is available.
"""
from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Coroutine, Iterable, TypeVar

import envctl.auth.files as files
import envctl.auth.flows as flows
import envctl.auth.headers as headers
import envctl.auth.httplogin as httplogin
from envctl.auth.browser import async_playwright, launch
from envctl.auth.check import ProbeSpec, probe_state
from envctl.auth.errors import AuthError, SiteDown, StateRejected
from envctl.catalog import Catalog, Deployment
from envctl.errors import UsageError
from envctl.routing.proxy import BACKEND_HEADER

T = TypeVar("T")
DEFAULT_PARALLEL = 6


@dataclass(frozen=True)
class Target:
    """What to log in to: a catalog, where its sites are published, and where files go."""

    catalog: Catalog
    deployment: Deployment
    auth_dir: Path
    flavor: str = "full"
    partners: tuple[str, ...] = ()  # other login sites that are up (pair files are made with them)
    # Sent with every request: envctl's X-Envctl-Backend addresses a spare copy through the proxy,
    # so a spare is logged in before it is swapped in (its cookies are for the same public URL).
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of_lab(cls, lab: Any, out: str | Path | None = None, headers: dict[str, str] | None = None) -> "Target":
        settings = lab.settings()
        if settings is None:
            raise UsageError(f"instance '{lab.instance}' is not running", "start it with 'envctl up'")
        up = tuple(s for s in lab.sites_up() if lab.catalog.site(s).login)
        own = lab.own_headers() if hasattr(lab, "own_headers") else {}  # envctl's own requests: not a site's use
        return cls(lab.catalog, settings.deployment, Path(out) if out else Path(lab.auth_dir), settings.flavor, up,
                   tuple(sorted({**own, **(headers or {})}.items())))


@dataclass
class FileResult:
    name: str
    sites: tuple[str, ...]
    ok: bool
    action: str  # written | kept | valid | invalid | missing | failed
    path: str
    seconds: float = 0.0
    error: str = ""
    kind: str = ""  # down | credentials | page-changed | rejected | error
    hint: str = ""
    age_s: float | None = None
    method: str = ""  # browser | http: how the file was made or checked
    note: str = ""  # e.g. made with the browser because the HTTP login did not fit the page


@dataclass
class Report:
    action: str  # login | check
    auth_dir: str
    files: list[FileResult] = field(default_factory=list)
    seconds: float = 0.0
    headers_file: str | None = None
    # the header-login file (auth.headers), written or checked beside the state files; None: no site has one
    headers: FileResult | None = None

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.files) and (self.headers is None or self.headers.ok)

    def paths(self) -> dict[str, Path]:
        """The state files made or kept (the headers file is ``headers_file``)."""
        return {f.name: Path(f.path) for f in self.files if f.ok}

    def failures(self) -> list[FileResult]:
        """The state files that failed (a refused header is ``headers``)."""
        return [f for f in self.files if not f.ok]

    def to_dict(self) -> dict[str, Any]:
        row = lambda f: {**asdict(f), "seconds": round(f.seconds, 3),  # noqa: E731
                         "age_s": None if f.age_s is None else round(f.age_s, 1)}
        return {"action": self.action, "ok": self.ok, "auth_dir": self.auth_dir, "seconds": round(self.seconds, 3),
                "headers_file": self.headers_file, "headers": row(self.headers) if self.headers else None,
                "files": [row(f) for f in self.files]}


def _secrets(catalog: Catalog) -> list[str]:
    return [a.password for s in catalog.sites.values() for a in s.accounts]


def _health(target: Target, site: str) -> str:
    """"" if the site's HTTP health probes pass, else what failed (no browser needed)."""
    from envctl.healthchecks.probes import run_probe

    s = target.catalog.site(site)
    for probe in s.health.probes:
        if probe.kind != "http":
            continue
        r = run_probe(probe, target.deployment.url(s, probe.service), headers=dict(target.headers))
        if not r.ok:
            return f"{site} is down or unhealthy: health probe '{r.name}' ({r.url}) failed: {r.detail or r.status}"
    return ""


def _specs(target: Target, combo: Iterable[str]) -> list[ProbeSpec]:
    return [ProbeSpec.of(target.catalog, s, target.deployment) for s in files.login_order(target.catalog, combo)]


def by_http(target: Target, combo: Iterable[str]) -> bool:
    """Can this combination be made without a browser (every site's login is a declared form post)?"""
    return all(httplogin.declared(target.catalog, s) for s in combo)


async def _login_all(target: Target, combos: list[tuple[str, ...]], *, max_age: float | None, parallel: int,
                     timeout_ms: float, http: bool = False) -> list[FileResult]:

    sites = sorted({s for c in combos for s in c})
    health = dict(zip(sites, await asyncio.gather(*(asyncio.to_thread(_health, target, s) for s in sites))))
    recipes = {s: flows.SiteLogin.of(target.catalog, s, target.deployment) for s in sites}
    secrets = _secrets(target.catalog)
    sem = asyncio.Semaphore(max(1, parallel))
    hdrs = dict(target.headers)

    async def probe(browser: Any, combo: tuple[str, ...], state: Path) -> list[str]:
        if browser is None:
            return await asyncio.to_thread(httplogin.probe_state, _specs(target, combo), state, hdrs, timeout_ms / 1000)
        return await probe_state(browser, _specs(target, combo), state, timeout_ms, hdrs)

    async def make(browser: Any, combo: tuple[str, ...]) -> dict[str, Any]:
        order = files.login_order(target.catalog, combo)
        if browser is None:
            return await asyncio.to_thread(httplogin.login_combo, target.catalog, recipes, order, hdrs, timeout_ms / 1000)
        context = await browser.new_context(extra_http_headers=hdrs)
        try:
            page = await context.new_page()
            for site in order:
                await flows.login(page, recipes[site], timeout_ms)
            return await context.storage_state()
        finally:
            await context.close()

    async def one(browser: Any, combo: tuple[str, ...]) -> FileResult:
        name = files.state_name(combo)
        path = target.auth_dir / name
        start = time.monotonic()
        res = FileResult(name, combo, False, "failed", str(path), method="browser" if browser is not None else "http")
        try:
            down = [health[s] for s in combo if health[s]]
            if down:
                raise SiteDown(combo[0], down[0], "bring it up with 'envctl up' and check 'envctl health'")
            async with sem:
                old = files.age(path)
                if max_age is not None and old is not None and old <= max_age:
                    if not await probe(browser, combo, path):
                        res.ok, res.action, res.age_s = True, "kept", old
                        return res
                state = await make(browser, combo)
                tmp = files.write_temp(path, state)
                try:
                    problems = await probe(browser, combo, tmp)
                    if problems:
                        raise StateRejected(combo[0], f"{name}: the new login state fails the expiry probe in a "
                                                      f"fresh context: {'; '.join(problems)}",
                                            "the site logged in but does not keep the session; see 'envctl logs'")
                    files.commit(tmp, path)
                finally:
                    tmp.unlink(missing_ok=True)
            res.ok, res.action, res.age_s = True, "written", 0.0
        except AuthError as exc:
            res.error, res.kind, res.hint = flows.redact(exc.message, *secrets), exc.kind, exc.hint or ""
        except Exception as exc:  # a browser crash or timeout: report it, never the password
            res.error, res.kind = flows.redact(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0]}", *secrets), "error"
        finally:
            res.seconds = time.monotonic() - start
        if not res.ok:
            path.unlink(missing_ok=True)  # never leave an old file looking valid
        return res

    plain = [c for c in combos if http and by_http(target, c)]
    rest = [c for c in combos if c not in plain]
    done = {c: r for c, r in zip(plain, await asyncio.gather(*(one(None, c) for c in plain)))}
    if rest:  # Chromium only when some combination needs it
        async with async_playwright() as pw:
            browser = await launch(pw)
            try:
                done |= dict(zip(rest, await asyncio.gather(*(one(browser, c) for c in rest))))
            finally:
                await browser.close()
    return [done[c] for c in combos]


async def _check_all(target: Target, names: list[str], timeout_ms: float) -> list[FileResult]:

    async def one(browser: Any, name: str) -> FileResult:
        combo = files.combo_of(name)
        path = target.auth_dir / name
        start = time.monotonic()
        res = FileResult(name, combo, False, "missing", str(path), age_s=files.age(path))
        if res.age_s is None:
            res.error, res.hint = f"{name} does not exist", "make it with 'envctl login'"
            return res
        try:
            problems = await probe_state(browser, _specs(target, combo), path, timeout_ms, dict(target.headers))
        except Exception as exc:  # unreadable JSON, browser error
            problems = [f"cannot load {name}: {str(exc).splitlines()[0]}"]
        res.seconds = time.monotonic() - start
        if problems:
            res.action, res.kind, res.error = "invalid", "rejected", "; ".join(problems)
            res.hint = "renew it with 'envctl login " + " ".join(combo) + "'"
        else:
            res.ok, res.action = True, "valid"
        return res

    async with async_playwright() as pw:
        browser = await launch(pw)
        try:
            return list(await asyncio.gather(*(one(browser, n) for n in names)))
        finally:
            await browser.close()


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion in a thread of its own.

    Always a fresh thread: the caller may run an event loop that asyncio cannot see from here, e.g. a
    harness using Playwright's sync API (its loop lives in a greenlet of the same thread)."""
    box: dict[str, Any] = {}

    def runner() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=runner, name="envctl-login")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _validate_sites(target: Target, sites: Iterable[str] | None) -> list[str]:
    if sites is None:
        return list(target.partners)
    names = list(dict.fromkeys(sites))
    for s in names:
        if not target.catalog.site(s).login:
            raise UsageError(f"site '{s}' has no login", "sites with a login: "
                             + ", ".join(files.login_sites_of(target.catalog)))
    return names


def login(target: Target, sites: Iterable[str] | None = None, *, max_age: float | None = None,
          parallel: int = DEFAULT_PARALLEL, timeout: float = 30.0, pairs: bool = True, http: bool = False) -> Report:
    """Log ``sites`` (default: every login site that is up) in; write and check every file touching them.

    ``max_age``: keep existing files younger than this many seconds that still pass the probe.
    ``pairs=False`` makes only the single-site files. ``http``: make files whose sites all declare
    ``login.http`` with a form post and check them over HTTP (no browser); a file the HTTP recipe
    does not fit is made again with the browser."""
    start = time.monotonic()
    names = _validate_sites(target, sites)
    combos = files.login_combos(target.catalog, names, target.partners if pairs else ())
    if not pairs:
        combos = [c for c in combos if len(c) == 1]
    target.auth_dir.mkdir(parents=True, exist_ok=True)
    results = _run(_login_all(target, combos, max_age=max_age, parallel=parallel, timeout_ms=timeout * 1000,
                              http=http)) if combos else []
    misfits = [i for i, r in enumerate(results) if r.method == "http" and r.kind in ("page-changed", "rejected")]
    if misfits:  # the catalog's form post no longer fits the page: the browser still may
        from envctl.errors import NoBrowser

        try:
            again = _run(_login_all(target, [combos[i] for i in misfits], max_age=None, parallel=parallel,
                                    timeout_ms=timeout * 1000))
        except NoBrowser:
            again = []
        for i, r in zip(misfits, again):
            if r.ok:
                r.note = f"made with the browser: the HTTP login failed ({results[i].error})"
            results[i] = r
    hdr, res = _header_login(target, names, timeout)
    return Report("login", str(target.auth_dir), results, time.monotonic() - start, str(hdr) if hdr else None, res)


def _header_login(target: Target, names: list[str], timeout: float, *, write: bool = True) -> tuple[Path | None, FileResult | None]:
    """The headers file for ``names`` (:mod:`envctl.auth.headers`): written (or only checked), each header
    checked on its site; a header the site refuses is taken out of the file and reported.

    A target that addresses one copy (a spare being staged, through ``X-Envctl-Backend``): the headers are
    checked on that copy, and the file, whose values are the same for every copy, is left where the
    instance's is."""
    one_copy = any(name == BACKEND_HEADER for name, _ in target.headers)
    write = write and not one_copy
    with_header = [s for s in names if headers.declared(target.catalog, s, target.flavor)]
    path = target.auth_dir / headers.HEADERS_FILE
    if not with_header:
        return (path if path.exists() else None), None
    start = time.monotonic()
    res = FileResult(headers.HEADERS_FILE, tuple(with_header), False, "failed", str(path), method="http")
    if not write and not path.exists() and not one_copy:
        res.action, res.error, res.hint = "missing", f"{headers.HEADERS_FILE} does not exist", "make it with 'envctl login'"
        return None, res
    down = [why for why in (_health(target, s) for s in with_header) if why]
    bad = {name: down[0] for name in headers.render(target.catalog, with_header, target.flavor)} if down else \
        headers.problems(target.catalog, with_header, target.deployment, target.flavor, dict(target.headers), timeout)
    if write:
        headers.write(target.auth_dir, target.catalog, with_header, target.flavor, drop=bad)
    elif bad and not one_copy:  # a check: what the file holds is what the sites refuse
        have = headers.read(path)
        bad = {k: v for k, v in bad.items() if k in have}
    res.seconds = time.monotonic() - start
    if bad:
        res.action = "failed" if write else "invalid"
        res.kind, res.error = ("down" if down else "rejected"), flows.redact("; ".join(bad.values()), *_secrets(target.catalog))
        res.hint = "bring the site up ('envctl up') and run 'envctl login' again" if down else \
            f"the image does not honour the header: is flavor '{target.flavor}' built with it? ('envctl images build')"
    else:
        res.ok, res.action = True, "written" if write else "valid"
    return path, res


def check(target: Target, sites: Iterable[str] | None = None, *, timeout: float = 30.0) -> Report:
    """Check existing files without logging in: the planned files for ``sites`` (default: every
    file touching a login site that is up, plus any other state file in the folder)."""
    start = time.monotonic()
    names = _validate_sites(target, sites)
    planned = [files.state_name(c) for c in files.login_combos(target.catalog, names, target.partners)]
    if sites is None and target.auth_dir.is_dir():
        known = set(files.login_sites_of(target.catalog))
        for p in sorted(target.auth_dir.glob("*" + files.SUFFIX)):
            if set(files.combo_of(p.name)) <= known and p.name not in planned:
                planned.append(p.name)
    results = _run(_check_all(target, planned, timeout * 1000)) if planned else []
    hdr, res = _header_login(target, names, timeout, write=False)
    return Report("check", str(target.auth_dir), results, time.monotonic() - start, str(hdr) if hdr else None, res)
