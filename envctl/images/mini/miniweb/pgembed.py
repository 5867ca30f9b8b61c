"""An embedded Debian PostgreSQL for the mini sites that use one (postmill, gitlab).

Build time: ``initdb`` a cluster, start it, let the site seed it, stop it with a fast shutdown, so
the seeded state lives in the image layer. Run time: the supervisor starts ``postgres`` in the
foreground as the ``postgres`` user (``setpriv`` execs, so SIGTERM reaches the server directly and
it performs a clean "smart" shutdown once the app, stopped first, has gone).
"""
from __future__ import annotations

import glob
import os
import subprocess
from dataclasses import dataclass
from typing import Callable, Sequence

from miniweb.core import SESSIONS_DDL, Database


def pg_bin(tool: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"))
    if not found:
        raise SystemExit(f"PostgreSQL tool {tool!r} not found (is the Debian postgresql package installed?)")
    return found[-1]


def as_postgres(argv: Sequence[str]) -> list[str]:
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", *argv]


@dataclass(frozen=True)
class Cluster:
    datadir: str
    db: str
    user: str
    password: str
    port: int = 5432

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/{self.db}"

    def server_argv(self) -> list[str]:
        return as_postgres([pg_bin("postgres"), "-D", self.datadir])

    def init(self) -> None:
        """Create the cluster, the app role and database (build time only)."""
        os.makedirs(self.datadir, exist_ok=True)
        subprocess.run(["chown", "-R", "postgres:postgres", os.path.dirname(self.datadir)], check=True)
        subprocess.run(
            as_postgres([pg_bin("initdb"), "-D", self.datadir, "-E", "UTF8", "--locale=C.UTF-8",
                         "--auth-local=trust", "--auth-host=scram-sha-256", "-U", "postgres",
                         "--wal-segsize=1"]),
            check=True, stdout=subprocess.DEVNULL,
        )
        with open(os.path.join(self.datadir, "postgresql.conf"), "a") as conf:
            conf.write(
                f"\n# envctl mini\nlisten_addresses = '127.0.0.1'\nport = {self.port}\n"
                "unix_socket_directories = '/tmp'\ntimezone = 'UTC'\nshared_buffers = 16MB\n"
                "max_connections = 40\njit = off\nmin_wal_size = 2MB\nmax_wal_size = 64MB\n"
                "logging_collector = off\nlog_line_prefix = 'postgresql: '\n"
            )
        self.start_background()
        try:
            psql = as_postgres([pg_bin("psql"), "-h", "/tmp", "-p", str(self.port), "-U", "postgres",
                                "-v", "ON_ERROR_STOP=1", "-q", "-c"])
            # Build-time constants from the Dockerfile, never user input.
            subprocess.run([*psql, f"CREATE ROLE {self.user} LOGIN PASSWORD '{self.password}'"], check=True)
            subprocess.run([*psql, f"CREATE DATABASE {self.db} OWNER {self.user}"], check=True)
        finally:
            self.stop_background()

    def start_background(self) -> None:
        done = subprocess.run(as_postgres([pg_bin("pg_ctl"), "-D", self.datadir, "-w", "-s", "start",
                                           "-l", "/tmp/pg-build.log"]))
        if done.returncode != 0:
            with open("/tmp/pg-build.log") as log:
                raise SystemExit(f"PostgreSQL did not start; its log:\n{log.read()[-3000:]}")

    def stop_background(self) -> None:
        subprocess.run(as_postgres([pg_bin("pg_ctl"), "-D", self.datadir, "-w", "-s", "-m", "fast", "stop"]),
                       check=True)


def build(cluster: Cluster, seed: Callable[[Database], None]) -> None:
    """initdb + seed + clean stop: the whole build-time step of a site image."""
    cluster.init()
    cluster.start_background()
    try:
        db = Database(cluster.url)
        db.run(SESSIONS_DDL)
        seed(db)
    finally:
        cluster.stop_background()
    for leftover in ("/tmp/pg-build.log",):
        if os.path.exists(leftover):
            os.remove(leftover)


def run(cluster: Cluster, name: str, app_argv: Sequence[str]) -> int:
    """Container main: PostgreSQL first (ready when it accepts connections), then the app."""
    from miniweb.supervise import supervise

    db = Database(cluster.url)
    return supervise([("postgresql", cluster.server_argv(), lambda: db.wait(60)), (name, list(app_argv), None)])
