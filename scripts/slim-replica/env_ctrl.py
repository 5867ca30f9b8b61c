#!/usr/bin/env python3
"""Stand-in for webarena-verified's env-ctrl (packages/environment_control), for envctl's slim rehearsal.

The rehearsal's replicas of ``am1n3e/webarena-verified-<site>`` run this where upstream's image runs
``env-ctrl serve --port $WA_ENV_CTRL_PORT`` (docs/flavors/slim.md, "env-ctrl"): the same endpoints, the
same switches, the same port, none of the site's own work beyond what envctl could notice.

* ``serve``: HTTP on ``$WA_ENV_CTRL_PORT`` (8877). ``GET /`` (HTML), ``GET /status`` (health as JSON:
  200 when the site answers on its port inside, 500 otherwise), ``POST /init`` (``?base_url=`` or a
  JSON body ``{"base_url": ...}``, else ``$WA_ENV_CTRL_EXTERNAL_SITE_URL``: the site's init commands, as
  upstream's ``ops/<site>._init``), ``POST /start|/stop|/restart`` (``?wait=1``; this replica's services
  are the image's own process, so these only report), anything else 404 JSON.
* ``probe``: what the rehearsal runs inside a container: ``off`` when nothing listens on the port,
  else the body of ``GET /status``.
* ``check-gitlab-rb``: exit 1 with one line when ``nginx['listen_port']`` in gitlab.rb differs from
  external_url's port (the replica's gitlab-ctl runs it before a reconfigure: the mini GitLab listens
  on external_url's port, upstream's nginx on listen_port, so a mismatch leaves the published port dead).

The entrypoint (entrypoint.sh) starts ``serve`` unless ``WA_ENV_CTRL_ENABLE`` (or ``WA_ENV_CTRL_AVAILABLE``)
is false, as upstream's ``ops/base.py`` reads them.
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

SITE = os.environ.get("WA_ENV_CTRL_TYPE", "")
PORT = int(os.environ.get("WA_ENV_CTRL_PORT", "8877"))
HEALTH = {"shopping": "/customer/account/login", "shopping_admin": "/", "reddit": "/login",
          "gitlab": "/users/sign_in", "wikipedia": "/", "map": "/"}  # upstream cfg health_check_path
MAGENTO = "/var/www/magento2/bin/magento"
SQL = ["mysql", "-u", "magentouser", "-pMyPassword", "magentodb", "-e"]
GITLAB_RB = "/etc/gitlab/gitlab.rb"


def enabled() -> bool:
    return all(os.environ.get(v, "true").strip().lower() not in ("false", "0", "no", "off")
               for v in ("WA_ENV_CTRL_ENABLE", "WA_ENV_CTRL_AVAILABLE"))


def site_port() -> int:
    if SITE == "wikipedia":
        return int(os.environ.get("WA_ENV_CTRL_KIWIX_PORT", "8080"))
    if SITE == "gitlab":
        return gitlab_ports()[0]
    return int(os.environ.get("WA_CONTAINER_PORT", "80"))


def gitlab_ports() -> tuple[int, int | None]:
    """(external_url's port, nginx['listen_port'] or None) from gitlab.rb."""
    text = open(GITLAB_RB).read()
    url = re.search(r"^external_url\s+['\"]([^'\"]+)['\"]", text, re.M)
    parts = urlparse(url.group(1) if url else "http://localhost:8023")
    listen = re.search(r"^nginx\['listen_port'\]\s*=\s*(\d+)", text, re.M)
    return parts.port or 80, int(listen.group(1)) if listen else None


def init_commands(url: str) -> list[list[str]]:
    """Upstream's ops/<site>._init, as commands (docs/flavors/slim.md, "init")."""
    if SITE in ("shopping", "shopping_admin"):
        cmds = [[MAGENTO, "setup:store-config:set", f"--base-url={url}"],
                SQL + [f'UPDATE core_config_data SET value="{url}" WHERE path="web/secure/base_url";'],
                [MAGENTO, "cache:flush"]]
        if SITE == "shopping_admin":
            cmds += [[MAGENTO, "config:set", "admin/security/password_is_forced", "0"],
                     [MAGENTO, "config:set", "admin/security/password_lifetime", "0"]]
        return cmds
    if SITE == "reddit":
        return [["sh", "-c", f"test ! -f /var/www/html/.env || sed -i 's|^APP_SITE_NAME=.*|APP_SITE_NAME={urlparse(url).netloc}|' "
                 "/var/www/html/.env; rm -rf /var/www/html/var/cache/*"]]
    if SITE == "gitlab":
        cmds = [["sed", "-i", f"s|^external_url.*|external_url '{url}'|", GITLAB_RB]]
        if os.environ.get("WA_ENV_CTRL_SKIP_RECONFIGURE", "").lower() != "true":
            cmds.append(["gitlab-ctl", "reconfigure"])
        return cmds
    return []  # wikipedia, map: nothing ("kiwix-serve is stateless"; the map uses relative URLs)


def status() -> tuple[int, dict]:
    port = site_port()
    url = f"http://127.0.0.1:{port}{HEALTH.get(SITE, '/')}"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            code = r.status
    except urllib.error.HTTPError as exc:
        code = exc.code
    except OSError as exc:
        return 500, {"site": SITE, "healthy": False, "url": url, "error": str(exc), "replica": True}
    ok = code < 500
    return (200 if ok else 500), {"site": SITE, "healthy": ok, "url": url, "status": code, "replica": True}


class Handler(BaseHTTPRequestHandler):
    server_version = "env-ctrl-replica/1"

    def _send(self, code: int, body: dict | str) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/html" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt: str, *args: object) -> None:
        sys.stderr.write("env-ctrl: " + fmt % args + "\n")

    def do_GET(self) -> None:
        path = urlparse(self.path).path
        if path == "/":
            code, st = status()
            self._send(200, f"<!doctype html><title>env-ctrl {SITE}</title><h1>{SITE}</h1><pre>{json.dumps(st)}</pre>")
        elif path == "/status":
            self._send(*status())
        else:
            self._send(404, {"error": f"no such endpoint: GET {path}"})

    def do_POST(self) -> None:
        parts = urlparse(self.path)
        query = parse_qs(parts.query)
        if parts.path == "/init":
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}"
            try:
                url = (query.get("base_url") or [None])[0] or json.loads(body).get("base_url") \
                    or os.environ.get("WA_ENV_CTRL_EXTERNAL_SITE_URL")
            except ValueError:
                return self._send(500, {"op": "init", "ok": False, "error": "body is not JSON"})
            if not url and init_commands("x"):
                return self._send(500, {"op": "init", "ok": False, "error": "base_url is required"})
            for cmd in init_commands(url or ""):
                p = subprocess.run(cmd, capture_output=True, text=True)
                if p.returncode != 0:
                    return self._send(500, {"op": "init", "ok": False, "cmd": cmd, "error": (p.stderr or p.stdout)[-400:]})
            return self._send(200, {"op": "init", "ok": True, "base_url": url})
        if parts.path in ("/start", "/stop", "/restart"):
            code, st = status() if query.get("wait") == ["1"] else (200, None)
            return self._send(code, {"op": parts.path[1:], "ok": code == 200, "status": st,
                                     "note": "replica: the site is the image's own process"})
        self._send(404, {"error": f"no such endpoint: POST {parts.path}"})


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "serve"
    if cmd == "serve":
        if not enabled():
            print("env-ctrl: disabled (WA_ENV_CTRL_ENABLE=false)", flush=True)
            return 0
        ThreadingHTTPServer(("0.0.0.0", PORT), Handler).serve_forever()
    if cmd == "probe":
        try:
            socket.create_connection(("127.0.0.1", PORT), timeout=2).close()
        except OSError:
            print("off")
            return 0
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/status", timeout=10) as r:
                print(r.read().decode())
        except urllib.error.HTTPError as exc:
            print(exc.read().decode())
        return 0
    if cmd == "check-gitlab-rb":
        port, listen = gitlab_ports()
        if listen is not None and listen != port:
            print(f"gitlab-ctl reconfigure (replica): nginx['listen_port'] = {listen} in {GITLAB_RB} but external_url's port "
                  f"is {port}: nginx would listen where nothing is published; set nginx['listen_port'] = {port}", file=sys.stderr)
            return 1
        return 0
    print(f"usage: env_ctrl.py serve|probe|check-gitlab-rb (got {cmd!r})", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
