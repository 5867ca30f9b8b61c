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

Leases (issue #16; with a pool, ``envctl serve --instances N``, see :mod:`envctl.leases`):

- ``POST /leases`` (JSON body, all optional: ``sites``, ``ttl`` seconds, ``holder``, ``wait`` seconds)
  -> 201 ``{"id", "instance", "sites", "env", "auth", "full_reset", "expires", ...}`` once the leased
  instance is healthy, or 503 with ``Retry-After`` when none is free;
- ``POST /leases/<id>/heartbeat`` (optional ``ttl``) extends it; ``DELETE /leases/<id>`` returns it
  (its sites are reset and verified in the background before the next lease); ``GET /leases`` lists;
- ``GET /leases/<id>/reset`` and ``GET /leases/<id>/status``: BrowserGym's protocol for the lease's
  own sites (the lease's ``full_reset`` URL, its ``WA_FULL_RESET``);
- ``GET /metrics``: Prometheus text (leases, resets by tier and latency, heals, spares).

:func:`serve_pool` serves a pool with no instance of its own (a cloud lab's, ``envctl cloud serve``):
the lease endpoints and ``/metrics`` only.

Access control (issue #14: a reset must not be triggerable by whoever reaches the port, nor by a
page the agent's own browser opens):

- **Token.** With ``--token`` (or ``$ENVCTL_SERVE_TOKEN``), and always when bound to a non-loopback
  address (a token is then generated with ``secrets.token_urlsafe`` unless one is given), every
  request needs it, as the first path segment (``/<token>/reset``, ``/<token>/status``: unmodified
  BrowserGym works with ``WA_FULL_RESET=http://host:7565/<token>``, since it appends ``/reset``
  and ``/status``) or as ``Authorization: Bearer <token>`` (or ``X-Envctl-Token``). Otherwise: 403.
  The one exception: ``GET /status`` (read-only, one line) needs no token on a loopback bind.
  The token is kept in ``<state dir>/serve-<instance>.token`` (mode 0600; see
  :func:`envctl.locks.lock_dir`) and reused by the next server of the instance.
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
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import parse_qs, urlparse

from envctl.errors import EnvctlError, UsageError
from envctl.leases import NoFreeInstance, NoSuchLease, Pool, auth_dir
from envctl.locks import lock_dir, write_private
from envctl.validate import is_loopback, validate_host, validate_instance_name, validate_token

if TYPE_CHECKING:
    from envctl.lab import Lab

TOKEN_ENV = "ENVCTL_SERVE_TOKEN"
STATE_CHANGING = ("/reset",)  # exact paths; plus every POST and DELETE, and a lease's /reset
MAX_BODY = 65536


def _record(instance: str) -> Path:
    return lock_dir() / f"serve-{validate_instance_name(instance)}.json"


def token_file(instance: str) -> Path:
    """Where the reset server of ``instance`` keeps its token (0600, in envctl's state directory)."""
    return lock_dir() / f"serve-{validate_instance_name(instance)}.token"


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


def running_server_url(instance: str) -> str | None:
    """The URL of the instance's running reset server, with its token path (``http://h:p/<token>``)
    when it requires one; what ``WA_FULL_RESET`` is set to. None when none runs."""
    try:
        raw = json.loads(_record(instance).read_text())
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


FULL_RESET_WAIT = 600.0  # BrowserGym's own limit for a full reset


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
              say: Callable[[str], None] | None = None) -> Pool:
    """The lease pool named after ``lab``'s instance: members ``<instance>-1`` … ``-N``, each a Lab
    with its own login state folder. Call ``start()`` on it (it brings missing members up)."""
    from envctl.lab import Lab

    def make(name: str) -> Lab:
        return Lab(lab.catalog, catalog_path=lab.catalog_path, instance=name, auth_dir=auth_dir(name))

    return Pool(lab.instance, make, size=instances, flavor=flavor, sites=sites, spares=spares,
                heal_after=heal_after, base_offset=base_offset, log=say or _stderr)


def make_handler(service: ResetService | None, token: str | None, *, loopback: bool = True,
                 pool: Pool | None = None) -> type[BaseHTTPRequestHandler]:
    """The request handler; ``token`` None = no token (only allowed on a loopback bind); ``pool``
    adds the lease endpoints and ``/metrics``. Without ``service`` (a lab's lease server, which has no
    instance of its own) ``/reset``, ``/status`` and ``POST /reset/SITE`` answer 404."""
    secret = token.encode() if token else None

    class Handler(BaseHTTPRequestHandler):
        server_version = "envctl-serve"

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: one line per request to stderr
            pass

        def handle_one_request(self) -> None:
            # An unexpected error answers 500 with one line (and its traceback goes to the debug log)
            # instead of closing the connection without an answer.
            try:
                super().handle_one_request()
            except (ConnectionError, TimeoutError):
                raise
            except Exception as exc:  # noqa: BLE001 - the boundary of one request
                import traceback

                from envctl.locks import write_debug_log

                where = write_debug_log(traceback.format_exc())
                try:
                    self._send(500, f"internal error: {type(exc).__name__}: {exc}" + (f" (traceback in {where})"
                                                                                       if where else ""))
                except OSError:
                    pass

        def _send(self, code: int, body: str, ctype: str = "text/plain; charset=utf-8",
                  headers: dict[str, str] | None = None) -> None:
            data = body.encode()
            self.send_response(code)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def _matches(self, given: str) -> bool:
            return bool(secret) and bool(given) and hmac.compare_digest(given.encode(), secret)  # type: ignore[arg-type]

        def _route(self) -> tuple[str, bool]:
            """The path without a token segment, and whether the request carried the token."""
            path = urlparse(self.path).path
            head, _, rest = path[1:].partition("/")
            if secret and head and self._matches(head):
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
            if secret and not authed and not (loopback and method == "GET" and path == "/status"):
                self._send(403, "forbidden: this reset server needs its token (http://host:port/<token>/reset, "
                                "or Authorization: Bearer <token>); 'envctl env --format browsergym' shows the URL")
                return None
            if not secret and loopback:
                host = _host_name(self.headers.get("Host") or "localhost")
                if not is_loopback(host):
                    self._send(403, f"forbidden: Host {host[:100]!r} is not a loopback name (use 127.0.0.1 or localhost)")
                    return None
            if method in ("POST", "DELETE") or path in STATE_CHANGING or (
                    path.startswith("/leases/") and path.endswith("/reset")):
                why = self._cross_site()
                if why:
                    self._send(403, f"forbidden: resets are not accepted from web pages of another origin ({why})")
                    return None
            return path

        def do_GET(self) -> None:  # noqa: N802
            path = self._allowed("GET")
            if path is None:
                return
            if pool is not None and (path == "/metrics" or path == "/leases" or path.startswith("/leases/")):
                self._leases("GET", path)
            elif service is None:
                self._send(404, "not found: this lease server has no instance of its own; reset a lease "
                                "through its full_reset URL")
            elif path == "/reset":
                if service.start_full_reset():
                    if parse_qs(urlparse(self.path).query).get("wait", ["1"])[0] != "0":
                        service.done.wait(FULL_RESET_WAIT)  # the reset itself is bounded by the sites' deadlines
                    self._send(200, "Reset initiated")
                else:
                    self._send(418, "Reset already ongoing")
            elif path == "/status":
                if service.running:
                    self._send(200, "Reset ongoing")
                elif service.error:
                    self._send(500, service.error)
                else:
                    self._send(200, "Ready for duty!")
            elif path == "/status.json":
                st = service.lab.status()
                self._send(200, json.dumps({"running": service.running, "error": service.error, "last": service.last,
                                            "instance": st.to_dict()}, default=str), "application/json")
            else:
                self._send(404, "not found")

        def do_POST(self) -> None:  # noqa: N802
            path = self._allowed("POST")
            if path is None:
                return
            if path.startswith("/reset/") and service is not None:
                site = path.split("/", 2)[2]
                try:
                    results = service.lab.reset([site])
                    self._send(200 if all(r.ok for r in results) else 500,
                               json.dumps([r.to_dict() for r in results]), "application/json")
                except Exception as exc:  # noqa: BLE001
                    self._send(400, json.dumps({"error": str(exc)}), "application/json")
            elif pool is not None and (path == "/leases" or path.startswith("/leases/")):
                self._leases("POST", path)
            else:
                self._send(404, "not found")

        def do_DELETE(self) -> None:  # noqa: N802
            path = self._allowed("DELETE")
            if path is None:
                return
            if pool is not None and path.startswith("/leases/"):
                self._leases("DELETE", path)
            else:
                self._send(404, "not found")

        # -- leases ------------------------------------------------------------------------------
        def _json(self, code: int, data: Any, headers: dict[str, str] | None = None) -> None:
            self._send(code, json.dumps(data, default=str), "application/json", headers)

        def _body(self) -> dict[str, Any]:
            try:
                size = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                raise UsageError("invalid Content-Length") from None
            if size > MAX_BODY:
                raise UsageError(f"request body over {MAX_BODY} bytes")
            raw = self.rfile.read(size) if size > 0 else b""
            if not raw.strip():
                return {}
            try:
                data = json.loads(raw)
            except ValueError:
                raise UsageError("the request body is not JSON", 'send e.g. {"sites": ["reddit"], "ttl": 600}') from None
            if not isinstance(data, dict):
                raise UsageError("the request body must be a JSON object")
            return data

        def _leases(self, method: str, path: str) -> None:
            assert pool is not None
            parts = path.strip("/").split("/")
            try:
                if parts == ["metrics"] and method == "GET":
                    self._send(200, pool.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
                elif parts == ["leases"] and method == "GET":
                    self._json(200, {"leases": pool.leases(), "instances": pool.rows(), "summary": pool.summary()})
                elif parts == ["leases"] and method == "POST":
                    body = self._body()
                    sites = body.get("sites")
                    if isinstance(sites, str):
                        sites = [s for s in sites.split(",") if s]
                    if sites is not None and not (isinstance(sites, list) and all(isinstance(s, str) for s in sites)):
                        raise UsageError("'sites' must be a list of site names")
                    base = getattr(self.server, "url", "")
                    lease = pool.acquire(sites or None, ttl=body.get("ttl"), holder=str(body.get("holder") or
                                                                                     self.client_address[0]),
                                         wait=float(body.get("wait") or 0),
                                         full_reset=lambda lid: f"{base}/leases/{lid}")
                    self._json(201, lease.to_dict())
                elif len(parts) == 3 and parts[0] == "leases" and parts[2] == "heartbeat" and method == "POST":
                    body = self._body()
                    self._json(200, pool.heartbeat(parts[1], body.get("ttl")))
                elif len(parts) == 2 and parts[0] == "leases" and method == "DELETE":
                    self._json(200, pool.release(parts[1]))
                elif len(parts) == 2 and parts[0] == "leases" and method == "GET":
                    row = next((r for r in pool.leases() if r.get("id") == parts[1]), None)
                    if row is None:
                        raise NoSuchLease(parts[1])
                    self._json(200, row)
                elif len(parts) == 3 and parts[0] == "leases" and parts[2] == "reset" and method == "GET":
                    if pool.start_lease_reset(parts[1]):
                        self._send(200, "Reset initiated")
                    else:
                        self._send(418, "Reset already ongoing")
                elif len(parts) == 3 and parts[0] == "leases" and parts[2] == "status" and method == "GET":
                    running, error = pool.lease_reset_status(parts[1])
                    if running:
                        self._send(200, "Reset ongoing")
                    elif error:
                        self._send(500, error)
                    else:
                        self._send(200, "Ready for duty!")
                else:
                    self._send(404 if method == "GET" else 405, "not found")
            except NoFreeInstance as exc:
                self._json(503, {"error": str(exc)}, {"Retry-After": str(exc.retry_after)})
            except NoSuchLease as exc:
                self._json(404, {"error": str(exc)})
            except UsageError as exc:
                self._json(400, {"error": str(exc)})
            except (EnvctlError, ValueError, TypeError) as exc:
                self._json(503 if isinstance(exc, EnvctlError) else 400, {"error": str(exc)},
                           {"Retry-After": "10"} if isinstance(exc, EnvctlError) else None)

    return Handler


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def serve(lab: "Lab", host: str = "127.0.0.1", port: int = 7565, token: str | None = None,
          ready: threading.Event | None = None, say: Callable[[str], None] = _stderr,
          pool: Pool | None = None) -> ThreadingHTTPServer:
    """Create the server (bound) and record its URL; call ``serve_forever()`` on the result.

    A non-loopback ``host`` always gets a token (``token``, else the stored or a new one). The
    result carries ``url`` (with the token path; what WA_FULL_RESET is set to), ``token`` and
    ``token_file``. With ``pool`` it also hands out leases (start the pool with ``pool.start()``)."""
    validate_instance_name(lab.instance)
    settings = lab.settings()
    return _bind(lab.instance, ResetService(lab), host, port, token, say, pool,
                 settings.public_host if settings else None, ready)


def serve_pool(name: str, pool: Pool, host: str = "127.0.0.1", port: int = 7565, token: str | None = None,
               ready: threading.Event | None = None, say: Callable[[str], None] = _stderr) -> ThreadingHTTPServer:
    """A lease server with no instance of its own (a cloud lab's pool, :class:`envctl.leases.LabPool`):
    the lease endpoints and ``/metrics`` only. Recorded under ``name`` (the lab), so
    ``envctl lease acquire --instance <lab>`` finds it; its token, when it has one, in
    ``<state dir>/serve-<lab>.token``."""
    validate_instance_name(name)
    return _bind(name, None, host, port, token, say, pool, None, ready)


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
        server = ThreadingHTTPServer((host, port), make_handler(service, token, loopback=loopback, pool=pool))
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
    write_private(_record(name), json.dumps(record))
    server.url = f"{url}/{token}" if token else url  # type: ignore[attr-defined]
    server.token = token  # type: ignore[attr-defined]
    server.token_file = path  # type: ignore[attr-defined]
    if ready:
        ready.set()
    return server
