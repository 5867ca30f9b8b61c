"""The Swarm backend (issue #30), mini flavor, on a throwaway swarm on this machine, against the local engine.

A swarm of a manager (drained: it only manages) and W workers (default 2), each a Docker engine in a container
(tests/swarmlab.py, ``SwarmLab(name="bench")``: its own names, label, network 172.31.251.0/24 and cleanup), images
pushed to the swarm's registry and pulled onto every worker first (the "images on the node" case). envctl is driven
as a user drives it: the CLI and ``envctl serve`` as processes, with ``ENVCTL_BACKEND=swarm``, ``DOCKER_HOST`` the
manager and ``ENVCTL_SWARM_REGISTRY`` the registry; the baselines are the same commands on this machine's engine,
measured in the same run. Printed (no assertions):

1. place and bring up N instances (N = 1, 2, 4; ``envctl up homepage`` per instance, started side by side): wall
   time for all N, each instance's time and the node it landed on; the same N on the local engine;
2. spare reset (``envctl reset reddit`` with a ready spare): p50 / p95 on a worker vs the local engine (ratio;
   goal within 1.5x), the reset's own time (its JSON) and the command's wall time;
3. lease acquire / release (HTTP, ``envctl serve --instances 2`` on the swarm, one lease per node at a time):
   p50 / p95, and release -> free again; a local pool of 1 as the baseline;
4. node loss: both instances leased, the node under one of them killed (``docker kill`` of its container): time
   until the holder's heartbeat answers 409 "lost: ...", and until a lease asked for right after the kill is
   granted (the lost instance brought up again on the other worker; goal <= 60 s);
5. a whole WebArena mini instance (bench/turnaround.py's seven sites, spares from the plan) in a pool of one on the
   swarm and one on this machine: release -> next lease after an episode (every site read, a reddit post), p50 / p95
   and the swarm/local ratio (goal within 1.5x); BrowserGym's full_reset() through each lease (``--whole 0`` skips).

Instances: sbu<N>-<k> (swarm) / sbl<N>-<k> (local) for 1, sbr (swarm) / sb-local (local) for 2, pools sbp (swarm)
and sblp (local, 1 instance) for 3 and 4, sbw (swarm) and sblw (local) for 5; port offsets 54000-54999 (a pool's
second instance is 1000 higher: its ports are on a node's address, not this machine's), but sblw's 20800: a whole
instance's ports on this machine must stay below 65536 and out of the ephemeral range (32768-60999), where a client
socket may hold one. Everything is removed at the end, also on failure or Ctrl-C.

    python bench/swarm.py [--workers 2] [--resets 10] [--leases 8] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from swarmlab import SwarmLab  # noqa: E402
import turnaround  # noqa: E402  (bench/turnaround.py: an episode of a whole instance)

from envctl.backends.swarm import HELPER  # noqa: E402
from envctl.catalog import load_catalog  # noqa: E402
from envctl.images.build import PROXY_IMAGE  # noqa: E402

LAB = dict(name="bench", subnet="172.31.251.0/24", registry_port=54800)
OFFSET = 54000
LOCAL_WHOLE_OFFSET = 20800  # figure 5's local pool: a whole instance's ports stay below the ephemeral range
SITES = ["reddit", "homepage"]
RESULTS: dict[str, Any] = {}


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[max(0, min(len(s) - 1, round(p / 100 * (len(s) - 1))))] if s else float("nan")


def table(title: str, head: tuple[str, ...], rows: list[list[Any]]) -> None:
    print(f"\n{title}\n")
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for r in rows:
        print(" | ".join(f"{x:.2f}" if isinstance(x, float) else str(x) for x in r))


def free_port(start: int) -> int:
    for port in range(start, 55000):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise SystemExit(f"no free port from {start} to 54999")


class Cli:
    """envctl as a user runs it, against one backend (its environment and a state directory of its own)."""

    def __init__(self, label: str, env: dict[str, str], state: Path) -> None:
        self.label, self.state = label, state
        state.mkdir(parents=True, exist_ok=True)
        self.env = {**env, "ENVCTL_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
        self.env.pop("ENVCTL_INSTANCE", None)

    def run(self, *args: str, timeout: float = 600) -> tuple[subprocess.CompletedProcess[str], float]:
        t = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "envctl", *args], capture_output=True, text=True, timeout=timeout,
                           env=self.env, cwd=self.state)
        return p, time.monotonic() - t

    def json(self, *args: str, timeout: float = 600) -> tuple[Any, float]:
        p, took = self.run(*args, "--json", timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"{self.label}: envctl {' '.join(args)} -> {p.returncode}: {p.stderr.strip()[-600:]}")
        return json.loads(p.stdout), took

    def down(self, names: list[str]) -> None:
        with ThreadPoolExecutor(max_workers=4) as ex:
            list(ex.map(lambda n: self.run("down", "-i", n, "--volumes", timeout=300), names))

    def spares_ready(self, instance: str, site: str) -> int:
        st, _ = self.json("status", "-i", instance)
        return sum(int(s.get("spares_ready") or 0) for s in st["sites"] if s["site"] == site)

    def wait_spare(self, instance: str, site: str, timeout: float = 300) -> float:
        t = time.monotonic()
        while self.spares_ready(instance, site) < 1:
            if time.monotonic() - t > timeout:
                raise RuntimeError(f"{self.label}: no {site} spare on {instance} after {timeout:.0f}s")
            time.sleep(0.5)
        return time.monotonic() - t


# -- the lab ------------------------------------------------------------------------------------------------------
def prepare(lab: SwarmLab, workers: list[str]) -> None:
    """Label each node with its engine, drain the manager, push the images, pull them onto every worker."""
    for host, ip in lab.node_ips.items():
        lab.docker("node", "update", "--label-add", f"envctl.engine=tcp://{ip}:2375", host)
    lab.docker("node", "update", "--availability", "drain", "node1")
    cat = load_catalog()
    images = [PROXY_IMAGE, HELPER] + sorted({cat.site(s).services[svc].flavors["mini"].image
                                              for s in {*SITES, *turnaround.SITES} for svc in cat.site(s).services_for("mini")})
    t = time.monotonic()
    refs = [lab.push(img) for img in images]
    RESULTS["push_s"] = time.monotonic() - t
    say(f"pushed {len(refs)} images to the swarm's registry in {RESULTS['push_s']:.1f}s")

    def pull(node: str) -> float:
        t = time.monotonic()
        for ref in refs:
            lab.docker("pull", "-q", ref, node=node, timeout=600)
        lab.docker("tag", f"{lab.registry}/{HELPER}", HELPER, node=node)
        return time.monotonic() - t

    with ThreadPoolExecutor(max_workers=len(workers)) as ex:
        RESULTS["pull_s"] = dict(zip(workers, ex.map(pull, workers)))
    say("images on the workers: " + ", ".join(f"{n} {s:.1f}s" for n, s in RESULTS["pull_s"].items()))


def node_of(lab: SwarmLab, host: str) -> str:
    return next((h for h, ip in lab.node_ips.items() if ip == host), host or "?")


# -- 1. place and bring up N instances ------------------------------------------------------------------------------
def bring_up(cli: Cli, lab: SwarmLab | None, prefix: str, n: int) -> dict[str, Any]:
    """``envctl up homepage`` for N instances side by side; wall time for all, each one's time and node."""
    names = [f"{prefix}{n}-{k}" for k in range(1, n + 1)]

    def one(k: int) -> dict[str, Any]:
        name = names[k]
        up, took = cli.json("up", "homepage", "--flavor", "mini", "-i", name, "--port-offset", str(OFFSET + 100 * k),
                            "--no-login")
        done = time.monotonic()
        st, _ = cli.json("status", "-i", name)
        ok = bool(up.get("ok")) and requests.get(st["sites"][0]["url"], timeout=20).status_code == 200
        return {"name": name, "s": took, "done": done, "ok": ok,
                "node": node_of(lab, st["public_host"]) if lab else "local"}

    t = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=n) as ex:
            rows = list(ex.map(one, range(n)))
        wall = max(r.pop("done") for r in rows) - t  # until the last 'up' returned (every site healthy)
    finally:
        t = time.monotonic()
        cli.down(names)
        down = time.monotonic() - t
    return {"n": n, "wall": wall, "down": down, "rows": rows}


def figure_up(swarm: Cli, local: Cli, lab: SwarmLab) -> None:
    out = []
    for n in (1, 2, 4):
        s = bring_up(swarm, lab, "sbu", n)
        say(f"swarm N={n}: {s['wall']:.1f}s " + " ".join(f"{r['name']}@{r['node']} {r['s']:.1f}s" for r in s["rows"]))
        loc = bring_up(local, None, "sbl", n)
        say(f"local N={n}: {loc['wall']:.1f}s")
        out.append((s, loc))
    RESULTS["up"] = [{"swarm": s, "local": loc} for s, loc in out]
    rows = []
    for s, loc in out:
        nodes: dict[str, int] = {}
        for r in s["rows"]:
            nodes[r["node"]] = nodes.get(r["node"], 0) + 1
        rows.append([s["n"], s["wall"], max(r["s"] for r in s["rows"]), " ".join(f"{k}:{v}" for k, v in sorted(nodes.items())),
                     "yes" if all(r["ok"] for r in s["rows"]) else "NO", loc["wall"], f"{s['wall'] / loc['wall']:.1f}x",
                     s["down"], loc["down"]])
    table("1. place and bring up N instances side by side (`envctl up homepage --flavor mini -i NAME`, one process per "
          "instance, all started at once; wall = until the last returned healthy; images already on the workers)",
          ("N", "swarm wall s", "slowest instance s", "instances per node", "all answer", "local wall s",
           "swarm/local", "swarm down s", "local down s"), rows)


# -- 2. spare reset -------------------------------------------------------------------------------------------------
def figure_reset(swarm: Cli, local: Cli, lab: SwarmLab, n: int) -> None:
    """Long because: one figure, two backends, measured interleaved (the same load on both), then printed."""
    ups: dict[str, Any] = {}

    def up(cli: Cli, name: str, offset: int) -> None:
        t = time.monotonic()
        res, _ = cli.json("up", "reddit", "--flavor", "mini", "-i", name, "--port-offset", str(offset), "--no-login",
                          "--spares", "1")
        up_s = time.monotonic() - t
        ups[cli.label] = {"up_s": up_s, "first_spare_s": cli.wait_spare(name, "reddit", 420), "ok": res.get("ok")}

    pairs = [(swarm, "sbr", OFFSET + 500), (local, "sb-local", OFFSET)]
    with ThreadPoolExecutor(max_workers=2) as ex:
        list(ex.map(lambda a: up(*a), pairs))
    st, _ = swarm.json("status", "-i", "sbr")
    node = node_of(lab, st["public_host"])
    say(f"reddit up with a spare: swarm on {node} " + ", ".join(
        f"{k} up {v['up_s']:.1f}s, first spare {v['first_spare_s']:.1f}s later" for k, v in ups.items()))
    got: dict[str, dict[str, list[Any]]] = {c.label: {"own": [], "wall": [], "tier": [], "refill": []} for c, _, _ in pairs}
    for i in range(n):
        for cli, name, _ in pairs:
            got[cli.label]["refill"].append(cli.wait_spare(name, "reddit"))
            [r], wall = cli.json("reset", "reddit", "-i", name)
            g = got[cli.label]
            g["own"].append(float(r["seconds"]))
            g["wall"].append(wall)
            g["tier"].append(r["tier"] if r.get("ok") else "FAILED")
        say(f"reset {i + 1}/{n}: " + ", ".join(f"{k} {v['tier'][-1]} {v['own'][-1]:.3f}s (cli {v['wall'][-1]:.2f}s)"
                                               for k, v in got.items()))
    RESULTS["reset"] = {"node": node, "ups": ups, **got}
    rows = []
    for label, g in got.items():
        rows.append([label + (f" ({node})" if label == "swarm" else ""), ",".join(sorted(set(g["tier"]))),
                     statistics.median(g["own"]), pct(g["own"], 95), statistics.median(g["wall"]), pct(g["wall"], 95),
                     ups[label]["first_spare_s"]])
    s, lo = got["swarm"], got["local"]
    table(f"2. spare reset, reddit (mini), {n} resets each with a spare ready (`envctl reset reddit -i NAME --json`; "
          "'reset' = its own seconds, 'cli' = the command's wall time)",
          ("backend", "tiers", "reset p50 s", "reset p95 s", "cli p50 s", "cli p95 s", "first spare after up s"),
          [[r[0], r[1], f"{r[2]:.3f}", f"{r[3]:.3f}", r[4], r[5], r[6]] for r in rows])
    ratio50, ratio95 = statistics.median(s["own"]) / statistics.median(lo["own"]), pct(s["own"], 95) / pct(lo["own"], 95)
    cli50 = statistics.median(s["wall"]) / statistics.median(lo["wall"])
    RESULTS["reset"]["ratio"] = {"p50": ratio50, "p95": ratio95, "cli_p50": cli50}
    print(f"\nswarm/local: reset p50 {ratio50:.2f}x, p95 {ratio95:.2f}x; cli p50 {cli50:.2f}x (goal: within 1.5x)")
    swarm.down(["sbr"])
    local.down(["sb-local"])


# -- 3 and 4. pools: leases across nodes, node loss -----------------------------------------------------------------
class Server:
    """``envctl serve --instances N`` as a process (its output in a log file)."""

    def __init__(self, cli: Cli, pool: str, size: int, base_offset: int, port: int, sites: tuple[str, ...] = ("homepage",),
                 spares: str = "0") -> None:
        self.cli, self.pool, self.size = cli, pool, size
        self.url = f"http://127.0.0.1:{port}"
        self.log = cli.state / f"serve-{pool}.log"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "envctl", "serve", "--instance", pool, "--instances", str(size), "--flavor",
                 "mini", "--sites", ",".join(sites), *(["--spares", spares] if spares != "plan" else []),
                 "--base-offset", str(base_offset), "--port", str(port)],
                stdout=out, stderr=out, env=cli.env, cwd=cli.state, start_new_session=True)

    def listing(self) -> dict[str, Any]:
        return requests.get(f"{self.url}/leases", timeout=30).json()

    def wait_free(self, timeout: float = 420) -> float:
        t = time.monotonic()
        while True:
            try:
                rows = self.listing()["instances"]
                if len(rows) == self.size and all(r["state"] == "free" for r in rows):
                    return time.monotonic() - t
            except (requests.RequestException, ValueError, KeyError):
                pass
            if self.proc.poll() is not None or time.monotonic() - t > timeout:
                raise RuntimeError(f"pool {self.pool} not free after {time.monotonic() - t:.0f}s: "
                                   f"{self.log.read_text()[-1500:]}")
            time.sleep(0.25)

    def acquire(self, holder: str, wait: float = 0) -> tuple[dict[str, Any], float]:
        t = time.monotonic()
        r = requests.post(f"{self.url}/leases", json={"ttl": 120, "holder": holder, "wait": wait}, timeout=wait + 120)
        r.raise_for_status()
        return r.json(), time.monotonic() - t

    def release(self, lease: dict[str, Any]) -> float:
        t = time.monotonic()
        requests.delete(f"{self.url}/leases/{lease['id']}", timeout=120).raise_for_status()
        return time.monotonic() - t

    def stop(self, down: bool = True) -> None:
        """Stop the server; take its instances down (``down=False``: the swarm's teardown removes them, with the
        services a killed node left)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if down:
            self.cli.down([f"{self.pool}-{i}" for i in range(1, self.size + 1)])


def lease_rounds(srv: Server, lab: SwarmLab | None, n: int) -> dict[str, list[Any]]:
    """n rounds: every instance of the pool leased (one lease per instance: both nodes), then every lease released;
    each acquire and release timed, then release -> every instance free again."""
    got: dict[str, list[Any]] = {"acquire": [], "release": [], "free_again": [], "nodes": []}
    for i in range(n):
        srv.wait_free()
        held = []
        for k in range(srv.size):
            lease, took = srv.acquire(f"bench-{i}-{k}")
            held.append(lease)
            got["acquire"].append(took)
            got["nodes"].append(node_of(lab, lease.get("host", "")) if lab else "local")
        t = time.monotonic()
        for lease in held:
            got["release"].append(srv.release(lease))
        srv.wait_free()
        got["free_again"].append(time.monotonic() - t)
    return got


def figure_leases(swarm: Server, local: Server, lab: SwarmLab, n: int) -> None:
    got = {"swarm": lease_rounds(swarm, lab, n), "local": lease_rounds(local, None, n)}
    RESULTS["leases"] = got
    rows = []
    for label, g in got.items():
        nodes: dict[str, int] = {}
        for x in g["nodes"]:
            nodes[x] = nodes.get(x, 0) + 1
        rows.append([f"{label} (pool of {swarm.size if label == 'swarm' else local.size})",
                     " ".join(f"{k}:{v}" for k, v in sorted(nodes.items())), len(g["acquire"]),
                     f"{statistics.median(g['acquire']) * 1000:.0f}", f"{pct(g['acquire'], 95) * 1000:.0f}",
                     f"{statistics.median(g['release']) * 1000:.0f}", f"{pct(g['release'], 95) * 1000:.0f}",
                     statistics.median(g["free_again"])])
    table("3. lease acquire / release over HTTP (`POST /leases`, `DELETE /leases/ID`; each instance of the pool "
          "leased, then all released, per round)",
          ("pool", "leases per node", "leases", "acquire p50 ms", "acquire p95 ms", "release p50 ms",
           "release p95 ms", "release -> all free p50 s"), rows)
    a = statistics.median(got["swarm"]["acquire"]) / statistics.median(got["local"]["acquire"])
    r = statistics.median(got["swarm"]["release"]) / statistics.median(got["local"]["release"])
    print(f"\nswarm/local: acquire p50 {a:.1f}x, release p50 {r:.1f}x")


def figure_node_loss(srv: Server, lab: SwarmLab) -> None:
    """Long because: one timeline (kill -> manager sees it -> holder told -> new lease) polled in one loop."""
    srv.wait_free()
    a, _ = srv.acquire("holder-a")
    b, _ = srv.acquire("holder-b")
    victim = node_of(lab, a.get("host", ""))
    other = node_of(lab, b.get("host", ""))
    marks: dict[str, float] = {}
    new: dict[str, Any] = {}
    why = "-"

    def ask() -> None:  # a client asking for a lease right after the kill, willing to wait
        try:
            lease, _ = srv.acquire("after-kill", wait=300)
            marks["granted"] = time.monotonic() - t0
            new.update(lease)
        except requests.RequestException as exc:
            new["error"] = str(exc)

    say(f"node loss: lease {a['id'][:8]} on {victim}, {b['id'][:8]} on {other}; killing {victim}")
    seen = srv.log.stat().st_size
    timeline: list[tuple[float, str]] = []  # what the server logged, seconds after the kill
    t0 = time.monotonic()
    lab.kill_node(victim)
    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    last_b = 0.0
    while time.monotonic() - t0 < 300 and ("told" not in marks or asker.is_alive()):
        try:
            if "told" not in marks:
                r = requests.post(f"{srv.url}/leases/{a['id']}/heartbeat", json={}, timeout=30)
                if r.status_code == 409:
                    marks["told"] = time.monotonic() - t0
                    why = str(r.json().get("error", ""))
            if "manager_down" not in marks and lab.node_states().get(victim) == "down":
                marks["manager_down"] = time.monotonic() - t0
            if time.monotonic() - last_b > 10:
                requests.post(f"{srv.url}/leases/{b['id']}/heartbeat", json={}, timeout=30)
                last_b = time.monotonic()
        except (requests.RequestException, RuntimeError) as exc:  # noqa: PERF203 - polled; the next round asks again
            say(f"node loss: poll failed ({exc}); again")
        with open(srv.log, "rb") as f:
            f.seek(seen)
            chunk = f.read()
        if b"\n" in chunk:
            done = chunk[:chunk.rindex(b"\n") + 1]
            seen += len(done)
            timeline += [(time.monotonic() - t0, ln) for ln in done.decode(errors="replace").splitlines()
                         if ln.strip() and '"GET /leases' not in ln and "/heartbeat" not in ln]
        time.sleep(0.5)
    asker.join(5)
    new_node = node_of(lab, new.get("host", "")) if new.get("host") else "-"
    answers = bool(new.get("env")) and requests.get(new["env"]["WA_HOMEPAGE"], timeout=20).status_code == 200
    RESULTS["node_loss"] = {"victim": victim, "other": other, "new_node": new_node, "answers": answers, **marks,
                            "why": why, "error": new.get("error", "")}
    rows = [[victim, f"{marks.get('manager_down', float('nan')):.1f}", f"{marks.get('told', float('nan')):.1f}",
             why[:60], f"{marks.get('granted', float('nan')):.1f}", new_node,
             "yes" if answers else "NO"]]
    table("4. node loss: both pool instances leased, the node under one killed (`docker kill` of its container); "
          "times from the kill",
          ("killed", "manager says down s", "holder told (409) s", "why", "new lease granted s", "new lease on",
           "it answers"), rows)
    print(f"\ngoal: new lease <= 60 s -> {marks.get('granted', float('nan')):.1f} s")
    print("\nthe server's log meanwhile (s after the kill, +-0.5 s):")
    for at, line in timeline[:40]:
        print(f"    {at:5.1f}  {line[:150]}")
    RESULTS["node_loss"]["timeline"] = timeline
    for lease in (b, new):
        if lease.get("id"):
            srv.release(lease)


# -- main -----------------------------------------------------------------------------------------------------------
# -- 5. a whole WebArena instance in a pool: release -> next lease, BrowserGym's full_reset -------------------------
def whole_rounds(srv: Server, n: int) -> dict[str, list[float]]:
    """n episodes on a pool of one whole instance: each reads every site and posts on reddit (turnaround.episode),
    then is released and the next lease asked for at once (timed until granted); then BrowserGym's full_reset()
    through the lease's WA_FULL_RESET (``/reset``, answered when done, then ``/status``), as a lease's first call
    right after the previous release and once more right after."""
    got: dict[str, list[float]] = {"turn": [], "full_reset_first": [], "full_reset_again": []}
    lease, _ = srv.acquire("bench-whole", wait=600)
    for _ in range(n):
        turnaround.episode(lease)
        srv.release(lease)
        lease, took = srv.acquire("bench-whole", wait=600)
        got["turn"].append(took)
    for key in ("full_reset_first", "full_reset_again"):
        t = time.monotonic()
        base = lease["env"]["WA_FULL_RESET"]
        requests.get(f"{base}/reset", timeout=900).raise_for_status()
        assert requests.get(f"{base}/status", timeout=60).text.strip().startswith("Ready"), "full_reset not ready"
        got[key].append(time.monotonic() - t)
        turnaround.episode(lease)  # the next one is after an episode too
    srv.release(lease)
    return got


def figure_whole_instance(swarm_cli: Cli, local_cli: Cli, n: int) -> None:
    sites = tuple(turnaround.SITES)
    servers = [Server(swarm_cli, "sbw", 1, OFFSET + 200, free_port(54980), sites, "plan"),
               Server(local_cli, "sblw", 1, LOCAL_WHOLE_OFFSET, free_port(54985), sites, "plan")]
    try:
        for s in servers:
            s.wait_free(timeout=900)
        got = {"swarm": whole_rounds(servers[0], n), "local": whole_rounds(servers[1], n)}
    finally:
        for s in servers:
            s.stop(down=True)
    RESULTS["whole"] = got
    table(f"5. a whole WebArena mini instance ({len(sites)} sites) in a pool of one, {n} episodes (every site read, a "
          "reddit post): release -> next lease; BrowserGym full_reset() through the lease (first call after a release, "
          "and again right after)",
          ("backend", "release->lease p50 s", "p95 s", "full_reset first s", "full_reset again s"),
          [[label, f"{statistics.median(g['turn']):.2f}", f"{pct(g['turn'], 95):.2f}",
            f"{g['full_reset_first'][0]:.2f}", f"{g['full_reset_again'][0]:.2f}"] for label, g in got.items()])
    r = statistics.median(got["swarm"]["turn"]) / statistics.median(got["local"]["turn"])
    print(f"\nswarm/local: whole-instance release -> next lease p50 {r:.2f}x (goal: within 1.5x)")


def run(args: argparse.Namespace, lab: SwarmLab, state: Path) -> None:
    workers = [h for h in lab.node_ips if h != "node1"]
    prepare(lab, workers)
    base = {k: v for k, v in os.environ.items() if k not in ("DOCKER_HOST", "DOCKER_CONTEXT", "ENVCTL_BACKEND")}
    swarm = Cli("swarm", {**base, "DOCKER_HOST": lab.manager_host, "ENVCTL_BACKEND": "swarm",
                          "ENVCTL_SWARM_REGISTRY": lab.registry, "ENVCTL_ENGINE_TIMEOUT": "60"}, state / "swarm")
    local = Cli("local", base, state / "local")
    figure_up(swarm, local, lab)
    figure_reset(swarm, local, lab, args.resets)
    servers: list[Server] = []
    try:
        servers.append(Server(swarm, "sbp", 2, OFFSET, free_port(54990)))
        servers.append(Server(local, "sblp", 1, OFFSET + 600, free_port(54995)))
        with ThreadPoolExecutor(max_workers=2) as ex:
            ready = list(ex.map(lambda s: s.wait_free(), servers))
        RESULTS["pool_up_s"] = dict(zip(("swarm", "local"), ready))
        say(f"pools free: swarm (2) {ready[0]:.1f}s, local (1) {ready[1]:.1f}s")
        figure_leases(servers[0], servers[1], lab, args.leases)
        figure_node_loss(servers[0], lab)
    finally:
        for s in servers:
            s.stop(down=s.cli is local)
    if args.whole:
        figure_whole_instance(swarm, local, args.whole)


def cleanup_local(local_names: list[str], state: Path) -> None:
    """The local instances (whatever a failed run left) and the golden images their spares were booted from."""
    base = {k: v for k, v in os.environ.items() if k not in ("DOCKER_HOST", "DOCKER_CONTEXT", "ENVCTL_BACKEND")}
    Cli("local", base, state / "local").down(local_names)
    for name in local_names:
        ids = subprocess.run(["docker", "images", "-q", "--filter", f"label=envctl.instance={name}"],
                             capture_output=True, text=True).stdout.split()
        tags = subprocess.run(["docker", "image", "inspect", "--format", "{{join .RepoTags \" \"}}", *ids],
                              capture_output=True, text=True).stdout.split() if ids else []
        mine = [t for t in tags if t.startswith(("envctl-golden/", "envctl-snap/"))]
        if mine:
            subprocess.run(["docker", "rmi", *mine], capture_output=True, text=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2, choices=(2, 3), help="swarm workers besides the manager")
    ap.add_argument("--resets", type=int, default=10, help="spare resets per backend")
    ap.add_argument("--leases", type=int, default=8, help="lease rounds per pool")
    ap.add_argument("--whole", type=int, default=4, help="episodes on a whole-instance pool per backend (0: skip)")
    ap.add_argument("--json", action="store_true", help="also print every measurement as JSON at the end")
    args = ap.parse_args()
    t0 = time.monotonic()
    load0 = os.getloadavg()
    p = subprocess.run([sys.executable, "-m", "envctl", "images", "build", "--flavor", "mini",
                        *(SITES if not args.whole else turnaround.SITES)],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if p.returncode != 0:
        raise SystemExit(f"envctl images build failed: {p.stderr.strip()[-800:]}")
    local_names = [f"sbl{n}-{k}" for n in (1, 2, 4) for k in range(1, n + 1)] + ["sb-local", "sblp-1", "sblw-1"]
    with tempfile.TemporaryDirectory(prefix="envctl-bench-swarm-") as tmp:
        try:
            with SwarmLab(nodes=1 + args.workers, verbose=False, **LAB) as lab:
                RESULTS["lab_up_s"] = lab.timings.get("up_total", 0.0)
                say(f"swarm lab up in {RESULTS['lab_up_s']:.1f}s: manager node1 (drained), workers "
                    + ", ".join(f"{h} {ip}" for h, ip in lab.node_ips.items() if h != "node1"))
                run(args, lab, Path(tmp))
        finally:
            cleanup_local(local_names, Path(tmp))
    load1 = os.getloadavg()
    RESULTS["loadavg"] = {"start": load0, "end": load1}
    print(f"\nswarm: a manager (drained) + {args.workers} workers, Docker 20.10 engines in containers on this machine "
          f"(tests/swarmlab.py); lab up {RESULTS['lab_up_s']:.1f}s, images pushed {RESULTS['push_s']:.1f}s, pulled "
          "onto the workers " + ", ".join(f"{k} {v:.1f}s" for k, v in RESULTS["pull_s"].items()))
    print(f"machine: {os.cpu_count()} CPUs, load average (1/5/15 min) {load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f} "
          f"at the start, {load1[0]:.1f} {load1[1]:.1f} {load1[2]:.1f} at the end (shared with other work: noisy); "
          f"whole run {time.monotonic() - t0:.0f}s")
    if args.json:
        print(json.dumps(RESULTS, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
