"""Log one site in, in a given Playwright page, through the site's real login form.

The catalog describes the form (``login.url``, ``username``/``password``/``submit`` fields by
label, placeholder, test id, CSS selector or button name); this module fills it like a user
and tells apart the ways it can go wrong:

- the page does not load or answers 5xx -> :class:`SiteDown`;
- a described field is missing -> :class:`LoginPageChanged` naming site, URL and field;
- after submitting, the password field is still shown -> :class:`WrongCredentials` with the
  site's own error message (read from the page's alert element).

Passwords are typed into the page and never put in a message: every text that leaves this
module goes through :func:`redact`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envctl.auth.errors import LoginPageChanged, SiteDown, WrongCredentials
from envctl.catalog import Account, Catalog, Deployment, LoginField, Renderer

# Where sites put their "login failed" text: Magento (.message-error), GitLab (.flash-alert /
# .gl-alert), Postmill (.alert), Osclass (#flashmessage), and the generic ARIA role.
ERROR_SELECTORS = ("[role=alert]", ".message-error", ".flash-alert", ".gl-alert", ".flash-container",
                   "#flashmessage", ".flashmessage", ".alert", ".error", ".messages")
FIELD_TIMEOUT_MS = 10_000


@dataclass(frozen=True)
class SiteLogin:
    """One site's rendered login recipe."""

    site: str
    url: str
    account: Account
    username: LoginField
    password: LoginField
    submit: LoginField

    @classmethod
    def of(cls, catalog: Catalog, site: str, deployment: Deployment) -> "SiteLogin":
        s = catalog.site(site)
        if not s.login:
            raise ValueError(f"site '{site}' has no login")
        account = s.account()
        assert account is not None
        return cls(site, Renderer(catalog, site, deployment)(s.login.url), account,
                   s.login.username, s.login.password, s.login.submit)


def describe(field: LoginField) -> str:
    for attr in ("label", "placeholder", "test_id", "selector", "button"):
        value = getattr(field, attr)
        if value:
            return f"{attr.replace('_', ' ')} {value!r}"
    return "?"


def redact(text: str, *secrets: str) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return text


async def _locate(page: Any, field: LoginField) -> Any | None:
    """The first visible element for ``field``, or None when the page has none."""
    candidates = []
    if field.test_id:
        candidates.append(page.get_by_test_id(field.test_id))
    if field.label:
        candidates += [page.get_by_label(field.label, exact=True), page.get_by_label(field.label)]
    if field.placeholder:
        candidates += [page.get_by_placeholder(field.placeholder, exact=True), page.get_by_placeholder(field.placeholder)]
    if field.selector:
        candidates.append(page.locator(field.selector))
    if field.button:
        candidates += [page.get_by_role("button", name=field.button, exact=True),
                       page.get_by_role("button", name=field.button)]
    combined = candidates[0]
    for loc in candidates[1:]:
        combined = combined.or_(loc)
    try:
        await combined.first.wait_for(state="visible", timeout=FIELD_TIMEOUT_MS)
    except Exception:
        return None
    for loc in candidates:  # in order of preference: exact matches first
        for i in range(await loc.count()):
            if await loc.nth(i).is_visible():
                return loc.nth(i)
    return None


async def page_error(page: Any) -> str:
    """The site's visible error text on the current page ("" if it shows none)."""
    for sel in ERROR_SELECTORS:
        loc = page.locator(sel)
        for i in range(min(await loc.count(), 5)):
            el = loc.nth(i)
            if await el.is_visible():
                text = " ".join((await el.inner_text()).split())
                if text:
                    return text[:300]
    return ""


async def goto(page: Any, site: str, url: str, timeout_ms: float) -> None:
    """Open ``url``; a refused connection or a 5xx answer means the site is down."""
    try:
        resp = await page.goto(url, wait_until="load", timeout=timeout_ms)
    except Exception as exc:
        reason = str(exc).splitlines()[0].removeprefix("Page.goto: ")
        raise SiteDown(site, f"{site} is down: {url} did not load ({reason})",
                       f"check it with 'envctl health {site}', bring it up with 'envctl up {site}'") from None
    if resp is not None and resp.status >= 500:
        raise SiteDown(site, f"{site} is unhealthy: {url} answered HTTP {resp.status}",
                       f"check it with 'envctl health {site}' and 'envctl logs {site}'")


async def login(page: Any, recipe: SiteLogin, timeout_ms: float = 30_000) -> None:
    """Fill and submit the site's login form in ``page``; raise on any failure."""
    site, url, pw = recipe.site, recipe.url, recipe.account.password
    await goto(page, site, url, timeout_ms)
    located = {}
    for role, field in (("username", recipe.username), ("password", recipe.password), ("submit", recipe.submit)):
        el = await _locate(page, field)
        if el is None:
            raise LoginPageChanged(site, f"{site}: the login page {page.url} has no {role} field ({describe(field)})",
                                   f"the site's login page changed or the catalog's sites.{site}.login.{role} "
                                   "is wrong; fix the catalog (see 'envctl sites')")
        located[role] = el
    await located["username"].fill(recipe.account.username)
    await located["password"].fill(pw)
    try:
        async with page.expect_navigation(wait_until="load", timeout=timeout_ms):
            await located["submit"].click()
    except Exception as exc:
        raise SiteDown(site, redact(f"{site}: submitting the login form at {url} loaded no page "
                                    f"({str(exc).splitlines()[0]})", pw),
                       f"check it with 'envctl health {site}'") from None
    still_form = await _locate_quick(page, recipe.password)
    if still_form:
        message = redact(await page_error(page), pw)
        shown = f"the site says: {message!r}" if message else "the site shows the login form again without a message"
        raise WrongCredentials(site, f"{site}: login as {recipe.account.username!r} failed at {url}; {shown}",
                               f"check sites.{site}.accounts in the catalog (the password is not shown)")


async def _locate_quick(page: Any, field: LoginField) -> bool:
    """Is the field visible right now (no waiting)?"""
    loc = (page.get_by_test_id(field.test_id) if field.test_id else
           page.get_by_label(field.label, exact=True) if field.label else
           page.get_by_placeholder(field.placeholder, exact=True) if field.placeholder else
           page.locator(field.selector) if field.selector else None)
    if loc is None:
        return False
    for i in range(await loc.count()):
        if await loc.nth(i).is_visible():
            return True
    return False
