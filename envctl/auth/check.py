"""The upstream expiry probe: does a storage state still log its sites in?

For each site of a combination, open the catalog's ``login.expiry.url`` in a FRESH browser
context loaded with the state. Valid means the keyword is in the page, or, without a keyword,
that the final URL equals the probe URL (no redirect to a login page) — exactly upstream's
``is_expired`` with ``EXACT_MATCH``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envctl.catalog import Catalog, Deployment, Renderer


@dataclass(frozen=True)
class ProbeSpec:
    site: str
    url: str
    keyword: str | None

    @classmethod
    def of(cls, catalog: Catalog, site: str, deployment: Deployment) -> "ProbeSpec":
        s = catalog.site(site)
        assert s.login is not None
        return cls(site, Renderer(catalog, site, deployment)(s.login.expiry.url), s.login.expiry.keyword)


async def probe_page(page: Any, spec: ProbeSpec, timeout_ms: float) -> str:
    """Run one probe in ``page``; "" when logged in, else what was seen instead."""
    try:
        await page.goto(spec.url, wait_until="load", timeout=timeout_ms)
    except Exception as exc:
        return f"{spec.site}: {spec.url} did not load ({str(exc).splitlines()[0].removeprefix('Page.goto: ')})"
    if spec.keyword:
        if spec.keyword in await page.content():
            return ""
        return f"{spec.site}: keyword {spec.keyword!r} not on {spec.url} (landed on {page.url})"
    if page.url == spec.url:
        return ""
    return f"{spec.site}: {spec.url} redirected to {page.url}"


async def probe_state(browser: Any, specs: list[ProbeSpec], state: str | Path | dict | None,
                      timeout_ms: float = 30_000, headers: dict[str, str] | None = None) -> list[str]:
    """Problems found when ``state`` is loaded into a new context (empty list: valid for every site)."""
    context = await browser.new_context(storage_state=str(state) if isinstance(state, Path) else state,
                                        extra_http_headers=headers or {})
    try:
        page = await context.new_page()
        problems = [await probe_page(page, spec, timeout_ms) for spec in specs]
    finally:
        await context.close()
    return [p for p in problems if p]
