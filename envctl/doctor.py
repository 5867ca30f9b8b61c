"""``envctl doctor``: what on this machine blocks ``envctl up``, and how to fix it."""
from __future__ import annotations

import os
import shutil
from typing import Any

from envctl.catalog import Catalog
from envctl.errors import EngineUnavailable, EnvctlError
from envctl.plan import memory_bytes
from envctl.paths import executable_file
from envctl.validate import env_report, env_value


def _check(name: str, status: str, detail: str, fix: str | None = None) -> dict[str, Any]:
    return {"check": name, "status": status, "detail": detail, "fix": fix}


def _engine(probe: Any, checks: list[dict[str, Any]]) -> dict[str, object] | None:
    """The engine's facts, its checks appended (engine, storage driver); None when it does not answer. A few
    seconds at most, not the engine's timeout: doctor answers on a stalled engine."""
    try:
        stalled = probe.engine_problem()
        if stalled:
            raise EngineUnavailable(stalled, "see 'docker info'; restart the engine (scripts/docker-engine.sh) if it "
                                             "stays unanswering")
        info = probe.check_engine()
    except EnvctlError as exc:
        checks.append(_check("docker engine", "fail", exc.message, exc.hint))
        return None
    checks.append(_check("docker engine", "ok", f"server {info['server_version']}, {info['ncpu']} CPUs"))
    drv = str(info["storage_driver"])
    checks.append(_check("storage driver", "ok" if drv in ("overlay2", "overlayfs") else "warn", drv,
                         None if drv in ("overlay2", "overlayfs") else "use overlay2 for fast container starts and commits"))
    return info


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"




def run_doctor(catalog: Catalog, sites: list[str] | None, *, flavor: str = "full", port_offset: int = 0,
               bind: str = "127.0.0.1") -> dict[str, Any]:
    from envctl.backends.base import InstanceSettings
    from envctl.instance import Instance

    names = [n for n in catalog.resolve(sites) if flavor in catalog.site(n).flavors]
    checks: list[dict[str, Any]] = []
    root = "/var/lib/docker"
    engine_ok = False
    probe = Instance(catalog, InstanceSettings("doctor", flavor, bind=bind, port_offset=port_offset,
                                               backend=Instance.backend_kind()))
    info = _engine(probe, checks)
    engine_ok = info is not None
    root = str(info["docker_root_dir"]) if info else root

    need_disk = 0
    missing_images: list[str] = []
    for n in names:
        site = catalog.site(n)
        for a in site.flavors[flavor].artifacts:
            need_disk += (a.loaded_size or a.size or 0)
        if engine_ok:
            missing_images += [img for _, img, _ in probe.copies.missing_images([n]) if img not in missing_images]
    probe_dir = root if os.path.exists(root) else "/"
    free = shutil.disk_usage(probe_dir).free
    if flavor == "full":
        status = "ok" if free >= need_disk else "fail"
        checks.append(_check("disk", status, f"{_gb(free)} free on {probe_dir}; the {flavor} images need about {_gb(need_disk)}",
                             None if status == "ok" else "free disk space or move Docker's data-root to a larger volume"))
    else:
        checks.append(_check("disk", "ok" if free > 5e9 else "warn", f"{_gb(free)} free on {probe_dir}"))

    need_mem = sum(memory_bytes(catalog.site(n).services[s].flavors[flavor].memory or catalog.site(n).services[s].memory)
                   for n in names for s in catalog.site(n).services_for(flavor))
    try:
        avail = int(next(line for line in open("/proc/meminfo") if line.startswith("MemAvailable")).split()[1]) * 1024
        st = "ok" if avail >= need_mem else "warn"
        checks.append(_check("memory", st, f"{_gb(avail)} available; the sites' memory hints add up to {_gb(need_mem)}",
                             None if st == "ok" else "start fewer sites at once, or use a larger host"))
    except (OSError, StopIteration):
        checks.append(_check("memory", "warn", "cannot read /proc/meminfo"))

    if engine_ok:
        if missing_images:
            hint = ("envctl images build --flavor mini" if flavor == "mini" else
                    "envctl images get " + ("" if flavor == "full" else f"--flavor {flavor} ") + " ".join(names))
            checks.append(_check("images", "fail", f"missing: {', '.join(missing_images)}", hint))
        else:
            checks.append(_check("images", "ok", f"all {flavor} images present"))

    busy = []
    owned: set[int] = set()
    if engine_ok:
        for _, _, ports in Instance.listed():
            owned |= set(ports)  # an envctl instance's own: its next 'up' reuses them
    wanted = {p + port_offset: n for n in names for svc, p in catalog.site(n).public_ports().items()
              if flavor in catalog.site(n).services[svc].flavors}
    if engine_ok:
        problems = probe.front.port_problems(sorted(set(wanted) - owned))
        busy = [f"{port} ({wanted[port]})" for port in sorted(problems)]
    checks.append(_check("ports", "fail" if busy else "ok",
                         f"in use on {bind}: {', '.join(busy)}" if busy else f"all free on {bind} (offset {port_offset})",
                         "stop what holds them, or pass --port-offset N" if busy else None))

    checks += space_checks(flavor, names, catalog)
    checks.append(browser_check(os.environ))
    environment = env_report()
    checks += environment_checks(environment)
    return {"ok": all(c["status"] != "fail" for c in checks), "flavor": flavor, "sites": names, "checks": checks,
            "environment": environment}


# Free space under which a directory envctl writes is reported before a write there fails (issue #32): the
# state directory (locks, lease and server records, tokens, the debug log), the data directory (downloads,
# unpacked data, what the mini images seed), the temporary directory (a snapshot's volume copies).
SPACE_WARN = {"state": 64 << 20, "data": 1 << 30, "temp": 1 << 30}


def space_checks(flavor: str, names: list[str], catalog: Catalog) -> list[dict[str, Any]]:
    """Free space where envctl writes: 'warn' under :data:`SPACE_WARN`, 'fail' when nothing is free or, on the
    full flavor, the data files of ``names`` that are not there yet do not fit. Creates nothing."""
    import tempfile

    from envctl.images.get import Options, artifacts, is_present
    from envctl.locks import free_space, human_bytes, mount_point
    from envctl.paths import data_dir, usable_dir

    rows = []
    need_data = 0
    where: dict[str, tuple[str, str]] = {}
    try:
        where["state"] = (str(usable_dir(_state_root(), "state directory")), "ENVCTL_STATE_DIR")
        where["data"] = (str(data_dir(flavor)), "ENVCTL_DATA_DIR")
    except EnvctlError as exc:
        rows.append(_check("space", "fail", exc.message, exc.hint))
    where["temp"] = (tempfile.gettempdir(), "TMPDIR")
    if flavor == "full" and "data" in where:
        try:
            opts = Options().resolved()
            need_data = sum((a.size or 0) for _, a in artifacts(catalog, names, flavor)
                            if a.kind == "data" and not is_present(a, opts))
        except EnvctlError as exc:  # e.g. a symbolic link out of the data directory: 'images get' says it too
            rows.append(_check("data files", "fail", exc.message, exc.hint))
    for what, (path, var) in where.items():
        free = free_space(path)
        need = max(SPACE_WARN[what], need_data if what == "data" else 0)
        status = "fail" if free == 0 or (what == "data" and need_data > free) else "warn" if free < need else "ok"
        rows.append(_check(f"{what} dir space", status,
                           f"{human_bytes(free)} free on {mount_point(path)} for {path}"
                           + (f"; the {flavor} data files still to get need {human_bytes(need_data)}" if what == "data" and need_data else ""),
                           None if status == "ok" else f"free space there, or set {var} to a directory on a bigger disk "
                           f"(writes there fail once it is full; under {human_bytes(SPACE_WARN[what])} is a warning)"))
    return rows


def _state_root() -> str:
    """The state directory (as :func:`envctl.locks.state_dir` finds it), without creating it."""
    explicit = env_value("ENVCTL_STATE_DIR")
    return explicit or os.path.join(env_value("XDG_RUNTIME_DIR") or "/tmp", f"envctl-{os.getuid()}")


def browser_check(environ: Any) -> dict[str, Any]:
    """``$ENVCTL_CHROMIUM`` (a directory, a missing or non-executable file is a failure naming it),
    else Debian's chromium on PATH (missing: a warning, logins and smoke need it)."""
    raw = environ.get("ENVCTL_CHROMIUM")
    if raw:
        try:
            executable_file(env_value("ENVCTL_CHROMIUM", environ), "ENVCTL_CHROMIUM")
        except EnvctlError as exc:
            return _check("browser", "fail", exc.message, exc.hint)
        return _check("browser", "ok", f"{raw} (ENVCTL_CHROMIUM)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    return _check("browser", "ok" if chromium else "warn", chromium or "no chromium found (needed for login state and smoke)",
                  None if chromium else "apt-get install chromium (or set ENVCTL_CHROMIUM)")


def environment_checks(environment: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The environment variables envctl reads (validate.ENV_VARS): one row per variable that is set,
    with its value (secrets masked) and meaning, 'fail' with the fix when the value is not valid;
    one row naming those that are unset (--json has every variable with its meaning)."""
    rows = []
    for var in environment:
        if not var["set"]:
            continue
        if var["problem"]:
            rows.append(_check(f"${var['name']}", "fail", f"{var['value']}: {var['problem']}",
                               f"fix or unset {var['name']} ({var['meaning']})"))
        else:
            rows.append(_check(f"${var['name']}", "ok", f"{var['value']} ({var['meaning']})"))
    unset = [v["name"] for v in environment if not v["set"]]
    if unset:
        rows.append(_check("environment", "ok", "unset: " + ", ".join(unset)))
    return rows
