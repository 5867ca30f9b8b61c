"""Full-page cache of the mini Magento storefront, as Magento's built-in one (``var/page_cache``, files).

Magento serves a cacheable storefront page (home, category and product pages) to a visitor who is not signed
in from its full-page cache while the entry is valid (``system/full_page_cache/ttl``, 86400 s by default), so
the database is not read at all. The entry goes away when

- ``bin/magento cache:flush`` (or ``cache:clean``) empties ``var/page_cache``;
- a write made through the app itself cleans it, as Magento's cache tags do when a product or a CMS page is
  saved in the admin (here: the whole page cache, not only the pages tagged with that product);
- it is older than the TTL.

A write that bypasses the app (SQL straight into MySQL, a restore of the database) leaves the cached pages as
they were, as upstream: that is what a reset must flush. Every cacheable answer carries
``X-Magento-Cache-Debug: HIT`` or ``MISS`` (upstream sends it in developer mode), so a test can tell.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from flask import Response, g, request

TTL = 86400.0  # seconds: Magento's default system/full_page_cache/ttl
DEBUG_HEADER = "X-Magento-Cache-Debug"
KEPT_HEADERS = ("Content-Type",)


class PageCache:
    """Cached pages as files under ``directory`` (one per URL: the response's status, headers and body)."""

    def __init__(self, directory: Path, ttl: float = TTL) -> None:
        self.directory, self.ttl = directory, ttl

    def _file(self, url: str) -> Path:
        return self.directory / (hashlib.sha256(url.encode()).hexdigest() + ".page")

    def load(self, url: str) -> dict | None:
        f = self._file(url)
        try:
            if time.time() - f.stat().st_mtime > self.ttl:
                return None
            return json.loads(f.read_text())
        except (OSError, ValueError):
            return None

    def save(self, url: str, status: int, headers: list[tuple[str, str]], body: str) -> None:
        f = self._file(url)
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = f.with_name(f"{f.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
        tmp.write_text(json.dumps({"status": status, "headers": headers, "body": body}))
        tmp.replace(f)

    def clean(self) -> None:
        """What saving a product or a CMS page in the admin does to the cached pages (cache tags, coarsely)."""
        for f in self.directory.glob("*.page"):
            try:
                f.unlink()
            except FileNotFoundError:
                pass


def cacheable_path(path: str) -> bool:
    """Home, category and product pages (``/<url-path>.html``): what Magento's FPC keeps for guests."""
    return path == "/" or (path.endswith(".html") and not path.startswith(("/admin", "/rest/", "/static/")))


def register(site: Any) -> None:  # site: sites.magento.Site; after the header login, before the areas
    app, cache = site.app, site.page_cache

    def url() -> str:
        return f"{request.scheme}://{request.host}{request.full_path.rstrip('?')}"

    @app.before_request
    def serve_cached() -> Any:
        if request.method not in ("GET", "HEAD") or not cacheable_path(request.path) or site.customer():
            return None
        g.fpc = url()
        hit = cache.load(g.fpc)
        if hit is None:
            return None
        g.fpc_hit = True
        resp = Response(hit["body"], status=hit["status"])
        for k, v in hit["headers"]:
            resp.headers[k] = v
        return resp

    @app.after_request
    def keep(response: Response) -> Response:
        key = g.get("fpc")
        if not key:
            return response
        hit = g.get("fpc_hit", False)
        response.headers[DEBUG_HEADER] = "HIT" if hit else "MISS"
        if not hit and response.status_code == 200 and "Set-Cookie" not in response.headers \
                and not response.direct_passthrough:
            headers = [(k, v) for k, v in response.headers.items() if k in KEPT_HEADERS]
            cache.save(key, response.status_code, headers, response.get_data(as_text=True))
        return response
