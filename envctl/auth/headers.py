"""Header login: a ``PW_EXTRA_HEADERS``-style JSON file for images that log users in by header.

Some image builds (webarena-verified) log a request in when it carries a header such as
``X-M2-Customer-Auto-Login: email:password``. BrowserGym reads a JSON object of extra HTTP
headers from the file named by ``PW_EXTRA_HEADERS`` and sends them with every request.

Catalog field (proposed; read with ``getattr`` so the catalog may not have it yet): a flavor
declares ``header_login: {HEADER: TEMPLATE}``; ``{username}`` and ``{password}`` are the site's
login account, other ``{...}`` tokens are the usual catalog templates. Example::

    flavors:
      verified:
        header_login: {X-M2-Customer-Auto-Login: "{username}:{password}"}
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

from envctl.auth.files import write_private
from envctl.catalog import Catalog, Deployment, Renderer

HEADERS_FILE = "extra_headers.json"


def declared(catalog: Catalog, site: str, flavor: str) -> Mapping[str, str]:
    f = catalog.site(site).flavors.get(flavor)
    return getattr(f, "header_login", None) or {} if f is not None else {}


def render(catalog: Catalog, sites: Iterable[str], deployment: Deployment, flavor: str) -> dict[str, str]:
    """Header name -> value for every site in ``sites`` whose flavor declares header login."""
    out: dict[str, str] = {}
    for site in sites:
        templates = declared(catalog, site, flavor)
        if not templates:
            continue
        account = catalog.site(site).account()
        if account is None:
            raise ValueError(f"sites.{site}: header_login needs an account")
        render_one = Renderer(catalog, site, deployment)
        for name, template in templates.items():
            value = template.replace("{username}", account.username).replace("{password}", account.password)
            out[name] = render_one(value)
    return out


def write(auth_dir: Path, catalog: Catalog, sites: Iterable[str], deployment: Deployment, flavor: str) -> Path | None:
    """Write (0600, atomically) ``auth_dir/extra_headers.json``; None when no site declares header login.

    Existing headers of other sites in the file are kept, so renewing one site does not drop another's."""
    sites = list(sites)
    headers = render(catalog, sites, deployment, flavor)
    if not headers:
        return None
    path = Path(auth_dir) / HEADERS_FILE
    current: dict[str, str] = {}
    if path.exists():
        import json

        try:
            current = {k: v for k, v in json.loads(path.read_text()).items() if isinstance(v, str)}
        except (ValueError, AttributeError):
            current = {}
    mine = {n for s in sites for n in declared(catalog, s, flavor)}
    merged = {k: v for k, v in current.items() if k not in mine} | headers
    write_private(path, merged)
    return path
