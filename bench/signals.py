#!/usr/bin/env python3
"""What knowing a site is untouched costs (issue 38): each site's change signal (its catalog ``changes``: the
database's own log position, read inside the copy) against its fingerprint (the catalog's queries over every table
agents write, hashed), on one mini instance of every site, in the same run.

    python bench/signals.py [--n 10] [--instance bsig] [--port-offset 48500] [--keep]

Prints, per site, p50/p95 of one signal read and of one fingerprint, their ratio, and what reading every site's
signal side by side costs (what an acquire pays: ``Lab.signals``) against fingerprinting every site side by side.
The baseline (the fingerprint) is measured in the same run, on the same copies.
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import pct  # noqa: E402
from envctl.lab import Lab  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--instance", default="bsig")
    ap.add_argument("--port-offset", type=int, default=48500)
    ap.add_argument("--keep", action="store_true", help="leave the instance up")
    args = ap.parse_args()
    lab = Lab(instance=args.instance)
    up = lab.up(all_sites=True, flavor="mini", port_offset=args.port_offset, spares=0)
    if not up.ok:
        print("up failed: " + "; ".join(s.error for s in up.sites if not s.ok), file=sys.stderr)
        return 1
    try:
        inst = lab.running()
        table = inst.routing.table()
        sites = [s for s in inst.routing.sites_up(table) if inst.catalog.site(s).fingerprint]
        found = {s: inst.routing.active_copy(s, table) for s in sites}
        copies = {s: c for s, c in found.items() if c is not None}
        sites = list(copies)
        print(f"{'site':<16}{'signal p50':>12}{'p95':>9}{'fingerprint p50':>17}{'p95':>9}{'ratio p50':>11}")
        for site in sites:
            sig, fp = [], []
            for _ in range(args.n):
                t = time.monotonic()
                has = inst.checks.changes(copies[site]) is not None
                sig.append(time.monotonic() - t)
                t = time.monotonic()
                inst.checks.fingerprint(copies[site])
                fp.append(time.monotonic() - t)
            s50, f50 = pct(sig, 50), pct(fp, 50)
            print(f"{site:<16}{s50 * 1000:>10.0f}ms{pct(sig, 95) * 1000:>7.0f}ms{f50 * 1000:>15.0f}ms"
                  f"{pct(fp, 95) * 1000:>7.0f}ms{(f50 / s50 if s50 and has else 0):>10.1f}x"
                  + ("" if has else "  (no change signal: the fingerprint is what it pays)"))
        every_sig, every_fp = [], []
        with ThreadPoolExecutor(max_workers=len(sites)) as pool:
            for _ in range(args.n):
                t = time.monotonic()
                lab.signals(sites)
                every_sig.append(time.monotonic() - t)
                t = time.monotonic()
                list(pool.map(lambda s: inst.checks.fingerprint(copies[s]), sites))
                every_fp.append(time.monotonic() - t)
        print(f"every site side by side ({len(sites)} sites): signals p50 {pct(every_sig, 50):.3f}s p95 "
              f"{pct(every_sig, 95):.3f}s; fingerprints p50 {pct(every_fp, 50):.3f}s p95 {pct(every_fp, 95):.3f}s "
              f"({pct(every_fp, 50) / pct(every_sig, 50):.1f}x the signals)")
    finally:
        if not args.keep:
            lab.down(volumes=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
