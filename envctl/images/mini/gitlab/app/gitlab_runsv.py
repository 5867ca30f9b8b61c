"""The mini GitLab's ``runsvdir-start`` and ``gitlab-ctl stop``, stopping the way the omnibus image does.

Upstream's container main is ``runsvdir-start``; on ``docker stop`` it exits at once and the kernel
kills PostgreSQL, which leaves ``postmaster.pid`` behind (the WebArena README's "502" fix removes it).
This replica does the same, and refuses to start PostgreSQL over a stale ``postmaster.pid`` (upstream
fails so whenever the old pid is taken in the new container; here always, so the mistake shows in
every test). ``gitlab-ctl stop`` stops puma, Redis and PostgreSQL cleanly and marks them down, so a commit
after it captures a clean data directory.

Redis runs as upstream's does: from ``/var/opt/gitlab/redis/redis.conf``, on the socket
``/var/opt/gitlab/redis/redis.socket`` only (no TCP port), started before PostgreSQL and puma. Unlike upstream it
keeps nothing on disk (no ``dump.rdb``): a new container starts with an empty cache and no sessions.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from miniweb import pgembed
from miniweb.core import Database
from sites import gitlab_cache
from sites.gitlab_ctl import PIDFILE, REDIS_PID, read_pid
from sites.gitlab_data import CLUSTER

DOWN = "/run/gitlab/down"  # gitlab-ctl stop: services are down on purpose
POSTMASTER_PID = os.path.join(CLUSTER.datadir, "postmaster.pid")
REDIS_CONF = "/var/opt/gitlab/redis/redis.conf"
REDIS_ARGV = ["setpriv", "--reuid=redis", "--regid=redis", "--init-groups", "--",
              "/opt/gitlab/embedded/bin/redis-server", REDIS_CONF]


def runsvdir(app_argv: list[str]) -> int:
    """Container main: Redis, PostgreSQL, then puma; exit at once on SIGTERM (children die with PID 1)."""
    os.makedirs(os.path.dirname(DOWN), exist_ok=True)
    for leftover in (DOWN, PIDFILE, REDIS_PID):
        if os.path.exists(leftover):
            os.remove(leftover)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))
    children: list[subprocess.Popen[bytes]] = []
    redis = subprocess.Popen(REDIS_ARGV)
    children.append(redis)
    with open(REDIS_PID + ".tmp", "w") as f:
        f.write(f"{redis.pid}\n")
    os.replace(REDIS_PID + ".tmp", REDIS_PID)
    gitlab_cache.wait(30)
    if os.path.exists(POSTMASTER_PID):
        print(f'postgresql: FATAL:  lock file "{POSTMASTER_PID}" already exists (left by an unclean stop); '
              "not starting: GitLab answers 502 until it is removed", flush=True)
    else:
        children.append(subprocess.Popen(CLUSTER.server_argv()))
        Database(CLUSTER.url).wait(60)
    children.append(subprocess.Popen(app_argv))
    while True:
        time.sleep(0.5)
        if os.path.exists(DOWN):
            for proc in children:
                proc.poll()  # reap what gitlab-ctl stop ended (no zombie looks alive to gitlab-ctl status)
            continue  # stopped on purpose by gitlab-ctl stop; wait for docker stop
        for proc in children:
            if proc.poll() is not None:
                print(f"runsvdir: a service exited with {proc.returncode}", flush=True)
                return proc.returncode or 1


def stop() -> int:
    """``gitlab-ctl stop``: puma, Redis, then a fast clean PostgreSQL shutdown."""
    os.makedirs(os.path.dirname(DOWN), exist_ok=True)
    with open(DOWN, "w"):
        pass
    pid = read_pid(PIDFILE)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while read_pid(PIDFILE) is not None and time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            if not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z":
                break
            time.sleep(0.1)
    print("ok: down: puma: 0s, normally up", flush=True)
    pid = read_pid(REDIS_PID)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)  # Redis shuts down cleanly (nothing to save) and removes its socket
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}") and \
                open(f"/proc/{pid}/stat").read().split()[2] != "Z":
            time.sleep(0.05)
        if os.path.exists(REDIS_PID):
            os.remove(REDIS_PID)
    print("ok: down: redis: 0s, normally up", flush=True)
    if os.path.exists(POSTMASTER_PID):
        done = subprocess.run(pgembed.as_postgres([pgembed.pg_bin("pg_ctl"), "-D", CLUSTER.datadir, "-w", "-s",
                                                   "-m", "fast", "stop"]))
        if done.returncode != 0:
            print("fail: down: postgresql: pg_ctl stop failed", file=sys.stderr)
            return 1
    print("ok: down: postgresql: 0s, normally up", flush=True)
    return 0
