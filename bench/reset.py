"""Reset latency and throughput on the mini flavor (issue 7's performance goal).

Per mutable site: reset latency p50 / p95 over N resets with a spare ready (including renewed login
state and verification), against *recreate* measured in the same run (ratio), plus sustained
resets per minute with K = 1 and K = 2 spares. Classifieds uses its app endpoint.

    python bench/reset.py [--n 20] [--sites reddit,gitlab] [--window 60]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from envctl.catalog import load_catalog
from envctl.images.build import build_for_sites
from envctl.lab import Lab
from envctl.provision import proxy

INSTANCE, OFFSET = "bench-reset", 27000


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(p / 100 * (len(s) - 1))))
    return s[k]


def spares_ready(lab: Lab, site: str) -> int:
    st = proxy.read_state(lab.instance)
    return len(st.spares.get(site, [])) if st else 0


def wait_spare(lab: Lab, site: str, timeout: float = 300) -> float:
    t = time.monotonic()
    while spares_ready(lab, site) < 1:
        if time.monotonic() - t > timeout:
            raise SystemExit(f"{site}: no spare became ready within {timeout}s")
        time.sleep(0.05)
    return time.monotonic() - t


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--recreate-n", type=int, default=3)
    ap.add_argument("--window", type=float, default=60.0, help="seconds per sustained-throughput run")
    ap.add_argument("--sites", default="shopping,shopping_admin,reddit,gitlab,classifieds")
    args = ap.parse_args()
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
            lab.reset([site], tier="recreate", replenish_async=False)  # makes the golden image
            recreate = [lab.reset([site], tier="recreate", replenish_async=False)[0].seconds for _ in range(args.recreate_n)]
            lat: list[float] = []
            boots: list[float] = []
            if tier == "spare":
                with lab.running().routing() as st:
                    st.wanted[site] = 1
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
                    with lab.running().routing() as st:
                        st.wanted[site] = k
                    lab.replenish(site, k)
                    done, t0 = 0, time.monotonic()
                    while time.monotonic() - t0 < args.window:
                        wait_spare(lab, site)
                        r = lab.reset([site])[0]
                        assert r.ok, r
                        done += 1
                    thr[k] = done / (time.monotonic() - t0) * 60
                with lab.running().routing() as st:
                    st.wanted[site] = 1
            rec = statistics.median(recreate)
            rows.append((site, tier, statistics.median(lat), pct(lat, 95), rec, rec / pct(lat, 95),
                         thr.get(1), thr.get(2), statistics.median(boots[1:]) if len(boots) > 1 else None))
            print(f"{site}: done", file=sys.stderr, flush=True)
    finally:
        lab.down()
    print(f"\nreset latency, mini flavor, N={args.n} per site (includes verification and login state)\n")
    head = ("site", "tier", "p50 s", "p95 s", "recreate s", "recreate/p95", "resets/min K=1", "resets/min K=2", "spare refill s")
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for site, tier, p50, p95, rec, ratio, k1, k2, refill in rows:
        f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        print(f"{site} | {tier} | {p50:.3f} | {p95:.3f} | {rec:.2f} | {ratio:.1f}x | {f(k1)} | {f(k2)} | {f(refill)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
