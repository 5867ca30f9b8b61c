"""A small threaded HTTP server on 127.0.0.1 that serves archives with chosen faults.

URL layout: ``/<mode>/<name>``, with modes
  ok        honours Range
  norange   ignores Range (always 200 with the whole body)
  drop      honours Range; the first request for a name is cut after ``drop_after`` bytes
  truncate  ignores Range; announces the full length and closes halfway, every time
  html      a Google Drive "quota exceeded" page
  corrupt   honours Range; one byte in the middle is flipped
  slow      honours Range; ~``slow_rate`` bytes/s per connection
  chunked   ignores Range; chunked transfer, no length announced
  gdrive    ``/gdrive/uc?export=download&id=<name>``: Drive's confirm form pointing at ``/ok/<name>``
Used by the tests and by bench/fetch.py.
"""
from __future__ import annotations

import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

QUOTA_PAGE = (b"<!DOCTYPE html><html><head><title>Google Drive - Quota exceeded</title></head><body>"
              b"<p>Sorry, you can't view or download this file at this time.</p><p>Too many users have viewed or "
              b"downloaded this file recently. Please try accessing the file again later.</p></body></html>")


class FaultServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str = "127.0.0.1") -> None:
        """``host``: the address it listens on (a test swarm's nodes reach the host at their network's gateway)."""
        super().__init__((host, 0), _Handler)
        self.host = host
        self.files: dict[str, bytes] = {}
        self.paths: dict[str, str] = {}  # name -> file on disk (served without holding it in memory)
        self.log: list[tuple[str, str | None]] = []  # (path, Range header)
        self.sent = 0
        self.drop_after = 300_000
        self.slow_rate = 2_000_000
        self._dropped: set[str] = set()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients hanging up mid-body is the point of several modes

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.server_address[1]}"

    def url(self, mode: str, name: str) -> str:
        return f"{self.base}/{mode}/{name}"

    def ranges(self, name: str) -> list[str | None]:
        return [r for p, r in self.log if p.endswith("/" + name)]

    def __enter__(self) -> "FaultServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: FaultServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _size(self, name: str) -> int | None:
        if name in self.server.files:
            return len(self.server.files[name])
        if name in self.server.paths:
            import os
            return os.path.getsize(self.server.paths[name])
        return None

    def _read(self, name: str, start: int, end: int) -> bytes:
        if name in self.server.files:
            return self.server.files[name][start:end]
        with open(self.server.paths[name], "rb") as fh:
            fh.seek(start)
            return fh.read(end - start)

    def do_GET(self) -> None:  # noqa: N802
        parsed = urlparse(self.path)
        rng = self.headers.get("Range")
        with self.server.lock:
            self.server.log.append((parsed.path, rng))
        mode, _, name = parsed.path.lstrip("/").partition("/")
        if mode == "gdrive":
            fid = parse_qs(parsed.query).get("id", [""])[0]
            page = (f'<!DOCTYPE html><html><body><p>Google Drive can\'t scan this file for viruses.</p>'
                    f'<form id="download-form" action="{self.server.base}/ok/{fid}" method="get">'
                    f'<input type="hidden" name="id" value="{fid}"><input type="hidden" name="export" value="download">'
                    f'<input type="hidden" name="confirm" value="t"></form></body></html>').encode()
            return self._send(200, page, "text/html; charset=utf-8")
        size = self._size(name)
        if size is None:
            return self._send(404, b"not found", "text/plain")
        if mode == "html":
            return self._send(200, QUOTA_PAGE, "text/html; charset=utf-8")
        if mode == "chunked":
            return self._send_chunked(name, size)
        start, end = 0, size
        ranged = mode in ("ok", "drop", "corrupt", "slow") and rng is not None
        if ranged:
            m = re.match(r"bytes=(\d+)-(\d*)$", rng or "")
            if not m or int(m.group(1)) >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start = int(m.group(1))
            end = min(size, int(m.group(2)) + 1) if m.group(2) else size
        self.send_response(206 if ranged else 200)
        self.send_header("Content-Type", "application/x-tar")
        self.send_header("Content-Length", str(end - start))
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        if mode in ("ok", "drop", "corrupt", "slow"):
            self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        limit = end
        if mode == "truncate":
            limit = start + (end - start) // 2
        if mode == "drop":
            with self.server.lock:
                first = name not in self.server._dropped
                self.server._dropped.add(name)
            if first:
                limit = min(end, start + self.server.drop_after)
        step = 64 * 1024
        pos = start
        t0 = time.monotonic()
        try:
            while pos < limit:
                chunk = self._read(name, pos, min(pos + step, limit))
                if mode == "corrupt" and pos <= size // 2 < pos + len(chunk):
                    i = size // 2 - pos
                    chunk = chunk[:i] + bytes([chunk[i] ^ 0xFF]) + chunk[i + 1:]
                self.wfile.write(chunk)
                pos += len(chunk)
                with self.server.lock:
                    self.server.sent += len(chunk)
                if mode == "slow":
                    ahead = (pos - start) / self.server.slow_rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
        except (BrokenPipeError, ConnectionResetError):
            return
        if limit < end:
            self.close_connection = True
            self.wfile.flush()
            self.connection.shutdown(2)

    def _send_chunked(self, name: str, size: int) -> None:
        """The whole file, chunked: no length announced, no Range."""
        self.send_response(200)
        self.send_header("Content-Type", "application/x-tar")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for pos in range(0, size, 64 * 1024):
                chunk = self._read(name, pos, min(pos + 64 * 1024, size))
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                with self.server.lock:
                    self.server.sent += len(chunk)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            return

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
