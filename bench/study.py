"""A study as a user would run it: tasks through leases on a pool vs. the same tasks on one shared instance.

Leased: ``envctl serve --instance P --instances N --flavor mini`` (the command itself, a subprocess);
W workers each take the next task, lease an instance with the task's sites (``Lab.lease``: the one
client, heartbeats, LeaseLost), check every site of the leased instance verifies pristine, run the
task with the bundled reference agent and the benchmark's evaluators (``run_smoke`` with the lease's
URLs and login state), and release. Baseline in the same run: the same tasks on one shared instance,
one after another in the task file's (dependency) order, as AgentLab runs WebArena, reset only where a
task asks for it (its ``require_reset``), the pristine check before each task likewise.

Prints tasks per minute for both, their ratio, the share of tasks that started on a state that did not
verify pristine (goal: 0 with leases), the release-to-next-lease time (p50/p95, from the pool's
figures) and a BrowserGym full_reset through a lease. No assertions.

    python bench/study.py [--instances 2] [--workers 3] [--rounds 2] [--sites reddit,homepage]
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

from common import free_port
from envctl.catalog import load_catalog
from envctl.images.build import build_for_sites
from envctl.lab import Lab
from envctl.leases.client import LeaseClient
from envctl.leases.members import auth_dir
from envctl.backends.docker import ENGINE as dk
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




def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2, help="times the task list is run")
    ap.add_argument("--sites", default="reddit,homepage")
    ap.add_argument("--spares", type=int, default=0)
    args = ap.parse_args()
    sites = args.sites.split(",")
    members = [f"{POOL}-{i}" for i in range(1, args.instances + 1)]
    cat = load_catalog()
    build_for_sites(cat, sites, "mini")
    down(members + [POOL])
    state = Path(tempfile.mkdtemp(prefix="envctl-study-"))
    os.environ["ENVCTL_STATE_DIR"] = str(state)
    tasks = [t for t in load_task_set("mini") if set(t.sites) <= set(sites)] * args.rounds
    print(f"{len(tasks)} tasks ({args.rounds} rounds of the bundled mini tasks for {', '.join(sites)})")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(state / "serve.log", "ab")
    serve = subprocess.Popen([sys.executable, "-m", "envctl", "serve", "--instance", POOL, "--instances",
                              str(args.instances), "--flavor", "mini", "--sites", args.sites, "--spares",
                              str(args.spares), "--base-offset", str(BASE_OFFSET), "--port", str(port)],
                             stdout=log, stderr=log, start_new_session=True)
    client = LeaseClient(url)
    try:
        t0 = time.monotonic()
        while True:
            try:
                rows = client.listing()["instances"]
                if len(rows) == args.instances and all(r["state"] == "free" for r in rows):
                    break
            except Exception:  # noqa: BLE001 - not answering yet
                pass
            if time.monotonic() - t0 > 900 or serve.poll() is not None:
                raise SystemExit(f"the pool did not come up; see {state / 'serve.log'}")
            time.sleep(0.5)
        print(f"pool of {args.instances} up in {time.monotonic() - t0:.1f}s")

        # -- leased ---------------------------------------------------------------------------------
        queue = list(enumerate(tasks))
        lock = threading.Lock()
        leased: list[dict[str, Any]] = []

        def worker(w: int) -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    i, task = queue.pop(0)
                try:
                    with Lab.lease(sites=list(task.sites), server=url, ttl=120, wait=900, holder=f"w{w}") as lease:
                        clean = pristine(lease.instance)
                        auth = Path(tempfile.mkdtemp(dir=state))
                        for name, st in lease.auth.items():
                            (auth / name).write_text(json.dumps(st))
                        res = run_smoke([task], env=lease.env, auth_dir=auth, sites=list(task.sites), max_parallel=1)
                        ok = next(r for r in res.tasks if not r.negative_control).status == "pass"
                    with lock:
                        leased.append({"task": task.task_id, "pristine": clean, "pass": ok})
                except Exception as exc:  # noqa: BLE001 - counted; the study goes on
                    with lock:
                        leased.append({"task": task.task_id, "pristine": False, "pass": False, "error": str(exc)[:200]})

        t = time.monotonic()
        threads = [threading.Thread(target=worker, args=(w,)) for w in range(args.workers)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        leased_s = time.monotonic() - t

        # BrowserGym's full_reset() through a lease: GET /reset (answered when done), then /status
        lease = client.acquire(sites[:1], ttl=120, wait=600)
        t = time.monotonic()
        requests.get(f"{lease.full_reset}/reset", timeout=600)
        ready = requests.get(f"{lease.full_reset}/status", timeout=30).text
        full_reset_s = time.monotonic() - t
        client.release(lease.id)
        t = time.monotonic()
        while not all(r["state"] == "free" for r in client.listing()["instances"]):  # the baseline waits for them
            if time.monotonic() - t > 600:
                raise SystemExit("the pool's releases did not end")
            time.sleep(0.5)
        summary = client.listing()["summary"]
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(60)

    # -- shared: one instance, the tasks in order, reset where a task asks -----------------------
    shared = Lab(cat, instance=members[0], auth_dir=auth_dir(members[0]))
    shared_rows: list[dict[str, Any]] = []
    env = {**shared.env("visualwebarena"), **shared.env("webarena")}
    shared.login([s for s in sites if cat.site(s).login])
    t = time.monotonic()
    for task in tasks:
        clean = pristine(members[0])
        res = run_smoke([task], env=env, auth_dir=shared.auth_dir, sites=list(task.sites), max_parallel=1)
        ok = next(r for r in res.tasks if not r.negative_control).status == "pass"
        shared_rows.append({"task": task.task_id, "pristine": clean, "pass": ok})
        if task.require_reset:
            shared.reset(list(task.sites))
    shared_s = time.monotonic() - t
    down(members + [POOL])

    n = len(tasks)
    lr, sr = len(leased) / leased_s * 60, n / shared_s * 60
    turn = summary.get("turnaround") or {}
    print(f"leased: {args.workers} workers on {args.instances} instances: {len(leased)} tasks in {leased_s:.1f}s = "
          f"{lr:.2f} tasks/min; passed {sum(r['pass'] for r in leased)}/{len(leased)}")
    print(f"shared: 1 instance, tasks in order: {n} tasks in {shared_s:.1f}s = {sr:.2f} tasks/min; "
          f"passed {sum(r['pass'] for r in shared_rows)}/{n}")
    print(f"ratio leased/shared: {lr / sr:.2f}x")
    print(f"tasks that started on a state that did not verify pristine: leased {sum(not r['pristine'] for r in leased)}"
          f"/{len(leased)} (goal 0), shared {sum(not r['pristine'] for r in shared_rows)}/{n}")
    print(f"release to next lease (free again): p50 {turn.get('p50_s')}s p95 {turn.get('p95_s')}s over {turn.get('count')} "
          f"releases; resets {summary.get('resets')}")
    print(f"BrowserGym full_reset through a lease ({sites[0]}): {full_reset_s:.2f}s, first /status: {ready!r}")
    errors = [r["error"] for r in leased if r.get("error")]
    if errors:
        print(f"errors ({len(errors)}): " + "; ".join(errors[:3]))


if __name__ == "__main__":
    main()
