"""Benchmark: cold ``envctl up --all --flavor mini`` against the slowest single site's cold ``up``.

Images must be present (built first unless ``--no-build``); instances are absent at the start of
every measurement. In the same run, each site is brought up alone on its own instance
(``bench-solo-<site>``, taken down before the next one), then every site together on
``bench-all``. Each measurement is the wall time of the real command
``envctl up ... --flavor mini --json --no-login`` (a subprocess, as a user runs it), from start to
every site healthy. The ratio all / slowest solo shows how close parallel start gets to its floor:
1.0 would mean starting eight sites costs no more than starting the slowest one.

Usage: .venv/bin/python bench/up.py [--no-build] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from envctl.catalog import Catalog, load_catalog


@dataclass
class Run:
    label: str
    instance: str
    sites: list[str]
    offset: int
    seconds: float = 0.0
    ok: bool = False
    timings: dict[str, dict[str, float]] = field(default_factory=dict)  # site -> phase -> s
    golden: list[str] = field(default_factory=list)  # sites that booted from a golden (preconfigured) image
    error: str = ""


def envctl(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envctl.cli", *args], capture_output=True, text=True, timeout=timeout)


def ports_of(catalog: Catalog, sites: list[str]) -> list[int]:
    return [p.public for s in sites for svc in catalog.site(s).services_for("mini")
            if (p := catalog.site(s).services[svc].ports) is not None]


def free_offset(bases: list[int], start: int) -> int:
    """The first offset from ``start`` at which every ``base + offset`` can be bound on 127.0.0.1."""
    for offset in range(start, 65535 - max(bases), 97):
        taken = False
        for base in bases:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", base + offset))
                except OSError:
                    taken = True
                    break
        if not taken:
            return offset
    raise SystemExit(f"no free port offset for ports {bases}")


def instance_exists(instance: str) -> bool:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=envctl.instance={instance}"],
                         capture_output=True, text=True, check=True).stdout
    return bool(out.strip())


def measure(run: Run, timeout: float) -> Run:
    if instance_exists(run.instance):
        envctl("down", "--instance", run.instance)
    t = time.monotonic()
    try:
        p = envctl("up", *run.sites, "--flavor", "mini", "--instance", run.instance, "--port-offset", str(run.offset),
                   "--json", "--no-login", timeout=timeout)
    except subprocess.TimeoutExpired:
        run.seconds = time.monotonic() - t
        run.error = f"no result after {timeout:.0f}s"
        envctl("down", "--instance", run.instance)
        return run
    run.seconds = time.monotonic() - t
    try:
        st = json.loads(envctl("status", "--instance", run.instance, "--json").stdout)
        run.golden = sorted({r["site"] for r in st["sites"] for c in r["containers"] if c.get("golden")})
    except (ValueError, KeyError):
        pass
    try:
        data: dict[str, Any] = json.loads(p.stdout)
        run.ok = bool(data["ok"]) and p.returncode == 0
        run.timings = {s["site"]: {k: round(v, 2) for k, v in s["timings"].items()} for s in data["sites"]}
        run.error = "; ".join(f"{s['site']}: {s['error'].splitlines()[0]}" for s in data["sites"] if s["error"])
    except (ValueError, KeyError):
        run.error = (p.stderr.strip().splitlines() or ["no output"])[-1]
    finally:
        down = envctl("down", "--instance", run.instance)
        if down.returncode != 0:
            print(f"warning: down {run.instance} failed: {down.stderr.strip()}", file=sys.stderr)
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-build", action="store_true", help="do not (re)build the mini images first")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--offset", type=int, default=27000, help="first port offset to try [27000]")
    ap.add_argument("--timeout", type=float, default=600, help="give up on one 'up' after this many seconds [600]")
    args = ap.parse_args()

    catalog = load_catalog()
    sites = catalog.resolve(None)
    if not args.no_build:
        from envctl.images.build import build_for_sites

        t = time.monotonic()
        build_for_sites(catalog, sites, "mini")
        print(f"images ready ({time.monotonic() - t:.0f}s, cached builds)", file=sys.stderr)

    solo: list[Run] = []
    for site in sites:
        offset = free_offset(ports_of(catalog, [site]), args.offset)
        r = measure(Run(site, f"bench-solo-{site.replace('_', '-')}", [site], offset), args.timeout)
        print(f"solo {site:15} {r.seconds:6.1f}s {'ok' if r.ok else 'FAILED ' + r.error}", file=sys.stderr)
        solo.append(r)
    offset = free_offset(ports_of(catalog, sites), args.offset)
    together = measure(Run("all", "bench-all", [], offset), args.timeout)
    print(f"all  {'':15} {together.seconds:6.1f}s {'ok' if together.ok else 'FAILED ' + together.error}",
          file=sys.stderr)

    slowest = max(solo, key=lambda r: r.seconds)
    ratio = together.seconds / slowest.seconds
    load = os.getloadavg()
    if args.json:
        print(json.dumps({"solo": [asdict(r) for r in solo], "all": asdict(together), "slowest": slowest.label,
                          "ratio_all_over_slowest": round(ratio, 3), "loadavg": load, "ncpu": os.cpu_count()}, indent=1))
        return
    phases = ("create", "boot", "configure", "healthy")
    # "other": wall time outside the site's phases (CLI start, engine checks, front proxy, lock).
    print(f"\n{'run':20} {'wall s':>7}  {'create':>7} {'boot':>7} {'config':>7} {'healthy':>7} {'other':>7}  ok")
    for r in solo:
        tm = r.timings.get(r.label, {})
        other = r.seconds - sum(tm.get(k, 0) for k in phases)
        print(f"{'solo ' + r.label:20} {r.seconds:7.1f}  " + " ".join(f"{tm.get(k, 0):7.1f}" for k in phases)
              + f" {other:7.1f}  {'yes' if r.ok else 'NO'}")
    print(f"{'all sites':20} {together.seconds:7.1f}  {'':39}  {'yes' if together.ok else 'NO'}")
    if together.timings:
        print("  in the all-sites run, per site (s):")
        for site, tm in together.timings.items():
            print(f"    {site:16} " + " ".join(f"{tm.get(k, 0):7.1f}" for k in phases))
    golden = sorted({g for r in [*solo, together] for g in r.golden})
    print(f"\nbooted from golden (preconfigured) images: {', '.join(golden) or 'none'}")
    print(f"slowest solo: {slowest.label} {slowest.seconds:.1f}s; all sites {together.seconds:.1f}s; "
          f"ratio all/slowest = {ratio:.2f}")
    print(f"(machine: {os.cpu_count()} CPUs, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; "
          "shared with other work, so figures are noisy)")
    if not together.ok or not all(r.ok for r in solo):
        sys.exit(1)


if __name__ == "__main__":
    main()
