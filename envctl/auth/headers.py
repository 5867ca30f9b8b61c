"""Header login: the ``PW_EXTRA_HEADERS`` file for sites whose images log a request in by header.

webarena-verified's images (the slim flavor) and envctl's mini images serve a request carrying e.g.
``X-M2-Customer-Auto-Login: email:password`` logged in as that account; the catalog says which site
has such a header and on which flavors (``header_login``, docs/architecture.md "Flavors"). BrowserGym
reads a flat JSON object of extra HTTP headers from the file ``$PW_EXTRA_HEADERS`` names and sends
them with every request of the browser context, to every origin; one file therefore holds the header
of every site of the instance (the Magento headers are area-scoped, the sites without a header login
ignore them).

The file (``extra_headers.json``, next to the cookie files, mode 0600: it holds passwords) is written
by ``envctl login`` (and ``up``), by every reset that renews login files, and by ``envctl env``. Its
values are credentials, not sessions: a reset puts the accounts back as they were, so the same values
log in to the new copy; each write is checked (the site's expiry probe over HTTP, with the header and
no cookie) and a header the site does not accept is taken out of the file and reported, never left
looking valid. A browser that keeps sending the header is logged in again by the new copy on its
next request (the session the header made on the old copy went with it, like cookies do).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from envctl.auth.check import ProbeSpec
from envctl.auth.files import write_private
from envctl.catalog import Catalog, Deployment

HEADERS_FILE = "extra_headers.json"


def declared(catalog: Catalog, site: str, flavor: str) -> dict[str, str]:
    """``{header: value}`` of ``site``'s header login on ``flavor`` ({} when its images have none)."""
    s = catalog.site(site)
    h = s.header_on(flavor)
    account = s.account()
    if h is None or account is None:
        return {}
    return {h.header: h.render(account)}


def render(catalog: Catalog, sites: Iterable[str], flavor: str) -> dict[str, str]:
    """Header name -> value for every site of ``sites`` that has a header login on ``flavor``."""
    out: dict[str, str] = {}
    for site in sites:
        out.update(declared(catalog, site, flavor))
    return out


def read(path: Path) -> dict[str, str]:
    """The string entries of a headers file ({} when it is missing or not a JSON object)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(data, dict) else {}


def write(auth_dir: Path, catalog: Catalog, sites: Iterable[str], flavor: str,
          drop: Iterable[str] = ()) -> Path | None:
    """Write (0600, atomically) ``auth_dir/extra_headers.json`` with the headers of ``sites``; None (and no
    file) when none is left: none of them has a header login on ``flavor`` and no file exists, or all were dropped.

    Other sites' headers already in the file are kept (renewing one site does not drop another's); the
    headers named in ``drop`` are taken out (a site that refused its header)."""
    sites = list(sites)
    fresh = render(catalog, sites, flavor)
    path = Path(auth_dir) / HEADERS_FILE
    if not fresh and not path.exists():
        return None
    dropped = set(drop)
    merged = {k: v for k, v in (read(path) | fresh).items() if k not in dropped}
    if not merged:  # every header refused: no file rather than an empty one
        path.unlink(missing_ok=True)
        return None
    write_private(path, merged)
    return path


def problems(catalog: Catalog, sites: Iterable[str], deployment: Deployment, flavor: str,
             extra: dict[str, str] | None = None, timeout: float = 30.0) -> dict[str, str]:
    """Header name -> why the site did not log its header in ({} when each did): per site with a header
    login on ``flavor``, its expiry probe over HTTP with the header (and ``extra``) and no cookie."""
    from envctl.auth.httplogin import probe_one

    out: dict[str, str] = {}
    for site in sites:
        for name, value in declared(catalog, site, flavor).items():
            spec = ProbeSpec.of(catalog, site, deployment)
            why = probe_one(spec, [], {**(extra or {}), name: value}, timeout)
            if why:
                out[name] = f"{name}: {why}"
    return out


__all__ = ["HEADERS_FILE", "declared", "render", "read", "write", "problems"]
