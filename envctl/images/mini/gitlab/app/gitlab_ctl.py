"""``/etc/gitlab/gitlab.rb`` and ``gitlab-ctl`` of the mini GitLab (reconfigure, restart, status).

``gitlab-ctl reconfigure`` parses gitlab.rb, stores the applied settings and, when they changed,
makes the running app (``puma``) re-exec itself with them (SIGHUP), then waits until it is ready.
"""
from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from urllib.parse import urlparse

from sites.gitlab_data import CLUSTER

GITLAB_RB = os.environ.get("GITLAB_RB", "/etc/gitlab/gitlab.rb")
APPLIED = os.environ.get("GITLAB_APPLIED", "/var/opt/gitlab/envctl-applied-config.json")
PIDFILE = "/run/gitlab/puma.pid"
REDIS_PID = "/run/gitlab/redis.pid"

@dataclass(frozen=True)
class GitlabConfig:
    external_url: str
    puma_workers: int | None = None

    @property
    def port(self) -> int:
        parts = urlparse(self.external_url)
        return parts.port or (443 if parts.scheme == "https" else 80)


def parse_gitlab_rb(text: str) -> GitlabConfig:
    """Read the settings the mini site honours; other Ruby lines are accepted and ignored."""
    url, workers = None, None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#"):
            continue
        m = re.match(r"""external_url\s*\(?\s*['"]([^'"]+)['"]""", line)
        if m:
            url = m.group(1)
        m = re.match(r"""puma\[\s*['"]worker_processes['"]\s*\]\s*=\s*(\d+)""", line)
        if m:
            workers = int(m.group(1))
    if not url:
        raise ValueError(f"{GITLAB_RB} has no external_url line, e.g. external_url 'http://myhost:8023'")
    parts = urlparse(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"external_url {url!r} is not an http(s) URL with a host")
    return GitlabConfig(url.rstrip("/"), workers)


def applied_config() -> GitlabConfig:
    try:
        with open(APPLIED) as f:
            return GitlabConfig(**json.load(f))
    except FileNotFoundError:
        with open(GITLAB_RB) as f:
            return parse_gitlab_rb(f.read())


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def read_pid(path: str) -> int | None:
    try:
        with open(path) as f:
            pid = int(f.readline().strip())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def wait_ready(port: int, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/readiness", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def restart_app(cfg: GitlabConfig) -> bool:
    """SIGHUP makes the app re-exec itself with the applied config (same pid, so the supervisor is unaffected)."""
    pid = read_pid(PIDFILE)
    if pid is None:
        return False
    before = start_marker()
    os.kill(pid, signal.SIGHUP)
    # Probe only once the re-exec'd process has rewritten the pidfile, never the old one.
    deadline = time.monotonic() + 30
    while start_marker() == before:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return wait_ready(cfg.port)


def start_marker() -> str:
    try:
        with open(PIDFILE) as f:
            return f.read()
    except OSError:
        return ""


def ctl(argv: list[str]) -> int:
    cmd = argv[0] if argv else "help"
    if cmd == "reconfigure":
        try:
            with open(GITLAB_RB) as f:
                cfg = parse_gitlab_rb(f.read())
        except (OSError, ValueError) as exc:
            print(f"gitlab-ctl reconfigure failed: {exc}", file=sys.stderr)
            return 1
        try:
            with open(APPLIED) as f:
                old = GitlabConfig(**json.load(f))
        except (OSError, ValueError, TypeError):
            old = None
        os.makedirs(os.path.dirname(APPLIED), exist_ok=True)
        with open(APPLIED + ".tmp", "w") as f:
            json.dump(asdict(cfg), f)
        os.replace(APPLIED + ".tmp", APPLIED)
        print(f"Recipe: gitlab::default\n  * external_url: {cfg.external_url} (listening on port {cfg.port})")
        if cfg.puma_workers is not None:
            print(f"  * puma['worker_processes']: {cfg.puma_workers}")
        if read_pid(PIDFILE) is not None:
            if cfg != old:
                print("Running handlers:\n  * restarting puma")
                if not restart_app(cfg):
                    print(f"gitlab-ctl reconfigure: puma did not become ready on port {cfg.port}", file=sys.stderr)
                    return 1
            elif not wait_ready(cfg.port):
                print(f"gitlab-ctl reconfigure: puma is not ready on port {cfg.port}", file=sys.stderr)
                return 1
        print("gitlab Reconfigured!")
        return 0
    if cmd == "restart":
        cfg = applied_config()
        pid = read_pid(PIDFILE)
        if pid is None or not restart_app(cfg):
            print("fail: puma: not running or not ready after restart", file=sys.stderr)
            return 1
        print(f"ok: run: puma: (pid {pid}) 0s")
        return 0
    if cmd == "status":
        code = 0
        for name, path in (("postgresql", os.path.join(CLUSTER.datadir, "postmaster.pid")), ("puma", PIDFILE),
                           ("redis", REDIS_PID)):
            pid = read_pid(path)
            if pid is None:
                print(f"down: {name}: 0s, normally up")
                code = 3
            else:
                up = int(time.time() - os.stat(path).st_mtime)
                print(f"run: {name}: (pid {pid}) {up}s")
        return code
    if cmd == "stop":
        from sites.gitlab_runsv import stop

        return stop()
    print("usage: gitlab-ctl reconfigure|restart|status|stop (mini flavor)", file=sys.stderr)
    return 1
