"""Benchmark: ``envctl login --all`` (parallel) against sequential single-site logins, same run.

Brings up the five login sites of the mini flavor (instance ``authbench``, port offset 22000 by default, shared with the tests: do not run both at once),
then, in one run:

  sequential   each site alone, one after another (``login SITE`` with single-site files only);
               the sum of these is what a one-at-a-time script pays for the five single files
  singles      the same five single-site files in one parallel run
  all          ``login --all``: every upstream file (5 singles + 6 pairs), combinations in parallel

Every measured login includes writing the file and checking it with the expiry probe in a fresh
context. Prints a table; ``--keep`` leaves the instance up.

Usage: .venv/bin/python bench/login.py [--repeat 2] [--parallel 6] [--port-offset 22000] [--keep]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from envctl.auth import login
from envctl.auth.run import Target
from envctl.lab import Lab

SITES = ["shopping", "shopping_admin", "reddit", "gitlab", "classifieds"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=6)
    ap.add_argument("--port-offset", type=int, default=22000)
    ap.add_argument("--keep", action="store_true", help="leave the instance running")
    args = ap.parse_args()

    out = Path(tempfile.mkdtemp(prefix="envctl-login-bench-"))
    lab = Lab(instance="authbench", auth_dir=out)
    t = time.monotonic()
    up = lab.up(SITES, flavor="mini", port_offset=args.port_offset, login=False)
    if not up.ok:
        raise SystemExit(f"up failed: {up.to_dict()}")
    print(f"up: {time.monotonic() - t:.1f}s (instance authbench, files in {out})")
    try:
        target = Target.of_lab(lab)
        rows = []
        for i in range(args.repeat):
            per_site = {}
            for site in SITES:
                r = login(target, [site], pairs=False, parallel=1)
                assert r.ok, r.to_dict()
                per_site[site] = r.seconds
            seq = sum(per_site.values())
            singles = login(target, SITES, pairs=False, parallel=args.parallel)
            assert singles.ok, singles.to_dict()
            r = login(target, None, parallel=args.parallel)
            assert r.ok, r.to_dict()
            rows.append((i + 1, per_site, seq, singles.seconds, r.seconds, len(r.files)))
            files = sorted(f.name for f in r.files)
        head = ["run"] + SITES + ["sum sequential (5 files)", "5 singles parallel", "singles/seq",
                                  f"--all parallel ({rows[0][5]} files)", "all/seq"]
        print(" | ".join(head))
        for run, per_site, seq, single_par, par, _ in rows:
            cells = [str(run)] + [f"{per_site[s]:.2f}" for s in SITES] + [
                f"{seq:.2f}", f"{single_par:.2f}", f"{single_par / seq:.2f}", f"{par:.2f}", f"{par / seq:.2f}"]
            print(" | ".join(cells))
        print("seconds; each single login = launch Chromium + log in + write + probe in a fresh context")
        print("files from --all:", ", ".join(files))
    finally:
        if not args.keep:
            lab.down()


if __name__ == "__main__":
    main()
