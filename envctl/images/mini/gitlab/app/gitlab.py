"""Mini stand-in for WebArena's GitLab (the omnibus image on port 8023).

Behaves like the omnibus image where provisioning touches it: ``/etc/gitlab/gitlab.rb`` holds
``external_url``; ``gitlab-ctl reconfigure`` applies it (the app then builds every link from that URL
and listens on its port, so container port = public port); ``gitlab-ctl restart|status|stop`` work; the
container main is ``/opt/gitlab/embedded/bin/runsvdir-start``, which stops like upstream's (see
``gitlab_runsv``). Pages mirror the markup that
WebArena's auto_login (test ids) and BrowserGym's ui_login (labels, button names) use, plus a small
``/api/v4`` with personal access tokens.

Modules: ``gitlab_data`` (schema, seed), ``gitlab_ctl`` (gitlab.rb, gitlab-ctl), ``gitlab_site`` (what the
areas share), ``gitlab_auth`` / ``gitlab_pages`` / ``gitlab_api`` (routes), this one (app and entry points).

CLI (``python3 -m sites.gitlab``): ``build``, ``start``, ``serve``, ``ctl ARGS``.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from flask import Response, request

from miniweb import pgembed
from miniweb.core import serve
from sites import gitlab_api, gitlab_auth, gitlab_pages, gitlab_repo_pages
from sites.gitlab_ctl import PIDFILE, GitlabConfig, applied_config, ctl
from sites.gitlab_data import CLUSTER, seed
from sites.gitlab_runsv import runsvdir
from sites.gitlab_site import make_site


def make_app(cfg: GitlabConfig) -> Any:
    site = make_site(cfg)
    app, api_error, layout = site.app, site.api_error, site.layout
    gitlab_auth.register(site)
    gitlab_pages.register(site)
    gitlab_repo_pages.register(site)
    gitlab_api.register(site)

    @app.errorhandler(404)
    def not_found(_: Any) -> Response:
        if request.path.startswith("/api/"):
            return api_error(404, "404 Not Found")
        return layout("Not Found", '<div class="container"><h1>404</h1><h3>Page Not Found</h3><p>Make sure the address '
                      "is correct and the page hasn't moved.</p></div>", 404)

    @app.errorhandler(500)
    def server_error(_: Any) -> Response:
        if request.path.startswith("/api/"):
            return api_error(500, "500 Internal Server Error")
        return Response("<h1>500</h1><h3>We're sorry, something went wrong on our end.</h3>", 500, mimetype="text/html")

    return app


def serve_app() -> None:
    """Serve with the applied config; SIGHUP re-execs this process so a reconfigure takes effect.

    Order matters for a reconfigure racing with boot: the SIGHUP handler exists before the pidfile
    announces this process, and the config is read only after that, so a reconfigure either signals
    us or has already written the config we are about to read.
    """

    def reexec(*_: object) -> None:
        print("gitlab: SIGHUP, restarting puma with the applied configuration", flush=True)
        os.execv(sys.executable, [sys.executable, "-m", "sites.gitlab", "serve"])

    signal.signal(signal.SIGHUP, reexec)
    os.makedirs(os.path.dirname(PIDFILE), exist_ok=True)
    with open(PIDFILE + ".tmp", "w") as f:
        f.write(f"{os.getpid()}\n{time.time_ns()}\n")
    os.replace(PIDFILE + ".tmp", PIDFILE)
    cfg = applied_config()
    print(f"gitlab: external_url {cfg.external_url}", flush=True)
    serve(make_app(cfg), cfg.port)


def superuser() -> None:
    """The omnibus cluster's superuser role, 'gitlab-psql' (initdb runs as that OS user there), which gitlab-psql
    connects as: the in-place steps terminate other backends and set session_replication_role, which need it. Then
    every database vacuumed."""
    import subprocess

    CLUSTER.start_background()
    try:
        psql = pgembed.as_postgres([pgembed.pg_bin("psql"), "-h", "/tmp", "-p", str(CLUSTER.port), "-U", "postgres",
                                    "-X", "-q", "-v", "ON_ERROR_STOP=1"])
        subprocess.run([*psql, "-d", "postgres", "-c", 'CREATE ROLE "gitlab-psql" SUPERUSER LOGIN'], check=True)
        # As a long-lived cluster is: every database vacuumed, frozen and analyzed, so that autovacuum has nothing to
        # catch up on after each boot (its WAL would move the change signal of an idle copy).
        for db in ("template1", "postgres", CLUSTER.db):
            subprocess.run([*psql, "-d", db, "-c", "VACUUM (FREEZE, ANALYZE)"], check=True)
    finally:
        CLUSTER.stop_background()


REDIS_CONF = """# envctl mini: as the omnibus image's /var/opt/gitlab/redis/redis.conf, on its socket only
port 0
unixsocket /var/opt/gitlab/redis/redis.socket
unixsocketperm 777
dir /var/opt/gitlab/redis
daemonize no
logfile ""
# small: the mini copy runs in 512 MB; the cache is a cache (least recently used keys go first)
maxmemory 16mb
maxmemory-policy allkeys-lru
# nothing kept on disk (upstream saves dump.rdb): a new container starts with an empty cache and no sessions
save ""
appendonly no
"""


def redis_conf() -> None:
    import shutil

    os.makedirs("/var/opt/gitlab/redis", exist_ok=True)
    with open("/var/opt/gitlab/redis/redis.conf", "w") as f:
        f.write(REDIS_CONF)
    for path in ("/var/opt/gitlab/redis", "/var/opt/gitlab/redis/redis.conf"):
        shutil.chown(path, "redis", "redis")


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "start"
    if cmd == "build":
        pgembed.build(CLUSTER, seed)
        superuser()
        redis_conf()
        return ctl(["reconfigure"])
    if cmd == "start":
        return runsvdir([sys.executable, "-m", "sites.gitlab", "serve"])
    if cmd == "serve":
        serve_app()
        return 0
    if cmd == "ctl":
        return ctl(argv[1:])
    print(f"usage: python3 -m sites.gitlab [build|start|serve|ctl], not {cmd!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
