"""Soak (issue #14): logins and page loads through the front proxy on reddit for 60 s while
``reset reddit`` runs in a loop (spare swaps, background refills, recreates when no spare is ready).

Counted: requests, failed requests (any answer that is not 2xx/3xx, connection errors, a login that
does not log in) and hung requests (> 10 s). Asserted: none hung and **none failed**, swaps and the
in-place tier included: the proxy flips routes without a reload, drains the copy it leaves, retries a
failed connection and holds requests while a database is restored in place. The figures are printed
(run with -s) for the closing note.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
import requests

from envctl.lab import Lab

from conftest import tear_down, up_reddit

pytestmark = [pytest.mark.docker, pytest.mark.mini, pytest.mark.slow]
INSTANCE, OFFSET = "ftsoak", 45000
LOAD_SECONDS = 60
HUNG = 10.0
USER, PASSWORD = "MarvelsGrantMan136", "test1234"


def replenishers() -> list[int]:
    """Detached 'envctl _replenish' processes of this instance (started by our resets)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"_ready" in argv and INSTANCE.encode() in argv:
            pids.append(int(d.name))
    return pids


@pytest.fixture(scope="module")
def lab(docker_engine, tmp_path_factory) -> Iterator[Lab]:
    lab = up_reddit(INSTANCE, OFFSET, tmp_path_factory.mktemp("auth"))
    lab.replenish("reddit", 1)
    yield lab
    deadline = time.monotonic() + 90  # let the background refill finish, so 'down' leaves nothing behind
    while replenishers() and time.monotonic() < deadline:
        time.sleep(1)
    for pid in replenishers():
        os.kill(pid, 9)
    tear_down(lab)


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[tuple[str, float, float, str]] = []  # kind, start, end, problem ('' = ok)

    def add(self, kind: str, start: float, problem: str) -> None:
        with self.lock:
            self.requests.append((kind, start, time.monotonic(), problem))


def client(base: str, rec: Recorder, stop: threading.Event, n: int) -> None:
    pages = ["/", "/forums", "/f/books", "/login"]
    i = 0
    while not stop.is_set():
        i += 1
        s = requests.Session()
        t = time.monotonic()
        try:  # a login: the form post, then the front page must show the user
            r = s.post(f"{base}/login_check", data={"_username": USER, "_password": PASSWORD}, timeout=HUNG + 5)
            problem = f"HTTP {r.status_code}" if not 200 <= r.status_code < 400 else \
                "login did not log in" if r.url.rstrip("/").endswith("/login") else ""
        except requests.RequestException as exc:
            problem = type(exc).__name__
        rec.add("login", t, problem)
        for path in pages[(i + n) % len(pages):] + pages[:(i + n) % len(pages)]:
            if stop.is_set():
                break
            t = time.monotonic()
            try:
                r = s.get(f"{base}{path}", timeout=HUNG + 5)
                problem = f"HTTP {r.status_code}" if not 200 <= r.status_code < 400 else ""
            except requests.RequestException as exc:
                problem = type(exc).__name__
            rec.add("page", t, problem)


@pytest.mark.parametrize("tier,seconds", [(None, LOAD_SECONDS), ("inplace", LOAD_SECONDS // 2)])
def test_logins_and_pages_while_resetting(lab, tier, seconds):
    """Spare swaps (the default chain), then the in-place tier (the database restored inside the routed
    copy, requests held meanwhile)."""
    base = lab.settings().deployment.url(lab.catalog.site("reddit"))
    rec = Recorder()
    stop = threading.Event()
    threads = [threading.Thread(target=client, args=(base, rec, stop, n), daemon=True) for n in range(3)]
    windows: list[tuple[float, float, str, bool]] = []
    for t in threads:
        t.start()
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        t0 = time.monotonic()
        [r] = lab.reset(["reddit"], tier=tier, refill=tier is None)
        windows.append((t0, time.monotonic(), r.tier, r.ok))
        time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(HUNG + 10)
    assert not any(t.is_alive() for t in threads), "a client thread is still stuck in a request"

    reqs = rec.requests
    failed = [q for q in reqs if q[3]]
    hung = [q for q in reqs if q[2] - q[1] > HUNG]
    tiers: dict[str, int] = {}
    for w in windows:
        tiers[w[2]] = tiers.get(w[2], 0) + 1
    durations = sorted(q[2] - q[1] for q in reqs)
    p95 = durations[int(len(durations) * 0.95)] if durations else 0.0
    swap_time = sum(w[1] - w[0] for w in windows)
    print(f"\nsoak {seconds}s on reddit ({tier or 'spare'} tier): {len(reqs)} requests ({sum(q[0] == 'login' for q in reqs)} logins), "
          f"{len(failed)} failed, {len(hung)} hung (> {HUNG:.0f}s); "
          f"p95 {p95:.3f}s, max {durations[-1] if durations else 0:.3f}s; {len(windows)} resets "
          f"({', '.join(f'{k}={v}' for k, v in sorted(tiers.items()))}; all ok: {all(w[3] for w in windows)}), "
          f"reset time {swap_time:.1f}s of {seconds}s")
    for q in failed[:10]:
        print(f"  failed {q[0]} at +{q[1] - start:.2f}s after {q[2] - q[1]:.2f}s: {q[3]}")
    assert reqs and all(w[3] for w in windows), windows
    assert not hung, hung[:5]
    assert not failed, failed[:5]
