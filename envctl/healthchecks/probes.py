"""Run one catalog probe against a site's public URL and report what it saw.

Kinds: ``http`` (status, content, JSON key, and that the final URL after redirects stays on the
public host:port — the check that catches Magento's stale base URL) and ``exec`` (argv in the
service's container exits 0).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable
from urllib.parse import urlparse

import requests

from envctl.catalog import Probe
from envctl.healthchecks.wait import check_timeout


@dataclass
class ProbeResult:
    name: str
    ok: bool
    latency_ms: float
    url: str
    status: int | None = None
    detail: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def run_probe(probe: Probe, base_url: str, *, exec_fn: Callable[[list[str]], tuple[int, str]] | None = None,
              timeout: float = 10.0, headers: dict[str, str] | None = None) -> ProbeResult:
    check_timeout(timeout, "probe timeout")  # a client wait is always bounded
    url = base_url + probe.path
    start = time.monotonic()
    if probe.kind == "exec":
        if exec_fn is None or not probe.run:
            return ProbeResult(probe.name, False, 0.0, url, detail="exec probe without a container")
        rc, out = exec_fn(list(probe.run))
        return ProbeResult(probe.name, rc == 0, (time.monotonic() - start) * 1000, url, rc,
                           "" if rc == 0 else out[-300:])
    try:
        resp = requests.request(probe.method, url, json=probe.json_body, timeout=timeout,
                                allow_redirects=probe.follow_redirects, headers=headers)
    except requests.RequestException as exc:
        return ProbeResult(probe.name, False, (time.monotonic() - start) * 1000, url, None,
                           f"{type(exc).__name__}: {str(exc)[:200]}")
    latency = (time.monotonic() - start) * 1000
    problems = []
    if resp.status_code not in probe.expect_status:
        problems.append(f"HTTP {resp.status_code} (expected {', '.join(map(str, probe.expect_status))})")
    if probe.expect_text and probe.expect_text not in resp.text:
        problems.append(f"text {probe.expect_text!r} not found")
    if probe.same_host and urlparse(resp.url).netloc != urlparse(base_url).netloc:
        problems.append(f"redirected off the public host to {resp.url}")
    if probe.expect_json_key:
        try:
            if probe.expect_json_key not in resp.json():
                problems.append(f"JSON key {probe.expect_json_key!r} missing")
        except ValueError:
            problems.append("response is not JSON")
    detail = "; ".join(problems)
    if problems:
        detail += f"; body: {resp.text[:160]!r}"
    return ProbeResult(probe.name, not problems, latency, url, resp.status_code, detail)


def run_probes(probes: list[tuple[Probe, str]], **kw: object) -> list[ProbeResult]:
    return [run_probe(p, base, **kw) for p, base in probes]  # type: ignore[arg-type]
