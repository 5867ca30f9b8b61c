"""Mini Magento 2 stand-in for the WebArena ``shopping`` (:7770) and ``shopping_admin`` (:7780) sites.

One app serves the storefront, ``/admin`` and ``/rest`` (as the real images do). This module holds
what every area shares: the store configuration with Magento-like caching, base-URL enforcement,
who is signed in, and the container entry point (MariaDB + app under ``miniweb.supervise``).

Configuration caching, as in Magento: the first request after a flush reads ``core_config_data``
and writes ``var/cache/mage--config.json`` under the Magento root; later requests use that file.
So ``bin/magento config:set``, ``setup:store-config:set`` and direct SQL updates take effect only
after ``bin/magento cache:flush`` (which empties ``var/cache``), exactly like upstream.

Base URLs: GET/HEAD requests whose scheme or host differ from the configured base URL get a 302 to
the same path on the base URL (Magento's "Auto-redirect to Base URL"). Admin, customer, checkout,
wish list and order pages are "secure" pages and use ``web/secure/base_url``; the rest uses
``web/unsecure/base_url``. A stale secure URL (WA#18) therefore breaks login but not the home page.

Header login (webarena-verified's contract, ``magento_autologin``): ``X-M2-Customer-Auto-Login`` on the
storefront and ``X-M2-Admin-Auto-Login`` on ``/admin`` sign a request in.

Full-page cache (``magento_fpc``): guests get home, category and product pages from ``var/page_cache`` until
``bin/magento cache:flush`` or an admin save cleans it; a write straight into MySQL does not.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from flask import Flask, g, redirect, request

from miniweb.core import Database, Sessions, create_app, serve

MAGENTO_ROOT = Path(os.environ.get("MAGENTO_ROOT", "/var/www/magento2"))
SECURE_PREFIXES = ("/admin", "/customer", "/checkout", "/wishlist", "/sales", "/review")


class ConfigCache:
    """``core_config_data`` (default scope) cached in a file that ``cache:flush`` deletes."""

    def __init__(self, db: Database, cache_dir: Path) -> None:
        self.db, self.file = db, cache_dir / "mage--config.json"
        self._lock = threading.Lock()
        self._stamp: int | None = None
        self._data: dict[str, str] = {}

    def get(self) -> dict[str, str]:
        with self._lock:
            try:
                stamp = self.file.stat().st_mtime_ns
            except FileNotFoundError:
                rows = self.db.all("SELECT path, value FROM core_config_data WHERE scope = 'default' AND scope_id = 0")
                self._data = {p: v for p, v in rows}
                self.file.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.file.with_suffix(".tmp")
                tmp.write_text(json.dumps(self._data, sort_keys=True))
                tmp.replace(self.file)
                self._stamp = self.file.stat().st_mtime_ns
                return self._data
            if stamp != self._stamp:
                self._data, self._stamp = json.loads(self.file.read_text()), stamp
            return self._data


def _netloc(scheme: str, host: str) -> str:
    default = {"http": ":80", "https": ":443"}.get(scheme, "")
    host = host.lower()
    return host[: -len(default)] if default and host.endswith(default) else host


def is_secure_path(path: str) -> bool:
    return path.startswith(SECURE_PREFIXES)


@dataclass
class Site:
    """What the area modules share: DB, config, sessions and URL building."""

    app: Flask
    db: Database
    config: ConfigCache
    customer_sessions: Sessions
    admin_sessions: Sessions
    page_cache: Any = None  # magento_fpc.PageCache

    def base_url(self, secure: bool) -> str:
        cfg = self.config.get()
        url = cfg.get("web/secure/base_url" if secure else "web/unsecure/base_url") or "http://localhost/"
        return url if url.endswith("/") else url + "/"

    def u(self, path: str) -> str:
        """Absolute URL of ``path`` on the configured base URL (secure pages on the secure one)."""
        return self.base_url(is_secure_path(path)) + path.lstrip("/")

    def customer(self) -> tuple | None:
        """(entity_id, email, firstname, lastname) of the signed-in customer."""
        user = g.get("user") or ""
        if not user.startswith("customer:"):
            return None
        return self.db.one("SELECT entity_id, email, firstname, lastname FROM customer_entity WHERE entity_id = %s",
                           (int(user.split(":", 1)[1]),))

    def admin(self) -> tuple | None:
        """(user_id, username, firstname, lastname) of the signed-in admin."""
        user = g.get("admin_user") or self.admin_sessions.current_user() or ""  # admin_user: a header login
        if not user.startswith("admin:"):
            return None
        return self.db.one("SELECT user_id, username, firstname, lastname FROM admin_user WHERE user_id = %s"
                           " AND is_active = 1", (int(user.split(":", 1)[1]),))

    def form_key(self) -> str:
        """Per-session CSRF token for admin forms (Magento's form_key)."""
        sid = g.get("admin_sid") or request.cookies.get(self.admin_sessions.cookie, "")
        return hashlib.sha256(f"form_key:{sid}".encode()).hexdigest()[:16]

    def categories(self) -> list[tuple]:
        return self.db.all("SELECT entity_id, parent_id, name, url_path FROM catalog_category_entity ORDER BY position")


def build_app() -> Flask:
    app = create_app("magento", cookie="PHPSESSID")
    app.url_map.strict_slashes = False
    db: Database = app.db  # type: ignore[attr-defined]
    from sites import magento_fpc

    site = Site(app, db, ConfigCache(db, MAGENTO_ROOT / "var" / "cache"), app.sessions,  # type: ignore[attr-defined]
                Sessions(db, "admin"), magento_fpc.PageCache(MAGENTO_ROOT / "var" / "page_cache"))

    @app.before_request
    def enforce_base_url() -> Any:
        if request.method not in ("GET", "HEAD") or request.path.startswith(("/rest/", "/static/")):
            return None
        if site.config.get().get("web/url/redirect_to_base", "1") == "0":
            return None
        base = urlsplit(site.base_url(is_secure_path(request.path)))
        if base.scheme != request.scheme or _netloc(base.scheme, base.netloc) != _netloc(request.scheme, request.host):
            query = request.query_string.decode()
            target = site.u(request.path) + (f"?{query}" if query else "")
            return redirect(target, 302)
        return None

    @app.after_request
    def log(response: Any) -> Any:
        print(f'{request.remote_addr} "{request.method} {request.full_path.rstrip("?")}" {response.status_code}',
              flush=True)
        return response

    @app.errorhandler(404)
    def not_found(_: Exception) -> Any:
        return ("<!DOCTYPE html><html><head><title>404 Not Found</title></head><body><h1>Whoops, our bad...</h1>"
                "<p>The page you requested was not found.</p></body></html>", 404)

    @app.errorhandler(500)
    def server_error(_: Exception) -> Any:
        # Never a stack trace in the page (the log has it).
        return ("<!DOCTYPE html><html><head><title>Error</title></head><body><h1>There has been an error processing"
                " your request</h1></body></html>", 500)

    from sites import magento_admin, magento_autologin, magento_rest, magento_store

    magento_autologin.register(site)  # before the areas' own gates, as upstream's plugins run before dispatch
    magento_fpc.register(site)  # after the header login: a guest's request only
    magento_store.register(site)
    magento_admin.register(site)
    magento_rest.register(site)
    return app


def run_container() -> int:
    """Container entry point: MariaDB first, then the app; both stop cleanly on SIGTERM."""
    from miniweb.supervise import supervise

    db = Database(os.environ["MINIWEB_DB"])
    mariadb = ["mariadbd", "--user=mysql"]  # settings: /etc/mysql/mariadb.conf.d/60-envctl.cnf
    web = [sys.executable, "-m", "sites.magento", "serve"]
    return supervise([("mariadb", mariadb, db.wait), ("web", web, None)])


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve(build_app())
    else:
        sys.exit(run_container())
