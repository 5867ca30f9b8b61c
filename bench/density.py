"""Benchmark (issue 23): how many instances get their spare, by memory limits vs by measured use.

Brings up N mini instances of reddit (``pmd1`` .. ``pmdN``, port offsets 54001.., one after another)
with the default spares (the capacity plan's), on the engine as it is (other instances running on it
count, as they do for a real ``up``). Before each ``up`` the engine is measured once, and both plans
are computed from that same reading:

* **old**: every other instance's containers by their memory limits (proxies left out), the new copy
  by its limits: what ``up`` did before issue 23;
* **new**: every container by ``min(limit, measured x MARGIN)``, spares being refilled kept, the new
  copy by the measured use of a running reddit copy: what ``up`` does now (and what it booted).

After the last ``up`` it waits (``--settle`` s at most) for the booted spares to be ready, resets
``pmd1``'s reddit once and times how long its spare takes to be back (the next episode needs it),
prints the engine's used memory (every container, measured) and removes every instance it made.

Usage: .venv/bin/python bench/density.py [--n 16] [--settle 300] [--keep] [--json]
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


def gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16, help="instances to bring up [16]")
    ap.add_argument("--settle", type=float, default=300, help="seconds to wait for the spares at the end [300]")
    ap.add_argument("--keep", action="store_true", help="leave the instances up")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    names = [f"pmd{i}" for i in range(1, a.n + 1)]
    rows: list[dict[str, Any]] = []
    out: dict[str, Any] = {"n": a.n, "margin": MARGIN}
    start = time.monotonic()
    try:
        for i, name in enumerate(names, 1):
            lab = Lab(instance=name)
            lab.down(volumes=True)
            e = measure_engine()
            old_res, old_n = e.held_by_others(name, by_limits=True)
            new_res, new_n = e.held_by_others(name)
            old = plan(lab.catalog, ["reddit"], "mini", reserved=old_res, others=old_n).spares()["reddit"]
            predicted = plan(lab.catalog, ["reddit"], "mini", reserved=new_res, others=new_n,
                             measured=e.site_use("mini", exclude=name)).spares()["reddit"]
            t = time.monotonic()
            r = lab.up(["reddit"], flavor="mini", port_offset=OFFSET + i, login=False)
            row = {"instance": name, "ok": r.ok, "up_s": round(time.monotonic() - t, 1),
                   "old_plan_spares": old, "new_plan_spares": r.spares.get("reddit", 0), "predicted": predicted,
                   "others": new_n, "held_by_limits": old_res, "held_measured": new_res,
                   "short": r.spares_short.get("reddit", "")}
            rows.append(row)
            print(f"{name}: up {row['up_s']}s ok={r.ok}; {new_n} other instances hold {gib(old_res)} by limits, "
                  f"{gib(new_res)} measured; spare by limits {old}, measured {row['new_plan_spares']}"
                  + (f" ({row['short']})" if row["short"] else ""), file=sys.stderr, flush=True)
        deadline = time.monotonic() + a.settle
        ready: dict[str, int] = {}
        while time.monotonic() < deadline:
            ready = {n: next((s.spares_ready for s in Lab(instance=n).status().sites if s.site == "reddit"), 0)
                     for n in names}
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
        if ready.get(names[0], 0) > 0:
            t = time.monotonic()
            res = lab.reset(["reddit"])
            out["reset_tier"], out["reset_s"] = res[0].tier, round(time.monotonic() - t, 2)
            back = None
            while time.monotonic() - t < 300:
                if next((s.spares_ready for s in lab.status().sites if s.site == "reddit"), 0) > 0:
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
        print(f"{a.n} mini reddit instances, margin x{MARGIN}, in {out.get('up_seconds')} s:")
        print(f"  with a spare by the old plan (limits): {out.get('old_plan_with_spare')} of {a.n}")
        print(f"  with a spare by the new plan (measured): {out.get('new_plan_with_spare')} of {a.n}"
              f" (ready at the end: {out.get('spares_ready')})")
        print(f"  engine's containers use {gib(out.get('engine_used_bytes', 0))} ({out.get('engine_source')}); "
              f"these {a.n} instances {gib(out.get('ours_measured_bytes', 0))}")
        if "reset_tier" in out:
            print(f"  reset of pmd1 reddit: {out['reset_tier']} in {out['reset_s']} s; spare back after "
                  f"{out['spare_back_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
