"""The mini GitLab's Redis: its Rails cache and its sessions, as the omnibus image keeps them.

Upstream runs one Redis (``/var/opt/gitlab/redis/redis.socket``) for the Rails cache (keys ``cache:gitlab:...``),
the sessions (``session:gitlab:...``), Sidekiq and shared state. The mini app uses it the same way for what it
has: a project's counts and its repository's branch list and commit counts are cached and expired by the app's
own writes (as GitLab's services refresh ``open_issues_count`` and ``Repository#expire_branches_cache``), never by a
write that bypasses the app, so a database or repository restored underneath shows stale pages until the cache is
flushed; sessions live here too, so flushing Redis signs everyone out.
"""
from __future__ import annotations

import json
import secrets
import time
from typing import Any, Callable

import redis
from flask import request

SOCKET = "/var/opt/gitlab/redis/redis.socket"
CACHE_PREFIX = "cache:gitlab:"
SESSION_PREFIX = "session:gitlab:"
CACHE_TTL = 14 * 86400  # GitLab's repository cache: two weeks
SESSION_TTL = 7 * 86400  # session_expire_delay: one week

_client: redis.Redis | None = None


def client() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis(unix_socket_path=SOCKET, decode_responses=True, socket_timeout=5)
    return _client


def fetch(key: str, compute: Callable[[], Any], ttl: int = CACHE_TTL) -> Any:
    """Rails.cache.fetch: the cached JSON value of ``key``, else ``compute()`` stored under it."""
    r = client()
    raw = r.get(CACHE_PREFIX + key)
    if raw is not None:
        return json.loads(raw)
    value = compute()
    r.set(CACHE_PREFIX + key, json.dumps(value), ex=ttl)
    return value


def expire(*keys: str) -> None:
    if keys:
        client().delete(*(CACHE_PREFIX + k for k in keys))


def project_keys(project_id: int) -> tuple[str, ...]:
    return (f"projects/{project_id}/open_issues_count", f"projects/{project_id}/open_merge_requests_count")


def repository_keys(path: str) -> tuple[str, ...]:
    return (f"repository:{path}:branches", f"repository:{path}:commit_count")


class RedisSessions:
    """Server-side sessions in Redis (the cookie holds only a random id), as GitLab's session store."""

    def __init__(self, cookie: str) -> None:
        self.cookie = cookie

    def current_user(self) -> str | None:
        sid = request.cookies.get(self.cookie)
        if not sid or len(sid) > 128:
            return None
        return client().get(SESSION_PREFIX + sid)

    def start(self, response: Any, username: str) -> Any:
        sid = secrets.token_hex(24)
        client().set(SESSION_PREFIX + sid, username, ex=SESSION_TTL)
        response.set_cookie(self.cookie, sid, httponly=True, samesite="Lax", path="/")
        return response

    def end(self, response: Any) -> Any:
        sid = request.cookies.get(self.cookie)
        if sid:
            client().delete(SESSION_PREFIX + sid)
        response.delete_cookie(self.cookie, path="/")
        return response


def wait(timeout: float = 30.0) -> None:
    """Block until Redis answers PING (the supervisor, before it starts the app)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if client().ping():
                return
        except (redis.RedisError, OSError):
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)
