"""BrowserGym's full reset against ``envctl serve`` (issue 15), on the mini flavor.

A client that follows BrowserGym's protocol exactly (``GET /reset``; then ``GET /status`` at once and
every 20 s until the body is ``Ready for duty!``; 10 min limit) is timed against envctl's own reset of
the same sites, measured in the same run: the ratio is the protocol's overhead (goal <= 1.2x). The
same client against the answer-at-once variant (``/reset?wait=0``, how the server answered before)
shows what the 20 s poll costs. Every reset measured starts with the site's spares back (as between
episodes), so the three are the same reset reached three ways.

    python bench/full_reset.py [--n 3] [--sites reddit,classifieds]
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path

import requests

from envctl.catalog import load_catalog
from envctl.images.build import build_for_sites
from envctl.lab import Lab
from envctl.serve import serve

INSTANCE, OFFSET = "bench-fullreset", 28000
POLL, LIMIT = 20.0, 600.0  # BrowserGym's client


def browsergym_full_reset(base: str, query: str = "") -> float:
    """BrowserGym's ``full_reset()``: its wall time in seconds."""
    t = time.monotonic()
    r = requests.get(f"{base}/reset{query}", timeout=None)  # BrowserGym sets no timeout here
    if r.status_code not in (200, 418):
        raise SystemExit(f"/reset answered {r.status_code}: {r.text}")
    while True:
        s = requests.get(f"{base}/status", timeout=30)
        if s.status_code != 200:
            raise SystemExit(f"/status answered {s.status_code}: {s.text}")
        if s.text == "Ready for duty!":
            return time.monotonic() - t
        if time.monotonic() - t > LIMIT:
            raise SystemExit(f"reset still running after {LIMIT:.0f}s")
        time.sleep(POLL)


def spares_back(lab: Lab, sites: list[str], timeout: float = 300) -> None:
    """Wait until every site has as many ready spares as it wants: each reset measured starts alike (one
    measured right after another would find the pool still refilling and take a slower tier)."""
    deadline = time.monotonic() + timeout
    while True:
        st = lab.running().routing.table()
        if all(len(st.ready.spares(s)) >= st.ready.want(s) for s in sites):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"spares not back within {timeout:.0f}s")
        time.sleep(0.1)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--sites", default="reddit,classifieds")
    args = ap.parse_args()
    cat = load_catalog()
    sites = args.sites.split(",")
    build_for_sites(cat, sites, "mini")
    lab = Lab(cat, instance=INSTANCE, auth_dir=Path("/tmp/envctl-bench-fullreset-auth"))
    lab.down()
    res = lab.up(sites, flavor="mini", port_offset=OFFSET, login=True)
    assert res.ok, [s.error for s in res.sites if not s.ok]
    server = serve(lab, "127.0.0.1", 0, say=lambda _m: None)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        own, proto, old = [], [], []
        tiers: list[str] = []
        for _ in range(args.n):
            spares_back(lab, sites)
            t = time.monotonic()
            results = lab.reset(all_sites=True)
            own.append(time.monotonic() - t)
            assert all(r.ok for r in results), [r.error for r in results if not r.ok]
            tiers += [r.tier for r in results]
            spares_back(lab, sites)
            proto.append(browsergym_full_reset(base))
            spares_back(lab, sites)
            old.append(browsergym_full_reset(base, "?wait=0"))
        m_own, m_proto, m_old = (statistics.median(x) for x in (own, proto, old))
        print(f"sites: {', '.join(sites)} (mini), {args.n} runs each, medians; each reset starts with the spares "
              f"back (envctl's own took the tiers {', '.join(sorted(set(tiers)))})")
        print(f"envctl's own reset (Lab.reset):              {m_own:6.2f} s")
        print(f"BrowserGym full_reset(), /reset answers done: {m_proto:6.2f} s  ratio {m_proto / m_own:.2f}x (goal <= 1.2x)")
        print(f"BrowserGym full_reset(), /reset answers at once (before): {m_old:6.2f} s  ratio {m_old / m_own:.2f}x")
    finally:
        server.shutdown()
        server.server_close()
        lab.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
