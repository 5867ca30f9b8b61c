"""Benchmark (issue 23): how many instances get their spare, by memory limits vs by measured use.

Brings up N mini instances of ``--sites`` (default reddit; ``all`` for every site; ``pmd1`` .. ``pmdN``,
one after another, on port offsets spaced so no two instances' ports meet, below the kernel's
ephemeral port range) with the default spares (the
capacity plan's), on the engine as it is (other instances running on it
count, as they do for a real ``up``). Before each ``up`` the engine is measured once, and both plans
are computed from that same reading:

* **old**: every other instance's containers by their memory limits (proxies left out), the new copy
  by its limits: what ``up`` did before issue 23;
* **new**: every container by ``min(limit, measured x MARGIN)``, spares being refilled kept, the new
  copy by the measured use of a running reddit copy: what ``up`` does now (and what it booted).

After the last ``up`` it waits (``--settle`` s at most) for the booted spares to be ready, resets the
spare-tier sites of every instance side by side (the tiers used, p50 / p95), times how long until every
spare is back (the next episode needs them), prints the engine's used memory (every container,
measured) and removes every instance it made.

Usage: .venv/bin/python bench/density.py [--n 16] [--sites reddit|all|a,b] [--settle 300] [--keep] [--json]
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from envctl.lab import Lab
from envctl.lab import engine_memory as measure_engine
from envctl.plan import GIB, MARGIN, plan

def ephemeral_low() -> int:
    """The first port the kernel hands out to outgoing connections: published ports stay below it (a
    port in that range can be held for a moment by any client's connection)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def offsets(ports: list[int], n: int) -> list[int]:
    """n port offsets, the smallest even spacing at which no two instances' ports meet, every port
    stays below the kernel's ephemeral range and the first instance starts at offset 10000 or lower."""
    top = ephemeral_low() - 1
    for step in range(1, 5000):
        base = min(10000, top - max(ports) - step * n)
        if base < 1024 - min(ports):
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
    raise SystemExit(f"no spacing fits {n} instances of these ports below the ephemeral range ({top + 1})")


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
        # every instance resets its spare-tier sites side by side (one episode ends everywhere at once),
        # then the next episode needs every spare back: time the refill of all of them
        if spare_sites:
            def reset_one(n: str) -> list[Any]:
                return Lab(instance=n).reset(spare_sites)

            t = time.monotonic()
            with ThreadPoolExecutor(max_workers=len(names)) as pool:
                results = [r for rs in pool.map(reset_one, names) for r in rs]
            out["resets"] = len(results)
            out["resets_ok"] = sum(1 for r in results if r.ok)
            out["reset_tiers"] = {k: sum(1 for r in results if r.tier == k) for k in sorted({r.tier for r in results})}
            why: dict[str, int] = {}
            for r in results:
                for e in r.escalations:  # why a reset left the spare tier, with the numbers left out
                    k = re.sub(r"[0-9a-f]{6,}|\d+(\.\d+)?", "N", e)[:90]
                    why[k] = why.get(k, 0) + 1
            out["escalations"] = why
            secs = sorted(r.seconds for r in results)
            out["reset_p50_s"] = round(statistics.median(secs), 3)
            out["reset_p95_s"] = round(secs[min(len(secs) - 1, int(0.95 * len(secs)))], 3)
            out["all_resets_s"] = round(time.monotonic() - t, 2)
            back = None
            while time.monotonic() - t < 600:
                if all(ready_all(n) for n in names):
                    back = round(time.monotonic() - t, 1)
                    break
                time.sleep(2)
            out["spares_back_s"] = back
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
        if "resets" in out:
            print(f"  every instance resets {', '.join(spare_sites)} side by side: {out['resets_ok']} of {out['resets']} "
                  f"ok, tiers {out['reset_tiers']}, p50 {out['reset_p50_s']} s, p95 {out['reset_p95_s']} s "
                  f"(all {out['all_resets_s']} s); every spare back after {out['spares_back_s']} s")
            for k, v in sorted(out["escalations"].items(), key=lambda kv: -kv[1]):
                print(f"    escalated {v}x: {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
