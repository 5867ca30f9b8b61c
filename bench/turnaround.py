"""Whole-instance turnaround through a lease pool (issue #33), mini flavor: what a lab waits between two episodes.

``envctl serve --instances 1 --flavor mini`` over every WebArena site (shopping, shopping_admin, reddit, gitlab, map,
wikipedia, homepage), spares as the pool's plan gives them. Each episode leases the whole instance, reads every site
(a GET of its start page through the lease's URLs: every site counts as reached) and writes a post on reddit, then:

- **release -> next lease**: ``DELETE /leases/ID`` then at once ``POST /leases`` (``wait``), timed until the new
  lease is granted; ``--gap`` seconds between episodes (as between a lab's episodes);
- **BrowserGym full_reset through a lease**: ``GET <full_reset>/reset`` (answered when done) then ``/status``,
  as a lease's first call right after the previous release; back to back (right after the previous full_reset,
  no spare refilled yet); and once every spare is back.

Baseline in the same run, on the same instance while the bench holds it: what the pool did at release and acquire
before it counted requests: reset the written site, fingerprint every site (release), fingerprint every site again
(acquire), timed. Prints p50/p95, the ratio, the tiers the pool's resets ended on and its verification counts.

    python bench/turnaround.py [--n 5] [--gap 20] [--spares K]
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import requests

from common import free_port, pct
from envctl.backends.docker import ENGINE as dk
from envctl.catalog import load_catalog
from envctl.images.build import build_for_sites
from envctl.lab import Lab
from envctl.leases.members import auth_dir

POOL, BASE_OFFSET = "turn", 36000
SITES = ["shopping", "shopping_admin", "reddit", "gitlab", "map", "wikipedia", "homepage"]
URL_KEYS = {"shopping": "WA_SHOPPING", "shopping_admin": "WA_SHOPPING_ADMIN", "reddit": "WA_REDDIT",
            "gitlab": "WA_GITLAB", "map": "WA_MAP", "wikipedia": "WA_WIKIPEDIA", "homepage": "WA_HOMEPAGE"}


def down(names: list[str]) -> None:
    for n in names:
        Lab(instance=n).down()
        for c in dk.containers(instance=n):
            dk.remove([c.name])


FAILED: list[str] = []


def episode(lease: dict[str, Any]) -> None:
    """Read every site, write one post on reddit (with the lease's login state); a failed write is counted."""
    env = lease["env"]
    for site, key in URL_KEYS.items():
        if env.get(key):
            requests.get(env[key], timeout=60)
    s = requests.Session()
    for c in (lease["auth"].get("reddit_state.json") or {}).get("cookies", []):
        s.cookies.set(c["name"], c["value"], domain=c["domain"], path=c["path"])
    title = f"episode {uuid.uuid4().hex[:8]}"
    r = s.post(f"{env['WA_REDDIT']}/submit", data={"submission[title]": title, "submission[forum]": "books",
                                                   "submission[url]": "", "submission[body]": "bench"}, timeout=60)
    if not (r.ok and title in r.text):
        cookies = sorted(c["name"] for c in (lease["auth"].get("reddit_state.json") or {}).get("cookies", []))
        FAILED.append(f"HTTP {r.status_code} at {r.url} (lease {lease['id'][:8]}, reddit cookies {cookies})")
        print(f"episode's write failed: {FAILED[-1]}", flush=True)


def refreshed(url: str, lease: dict[str, Any]) -> dict[str, Any]:
    """The lease's login state after a reset (the reset renewed the files: GET /leases/ID?auth=1)."""
    return requests.get(f"{url}/leases/{lease['id']}?auth=1", timeout=120).json()["auth"]


def acquire(url: str) -> tuple[dict[str, Any], float]:
    t = time.monotonic()
    r = requests.post(f"{url}/leases", json={"ttl": 600, "wait": 600, "holder": "bench"}, timeout=700)
    if r.status_code != 201:
        raise SystemExit(f"no lease: HTTP {r.status_code} {r.text[:300]}")
    return r.json(), time.monotonic() - t


def spares_back(member: str) -> bool:
    lab = Lab(instance=member)
    ready = lab.spares_ready()
    return all(ready.get(s, 0) >= 1 for s in ready)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5, help="episodes")
    ap.add_argument("--gap", type=float, default=20.0, help="seconds an episode lasts (between lease and release)")
    ap.add_argument("--spares", type=int, default=None, help="spares per site (default: the pool's, from the plan)")
    args = ap.parse_args()
    member = f"{POOL}-1"
    build_for_sites(load_catalog(), SITES, "mini")
    down([member, POOL])
    state = Path(tempfile.mkdtemp(prefix="envctl-turn-"))
    os.environ["ENVCTL_STATE_DIR"] = str(state)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(state / "serve.log", "ab")
    serve = subprocess.Popen([sys.executable, "-m", "envctl", "serve", "--instance", POOL, "--instances", "1",
                              "--flavor", "mini", "--sites", ",".join(SITES), "--base-offset", str(BASE_OFFSET),
                              "--port", str(port)] + ([] if args.spares is None else ["--spares", str(args.spares)]),
                             stdout=log, stderr=log, start_new_session=True)
    turn: list[float] = []
    full_after_release: list[float] = []
    full_back_to_back: list[float] = []
    full_spares_back: list[float] = []
    baseline: list[float] = []
    try:
        t0 = time.monotonic()
        while True:  # the server answers once it listens (503 + Retry-After while the pool starts)
            try:
                requests.get(f"{url}/leases", timeout=5)
                break
            except requests.RequestException:
                if serve.poll() is not None or time.monotonic() - t0 > 120:
                    raise SystemExit(f"envctl serve did not start; see {state / 'serve.log'}")
                time.sleep(0.3)
        lease, _ = acquire(url)
        print(f"pool of one whole instance up and leased in {time.monotonic() - t0:.1f}s; "
              f"load average {os.getloadavg()[0]:.1f}")
        deadline = time.monotonic() + 600
        while not spares_back(member) and time.monotonic() < deadline:
            time.sleep(1)
        for _ in range(args.n):
            episode(lease)
            time.sleep(args.gap)
            requests.delete(f"{url}/leases/{lease['id']}", timeout=60)
            t = time.monotonic()
            lease, _ = acquire(url)
            turn.append(time.monotonic() - t)
        # full_reset as the next lease's first call, right after the previous release (the spare the release used
        # is being refilled): what a harness calling full_reset() at the start of each task meets
        for _ in range(args.n):
            episode(lease)
            requests.delete(f"{url}/leases/{lease['id']}", timeout=60)
            lease, _ = acquire(url)
            t = time.monotonic()
            requests.get(f"{lease['full_reset']}/reset", timeout=700)
            status = requests.get(f"{lease['full_reset']}/status", timeout=60).text
            full_after_release.append(time.monotonic() - t)
            lease["auth"] = refreshed(url, lease)
            if status != "Ready for duty!":
                raise SystemExit(f"/status after the reset: {status!r}")
            time.sleep(args.gap)
        # back to back: full_reset right after the previous full_reset (no spare refilled yet)
        for _ in range(args.n):
            episode(lease)
            t = time.monotonic()
            requests.get(f"{lease['full_reset']}/reset", timeout=700)
            status = requests.get(f"{lease['full_reset']}/status", timeout=60).text
            full_back_to_back.append(time.monotonic() - t)
            lease["auth"] = refreshed(url, lease)
            if status != "Ready for duty!":
                raise SystemExit(f"/status after the reset: {status!r}")
        # ... and once every spare is back
        for _ in range(args.n):
            deadline = time.monotonic() + 600
            while not spares_back(member) and time.monotonic() < deadline:
                time.sleep(1)
            episode(lease)
            t = time.monotonic()
            requests.get(f"{lease['full_reset']}/reset", timeout=700)
            requests.get(f"{lease['full_reset']}/status", timeout=60)
            full_spares_back.append(time.monotonic() - t)
            lease["auth"] = refreshed(url, lease)
        # baseline: the old release + acquire on the held instance (reset the written site, verify all, twice)
        lab = Lab(instance=member, auth_dir=auth_dir(member))  # the pool's member, its login files
        for _ in range(args.n):
            deadline = time.monotonic() + 600
            while not spares_back(member) and time.monotonic() < deadline:
                time.sleep(1)
            episode(lease)
            t = time.monotonic()
            [r] = lab.reset(["reddit"])
            bad = lab.not_pristine(SITES) or lab.not_pristine(SITES)
            baseline.append(time.monotonic() - t)
            lease["auth"] = refreshed(url, lease)
            if not r.ok or bad:
                raise SystemExit(f"baseline reset did not verify: {r.error} {bad}")
        summary = requests.get(f"{url}/leases", timeout=60).json()["summary"]
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(60)
        except subprocess.TimeoutExpired:
            serve.kill()
        down([member, POOL])

    print(f"\nwhole WebArena instance (mini, {len(SITES)} sites, spares {'from the plan' if args.spares is None else args.spares}), {args.n} episodes "
          f"(read every site, one reddit post, {args.gap:g}s each)\n")
    print("figure | p50 s | p95 s | goal")
    print(f"release -> next lease | {pct(turn, 50):.2f} | {pct(turn, 95):.2f} | p95 <= 1 s")
    print(f"BrowserGym full_reset() as a lease's first call, right after the previous release | "
          f"{pct(full_after_release, 50):.2f} | {pct(full_after_release, 95):.2f} | <= 2 s")
    print(f"BrowserGym full_reset() right after the previous full_reset (no spare refilled) | "
          f"{pct(full_back_to_back, 50):.2f} | {pct(full_back_to_back, 95):.2f} |")
    print(f"BrowserGym full_reset() through the lease, spares back | {pct(full_spares_back, 50):.2f} | "
          f"{pct(full_spares_back, 95):.2f} | <= 2 s")
    print(f"baseline: reset reddit + verify every site at release and again at acquire | {pct(baseline, 50):.2f} | "
          f"{pct(baseline, 95):.2f} |")
    print(f"\nratio baseline / release->next lease (p50): {pct(baseline, 50) / pct(turn, 50):.1f}x")
    print(f"episodes whose write failed: {len(FAILED)}" + (f" ({FAILED[0]})" if FAILED else ""))
    print(f"pool: resets {summary.get('resets')}; verifications {summary.get('verifications')}, skipped "
          f"{summary.get('verifications_skipped')}; leased sites not reset (untouched) {summary.get('resets_skipped')}; "
          f"fingerprints computed by the server {summary.get('fingerprints')}")


if __name__ == "__main__":
    main()
