"""A study as a user would run it: tasks through leases on a pool, for W = 1, 2, 3 workers, vs. the same tasks on one
shared instance, measured in the same run.

Leased: ``envctl serve --instance study --instances N --flavor mini`` (the command itself, a subprocess, with the
pool's defaults: spares where the capacity plan fits them); W workers each take the next task, lease an instance with
the task's sites (``envctl.leases.lease``: the one client, heartbeats, LeaseLost), check every site of the leased
instance verifies pristine (envctl's fingerprints, from this process), run the task with the bundled reference agent
and the benchmark's evaluators (``run_smoke`` with the lease's URLs and login state), and release. Each worker times
its release -> next lease granted (what a lab waits between episodes; the first lease of each worker is left out).
Baseline: the same tasks on one shared instance, one after another in the task file's (dependency) order, as
AgentLab runs WebArena, reset only where a task asks for it (its ``require_reset``), the pristine check likewise.

Prints, per W: tasks/min, its ratio to W = 1 and to the shared baseline, release -> next lease p50/p95, and the
tasks that started on a state that did not verify pristine (goal: 0 with leases). No assertions.

``--mode access`` (issue 40): the bundled mixed task set (each task ``read`` or ``write``, its ``envctl_access``) with
W workers on one pool of W instances, run with exclusive (write) leases only, then with readers sharing (a read task
takes a read lease, shared by up to ``--readers`` R; a write task a write lease), for each R given, in the same run:
tasks/min, instances used (distinct, and the most in use at once) and their memory (the engine's measured use of one
instance's containers x that peak), tainted read leases, and tasks that started on a state that did not verify.

    python bench/study.py [--workers 1,2,3] [--instances 3] [--rounds 2] [--sites reddit,homepage] [--spares K]
    python bench/study.py --mode access --workers 4 [--readers 2,4] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import requests

from common import free_port, pct
from envctl.backends.docker import ENGINE as dk
from envctl.catalog import load_catalog
from envctl.images.build import build_for_sites
from envctl.lab import Lab, engine_memory
from envctl.leases import lease
from envctl.leases.client import LeaseClient
from envctl.leases.members import auth_dir
from envctl.smoke import load_task_set, run_smoke

POOL, BASE_OFFSET = "study", 34000


def down(names: list[str]) -> None:
    for n in names:
        Lab(instance=n).down()
        for c in dk.containers(instance=n):
            dk.remove([c.name])


def pristine(instance: str) -> bool:
    lab = Lab(instance=instance)
    return all(lab.verify(s).ok for s in lab.sites_up())


def passed(res: Any) -> bool:
    return next(r for r in res.tasks if not r.negative_control).status == "pass"


def run_leased(url: str, tasks: list[Any], workers: int, state: Path) -> dict[str, Any]:
    queue = list(tasks)
    lock = threading.Lock()
    rows: list[dict[str, Any]] = []
    turn: list[float] = []

    def worker(w: int) -> None:
        released_at: float | None = None
        while True:
            with lock:
                if not queue:
                    return
                task = queue.pop(0)
            try:
                with lease(sites=list(task.sites), server=url, ttl=120, wait=900, holder=f"w{w}") as held:
                    if released_at is not None:
                        with lock:
                            turn.append(time.monotonic() - released_at)
                    clean = pristine(held.instance)
                    auth = Path(tempfile.mkdtemp(dir=state))
                    for name, st in held.auth.items():
                        (auth / name).write_text(json.dumps(st))
                    res = run_smoke([task], env=held.env, auth_dir=auth, sites=list(task.sites), max_parallel=1)
                released_at = time.monotonic()
                with lock:
                    rows.append({"task": task.task_id, "pristine": clean, "pass": passed(res)})
            except Exception as exc:  # noqa: BLE001 - counted; the study goes on
                released_at = None
                with lock:
                    rows.append({"task": task.task_id, "pristine": False, "pass": False, "error": str(exc)[:200]})

    t = time.monotonic()
    threads = [threading.Thread(target=worker, args=(w,)) for w in range(workers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return {"seconds": time.monotonic() - t, "rows": rows, "turn": turn}


def wait_free(client: LeaseClient, n: int, limit: float = 900) -> float:
    t0 = time.monotonic()
    while True:
        try:
            rows = client.listing()["instances"]
            if len(rows) == n and all(r["state"] == "free" for r in rows):
                return time.monotonic() - t0
        except Exception:  # noqa: BLE001 - not answering yet
            pass
        if time.monotonic() - t0 > limit:
            raise SystemExit("the pool did not come up (or its releases did not end)")
        time.sleep(0.5)


def run_access(url: str, tasks: list[Any], workers: int, state: Path, shared: bool) -> dict[str, Any]:
    """W workers over ``tasks``: each a lease with the task's access (``shared``) or a write lease (not), the instance
    checked pristine (every site, envctl's fingerprints) when the task starts; which instances were in use when."""
    queue = list(tasks)
    lock = threading.Lock()
    rows: list[dict[str, Any]] = []
    using: dict[str, int] = {}
    peak = [0]

    def worker(w: int) -> None:
        while True:
            with lock:
                if not queue:
                    return
                task = queue.pop(0)
            access = (task.access or "write") if shared else "write"
            try:
                with lease(sites=list(task.sites), server=url, ttl=300, wait=1800, holder=f"w{w} {task.task_id}",
                           access=access) as held:
                    with lock:
                        using[held.instance] = using.get(held.instance, 0) + 1
                        peak[0] = max(peak[0], sum(1 for n in using.values() if n))
                    try:
                        clean = pristine(held.instance)
                        auth = Path(tempfile.mkdtemp(dir=state))
                        for name, st in held.auth.items():
                            (auth / name).write_text(json.dumps(st))
                        # a write task checked again after a reset (envctl_recheck_after_reset): the lease's own
                        reset = None if access == "read" or not held.full_reset else \
                            (lambda _sites, url=held.full_reset: requests.get(f"{url}/reset", timeout=900).raise_for_status())
                        res = run_smoke([task], env=held.env, auth_dir=auth, sites=list(task.sites), max_parallel=1,
                                        reset=reset)
                    finally:
                        with lock:
                            using[held.instance] -= 1
                with lock:
                    rows.append({"task": task.task_id, "access": access, "instance": held.instance,
                                 "pristine": clean, "pass": passed(res), "tainted": held.tainted})
            except Exception as exc:  # noqa: BLE001 - counted; the study goes on
                with lock:
                    rows.append({"task": task.task_id, "access": access, "pristine": False, "pass": False,
                                 "error": str(exc)[:200]})

    t = time.monotonic()
    threads = [threading.Thread(target=worker, args=(w,)) for w in range(workers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return {"seconds": time.monotonic() - t, "rows": rows, "peak": peak[0],
            "used": sorted({r["instance"] for r in rows if r.get("instance")})}


def instance_memory(names: list[str]) -> float:
    """The mean measured memory (MiB) of one instance's containers (copies and proxy), over ``names``."""
    held = engine_memory().containers
    per = [sum(h.measured or 0 for h in held if h.instance == n) for n in names]
    per = [x for x in per if x]
    return sum(per) / len(per) / (1 << 20) if per else float("nan")


def serve_pool(size: int, sites: str, spares: int | None, state: Path, readers: int | None = None) -> tuple[Any, str]:
    port = free_port()
    log = open(state / "serve.log", "ab")
    cmd = [sys.executable, "-m", "envctl", "serve", "--instance", POOL, "--instances", str(size), "--flavor", "mini",
           "--sites", sites, "--base-offset", str(BASE_OFFSET), "--port", str(port), "--reverify-every", "0"]
    if spares is not None:
        cmd += ["--spares", str(spares)]
    if readers is not None:
        cmd += ["--readers", str(readers)]
    return subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True), f"http://127.0.0.1:{port}"


def stop(serve: Any) -> None:
    serve.send_signal(signal.SIGTERM)
    serve.wait(60)


def main_access(args: argparse.Namespace) -> None:
    """``--mode access``: exclusive leases only vs readers sharing, on the bundled mixed task set."""
    workers = max(int(w) for w in args.workers.split(","))
    readers = [int(r) for r in args.readers.split(",")]
    size = args.instances or workers
    sites = args.sites.split(",")
    members = [f"{POOL}-{i}" for i in range(1, size + 1)]
    cat = load_catalog()
    build_for_sites(cat, sites, "mini")
    down(members + [POOL])
    state = Path(tempfile.mkdtemp(prefix="envctl-study-"))
    os.environ["ENVCTL_STATE_DIR"] = str(state)
    tasks = [t for t in load_task_set("mini") if set(t.sites) <= set(sites)] * args.rounds
    n_read = sum(1 for t in tasks if t.access == "read")
    print(f"{len(tasks)} tasks ({n_read} read, {len(tasks) - n_read} write; {args.rounds} rounds of the bundled mini "
          f"tasks for {', '.join(sites)}), W={workers}, a pool of {size}; load average {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} CPUs")
    runs: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    try:
        for label, shared, r in [("exclusive", False, None), *[(f"readers share (R={r})", True, r) for r in readers]]:
            serve, url = serve_pool(size, args.sites, args.spares, state, r)
            try:
                client = LeaseClient(url)
                print(f"{label}: pool of {size} up in {wait_free(client, size):.1f}s")
                time.sleep(5)
                got = run_access(url, tasks, workers, state, shared)
                wait_free(client, size)
                runs.append((label, got, client.listing()["summary"]))
            finally:
                stop(serve)
        mem = instance_memory(members)
    finally:
        down(members + [POOL])
    print(f"\none instance ({', '.join(sites)}) uses {mem:.0f} MiB (measured, mean over {size})")
    print("run | tasks/min | instances used (most at once) | their memory MiB | tainted read leases (server) | "
          "started on a state that did not verify | passed | errors")
    for label, got, summary in runs:
        rows = got["rows"]
        rate = len(rows) / got["seconds"] * 60
        tainted = sum(1 for x in rows if x.get("tainted"))
        print(f"{label} | {rate:.2f} | {len(got['used'])} ({got['peak']}) | {got['peak'] * mem:.0f} | {tainted} "
              f"({summary.get('tainted')}) | {sum(not x['pristine'] for x in rows)}/{len(rows)} | "
              f"{sum(x['pass'] for x in rows)}/{len(rows)} | {sum(1 for x in rows if x.get('error'))}")
        errors = [x["error"] for x in rows if x.get("error")]
        if errors:
            print("  errors: " + "; ".join(errors[:3]))
        failed = sorted({f"{x['task']} ({x['access']})" for x in rows if not x["pass"]})
        if failed:
            print(f"  tasks that did not pass: {', '.join(failed)}")
        print(f"  pool: verifications {summary.get('verifications')}, skipped {summary.get('verifications_skipped')}, "
              f"signal readings {summary.get('signal_reads')}, resets {summary.get('resets')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["scaling", "access"], default="scaling",
                    help="scaling: W workers vs one shared instance; access: exclusive leases vs readers sharing")
    ap.add_argument("--workers", default="1,2,3", help="worker counts, comma-separated (access: the largest)")
    ap.add_argument("--instances", type=int, default=None, help="pool size (default: the largest worker count)")
    ap.add_argument("--rounds", type=int, default=2, help="times the task list is run per worker count")
    ap.add_argument("--sites", default="reddit,homepage")
    ap.add_argument("--spares", type=int, default=None, help="spares per site (default: the pool's, from the plan)")
    ap.add_argument("--readers", default="2,4", help="access mode: the read leases one instance takes, each run")
    args = ap.parse_args()
    if args.mode == "access":
        return main_access(args)
    counts = [int(w) for w in args.workers.split(",")]
    size = args.instances or max(counts)
    sites = args.sites.split(",")
    members = [f"{POOL}-{i}" for i in range(1, size + 1)]
    cat = load_catalog()
    build_for_sites(cat, sites, "mini")
    down(members + [POOL])
    state = Path(tempfile.mkdtemp(prefix="envctl-study-"))
    os.environ["ENVCTL_STATE_DIR"] = str(state)
    tasks = [t for t in load_task_set("mini") if set(t.sites) <= set(sites)] * args.rounds
    print(f"{len(tasks)} tasks per run ({args.rounds} rounds of the bundled mini tasks for {', '.join(sites)}); "
          f"load average {os.getloadavg()[0]:.1f}")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(state / "serve.log", "ab")
    cmd = [sys.executable, "-m", "envctl", "serve", "--instance", POOL, "--instances", str(size), "--flavor", "mini",
           "--sites", args.sites, "--base-offset", str(BASE_OFFSET), "--port", str(port)]
    if args.spares is not None:
        cmd += ["--spares", str(args.spares)]
    serve = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)
    client = LeaseClient(url)
    runs: dict[int, dict[str, Any]] = {}
    try:
        print(f"pool of {size} up in {wait_free(client, size):.1f}s")
        for w in counts:
            time.sleep(5)  # spares refilled after the previous run
            runs[w] = run_leased(url, tasks, w, state)
            wait_free(client, size)
        summary = client.listing()["summary"]
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(60)

    shared = Lab(cat, instance=members[0], auth_dir=auth_dir(members[0]))
    shared_rows: list[dict[str, Any]] = []
    env = {**shared.env("visualwebarena"), **shared.env("webarena")}
    shared.login([s for s in sites if cat.site(s).login])
    t = time.monotonic()
    for task in tasks:
        clean = pristine(members[0])
        res = run_smoke([task], env=env, auth_dir=shared.auth_dir, sites=list(task.sites), max_parallel=1)
        shared_rows.append({"task": task.task_id, "pristine": clean, "pass": passed(res)})
        if task.require_reset:
            shared.reset(list(task.sites))
    shared_s = time.monotonic() - t
    down(members + [POOL])

    n = len(tasks)
    sr = n / shared_s * 60
    base = len(runs[counts[0]]["rows"]) / runs[counts[0]]["seconds"] * 60
    print(f"\nshared (1 instance, tasks in order): {sr:.2f} tasks/min, passed "
          f"{sum(r['pass'] for r in shared_rows)}/{n}, started non-pristine {sum(not r['pristine'] for r in shared_rows)}/{n}")
    print(f"pool of {size} ({', '.join(sites)}; spares {'the plan' if args.spares is None else args.spares}); "
          f"verifications {summary.get('verifications')}, skipped {summary.get('verifications_skipped')}, "
          f"resets skipped {summary.get('resets_skipped')}, resets {summary.get('resets')}")
    print("W | tasks/min | vs W=1 | vs shared | release -> next lease p50 / p95 (s) | passed | started non-pristine")
    for w in counts:
        r = runs[w]
        rate = len(r["rows"]) / r["seconds"] * 60
        turn = r["turn"]
        print(f"{w} | {rate:.2f} | {rate / base:.2f}x | {rate / sr:.2f}x | "
              f"{pct(turn, 50):.2f} / {pct(turn, 95):.2f} (n={len(turn)}) | {sum(x['pass'] for x in r['rows'])}/"
              f"{len(r['rows'])} | {sum(not x['pristine'] for x in r['rows'])}/{len(r['rows'])}")
        errors = [x["error"] for x in r["rows"] if x.get("error")]
        if errors:
            print(f"  errors ({len(errors)}): " + "; ".join(errors[:3]))


if __name__ == "__main__":
    main()
