"""``envctl serve``: BrowserGym's full-reset protocol, plus per-site resets and a JSON status.

- ``GET /reset``  -> a reset of every site that is up, answered (200 "Reset initiated") once it has ended,
  so BrowserGym's ``full_reset()``, which waits for this answer without a timeout and then asks
  ``/status`` at once, returns as soon as the sites are pristine instead of a 20 s poll later;
  418 while one runs. ``GET /reset?wait=0`` answers at once and resets in the background (BrowserGym
  then sleeps 20 s before its next ``/status`` poll, so a 5 s reset costs it 20 s).
- ``GET /status`` -> 200 "Ready for duty!" when idle, 200 "Reset ongoing" while running,
  500 with the error when the last reset failed.
- ``POST /reset/<site>`` -> the site's reset, synchronously, as JSON.
- ``GET /status.json`` -> instance status with the last reset results.

- ``GET /verify.json`` -> every site up: probes and whether it verifies pristine.

Leases (with a pool, ``envctl serve --instances N``): the routes of :mod:`envctl.leases.http`; the
pool is :mod:`envctl.leases.pool` (docs/architecture.md, "Leases").

Access control (issue #14: a reset must not be triggerable by whoever reaches the port, nor by a
page the agent's own browser opens):

- **Token.** With ``--token`` (or ``$ENVCTL_SERVE_TOKEN``), and always when bound to a non-loopback
  address (a token is then generated with ``secrets.token_urlsafe`` unless one is given), every
  request needs it, as the first path segment (``/<token>/reset``, ``/<token>/status``: unmodified
  BrowserGym works with ``WA_FULL_RESET=http://host:7565/<token>``, since it appends ``/reset``
  and ``/status``) or as ``Authorization: Bearer <token>`` (or ``X-Envctl-Token``). Otherwise: 403.
  The one exception: ``GET /status`` (read-only, one line) needs no token on a loopback bind.
  The token is kept in ``<state dir>/serve-<instance>.token`` (mode 0600; see
  :func:`envctl.locks.state_dir`) and reused by the next server of the instance.
- **Browsers.** ``GET /reset`` and ``POST /reset/<site>`` are refused (403) when the request says
  it comes from a web page of another origin: ``Sec-Fetch-Site`` other than ``same-origin`` / ``none``
  (``same-site`` too: the sites on other ports of the same host are the same *site*), or an
  ``Origin`` that is not the server's own. Without a token on a loopback bind, a ``Host`` header
  that is not a loopback name is refused too (DNS rebinding). Harness clients (requests, curl)
  send none of these headers.

The server's URL (with the token path when there is one) is recorded in
``<state dir>/serve-<instance>.json`` (0600) for ``envctl env``.
"""
from __future__ import annotations

import hmac
import json
import os
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import parse_qs, urlparse

from envctl.errors import EnvctlError, UsageError
from envctl.leases.client import running_server_url, server_record  # noqa: F401 - re-exported
from envctl.leases.http import MAX_BODY, LeaseRoutes, Reply, as_json
from envctl.leases.members import Members, auth_dir
from envctl.leases.pool import FULL_RESET_WAIT, Pool, say_stderr
from envctl.leases.sizing import auto_size
from envctl.locks import state_dir, write_private
from envctl.validate import is_loopback, validate_host, validate_instance_name, validate_token

if TYPE_CHECKING:
    from envctl.lab import Lab

TOKEN_ENV = "ENVCTL_SERVE_TOKEN"
STATE_CHANGING = ("/reset",)
DRAIN_MAX = 1 << 20  # an oversized request body up to this is read (and dropped) before the 400 is sent  # exact paths; plus every POST and DELETE, and a lease's /reset


def token_file(instance: str) -> Path:
    """Where the reset server of ``instance`` keeps its token (0600, in envctl's state directory)."""
    return state_dir() / f"serve-{validate_instance_name(instance)}.token"


def server_token(instance: str, given: str | None = None) -> tuple[str, Path]:
    """The token to require: ``given`` (validated), else the instance's stored one, else a new
    ``secrets.token_urlsafe(32)``; stored 0600 in :func:`token_file`. Returns (token, file)."""
    path = token_file(instance)
    if given:
        token = validate_token(given)
    else:
        try:
            token = validate_token(path.read_text().strip())
        except (OSError, UsageError):
            token = secrets.token_urlsafe(32)
    write_private(path, token + "\n")
    return token, path


class ResetService:
    def __init__(self, lab: "Lab") -> None:
        self.lab = lab
        self.lock = threading.Lock()
        self.running = False
        self.error = ""
        self.last: list[dict[str, Any]] = []
        self.finished_at = 0.0
        self.done = threading.Event()

    def start_full_reset(self) -> bool:
        with self.lock:
            if self.running:
                return False
            self.running, self.error = True, ""
            self.done.clear()
        threading.Thread(target=self._full, daemon=True).start()
        return True

    def _full(self) -> None:
        try:
            results = self.lab.reset(all_sites=True)
            self.last = [r.to_dict() for r in results]
            bad = [r for r in results if not r.ok]
            self.error = "; ".join(f"{r.site}: {r.error}" for r in bad)
        except Exception as exc:  # noqa: BLE001 - reported through /status
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.finished_at = time.time()
            with self.lock:
                self.running = False
            self.done.set()


def _host_name(header: str) -> str:
    """``127.0.0.1:7565`` -> ``127.0.0.1``; ``[::1]:7565`` -> ``::1``."""
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _same_origin(origin: str, host: str) -> bool:
    o = urlparse(origin)
    return o.scheme in ("http", "https") and bool(o.netloc) and o.netloc.lower() == host.lower()


def make_pool(lab: "Lab", instances: int | None, *, flavor: str | None = None, sites: list[str] | None = None,
              spares: int | None = None, heal_after: float = 60.0, base_offset: int = 10000,
              max_lease: float | None = None, bind: str = "127.0.0.1", readers: int | None = None,
              reverify_every: float = 60.0, reverify_load: float | None = None,
              say: Callable[[str], None] | None = None) -> Pool:
    """The lease pool named after ``lab``'s instance: members ``<instance>-1`` … ``-N`` on the backend (this engine, or a swarm's nodes),
    each a Lab with its own login state folder. Call ``start()`` on it (it brings members up). ``readers``: read leases
    one instance takes at most (default :func:`envctl.leases.pool.default_readers`); ``reverify_every``: seconds
    between background re-verifications of free members (0: none), only while this host's 1-minute load average is
    below ``reverify_load`` (default: its CPU count)."""
    from envctl.lab import Lab

    def make(name: str) -> Lab:
        return Lab(lab.catalog, catalog_path=lab.catalog_path, instance=name, auth_dir=auth_dir(name))

    store = Members(make, size=instances, flavor=flavor, sites=sites, spares=spares, base_offset=base_offset,
                    bind=bind, instances=lambda: Lab.instances(lab.catalog))
    return Pool(lab.instance, store, heal_after=heal_after, max_lease=max_lease, readers=readers,
                reverify_every=reverify_every, reverify_load=reverify_load, log=say or say_stderr)


def pool_size(lab: "Lab", sites: list[str], flavor: str, spares: int | None) -> tuple[int, str]:
    """``serve --instances auto``: how many instances of ``sites`` fit (:func:`envctl.leases.sizing.auto_size`)."""
    from envctl.instance import measure

    return auto_size(lab.catalog, sites, flavor, spares, lab.instance, measure=measure)


class InstanceRoutes:
    """The reset server of one instance: BrowserGym's protocol, per-site resets, status and verification."""

    def __init__(self, service: ResetService) -> None:
        self.service = service

    def __call__(self, method: str, path: str, query: dict[str, list[str]]) -> Reply:
        if method == "GET" and path == "/reset":
            return self.reset(query)
        if method == "GET" and path == "/status":
            return self.status()
        if method == "GET" and path == "/status.json":
            return self.status_json()
        if method == "GET" and path == "/verify.json":
            return self.verify_json()
        if method == "POST" and path.startswith("/reset/"):
            return self.reset_site(path.split("/", 2)[2])
        return Reply(404 if method == "GET" else 405, "not found")

    def reset(self, query: dict[str, list[str]]) -> Reply:
        service = self.service
        if not service.start_full_reset():
            return Reply(418, "Reset already ongoing")
        if query.get("wait", ["1"])[0] != "0":
            service.done.wait(FULL_RESET_WAIT)  # the reset itself is bounded by the sites' deadlines
        return Reply(200, "Reset initiated")

    def status(self) -> Reply:
        service = self.service
        if service.running:
            return Reply(200, "Reset ongoing")
        if service.error:
            return Reply(500, service.error)
        return Reply(200, "Ready for duty!")

    def status_json(self) -> Reply:
        service = self.service
        st = service.lab.status()
        return as_json(200, {"running": service.running, "error": service.error, "last": service.last,
                             "instance": st.to_dict()})

    def verify_json(self) -> Reply:
        """Every site up: its probes and whether it verifies pristine (what a lab's lease server asks
        before it hands this instance out)."""
        lab = self.service.lab
        out: dict[str, dict[str, Any]] = {}
        for site in lab.sites_up():
            ok, why = True, ""
            try:
                v = lab.verify(site)
                ok, why = v.ok, "; ".join(v.differences[:2])
            except EnvctlError as exc:
                ok, why = False, str(exc).splitlines()[0]
            out[site] = {"ok": ok, "why": why}
        return as_json(200, {"running": self.service.running, "sites": out})

    def reset_site(self, site: str) -> Reply:
        try:
            results = self.service.lab.reset([site])
        except EnvctlError as exc:
            return as_json(400, {"error": str(exc).splitlines()[0]})
        return as_json(200 if all(r.ok for r in results) else 500, [r.to_dict() for r in results])


class Handler(BaseHTTPRequestHandler):
    """One request to the reset server. :func:`make_handler` binds what it serves (class attributes)."""

    server_version = "envctl-serve"
    timeout = 15  # seconds a socket read or write may stall (a request sent half, a client gone): never a hang
    secret: bytes | None = None  # the token; None: none (only allowed on a loopback bind)
    loopback = True
    instance_routes: InstanceRoutes | None = None
    lease_routes: LeaseRoutes | None = None

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet: one line per request to stderr
        pass

    def handle_one_request(self) -> None:
        # An unexpected error answers 500 with one line (and its traceback goes to the debug log) instead of
        # closing the connection without an answer.
        try:
            super().handle_one_request()
        except (ConnectionError, TimeoutError):
            raise
        except Exception as exc:  # noqa: BLE001 - the boundary of one request
            import traceback

            from envctl.locks import write_debug_log

            where = write_debug_log(traceback.format_exc())
            try:
                self._reply(Reply(500, f"internal error: {type(exc).__name__}: {str(exc)[:200]}"
                                       + (f" (traceback in {where})" if where else "")))
            except OSError:
                pass

    def _reply(self, reply: Reply) -> None:
        data = reply.body.encode()
        self.send_response(reply.code)
        for k, v in reply.headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", reply.ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def _matches(self, given: str) -> bool:
        return bool(self.secret) and bool(given) and hmac.compare_digest(given.encode(), self.secret)  # type: ignore[arg-type]

    def _route(self) -> tuple[str, bool]:
        """The path without a token segment, and whether the request carried the token."""
        path = urlparse(self.path).path
        head, _, rest = path[1:].partition("/")
        if self.secret and head and self._matches(head):
            return "/" + rest, True
        auth = self.headers.get("Authorization", "")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
        return path, self._matches(bearer) or self._matches(self.headers.get("X-Envctl-Token", ""))

    def _cross_site(self) -> str | None:
        """Why this request looks like it comes from a web page of another origin, or None."""
        site = self.headers.get("Sec-Fetch-Site", "").strip().lower()
        if site and site not in ("same-origin", "none"):
            return f"Sec-Fetch-Site: {site}"
        origin = self.headers.get("Origin")
        if origin is not None and not _same_origin(origin, self.headers.get("Host", "")):
            return f"Origin: {origin[:100]}"
        return None

    def _allowed(self, method: str) -> str | None:
        """The path to serve, or None after answering 403."""
        path, authed = self._route()
        if self.secret and not authed and not (self.loopback and method == "GET" and path == "/status"):
            self._reply(Reply(403, "forbidden: this reset server needs its token (http://host:port/<token>/reset, "
                                   "or Authorization: Bearer <token>); 'envctl env --format browsergym' shows the URL"))
            return None
        if not self.secret and self.loopback:
            host = _host_name(self.headers.get("Host") or "localhost")
            if not is_loopback(host):
                self._reply(Reply(403, f"forbidden: Host {host[:100]!r} is not a loopback name (use 127.0.0.1 or localhost)"))
                return None
        if method in ("POST", "DELETE") or path in STATE_CHANGING or (
                path.startswith("/leases/") and path.endswith("/reset")):
            why = self._cross_site()
            if why:
                self._reply(Reply(403, f"forbidden: resets are not accepted from web pages of another origin ({why})"))
                return None
        return path

    def _body(self) -> bytes:
        try:
            size = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise UsageError("invalid Content-Length") from None
        if size < 0:
            raise UsageError("invalid Content-Length")
        if size > MAX_BODY:
            if size <= DRAIN_MAX:  # read what was sent before answering: a close with it unread resets the answer
                try:
                    self.rfile.read(size)
                except TimeoutError:
                    pass
            self.close_connection = True
            raise UsageError(f"request body over {MAX_BODY} bytes")
        try:
            data = self.rfile.read(size) if size > 0 else b""
        except TimeoutError:  # a client that announced more than it sends holds no thread for long
            raise UsageError(f"the request body stopped before its Content-Length ({size} bytes)") from None
        if len(data) != size:
            raise UsageError(f"the request body ended before its Content-Length ({len(data)} of {size} bytes)")
        return data

    def _dispatch(self, method: str) -> None:
        path = self._allowed(method)
        if path is None:
            return
        query = parse_qs(urlparse(self.path).query)
        routes = self.lease_routes
        if routes is not None and routes.handles(path):
            try:
                self._reply(routes(method, path, query, self._body, self.client_address[0]))
            except UsageError as exc:
                self._reply(as_json(400, {"error": str(exc).splitlines()[0]}))
        elif self.instance_routes is None:
            self._reply(Reply(404, "not found"))
        else:
            self._reply(self.instance_routes(method, path, query))

    def do_GET(self) -> None:  # noqa: N802
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")


def make_handler(service: ResetService | None, token: str | None, *, loopback: bool = True,
                 pool: Pool | None = None) -> type[Handler]:
    """The request handler; ``token`` None = no token (only allowed on a loopback bind); ``pool`` adds the lease
    routes and ``/metrics``."""
    return type("BoundHandler", (Handler,), {
        "secret": token.encode() if token else None, "loopback": loopback,
        "instance_routes": InstanceRoutes(service) if service is not None else None,
        "lease_routes": LeaseRoutes(pool, lambda: "") if pool is not None else None})


def serve(lab: "Lab", host: str = "127.0.0.1", port: int = 7565, token: str | None = None,
          ready: threading.Event | None = None, say: Callable[[str], None] = say_stderr,
          pool: Pool | None = None) -> ThreadingHTTPServer:
    """Create the server (bound) and record its URL; call ``serve_forever()`` on the result.

    A non-loopback ``host`` always gets a token (``token``, else the stored or a new one). The
    result carries ``url`` (with the token path; what WA_FULL_RESET is set to), ``token`` and
    ``token_file``. With ``pool`` it also hands out leases (start the pool with ``pool.start()``)."""
    validate_instance_name(lab.instance)
    settings = lab.settings()
    return _bind(lab.instance, ResetService(lab), host, port, token, say, pool,
                 settings.public_host if settings else None, ready)


def _bind(name: str, service: ResetService | None, host: str, port: int, token: str | None,
          say: Callable[[str], None], pool: Pool | None, public_host: str | None,
          ready: threading.Event | None) -> ThreadingHTTPServer:
    if host:
        validate_host(host, "--bind")
    if not 0 <= int(port) <= 65535:
        raise UsageError(f"--port {port} is out of range", "use a port between 1 and 65535")
    loopback = is_loopback(host)
    path: Path | None = None
    if token or not loopback:
        generated = not token and not token_file(name).exists()
        token, path = server_token(name, token)
        if generated:
            say(f"reset server token generated and stored in {path} (mode 0600); "
                "'envctl env --format browsergym' gives the WA_FULL_RESET URL that carries it")
        else:
            say(f"reset server token: {path}")
    try:
        handler = make_handler(service, token, loopback=loopback, pool=pool)
        server = ThreadingHTTPServer((host, port), handler)
    except OSError as exc:
        raise EnvctlError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                         "pick a free port with --port, or stop what listens there") from None
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    if public_host and host in ("0.0.0.0", ""):
        shown = public_host
    if ":" in shown:
        shown = f"[{shown}]"
    url = f"http://{shown}:{server.server_address[1]}"
    record = {"pid": os.getpid(), "url": url, "token_file": str(path) if path else None}
    write_private(server_record(name), json.dumps(record))
    server.daemon_threads = True  # a request waiting on a reset does not hold the process at exit
    server.url = f"{url}/{token}" if token else url  # type: ignore[attr-defined]
    routes = getattr(handler, "lease_routes", None)
    if routes is not None:
        routes.base_url = lambda: server.url  # type: ignore[attr-defined]
    server.token = token  # type: ignore[attr-defined]
    server.token_file = path  # type: ignore[attr-defined]
    if ready:
        ready.set()
    return server
