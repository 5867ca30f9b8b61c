"""Benchmark (issue 23): how many instances get their spare, by memory limits vs by measured use.

Brings up N mini instances of ``--sites`` (default reddit; ``all`` for every site; ``pmd1`` .. ``pmdN``,
one after another, on port offsets spaced so no two instances' ports meet) with the default spares (the
capacity plan's), on the engine as it is (other instances running on it
count, as they do for a real ``up``). Before each ``up`` the engine is measured once, and both plans
are computed from that same reading:

* **old**: every other instance's containers by their memory limits (proxies left out), the new copy
  by its limits: what ``up`` did before issue 23;
* **new**: every container by ``min(limit, measured x MARGIN)``, spares being refilled kept, the new
  copy by the measured use of a running reddit copy: what ``up`` does now (and what it booted).

After the last ``up`` it waits (``--settle`` s at most) for the booted spares to be ready, resets
``pmd1``'s sites once and times how long their spares take to be back (the next episode needs them),
prints the engine's used memory (every container, measured) and removes every instance it made.

Usage: .venv/bin/python bench/density.py [--n 16] [--sites reddit|all|a,b] [--settle 300] [--keep] [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from envctl.lab import Lab
from envctl.plan import GIB, MARGIN, measure_engine, plan

OFFSET = 54000  # reddit's 9999 + 54001.. stays below 65535; tests use other offsets


def offsets(ports: list[int], n: int) -> list[int]:
    """n port offsets, the smallest even spacing from OFFSET (or lower) at which no two instances' ports
    meet and every port stays below 65536."""
    for step in range(1, 5000):
        base = min(OFFSET, 65535 - max(ports) - step * n)
        if base < 1024:
            break
        seen: set[int] = set()
        ok = True
        for i in range(1, n + 1):
            mine = {p + base + step * i for p in ports}
            if mine & seen:
                ok = False
                break
            seen |= mine
        if ok:
            return [base + step * i for i in range(1, n + 1)]
    raise SystemExit(f"no spacing fits {n} instances of these ports below 65536")


def gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16, help="instances to bring up [16]")
    ap.add_argument("--settle", type=float, default=300, help="seconds to wait for the spares at the end [300]")
    ap.add_argument("--sites", default="reddit", help="sites per instance: a,b or 'all' [reddit]")
    ap.add_argument("--keep", action="store_true", help="leave the instances up")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    names = [f"pmd{i}" for i in range(1, a.n + 1)]
    catalog = Lab(instance=names[0]).catalog
    sites = [s for s in catalog.sites if "mini" in catalog.site(s).flavors] if a.sites == "all" else a.sites.split(",")
    # the sites that keep spares (reset tier spare): an instance counts when every one of them has its spare
    spare_sites = [s for s in sites if catalog.site(s).reset.tier == "spare"]
    offs = offsets([p for s in sites for p in catalog.site(s).public_ports().values()], a.n)
    rows: list[dict[str, Any]] = []
    out: dict[str, Any] = {"n": a.n, "margin": MARGIN, "sites": sites, "spare_sites": spare_sites}
    start = time.monotonic()

    def every(spares: dict[str, int]) -> int:
        return int(all(spares.get(s, 0) > 0 for s in spare_sites))

    try:
        for i, name in enumerate(names):
            lab = Lab(instance=name)
            lab.down(volumes=True)
            e = measure_engine()
            old_res, old_n = e.held_by_others(name, by_limits=True)
            new_res, new_n = e.held_by_others(name)
            old = plan(lab.catalog, sites, "mini", reserved=old_res, others=old_n).spares()
            predicted = plan(lab.catalog, sites, "mini", reserved=new_res, others=new_n,
                             measured=e.site_use("mini", exclude=name)).spares()
            t = time.monotonic()
            r = lab.up(sites, flavor="mini", port_offset=offs[i], login=False)
            row = {"instance": name, "ok": r.ok, "up_s": round(time.monotonic() - t, 1),
                   "old_plan_spares": every(old), "new_plan_spares": every(r.spares), "predicted": every(predicted),
                   "spares": r.spares, "others": new_n, "held_by_limits": old_res, "held_measured": new_res,
                   "short": "; ".join(f"{k}: {v}" for k, v in r.spares_short.items())}
            rows.append(row)
            print(f"{name}: up {row['up_s']}s ok={r.ok}; {new_n} other instances hold {gib(old_res)} by limits, "
                  f"{gib(new_res)} measured; a spare for every spare-tier site by limits {bool(row['old_plan_spares'])}, "
                  f"measured {bool(row['new_plan_spares'])} {r.spares}"
                  + (f" ({row['short']})" if row["short"] else ""), file=sys.stderr, flush=True)
        deadline = time.monotonic() + a.settle
        ready: dict[str, int] = {}
        def ready_all(n: str) -> int:  # 1 when every spare-tier site of n has a ready spare
            got = {s.site: s.spares_ready for s in Lab(instance=n).status().sites}
            return int(all(got.get(s, 0) > 0 for s in spare_sites))

        while time.monotonic() < deadline:
            ready = {n: ready_all(n) for n in names}
            if all(ready[r["instance"]] >= r["new_plan_spares"] for r in rows):
                break
            time.sleep(5)
        e = measure_engine()
        out.update({"rows": rows, "old_plan_with_spare": sum(1 for r in rows if r["old_plan_spares"] > 0),
                    "new_plan_with_spare": sum(1 for r in rows if r["new_plan_spares"] > 0),
                    "spares_ready": sum(1 for n in names if ready.get(n, 0) > 0),
                    "engine_used_bytes": e.used_bytes, "engine_source": e.source,
                    "ours_measured_bytes": sum(h.measured or 0 for h in e.containers if h.instance in names),
                    "up_seconds": round(time.monotonic() - start, 1)})
        # the next episode needs the spare back: reset pmd1's reddit and time the refill
        lab = Lab(instance=names[0])
        if ready.get(names[0], 0) > 0 and spare_sites:
            t = time.monotonic()
            res = lab.reset(spare_sites)
            out["reset_tier"] = ",".join(sorted({x.tier for x in res}))
            out["reset_s"] = round(time.monotonic() - t, 2)
            back = None
            while time.monotonic() - t < 300:
                if ready_all(names[0]):
                    back = round(time.monotonic() - t, 1)
                    break
                time.sleep(1)
            out["spare_back_s"] = back
    finally:
        if not a.keep:
            for n in names:
                try:
                    Lab(instance=n).down(volumes=True)
                except Exception as exc:  # noqa: BLE001 - clean up the rest
                    print(f"down {n}: {exc}", file=sys.stderr)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{a.n} mini instances of {', '.join(sites)}, margin x{MARGIN}, in {out.get('up_seconds')} s:")
        print(f"  with a spare for every spare-tier site ({', '.join(spare_sites)}) by the old plan (limits): "
              f"{out.get('old_plan_with_spare')} of {a.n}")
        print(f"  the same by the new plan (measured): {out.get('new_plan_with_spare')} of {a.n}"
              f" (ready at the end: {out.get('spares_ready')})")
        print(f"  engine's containers use {gib(out.get('engine_used_bytes', 0))} ({out.get('engine_source')}); "
              f"these {a.n} instances {gib(out.get('ours_measured_bytes', 0))}")
        if "reset_tier" in out:
            print(f"  reset of pmd1's {', '.join(spare_sites)}: tier {out['reset_tier']} in {out['reset_s']} s; "
                  f"spares back after {out['spare_back_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
