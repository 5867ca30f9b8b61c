"""Reset latency and throughput on the mini flavor (issues 7 and 15).

``--mode episodes`` (the default; issue 15): a plain ``up`` (no ``--spares``: the capacity plan's
default), then resets spaced like agent episodes (``--episode`` seconds of "agent work" between
resets, default 1.5 x the spare refill time measured first). Prints the share of resets that
recreated (goal 0), p50 / p95 per site with the phases of a swap (route switch, verification),
against a recreate measured in the same run (ratio), and the spare-less in-place tier where a site
declares one (what a host without memory for spares gets; recreate otherwise).

``--mode tight``: per mutable site, reset latency p50 / p95 over N back-to-back resets with a spare
ready, recreate as the baseline, plus sustained resets per minute with K = 1 and K = 2 spares.
Classifieds uses its app endpoint.

``--mode inplace`` (issue 23): the spare-less in-place tier, N resets per login method, interleaved:
login files renewed over HTTP (the default for sites whose catalog login declares ``http``; run
with ``ENVCTL_CHROMIUM`` pointing nowhere, so a Chromium start would show as a note) against the
browser login (the same renewal with ``http=False``). Prints p50 / p95 of each, the ratio, and the
phases (restore, verification, login). ``--partners`` adds login sites that are up beside it, so
their pair files are renewed too (``gitlab.reddit_state.json``).

    python bench/reset.py [--mode episodes|tight|inplace] [--episodes 8] [--episode S] [--n 20] [--sites reddit,gitlab]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from common import pct
from envctl.catalog import load_catalog
from envctl.images.build import build_for_sites
from envctl.lab import Lab

INSTANCE, OFFSET = "bench-reset", 27000


def table_head(title: str, head: tuple[str, ...]) -> None:
    """A figure's title and its markdown table head."""
    print(f"\n{title}\n")
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))




def spares_ready(lab: Lab, site: str) -> int:
    return len(lab.running().routing.table().ready.spares(site))


def wait_spare(lab: Lab, site: str, timeout: float = 300) -> float:
    t = time.monotonic()
    while spares_ready(lab, site) < 1:
        if time.monotonic() - t > timeout:
            raise SystemExit(f"{site}: no spare became ready within {timeout}s")
        time.sleep(0.05)
    return time.monotonic() - t


def episodes(args: argparse.Namespace) -> int:
    cat = load_catalog()
    sites = args.sites.split(",")
    build_for_sites(cat, sites, "mini")
    lab = Lab(cat, instance=INSTANCE, auth_dir=Path("/tmp/envctl-bench-auth"))
    lab.down()
    res = lab.up(sites, flavor="mini", port_offset=OFFSET, login=True)  # defaults: the plan's spares
    assert res.ok, [s.error for s in res.sites if not s.ok]
    print(f"up: spares by default {res.spares}", file=sys.stderr, flush=True)
    lat: dict[str, list[float]] = {s: [] for s in sites}
    tiers: dict[str, list[str]] = {s: [] for s in sites}
    phases: dict[str, dict[str, list[float]]] = {s: {} for s in sites}
    recreate: dict[str, list[float]] = {s: [] for s in sites}
    inplace: dict[str, list[float]] = {s: [] for s in sites}
    inplace_phases: dict[str, dict[str, list[float]]] = {s: {} for s in sites}
    try:
        t0 = time.monotonic()
        for s in sites:
            if res.spares.get(s):
                wait_spare(lab, s)
        refill = time.monotonic() - t0  # how long the pool takes to fill (booted one site after another)
        episode = args.episode if args.episode is not None else max(5.0, 1.5 * refill)
        print(f"spares ready {refill:.1f} s after up; episode length {episode:.1f} s", file=sys.stderr, flush=True)
        for e in range(args.episodes):
            time.sleep(episode)  # the agent's episode: the spare pool refills meanwhile (or not)
            for site in sites:
                r = lab.reset([site])[0]
                assert r.ok, r
                lat[site].append(r.seconds)
                tiers[site].append(r.tier)
                for k, v in r.phases.items():
                    phases[site].setdefault(k, []).append(v)
            print(f"episode {e + 1}/{args.episodes}: " + ", ".join(f"{s} {tiers[s][-1]} {lat[s][-1]:.3f}s"
                                                                  for s in sites), file=sys.stderr, flush=True)
        # Baseline in the same run: a recreate (what a reset costs when no spare is ready).
        for site in sites:
            lab.running().routing.want_ready(site, "golden", 0)
            for _ in range(args.recreate_n):
                recreate[site].append(lab.reset([site], tier="recreate", refill=False)[0].seconds)
            # The spare-less tier (a host with no memory for spares), where the site declares one.
            if cat.site(site).reset.inplace is not None:
                for _ in range(args.recreate_n * 2):
                    r = lab.reset([site], tier="inplace", refill=False)[0]
                    assert r.ok and r.tier == "inplace", r
                    inplace[site].append(r.seconds)
                    for k, v in r.phases.items():
                        inplace_phases[site].setdefault(k, []).append(v)
    finally:
        lab.down()
    total = sum(len(v) for v in tiers.values())
    recreated = sum(t.count("recreate") for t in tiers.values())
    print(f"\nresets between episodes, mini flavor, default 'up' ({args.episodes} episodes of {episode:.1f} s; "
          f"spare refill {refill:.1f} s)\n")
    print(f"resets that recreated: {recreated} of {total} ({100 * recreated / max(1, total):.0f} %)\n")
    head = ("site", "tiers", "p50 s", "p95 s", "swap p50 s", "verify p50 s", "recreate p50 s", "recreate p95 s",
            "recreate/p50", "recreate/p95", "in-place p50 s", "in-place p95 s")
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for site in sites:
        ph = phases[site]
        med = lambda k, ph=ph: f"{statistics.median(ph[k]):.3f}" if ph.get(k) else "-"
        rec = recreate[site]
        print(f"{site} | {','.join(sorted(set(tiers[site])))} | {statistics.median(lat[site]):.3f} | "
              f"{pct(lat[site], 95):.3f} | {med('swap')} | {med('verify')} | {statistics.median(rec):.2f} | "
              f"{pct(rec, 95):.2f} | {statistics.median(rec) / statistics.median(lat[site]):.0f}x | "
              f"{pct(rec, 95) / pct(lat[site], 95):.1f}x | "
              + (f"{statistics.median(inplace[site]):.2f} | {pct(inplace[site], 95):.2f}" if inplace[site] else "- | -"))
    for site in sites:
        if inplace_phases[site]:  # what an in-place reset spends its time on (the restore itself vs the login renewal)
            print(f"{site} in-place phases p50: " + ", ".join(
                f"{k} {statistics.median(v):.3f} s" for k, v in sorted(inplace_phases[site].items())))
    return 0


def inplace_login(args: argparse.Namespace) -> int:
    import os

    import envctl.state.reset as resets
    from envctl.auth.files import login_combos

    cat = load_catalog()
    sites = args.sites.split(",")
    partners = [p for p in (args.partners or "").split(",") if p]
    build_for_sites(cat, sites + partners, "mini")
    lab = Lab(cat, instance=INSTANCE, auth_dir=Path("/tmp/envctl-bench-auth"))
    lab.down()
    res = lab.up(sites + partners, flavor="mini", port_offset=OFFSET, login=True, spares=0)
    assert res.ok, [s.error for s in res.sites if not s.ok]
    real = resets.login_sites

    def browser_login(target, names, **kw):
        return real(target, names, **{**kw, "http": False})

    lat: dict[tuple[str, str], list[float]] = {}
    ph: dict[tuple[str, str], dict[str, list[float]]] = {}
    chromium = os.environ.get("ENVCTL_CHROMIUM")
    try:
        for site in sites:
            lab.reset([site], tier="inplace", refill=False)  # warm-up (caches, connections)
            for i in range(args.n):
                for method in (("http", "browser") if i % 2 == 0 else ("browser", "http")):
                    resets.login_sites = real if method == "http" else browser_login
                    if method == "http":  # no browser on this path: a Chromium start would fail and say so
                        os.environ["ENVCTL_CHROMIUM"] = "/nonexistent/chromium"
                    try:
                        r = lab.reset([site], tier="inplace", refill=False)[0]
                    finally:
                        resets.login_sites = real
                        if chromium is None:
                            os.environ.pop("ENVCTL_CHROMIUM", None)
                        else:
                            os.environ["ENVCTL_CHROMIUM"] = chromium
                    assert r.ok and r.tier == "inplace" and not r.note, r
                    lat.setdefault((site, method), []).append(r.seconds)
                    for k, v in r.phases.items():
                        ph.setdefault((site, method), {}).setdefault(k, []).append(v)
            print(f"{site}: done", file=sys.stderr, flush=True)
    finally:
        lab.down()
    table_head(f"in-place reset, mini flavor, N={args.n} per login method (interleaved; verified; login files renewed)",
               ("site", "files", "login", "p50 s", "p95 s", "restore p50 s", "verify p50 s", "login p50 s", "login p95 s"))
    for site in sites:
        n_files = len(login_combos(cat, [site], partners))
        for method in ("http", "browser"):
            vals, p = lat[(site, method)], ph[(site, method)]
            print(f"{site} | {n_files} | {method} | {statistics.median(vals):.3f} | {pct(vals, 95):.3f} | "
                  f"{statistics.median(p['inplace']):.3f} | {statistics.median(p['verify']):.3f} | "
                  f"{statistics.median(p['login']):.3f} | {pct(p['login'], 95):.3f}")
    for site in sites:
        h, b = lat[(site, "http")], lat[(site, "browser")]
        hl, bl = ph[(site, "http")]["login"], ph[(site, "browser")]["login"]
        print(f"{site}: browser/http p50 {statistics.median(b) / statistics.median(h):.2f}x, "
              f"p95 {pct(b, 95) / pct(h, 95):.2f}x; login phase p50 {statistics.median(bl) / statistics.median(hl):.1f}x")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("episodes", "tight", "inplace"), default="episodes")
    ap.add_argument("--episodes", type=int, default=8, help="episodes (one reset of every site after each)")
    ap.add_argument("--episode", type=float, default=None, help="seconds per episode [1.5 x the spare refill]")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--recreate-n", type=int, default=3)
    ap.add_argument("--window", type=float, default=60.0, help="seconds per sustained-throughput run")
    ap.add_argument("--sites", default=None, help="[episodes: reddit,gitlab,shopping; tight: every mutable site; "
                                                  "inplace: reddit]")
    ap.add_argument("--partners", default="", help="inplace: login sites also up (their pair files are renewed)")
    args = ap.parse_args()
    if args.mode == "inplace":
        args.sites = args.sites or "reddit"
        return inplace_login(args)
    if args.mode == "episodes":
        args.sites = args.sites or "reddit,gitlab,shopping"
        return episodes(args)
    args.sites = args.sites or "shopping,shopping_admin,reddit,gitlab,classifieds"
    cat = load_catalog()
    sites = args.sites.split(",")
    build_for_sites(cat, sites, "mini")
    auth = Path("/tmp/envctl-bench-auth")
    lab = Lab(cat, instance=INSTANCE, auth_dir=auth)
    lab.down()
    res = lab.up(sites, flavor="mini", port_offset=OFFSET, login=True, spares=0)
    assert res.ok, [s.error for s in res.sites if not s.ok]
    rows = []
    try:
        for site in sites:
            tier = cat.site(site).reset.tier
            # baseline: recreate (boots from the golden image once it exists)
            lab.reset([site], tier="recreate", refill=False)  # makes the golden image
            recreate = [lab.reset([site], tier="recreate", refill=False)[0].seconds for _ in range(args.recreate_n)]
            lat: list[float] = []
            boots: list[float] = []
            if tier == "spare":
                lab.running().routing.want_ready(site, "golden", 1)
                lab.replenish(site, 1)
                for _ in range(args.n):
                    boots.append(wait_spare(lab, site))
                    r = lab.reset([site])[0]  # background replenish, as in real use
                    assert r.ok and r.tier == "spare", r
                    lat.append(r.seconds)
            else:
                for _ in range(args.n):
                    r = lab.reset([site])[0]
                    assert r.ok, r
                    lat.append(r.seconds)
            thr = {}
            if tier == "spare":
                for k in (1, 2):
                    lab.running().routing.want_ready(site, "golden", k)
                    lab.replenish(site, k)
                    done, t0 = 0, time.monotonic()
                    while time.monotonic() - t0 < args.window:
                        wait_spare(lab, site)
                        r = lab.reset([site])[0]
                        assert r.ok, r
                        done += 1
                    thr[k] = done / (time.monotonic() - t0) * 60
                lab.running().routing.want_ready(site, "golden", 1)
            rec = statistics.median(recreate)
            rows.append((site, tier, statistics.median(lat), pct(lat, 95), rec, rec / statistics.median(lat),
                         rec / pct(lat, 95),
                         thr.get(1), thr.get(2), statistics.median(boots[1:]) if len(boots) > 1 else None))
            print(f"{site}: done", file=sys.stderr, flush=True)
    finally:
        lab.down()
    table_head(f"reset latency, mini flavor, N={args.n} per site (includes verification and login state)",
               ("site", "tier", "p50 s", "p95 s", "recreate s", "recreate/p50", "recreate/p95", "resets/min K=1",
                "resets/min K=2", "spare refill s"))
    for site, tier, p50, p95, rec, r50, r95, k1, k2, refill in rows:
        f = lambda v: "-" if v is None else f"{v:.2f}"
        print(f"{site} | {tier} | {p50:.3f} | {p95:.3f} | {rec:.2f} | {r50:.0f}x | {r95:.1f}x | {f(k1)} | {f(k2)} | "
              f"{f(refill)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
