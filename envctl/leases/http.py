"""The pool's HTTP face: the lease routes of ``envctl serve --instances N`` (on one machine or a swarm).

- ``POST /leases`` (JSON object, all optional: ``sites`` list, ``ttl`` s, ``holder``, ``wait`` s up to
  :data:`~envctl.leases.client.MAX_WAIT`, ``max_seconds``, ``access``: ``write`` (default) or ``read``) -> 201 with
  the lease; 503 + Retry-After when no instance is free (or the pool is still starting), within ``wait`` plus a few
  seconds whatever the engine does; 400 for bad input;
- ``POST /leases/<id>/heartbeat`` (optional ``ttl``), ``DELETE /leases/<id>``, ``GET /leases/<id>``;
  404 for an unknown id, 409 (and why) for one whose lease ended;
- ``GET /leases/<id>/reset`` (BrowserGym's ``full_reset``: answered when the reset has ended,
  ``?wait=0`` at once; 418 while one runs) and ``GET /leases/<id>/status``;
- ``GET /leases``, ``GET /metrics`` (Prometheus text).

Routes return a :class:`Reply`; the server (``envctl.serve``) writes it. Authentication and the
cross-site checks are the server's, before a route runs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from envctl.errors import EnvctlError, UsageError
from envctl.leases.client import LeaseLost, NoFreeInstance, NoSuchLease
from envctl.leases.pool import FULL_RESET_WAIT, Pool

MAX_BODY = 65536
MAX_DEPTH = 16  # nesting of a request's JSON: a lease request is flat
LEASE_KEYS = {"sites", "ttl", "holder", "wait", "max_seconds", "access"}


@dataclass
class Reply:
    code: int
    body: str
    ctype: str = "text/plain; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


def as_json(code: int, data: Any, headers: dict[str, str] | None = None) -> Reply:
    return Reply(code, json.dumps(data, default=str), "application/json", headers or {})


def _depth(value: Any, limit: int) -> bool:
    """Whether ``value`` nests no deeper than ``limit`` (checked iteratively: no recursion to exhaust)."""
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if d > limit:
            return False
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return True


def parse_body(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object ({} when empty); UsageError (400) otherwise."""
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise UsageError("the request body is not JSON (or nests too deep)",
                         'send e.g. {"sites": ["reddit"], "ttl": 600}') from None
    if not isinstance(data, dict):
        raise UsageError("the request body must be a JSON object", 'send e.g. {"sites": ["reddit"], "ttl": 600}')
    if not _depth(data, MAX_DEPTH):
        raise UsageError(f"the request body nests deeper than {MAX_DEPTH} levels")
    return data


def _sites(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [s for s in value.split(",") if s]
    if not (isinstance(value, list) and all(isinstance(s, str) and s for s in value)) or len(value) > 64:
        raise UsageError("'sites' must be a list of site names")
    return value or None


class LeaseRoutes:
    """The lease routes over ``pool``; ``base_url()`` is the server's URL (with its token path), the
    prefix of every lease's ``full_reset``."""

    def __init__(self, pool: Pool, base_url: Callable[[], str]) -> None:
        self.pool, self.base_url = pool, base_url

    def handles(self, path: str) -> bool:
        return path in ("/metrics", "/leases") or path.startswith("/leases/")

    def __call__(self, method: str, path: str, query: dict[str, list[str]], body: Callable[[], bytes],
                 client: str) -> Reply:
        parts = path.strip("/").split("/")
        try:
            route = self._route(method, parts)
            if route is None:  # a lease client reads JSON: an unknown route answers it too
                return as_json(404 if method == "GET" else 405, {"error": f"no route {method} {path[:80]}"})
            return route(parts, query, body, client)
        except NoFreeInstance as exc:  # the message alone: the client adds its own hint
            return as_json(503, {"error": exc.message.splitlines()[0], "retry_after": exc.retry_after},
                           {"Retry-After": str(exc.retry_after)})
        except NoSuchLease as exc:
            return as_json(404, {"error": str(exc).splitlines()[0]})
        except LeaseLost as exc:
            return as_json(409, {"error": exc.why})
        except UsageError as exc:
            return as_json(400, {"error": str(exc).splitlines()[0]})
        except EnvctlError as exc:  # the engine or a member failed: a client may retry
            return as_json(503, {"error": str(exc).splitlines()[0]}, {"Retry-After": "10"})

    def _route(self, method: str, parts: list[str]) -> Callable[..., Reply] | None:
        n = len(parts)
        table: dict[tuple[str, int, str], Callable[..., Reply]] = {
            ("GET", 1, "metrics"): self.metrics,
            ("GET", 1, "leases"): self.listing,
            ("POST", 1, "leases"): self.acquire,
            ("GET", 2, ""): self.get,
            ("DELETE", 2, ""): self.release,
            ("POST", 3, "heartbeat"): self.heartbeat,
            ("GET", 3, "reset"): self.reset,
            ("GET", 3, "status"): self.status,
        }
        if n == 1:
            return table.get((method, 1, parts[0]))
        if parts[0] != "leases" or n > 3:
            return None
        return table.get((method, n, parts[2] if n == 3 else ""))

    # -- the routes ---------------------------------------------------------------------------------------
    def metrics(self, parts: list[str], query: Any, body: Any, client: str) -> Reply:
        return Reply(200, self.pool.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")

    def listing(self, parts: list[str], query: Any, body: Any, client: str) -> Reply:
        return as_json(200, {"leases": self.pool.leases(), "instances": self.pool.rows(), "summary": self.pool.summary()})

    def acquire(self, parts: list[str], query: Any, body: Callable[[], bytes], client: str) -> Reply:
        data = parse_body(body())
        unknown = set(data) - LEASE_KEYS
        if unknown:
            raise UsageError(f"unknown field(s) {', '.join(sorted(str(k)[:30] for k in unknown))}",
                             f"a lease request takes {', '.join(sorted(LEASE_KEYS))}")
        holder = data.get("holder")
        if holder is not None and not isinstance(holder, str):
            raise UsageError("'holder' must be a string")
        base = self.base_url()
        lease = self.pool.acquire(_sites(data.get("sites")), ttl=data.get("ttl"), holder=(holder or client)[:200],
                                  wait=data.get("wait"), max_seconds=data.get("max_seconds"),
                                  full_reset=lambda lid: f"{base}/leases/{lid}", access=data.get("access"))
        return as_json(201, lease.to_dict())

    def get(self, parts: list[str], query: Any, body: Any, client: str) -> Reply:
        m = self.pool._find(parts[1])  # 404 / 409 with why
        with self.pool.cond:
            if parts[1] not in m.leases:
                raise NoSuchLease(parts[1])
            row = self.pool._row(m, parts[1])
        if (query.get("auth") or [""])[0] in ("1", "true", "yes"):  # the login state as it is now (after a reset)
            row = {**row, "auth": self.pool.lease_auth(parts[1])}
        return as_json(200, row)

    def release(self, parts: list[str], query: Any, body: Any, client: str) -> Reply:
        return as_json(200, self.pool.release(parts[1]))

    def heartbeat(self, parts: list[str], query: Any, body: Callable[[], bytes], client: str) -> Reply:
        data = parse_body(body())
        if set(data) - {"ttl"}:
            raise UsageError("a heartbeat takes only 'ttl'")
        return as_json(200, self.pool.heartbeat(parts[1], data.get("ttl")))

    def reset(self, parts: list[str], query: dict[str, list[str]], body: Any, client: str) -> Reply:
        wait = query.get("wait", ["1"])[0] != "0"
        if self.pool.lease_reset(parts[1], wait=wait, timeout=FULL_RESET_WAIT):
            return Reply(200, "Reset initiated")
        return Reply(418, "Reset already ongoing")

    def status(self, parts: list[str], query: Any, body: Any, client: str) -> Reply:
        running, error = self.pool.lease_reset_status(parts[1])
        if running:
            return Reply(200, "Reset ongoing")
        if error:
            return Reply(500, error)
        return Reply(200, "Ready for duty!")


__all__ = ["LeaseRoutes", "Reply", "as_json", "parse_body", "MAX_BODY"]
