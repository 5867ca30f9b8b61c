"""The one lease client: what a holder (the CLI, the Python API, a harness) says to a lease server.

It speaks HTTP only and imports nothing of the pool, so :func:`envctl.leases.lease` (the Python entry) and
the CLI lease without importing the pool (docs/architecture.md, "Leases"). Every answer of the
server maps to one envctl error: 503 -> :class:`NoFreeInstance` (with the server's Retry-After),
404 -> :class:`NoSuchLease`, 409 -> :class:`LeaseLost`, 400 -> :class:`UsageError`, anything else
-> :class:`EnvctlError`; requests' own exceptions never leak.

:func:`held` is the ``with`` block of the Python API: it heartbeats in a background thread and
raises :class:`LeaseLost` when the lease ended under its holder (expired, reclaimed by the
watchdog, released by someone else), at the latest when the block ends; ``lease.check()`` raises it
at once, for harnesses that want to stop an episode early.
"""
from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import requests

from envctl.errors import EnvctlError, UsageError
from envctl.locks import state_dir
from envctl.validate import env_value, validate_instance_name, validate_token

DEFAULT_TTL = 600.0
MAX_TTL = 7 * 24 * 3600.0
MAX_WAIT = 3600.0  # the longest a POST /leases may wait for a free instance (server-side cap)
SERVER_ENV = "ENVCTL_LEASE_SERVER"


# -- errors ------------------------------------------------------------------------------------------
class NoFreeInstance(EnvctlError):
    """Every instance of the pool is leased, being reset or starting; try again after ``retry_after`` s."""

    def __init__(self, message: str, retry_after: int = 5) -> None:
        super().__init__(message, f"retry in {retry_after}s, release a lease, or serve a larger pool (--instances)")
        self.retry_after = retry_after


class NoSuchLease(EnvctlError):
    def __init__(self, lease_id: str, why: str = "") -> None:
        super().__init__(f"no lease '{lease_id[:40]}'{': ' + why if why else ''}",
                         "check the id ('envctl lease list' shows the active ones)")


class LeaseLost(EnvctlError):
    """The lease ended while its holder still used it: it expired, the watchdog reclaimed it, or
    someone else released it. The instance may already be someone else's: stop writing to it."""

    def __init__(self, lease_id: str, why: str) -> None:
        super().__init__(f"lease '{lease_id[:40]}' was lost: {why}",
                         "stop this episode and lease again (heartbeat more often than the ttl, or ask a longer --ttl)")
        self.lease_id, self.why = lease_id, why


# -- values --------------------------------------------------------------------------------------------
def _number(value: Any, what: str, example: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UsageError(f"invalid {what} {str(value)[:40]!r}", f"give a number of seconds, e.g. {example}")
    try:
        out = float(value)
    except (ValueError, OverflowError):  # OverflowError: a JSON integer of hundreds of digits
        raise UsageError(f"invalid {what} {str(value)[:40]!r}", f"give a number of seconds, e.g. {example}") from None
    if out != out or out in (float("inf"), float("-inf")):
        raise UsageError(f"{what} {str(value)[:40]} is not a finite number", f"give a number of seconds, e.g. {example}")
    return out


def validate_ttl(value: Any) -> float:
    ttl = _number(value, "ttl", "600")
    if not 1 <= ttl <= MAX_TTL:
        raise UsageError(f"ttl {ttl:g} is out of range", f"use 1 to {MAX_TTL:.0f} seconds")
    return ttl


def validate_wait(value: Any) -> float:
    wait = _number(value if value is not None else 0, "wait", "60")
    if not 0 <= wait <= MAX_WAIT:
        raise UsageError(f"wait {wait:g} is out of range", f"use 0 to {MAX_WAIT:.0f} seconds")
    return wait


ACCESS = ("read", "write")


def validate_access(value: Any) -> str:
    """A lease's access: ``write`` (the default: the instance is the holder's alone) or ``read`` (shared with other
    read leases; told when a change overlapped it)."""
    if value is None:
        return "write"
    if value not in ACCESS:
        raise UsageError(f"invalid access {str(value)[:20]!r}", "give 'read' (shared with other readers) or 'write'")
    return str(value)


def validate_max_seconds(value: Any) -> float | None:
    if value is None:
        return None
    out = _number(value, "max_seconds", "1800")
    if not 1 <= out <= MAX_TTL:
        raise UsageError(f"max_seconds {out:g} is out of range", f"use 1 to {MAX_TTL:.0f} seconds")
    return out


def iso_time(t: float) -> str:
    """Unix time ``t`` as ISO 8601 in UTC, to the second (``2026-11-28T19:18:09Z``): what lease rows show."""
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class Lease:
    """What a holder gets: the instance, its URLs (harness variables), login state and reset URL."""

    id: str
    instance: str
    sites: list[str]
    holder: str
    acquired: float
    expires: float
    ttl: float
    env: dict[str, str] = field(default_factory=dict)
    auth: dict[str, Any] = field(default_factory=dict)  # storage_state file name -> its JSON
    full_reset: str | None = None
    host: str | None = None  # the node the instance runs on (a pool on a swarm)
    auth_note: str | None = None  # why ``auth`` is empty (no browser where the pool runs)
    max_seconds: float | None = None  # the watchdog reclaims the lease this long after it was acquired
    access: str = "write"  # 'read': the instance is shared with other read leases (issue 40)
    # a read lease the pool found overlapping a change of its shared instance: why (the site and what differs), as
    # the last heartbeat or the release's answer said; None while none was found
    tainted: str | None = field(default=None, compare=False)
    lost: str | None = field(default=None, repr=False, compare=False)  # set by the heartbeat thread
    # what happened to the leased sites while held (a site healed, a copy killed for memory), as the pool said at
    # the last heartbeat: the lease goes on, but the holder's work on that site may be gone
    notices: list[dict[str, Any]] = field(default_factory=list, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("host", "auth_note", "max_seconds", "lost", "tainted"):
            if d[k] is None:
                del d[k]
        if not d["notices"]:
            del d["notices"]
        d["expires_at"] = iso_time(self.expires)
        return d

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "Lease":
        try:
            return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw and k != "lost"})
        except TypeError as exc:
            raise EnvctlError(f"the lease server's answer is not a lease: {exc}") from None

    def check(self) -> None:
        """Raise :class:`LeaseLost` if the lease ended under its holder (the heartbeat found out)."""
        if self.lost:
            raise LeaseLost(self.id, self.lost)


# -- where servers are -----------------------------------------------------------------------------------
def server_record(instance: str) -> Path:
    """The file a running ``envctl serve`` of ``instance`` (or pool, or lab) records its URL in (0600)."""
    return state_dir() / f"serve-{validate_instance_name(instance)}.json"


def running_server_url(instance: str) -> str | None:
    """The URL of the running server of ``instance``, with its token path (``http://h:p/<token>``)
    when it requires one; what ``WA_FULL_RESET`` is set to. None when none runs."""
    try:
        raw = json.loads(server_record(instance).read_text())
        os.kill(int(raw["pid"]), 0)
        url = str(raw["url"])
    except (OSError, ValueError, KeyError, TypeError, UsageError):
        return None
    if raw.get("token_file"):
        try:
            token = validate_token(Path(raw["token_file"]).read_text().strip())
        except (OSError, UsageError):
            return url  # the token is not ours to read: the bare URL, which answers 403
        return f"{url}/{token}"
    return url


def find_server(server: str | None = None, pool: str | None = None) -> str:
    """``server``, else ``$ENVCTL_LEASE_SERVER``, else the recorded server of ``pool`` (``$ENVCTL_POOL``)."""
    url = server or env_value(SERVER_ENV) or None  # garbage in a variable: one line naming it
    if url:
        return url
    name = pool or env_value("ENVCTL_POOL") or "default"
    found = running_server_url(name)
    if found is None:
        raise EnvctlError(f"no lease server runs for pool '{name}'",
                          f"start one with 'envctl serve --instance {name} --instances N --flavor F', "
                          f"or set {SERVER_ENV} to its URL")
    return found


# -- the client ------------------------------------------------------------------------------------------
class LeaseClient:
    """HTTP calls to one lease server (``base``: its URL, with the token path when it has one)."""

    def __init__(self, base: str) -> None:
        base = str(base).strip().rstrip("/")
        if not base.startswith(("http://", "https://")) or len(base) < 10 or any(c in base for c in "\0\n\r \t"):
            raise UsageError(f"invalid lease server URL {base[:60]!r}", "give it as http://HOST:PORT[/TOKEN]")
        self.base = base

    @property
    def where(self) -> str:
        return self.base.split("//", 1)[-1].split("/", 1)[0]  # host:port, never the token

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 120) -> Any:
        try:
            r = requests.request(method, f"{self.base}{path}", json=body, timeout=(10, timeout))
        except requests.RequestException as exc:
            raise EnvctlError(f"the lease server at {self.where} did not answer ({type(exc).__name__})",
                              "is 'envctl serve --instances N' running there?") from None
        try:
            data = r.json()
        except ValueError:
            data = {"error": r.text.strip()[:300]}
        error = str(data.get("error", "")) if isinstance(data, dict) else ""
        error = error or f"HTTP {r.status_code}"
        lease_id = path.split("/")[2] if path.startswith("/leases/") else ""
        if r.status_code == 503:
            try:
                retry = int(r.headers.get("Retry-After") or 5)
            except ValueError:
                retry = 5
            raise NoFreeInstance(error, retry)
        if r.status_code == 404 and lease_id:
            raise NoSuchLease(lease_id, error)
        if r.status_code == 409 and lease_id:
            raise LeaseLost(lease_id, error)
        if r.status_code == 400:
            raise UsageError(error)
        if r.status_code >= 400:
            raise EnvctlError(f"the lease server at {self.where} answered {r.status_code}: {error[:200]}")
        return data

    def acquire(self, sites: list[str] | None = None, *, ttl: float = DEFAULT_TTL, wait: float = 0.0,
                holder: str = "", max_seconds: float | None = None, access: str = "write") -> Lease:
        body: dict[str, Any] = {"sites": sites or None, "ttl": validate_ttl(ttl), "wait": validate_wait(wait),
                                "holder": holder}
        if validate_access(access) != "write":
            body["access"] = access
        if max_seconds is not None:
            body["max_seconds"] = validate_max_seconds(max_seconds)
        return Lease.from_dict(self.call("POST", "/leases", body, timeout=wait + 900))

    def heartbeat(self, lease_id: str, ttl: float | None = None) -> dict[str, Any]:
        return self.call("POST", f"/leases/{lease_id}/heartbeat", {} if ttl is None else {"ttl": validate_ttl(ttl)}, 30)

    def release(self, lease_id: str) -> dict[str, Any]:
        return self.call("DELETE", f"/leases/{lease_id}", None, 60)

    def get(self, lease_id: str, *, auth: bool = False) -> dict[str, Any]:
        """A lease's row; with ``auth``, its login state as it is now (renewed by a reset through the lease)."""
        return self.call("GET", f"/leases/{lease_id}" + ("?auth=1" if auth else ""), None, 60 if auth else 30)

    def listing(self) -> dict[str, Any]:
        return self.call("GET", "/leases", None, 60)


@contextmanager
def held(client: LeaseClient, sites: list[str] | None = None, *, ttl: float = DEFAULT_TTL, wait: float = 0.0,
         holder: str = "", max_seconds: float | None = None, access: str = "write") -> Iterator[Lease]:
    """Lease for a ``with`` block: heartbeats every ttl/3 meanwhile, releases when it ends.

    Raises :class:`LeaseLost` (at the block's end, or from ``lease.check()``) when the lease ended
    under its holder; a release the server refuses is an error too, never silence. A read lease
    (``access="read"``) keeps on ``lease.tainted`` why the pool found a change overlapping it (the
    heartbeat's and the release's answers), readable after the block."""
    lease = client.acquire(sites, ttl=ttl, wait=wait, holder=holder or f"pid {os.getpid()}", max_seconds=max_seconds,
                           access=access)
    stop = threading.Event()
    last_ok = time.monotonic()

    def heartbeats() -> None:
        nonlocal last_ok
        while not stop.wait(max(0.5, float(lease.ttl) / 3)):
            try:
                row = client.heartbeat(lease.id)
                if isinstance(row, dict):
                    lease.notices = list(row.get("notices") or [])
                    lease.tainted = row.get("tainted") or lease.tainted
                last_ok = time.monotonic()
            except (LeaseLost, NoSuchLease) as exc:
                lease.lost = exc.why if isinstance(exc, LeaseLost) else str(exc)
                return
            except EnvctlError as exc:  # the server did not answer: retry; past the ttl the lease is gone
                if time.monotonic() - last_ok > float(lease.ttl):
                    lease.lost = f"no heartbeat got through for {lease.ttl:g}s ({str(exc).splitlines()[0]})"
                    return

    beat = threading.Thread(target=heartbeats, name=f"lease-{lease.id[:8]}-heartbeat", daemon=True)
    beat.start()
    failed = False
    try:
        yield lease
    except BaseException:
        failed = True
        raise
    finally:
        stop.set()
        beat.join(timeout=35)
        try:
            if lease.lost:
                raise LeaseLost(lease.id, lease.lost)
            row = client.release(lease.id)
            if isinstance(row, dict):
                lease.tainted = row.get("tainted") or lease.tainted
        except EnvctlError:
            if not failed:  # the block's own exception wins; ours would only hide it
                raise


__all__ = ["Lease", "LeaseClient", "LeaseLost", "NoFreeInstance", "NoSuchLease", "held", "find_server",
           "running_server_url", "server_record", "iso_time", "validate_ttl", "validate_wait", "validate_max_seconds",
           "validate_access", "DEFAULT_TTL", "MAX_TTL", "MAX_WAIT"]
