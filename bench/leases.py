"""Parallel evaluation on leased instances (issue #16), mini flavor.

W workers each run T short episodes (lease -> check the instance is pristine -> write a post on the
reddit stand-in -> check it landed -> release) against a pool of N instances served by a real
``envctl serve`` (HTTP). Baseline in the same run: the same episodes on one shared instance, one at a
time (write, check, synchronous reset). Prints episodes per minute for both, their ratio, and the
share of leased episodes that saw another worker's writes (goal: 0). No assertions.

    python bench/leases.py [--instances 2] [--workers 3] [--episodes 3] [--spares 0]
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from typing import Any

import requests

from envctl.catalog import load_catalog
from envctl.images.build import build_for_sites
from envctl.lab import Lab
from envctl.leases.members import auth_dir
from envctl.backends.docker import ENGINE as dk
from envctl.serve import make_pool, serve

POOL, BASE_OFFSET = "lsbench", 33000
SITES = ["reddit", "homepage"]


def post(base: str, title: str) -> None:
    s = requests.Session()
    r = s.post(f"{base}/login_check", data={"_username": "MarvelsGrantMan136", "_password": "test1234"}, timeout=60)
    r.raise_for_status()
    r = s.post(f"{base}/submit", data={"submission[title]": title, "submission[forum]": "books",
                                       "submission[url]": "", "submission[body]": "bench"}, timeout=60)
    if not (r.ok and title in r.text):
        raise RuntimeError(f"post failed: HTTP {r.status_code}")


def down(names: list[str]) -> None:
    for n in names:
        Lab(instance=n).down()
        for c in dk.containers(instance=n):
            dk.remove([c.name])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--episodes", type=int, default=3, help="per worker")
    ap.add_argument("--spares", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="leave the pool running")
    args = ap.parse_args()
    members = [f"{POOL}-{i}" for i in range(1, args.instances + 1)]
    cat = load_catalog()
    build_for_sites(cat, SITES, "mini")
    down(members + [POOL])
    logs: list[str] = []
    lab = Lab(cat, instance=POOL)
    pool = make_pool(lab, args.instances, flavor="mini", sites=SITES, spares=args.spares, heal_after=30,
                     base_offset=BASE_OFFSET, say=logs.append)
    server = serve(lab, "127.0.0.1", 0, say=lambda _m: None, pool=pool)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    t0 = time.monotonic()
    pool.start()
    while not (len(pool.rows()) == args.instances and all(r["state"] == "free" for r in pool.rows())):
        if time.monotonic() - t0 > 600:
            raise SystemExit(f"the pool did not come up: {pool.rows()} {logs[-5:]}")
        time.sleep(0.5)
    print(f"pool of {args.instances} up in {time.monotonic() - t0:.1f}s (spares per site: {args.spares})")

    try:
        # -- leased: W workers x T episodes on the pool ------------------------------------------
        saw_others: list[bool] = []
        waits: list[float] = []
        errors: list[str] = []
        lock = threading.Lock()

        def worker(w: int) -> None:
            for ep in range(args.episodes):
                try:
                    t = time.monotonic()
                    r = requests.post(f"{url}/leases", json={"sites": ["reddit"], "ttl": 300, "wait": 600,
                                                             "holder": f"w{w}"}, timeout=900)
                    r.raise_for_status()
                    lease: dict[str, Any] = r.json()
                    waited = time.monotonic() - t
                    dirty = not Lab(cat, instance=lease["instance"]).verify("reddit").ok
                    post(lease["env"]["WA_REDDIT"], f"bench w{w} e{ep} {uuid.uuid4().hex[:6]}")
                    landed = not Lab(cat, instance=lease["instance"]).verify("reddit").ok
                    requests.delete(f"{url}/leases/{lease['id']}", timeout=60).raise_for_status()
                    with lock:
                        saw_others.append(dirty)
                        waits.append(waited)
                        if not landed:
                            errors.append(f"w{w} e{ep}: the write did not land")
                except Exception as exc:  # noqa: BLE001 - counted, the run goes on
                    with lock:
                        errors.append(f"w{w} e{ep}: {exc}")

        t = time.monotonic()
        threads = [threading.Thread(target=worker, args=(w,)) for w in range(args.workers)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        leased_s = time.monotonic() - t
        done = len(saw_others)
        leased_rate = done / leased_s * 60
        dirty_share = sum(saw_others) / done if done else float("nan")
        t_free = time.monotonic()
        while not all(r["state"] == "free" for r in pool.rows()):  # the baseline must not start on a release
            if time.monotonic() - t_free > 600:                        # still being reset (a false "not pristine")
                raise SystemExit(f"the pool's releases did not end: {pool.rows()}")
            time.sleep(0.5)
        summary = pool.summary()
        server.shutdown()
        server.server_close()
        pool.stop()

        # -- baseline: one shared instance, one episode at a time ---------------------------------
        shared = Lab(cat, instance=members[0], auth_dir=auth_dir(members[0]))
        base = shared.env("webarena")["REDDIT"]
        n = args.workers * args.episodes
        t = time.monotonic()
        base_dirty = 0
        for ep in range(n):
            base_dirty += not shared.verify("reddit").ok
            post(base, f"bench shared e{ep} {uuid.uuid4().hex[:6]}")
            [res] = shared.reset(["reddit"], refill=args.spares > 0)
            if not res.ok:
                errors.append(f"shared e{ep}: reset failed: {res.error}")
        shared_s = time.monotonic() - t
        shared_rate = n / shared_s * 60

        print(f"leased: {args.workers} workers x {args.episodes} episodes on {args.instances} instances: "
              f"{done} episodes in {leased_s:.1f}s = {leased_rate:.2f} episodes/min; "
              f"lease wait p50 {statistics.median(waits) if waits else float('nan'):.1f}s, max {max(waits, default=0):.1f}s")
        print(f"shared: 1 instance, one episode at a time: {n} episodes in {shared_s:.1f}s = {shared_rate:.2f} episodes/min")
        print(f"ratio leased/shared: {leased_rate / shared_rate:.2f}x")
        print(f"episodes that saw another worker's writes: {sum(saw_others)}/{done} = {dirty_share:.0%} (goal 0); "
              f"shared baseline: {base_dirty}/{n}")
        print(f"resets: {summary['resets']}")
        if errors:
            print(f"errors ({len(errors)}): " + "; ".join(errors[:5]))
    finally:
        if not args.keep:
            down(members + [POOL])


if __name__ == "__main__":
    main()
