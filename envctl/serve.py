"""``envctl serve``: BrowserGym's full-reset protocol, plus per-site resets and a JSON status.

- ``GET /reset``  -> 200 "Reset initiated" and a reset of every mutable site starts; 418 while one runs.
- ``GET /status`` -> 200 "Ready for duty!" when idle, 200 "Reset ongoing" while running,
  500 with the error when the last reset failed.
- ``POST /reset/<site>`` -> the site's reset, synchronously, as JSON.
- ``GET /status.json`` -> instance status with the last reset results.
A ``--token`` makes every request need ``?token=`` or the ``X-Envctl-Token`` header.
The server's URL is recorded in ``<lock dir>/serve-<instance>.json`` for ``envctl env``.
"""
from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlparse

from envctl.locks import lock_dir

if TYPE_CHECKING:
    from envctl.lab import Lab


def _record(instance: str) -> Path:
    return lock_dir() / f"serve-{instance}.json"


def running_server_url(instance: str) -> str | None:
    try:
        raw = json.loads(_record(instance).read_text())
        os.kill(int(raw["pid"]), 0)
        return raw["url"]
    except (OSError, ValueError, KeyError):
        return None


class ResetService:
    def __init__(self, lab: "Lab") -> None:
        self.lab = lab
        self.lock = threading.Lock()
        self.running = False
        self.error = ""
        self.last: list[dict[str, Any]] = []
        self.finished_at = 0.0

    def start_full_reset(self) -> bool:
        with self.lock:
            if self.running:
                return False
            self.running, self.error = True, ""
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


def make_handler(service: ResetService, token: str | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "envctl-serve"

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: one line per request to stderr
            pass

        def _send(self, code: int, body: str, ctype: str = "text/plain; charset=utf-8") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self) -> bool:
            if not token:
                return True
            given = parse_qs(urlparse(self.path).query).get("token", [""])[0] or self.headers.get("X-Envctl-Token", "")
            if given != token:
                self._send(401, "invalid or missing token")
                return False
            return True

        def do_GET(self) -> None:  # noqa: N802
            if not self._authorized():
                return
            path = urlparse(self.path).path
            if path == "/reset":
                if service.start_full_reset():
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
                                            "instance": st}, default=str), "application/json")
            else:
                self._send(404, "not found")

        def do_POST(self) -> None:  # noqa: N802
            if not self._authorized():
                return
            path = urlparse(self.path).path
            if path.startswith("/reset/"):
                site = path.split("/", 2)[2]
                try:
                    results = service.lab.reset([site])
                    self._send(200 if all(r.ok for r in results) else 500,
                               json.dumps([r.to_dict() for r in results]), "application/json")
                except Exception as exc:  # noqa: BLE001
                    self._send(400, json.dumps({"error": str(exc)}), "application/json")
            else:
                self._send(404, "not found")

    return Handler


def serve(lab: "Lab", host: str = "127.0.0.1", port: int = 7565, token: str | None = None,
          ready: threading.Event | None = None) -> ThreadingHTTPServer:
    """Create the server (bound) and record its URL; call ``serve_forever()`` on the result."""
    server = ThreadingHTTPServer((host, port), make_handler(ResetService(lab), token))
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    settings = lab.settings()
    if settings and host == "0.0.0.0":
        shown = settings.public_host
    url = f"http://{shown}:{server.server_address[1]}"
    _record(lab.instance).write_text(json.dumps({"pid": os.getpid(), "url": url}))
    if ready:
        ready.set()
    return server
