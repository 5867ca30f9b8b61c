"""Flip time of the front proxy: how long switching one public port to another backend takes (issue 23).

Old: the nginx proxy of envctl before the runtime API (its image built from ``git show REV:envctl/images/
proxy``): one ``docker exec -i envctl-proxy-apply --stdin`` (tar of the rendered routes), ``nginx -t``, a
graceful reload and the wait until the old workers stop accepting. New: HAProxy's runtime API through the
proxy's control service on its own port (``proxy.apply``: the table and config written in the proxy, one
runtime-API write, one read-back, each an HTTP keep-alive request). Both route between the same two backends on a private network; each flip is followed by
a request through the public port that must reach the new backend. Prints medians, p95 and the ratio.

    python bench/proxy_flip.py [--n 40] [--rev REV]   (REV: default, the last revision with the nginx proxy)
"""
from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import requests

from common import pct
from envctl.images.build import PROXY_IMAGE, ImageBuild, build, proxy_build
from envctl.backends.base import InstanceSettings, network_name
from envctl.backends.docker import ENGINE as dk
from envctl.backends.local import local_backend
from envctl.routing import proxy
from envctl.routing.table import Route, RoutingTable

OLD, NEW, OLD_PORT, NEW_PORT = "envctl-pxbench-old-proxy", "pxbench", 45991, 45992
NET = network_name(NEW)
APP = ("import http.server,os\nclass H(http.server.BaseHTTPRequestHandler):\n def do_GET(self):\n"
       "  b=os.environ['N'].encode(); self.send_response(200); self.send_header('Content-Length',str(len(b)))\n"
       "  self.end_headers(); self.wfile.write(b)\n def log_message(self,*a): pass\n"
       "http.server.ThreadingHTTPServer(('0.0.0.0',8000),H).serve_forever()\n")




def old_image(rev: str) -> str:
    """The nginx proxy image as of ``rev`` (built under its own tag)."""
    d = Path(tempfile.mkdtemp(prefix="pxbench-"))
    for f in ("Dockerfile", "nginx.conf", "envctl-proxy-apply"):
        (d / f).write_bytes(subprocess.run(["git", "show", f"{rev}:envctl/images/proxy/{f}"], check=True,
                                           capture_output=True).stdout)
    tag = "envctl-bench/proxy-nginx:old"
    build(ImageBuild("proxy-old", tag, d / "Dockerfile", d))
    return tag


def old_render(backend: str) -> bytes:
    conf = (f"server {{\n  listen {OLD_PORT};\n  location / {{\n    proxy_pass http://{backend}:8000;\n  }}\n}}\n")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in (("routes.conf", conf), ("state.json", "{}")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--rev", default="", help="git revision holding the old (nginx) proxy (default: the last one)")
    args = ap.parse_args()
    rev = args.rev or subprocess.run(["git", "rev-list", "-1", "HEAD", "--", "envctl/images/proxy/nginx.conf"],
                                     check=True, capture_output=True, text=True).stdout.strip() + "^"
    tag = old_image(rev)
    build(proxy_build())
    backends = ["pxbench-a", "pxbench-b"]
    local = local_backend()
    settings, _ = local.placement.prepare(InstanceSettings(name=NEW, flavor="mini"))  # the instance's network
    try:
        for b in backends:
            subprocess.run(["docker", "rm", "-f", b], capture_output=True)
            subprocess.run(["docker", "run", "-d", "--name", b, "--network", NET, "-e", f"N={b}",
                            "--label", f"envctl.instance={NEW}", "envctl-mini/base:1", "python3", "-c", APP],
                           check=True, capture_output=True)
        subprocess.run(["docker", "rm", "-f", OLD], capture_output=True)
        subprocess.run(["docker", "run", "-d", "--name", OLD, "--network", NET, "-p", f"127.0.0.1:{OLD_PORT}:{OLD_PORT}",
                        tag], check=True, capture_output=True)
        # the proxy as an instance's: booted by the local backend, reached through its control service
        st = RoutingTable()
        ctl = proxy.locate(NEW, local.proxy.boot(proxy.spec(settings, [NEW_PORT], st, PROXY_IMAGE), settings), wait=30)
        assert ctl is not None, "the proxy's control service did not answer"
        st.routes.by_port[str(NEW_PORT)] = Route(backends[0], 8000)
        for b in backends:  # what a spare's readiness records
            st.routes.addrs[b] = local.proxy.address(NEW, b) or ""
        proxy.apply(ctl, st)
        times: dict[str, list[float]] = {"old": [], "new": []}
        for i in range(args.n):
            to = backends[(i + 1) % 2]
            t = time.perf_counter()
            rc = subprocess.run(["docker", "exec", "-i", OLD, "envctl-proxy-apply", "--stdin"], input=old_render(to),
                                capture_output=True).returncode
            times["old"].append(time.perf_counter() - t)
            assert rc == 0 and requests.get(f"http://127.0.0.1:{OLD_PORT}/", timeout=10).text == to
            st = proxy.load(ctl)
            t = time.perf_counter()
            st.routes.by_port[str(NEW_PORT)] = Route(to, 8000)
            proxy.apply(ctl, st)
            times["new"].append(time.perf_counter() - t)
            assert requests.get(f"http://127.0.0.1:{NEW_PORT}/", timeout=10).text == to
            proxy.retire(ctl, [backends[i % 2]])  # the old server, drained
    finally:
        subprocess.run(["docker", "rm", "-f", OLD, *backends], capture_output=True)
        local.proxy.remove(NEW)
        proxy.forget(NEW)
        local.placement.remove_network(NEW)
    o, n = statistics.median(times["old"]), statistics.median(times["new"])
    print(f"\nroute flip, {args.n} flips each (a request through the public port after each reaches the new backend)\n")
    print("mechanism | p50 ms | p95 ms")
    print("--- | --- | ---")
    print(f"old: docker exec + nginx reload + old workers gone | {o * 1000:.1f} | {pct(times['old'], 95) * 1000:.1f}")
    print(f"new: HAProxy runtime API via the control service (write + read-back) | {n * 1000:.2f} | "
          f"{pct(times['new'], 95) * 1000:.2f}")
    print(f"\nratio old/new (p50): {o / n:.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
