"""Shared core of the mini sites: DB access, server-side sessions, layout, app factory.

Configuration comes from the environment, as the real images take theirs:

- ``MINIWEB_DB``: ``mysql://user:password@host:port/db`` or ``postgresql://user:password@host:port/db``
- ``MINIWEB_PORT``: the port the app listens on (default 80)
- ``MINIWEB_SESSION_COOKIE``: the session cookie name (each site uses its upstream's name)
"""
from __future__ import annotations

import functools
import html
import os
import secrets
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator
from urllib.parse import unquote, urlparse

from flask import Flask, g, redirect, request

# Pinned "now" for seed data, so every build reaches the same state.
SEED_EPOCH = 1_700_000_000  # 2023-11-14T22:13:20Z


class Database:
    """A thin DB-API wrapper that speaks MariaDB (pymysql) or PostgreSQL (psycopg2).

    Queries use ``%s`` placeholders, which both drivers accept.
    """

    def __init__(self, url: str) -> None:
        parts = urlparse(url)
        self.kind = "postgresql" if parts.scheme.startswith("postgres") else "mysql"
        self.params = {
            "host": parts.hostname or "127.0.0.1",
            "port": parts.port or (5432 if self.kind == "postgresql" else 3306),
            "user": unquote(parts.username or ""),
            "password": unquote(parts.password or ""),
            "database": parts.path.lstrip("/"),
        }

    def connect(self) -> Any:
        if self.kind == "postgresql":
            import psycopg2

            p = dict(self.params)
            return psycopg2.connect(dbname=p.pop("database"), **p)
        import pymysql

        return pymysql.connect(charset="utf8mb4", autocommit=False, **self.params)

    @contextmanager
    def cursor(self) -> Iterator[Any]:
        conn = self.connect()
        try:
            cur = conn.cursor()
            yield cur
            conn.commit()
        except Exception:
            conn.rollback()
            raise
        finally:
            conn.close()

    def all(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self.cursor() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())

    def one(self, sql: str, args: tuple = ()) -> tuple | None:
        rows = self.all(sql, args)
        return rows[0] if rows else None

    def run(self, sql: str, args: tuple = ()) -> int:
        with self.cursor() as cur:
            cur.execute(sql, args)
            return cur.rowcount

    def wait(self, timeout: float = 60.0) -> None:
        """Block until the database accepts connections (used by the supervisor, not by requests)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.connect().close()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


SESSIONS_DDL = (
    "CREATE TABLE IF NOT EXISTS miniweb_sessions ("
    " id VARCHAR(64) PRIMARY KEY, username VARCHAR(255) NOT NULL, created BIGINT NOT NULL)"
)


class Sessions:
    """Server-side sessions in the site's own database: the cookie holds only a random id."""

    def __init__(self, db: Database, cookie: str) -> None:
        self.db, self.cookie = db, cookie

    def current_user(self) -> str | None:
        sid = request.cookies.get(self.cookie)
        if not sid:
            return None
        row = self.db.one("SELECT username FROM miniweb_sessions WHERE id = %s", (sid,))
        return row[0] if row else None

    def start(self, response: Any, username: str) -> Any:
        sid = secrets.token_hex(24)
        self.db.run(
            "INSERT INTO miniweb_sessions (id, username, created) VALUES (%s, %s, %s)",
            (sid, username, int(time.time())),
        )
        response.set_cookie(self.cookie, sid, httponly=True, samesite="Lax", path="/")
        return response

    def end(self, response: Any) -> Any:
        sid = request.cookies.get(self.cookie)
        if sid:
            self.db.run("DELETE FROM miniweb_sessions WHERE id = %s", (sid,))
        response.delete_cookie(self.cookie, path="/")
        return response


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def page(title: str, body: str, *, head: str = "", user: str | None = None, nav: str = "") -> str:
    """The common page frame. Site modules pass their own nav and body HTML (already escaped)."""
    who = f'<span class="user">{esc(user)}</span>' if user else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{esc(title)}</title>{head}</head><body>"
        f"<header>{nav}{who}</header><main>{body}</main></body></html>"
    )


def create_app(name: str, *, cookie: str | None = None) -> Flask:
    """An app with the shared DB handle and session store attached as ``app.db`` / ``app.sessions``."""
    app = Flask(name)
    db = Database(os.environ.get("MINIWEB_DB", ""))
    app.db = db  # type: ignore[attr-defined]
    app.sessions = Sessions(db, cookie or os.environ.get("MINIWEB_SESSION_COOKIE", "session"))  # type: ignore[attr-defined]

    @app.before_request
    def _load_user() -> None:
        g.user = app.sessions.current_user()  # type: ignore[attr-defined]

    return app


def login_required(login_url: Callable[[], str]) -> Callable:
    """Redirect anonymous users to the site's login page, like the real sites do."""

    def decorate(view: Callable) -> Callable:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not g.get("user"):
                return redirect(login_url())
            return view(*args, **kwargs)

        return wrapper

    return decorate


def exit_on_sigterm() -> None:
    """As PID 1, Python ignores SIGTERM unless it installs a handler; without one ``docker stop`` waits 10 s."""
    import signal
    import sys

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))


def serve(app: Flask, port: int | None = None) -> None:
    """Serve with waitress (multi-threaded, production-grade), logging requests to stdout."""
    from waitress import serve as waitress_serve

    import signal
    import sys

    # As PID 1 without a supervisor, Python ignores SIGTERM by default: exit at once instead.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    port = port or int(os.environ.get("MINIWEB_PORT", "80"))
    print(f"miniweb {app.name} listening on :{port}", flush=True)
    waitress_serve(app, host="0.0.0.0", port=port, threads=8, ident=None)
