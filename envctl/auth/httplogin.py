"""Log sites in with one HTTP form post, no browser (sites whose catalog login declares ``http``).

Where a site's login is a plain HTML form post, a browser adds nothing but time: this module GETs
the login page through the public URL (with the same extra headers the browser path sends, e.g.
``X-Envctl-Backend`` for a spare), finds the form by the catalog's own field descriptions (label,
placeholder, test id, simple CSS selector, button name), posts it with every hidden input the page
carries (``_csrf_token``, ``form_key``, ``authenticity_token``, ...) and the account's credentials,
and writes the session's cookies as a Playwright ``storage_state`` (same keys and value conventions
as ``BrowserContext.storage_state()``, so harnesses load it with ``new_context(storage_state=...)``).

Failures use the browser path's classes (:mod:`envctl.auth.errors`): no answer or 5xx ->
:class:`SiteDown`; a described field missing -> :class:`LoginPageChanged`; the password field
shown again after the post -> :class:`WrongCredentials` with the site's own message. The password
never leaves in a message (:func:`envctl.auth.flows.redact`).

:func:`probe_state` is the upstream expiry probe over HTTP (keyword in the body, or no redirect
away from the probe URL), for files made here.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Iterable, Iterator
from urllib.parse import urljoin, urlsplit

import requests

from envctl.auth.check import ProbeSpec
from envctl.auth.errors import LoginPageChanged, SiteDown, WrongCredentials
from envctl.auth.flows import SiteLogin, describe, redact
from envctl.catalog import Catalog, LoginField

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
# The browser path's ERROR_SELECTORS (flows.py), as (attribute, value) tests on one element.
ERROR_MATCHERS = (("role", "alert"), ("class", "message-error"), ("class", "flash-alert"), ("class", "gl-alert"),
                  ("class", "flash-container"), ("id", "flashmessage"), ("class", "flashmessage"), ("class", "alert"),
                  ("class", "error"), ("class", "messages"))
MAX_REDIRECTS = 10


def declared(catalog: Catalog, site: str) -> bool:
    login = catalog.site(site).login
    return bool(login and login.http is not None)


# -- a small DOM ------------------------------------------------------------------------------

@dataclass(eq=False)
class Node:
    tag: str
    attrs: dict[str, str]
    parent: "Node | None" = None
    children: list["Node | str"] = field(default_factory=list)

    def walk(self) -> Iterator["Node"]:
        for c in self.children:
            if isinstance(c, Node):
                yield c
                yield from c.walk()

    def text(self) -> str:
        parts: list[str] = []
        for c in self.children:
            if isinstance(c, str):
                parts.append(c)
            elif c.tag not in ("script", "style"):
                parts.append(c.text())
        return " ".join(" ".join(parts).split())

    def ancestor(self, tag: str) -> "Node | None":
        n = self.parent
        while n is not None and n.tag != tag:
            n = n.parent
        return n

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def hidden(self) -> bool:
        """Not shown to a user (the browser path only fills visible fields)."""
        n: Node | None = self
        while n is not None:
            if "hidden" in n.attrs or re.search(r"display\s*:\s*none", n.attrs.get("style", "")):
                return True
            n = n.parent
        return self.tag == "input" and self.attrs.get("type", "").lower() == "hidden"


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.cur = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.cur.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.cur))

    def handle_endtag(self, tag: str) -> None:
        n: Node | None = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:  # close it (and anything left open inside it)
            self.cur = n.parent

    def handle_data(self, data: str) -> None:
        self.cur.children.append(data)


def parse(html: str) -> Node:
    b = _Builder()
    b.feed(html)
    b.close()
    return b.root


# -- finding the catalog's fields -------------------------------------------------------------

_SIMPLE = re.compile(r'^(?P<tag>[a-zA-Z][\w-]*)?(?P<rest>(?:[#.][\w-]+|\[[\w-]+(?:=["\']?[^"\'\]]*["\']?)?\])*)$')
_PART = re.compile(r'#(?P<id>[\w-]+)|\.(?P<cls>[\w-]+)|\[(?P<attr>[\w-]+)(?:=["\']?(?P<val>[^"\'\]]*)["\']?)?\]')


def _selector(sel: str) -> list[tuple[str, str, str | None]] | None:
    """``tag#id.class[attr=value]`` -> tests; None for anything a browser would need to evaluate."""
    m = _SIMPLE.match(sel.strip())
    if not m:
        return None
    tests: list[tuple[str, str, str | None]] = [("tag", m["tag"].lower(), None)] if m["tag"] else []
    for p in _PART.finditer(m["rest"]):
        if p["id"]:
            tests.append(("attr", "id", p["id"]))
        elif p["cls"]:
            tests.append(("class", p["cls"], None))
        else:
            tests.append(("attr", p["attr"], p["val"]))
    return tests


def _matches(node: Node, tests: list[tuple[str, str, str | None]]) -> bool:
    for kind, a, b in tests:
        if kind == "tag" and node.tag != a:
            return False
        if kind == "class" and a not in node.classes():
            return False
        if kind == "attr" and (a not in node.attrs or (b is not None and node.attrs[a] != b)):
            return False
    return True


def supported(fld: LoginField) -> bool:
    """Can :func:`locate` evaluate this description without a browser?"""
    return not fld.selector or _selector(fld.selector) is not None


def _same(text: str, want: str, exact: bool) -> bool:
    text = " ".join(text.split())
    return text == want if exact else want.lower() in text.lower()


def _controls(root: Node) -> list[Node]:
    return [n for n in root.walk() if n.tag in ("input", "textarea", "select", "button") and not n.hidden()]


def locate(root: Node, fld: LoginField) -> Node | None:
    """The first visible control matching ``fld``, preferring exact matches, like ``flows._locate``."""
    controls = _controls(root)
    by_id = {n.attrs["id"]: n for n in controls if n.attrs.get("id")}
    found: list[Node] = []
    if fld.test_id:
        found += [n for n in root.walk() if n.attrs.get("data-testid") == fld.test_id and not n.hidden()]
    for exact in (True, False):
        if fld.label:
            for lab in (n for n in root.walk() if n.tag == "label"):
                if _same(lab.text(), fld.label, exact):
                    target = by_id.get(lab.attrs.get("for", "")) or next(
                        (n for n in lab.walk() if n in controls), None)
                    if target is not None:
                        found.append(target)
            found += [n for n in controls if n.attrs.get("aria-label") and _same(n.attrs["aria-label"], fld.label, exact)]
        if fld.placeholder:
            found += [n for n in controls if "placeholder" in n.attrs and _same(n.attrs["placeholder"], fld.placeholder, exact)]
    if fld.selector:
        tests = _selector(fld.selector)
        if tests is not None:
            found += [n for n in root.walk() if _matches(n, tests) and not n.hidden()]
    if fld.button:
        buttons = [n for n in controls if n.tag == "button" and n.attrs.get("type", "submit").lower() == "submit"
                   or n.tag == "input" and n.attrs.get("type", "").lower() in ("submit", "image")]
        for exact in (True, False):
            found += [b for b in buttons if _same(b.attrs.get("aria-label") or b.text() or b.attrs.get("value", ""),
                                                  fld.button, exact)]
    return found[0] if found else None


def page_error(root: Node) -> str:
    """The site's error text on a page ("" if none), in the browser path's selector order."""
    for attr, value in ERROR_MATCHERS:
        for n in root.walk():
            if n.hidden():
                continue
            have = n.classes() if attr == "class" else {n.attrs.get(attr, "")}
            if value in have:
                text = n.text()
                if text:
                    return text[:300]
    return ""


def form_fields(form: Node, submit: Node | None) -> list[tuple[str, str]]:
    """What a browser submits for ``form`` (successful controls, in document order)."""
    out: list[tuple[str, str]] = []
    for n in form.walk():
        name = n.attrs.get("name")
        if not name or "disabled" in n.attrs:
            continue
        if n.tag == "input":
            kind = n.attrs.get("type", "text").lower()
            if kind in ("submit", "image", "button", "reset", "file"):
                continue
            if kind in ("checkbox", "radio") and "checked" not in n.attrs:
                continue
            out.append((name, n.attrs.get("value", "on" if kind in ("checkbox", "radio") else "")))
        elif n.tag == "textarea":
            out.append((name, n.text()))
        elif n.tag == "select":
            options = [o for o in n.walk() if o.tag == "option"]
            chosen = next((o for o in options if "selected" in o.attrs), options[0] if options else None)
            if chosen is not None:
                out.append((name, chosen.attrs.get("value", chosen.text())))
    if submit is not None and submit.attrs.get("name"):
        out.append((submit.attrs["name"], submit.attrs.get("value", "")))
    return out


# -- cookies as Playwright writes them --------------------------------------------------------

def _rest(c: Any, key: str) -> str | None:
    for k, v in getattr(c, "_rest", {}).items():
        if k.lower() == key.lower():
            return "" if v is None else str(v)
    return None


def storage_state(jar: requests.cookies.RequestsCookieJar, hosts: Iterable[str]) -> dict[str, Any]:
    """``jar`` as ``BrowserContext.storage_state()`` returns it: cookies with name, value, domain,
    path, expires (-1 for a session cookie), httpOnly, secure, sameSite (Chromium's default Lax when
    the site sets none); no origins (nothing here runs scripts that write localStorage)."""
    hosts = set(hosts)
    now = time.time()
    cookies = []
    for c in jar:
        if c.expires is not None and c.expires <= now:
            continue
        domain = c.domain
        if c.domain_specified:
            domain = domain if domain.startswith(".") else "." + domain
        else:  # host-only; http.cookiejar calls a dotless host "<host>.local"
            domain = next((h for h in hosts if domain == h + ".local"), domain)
        same = (_rest(c, "SameSite") or "Lax").capitalize()
        cookies.append({"name": c.name, "value": c.value or "", "domain": domain, "path": c.path or "/",
                        "expires": float(c.expires) if c.expires is not None else -1,
                        "httpOnly": _rest(c, "HttpOnly") is not None, "secure": bool(c.secure),
                        "sameSite": same if same in ("Strict", "Lax", "None") else "Lax"})
    return {"cookies": cookies, "origins": []}


def _cookie_header(cookies: list[dict[str, Any]], url: str) -> str:
    u = urlsplit(url)
    host, path = (u.hostname or "").lower(), u.path or "/"
    out = []
    for c in cookies:
        d = str(c.get("domain", "")).lower()
        host_ok = host == d.lstrip(".") or (d.startswith(".") and host.endswith(d))
        cpath = str(c.get("path") or "/")
        path_ok = path == cpath or path.startswith(cpath.rstrip("/") + "/") or cpath == "/"
        if host_ok and path_ok and (not c.get("secure") or u.scheme == "https"):
            out.append(f"{c['name']}={c['value']}")
    return "; ".join(out)


# -- login ------------------------------------------------------------------------------------

def _get(session: requests.Session, site: str, url: str, timeout: float) -> requests.Response:
    try:
        r = session.get(url, timeout=timeout)
    except requests.RequestException as exc:
        raise SiteDown(site, f"{site} is down: {url} did not load ({type(exc).__name__})",
                       f"check it with 'envctl health {site}', bring it up with 'envctl up {site}'") from None
    if r.status_code >= 500:
        raise SiteDown(site, f"{site} is unhealthy: {url} answered HTTP {r.status_code}",
                       f"check it with 'envctl health {site}' and 'envctl logs {site}'")
    return r


def login(session: requests.Session, recipe: SiteLogin, echo_cookies: Iterable[str] = (), timeout: float = 30.0) -> None:
    """Log ``recipe``'s site in within ``session`` (its cookie jar keeps the session); raise on failure."""
    site, url, pw = recipe.site, recipe.url, recipe.account.password
    page = _get(session, site, url, timeout)
    root = parse(page.text)
    located: dict[str, Node] = {}
    for role, fld in (("username", recipe.username), ("password", recipe.password), ("submit", recipe.submit)):
        el = locate(root, fld)
        if el is None:
            raise LoginPageChanged(site, f"{site}: the login page {page.url} has no {role} field ({describe(fld)})",
                                   f"the site's login page changed or the catalog's sites.{site}.login.{role} "
                                   "is wrong; fix the catalog (see 'envctl sites')")
        located[role] = el
    form = located["password"].ancestor("form")
    for role in ("username", "password"):
        if not located[role].attrs.get("name") or located[role].ancestor("form") is not form:
            raise LoginPageChanged(site, f"{site}: the login page {page.url} has no plain form posting the {role} "
                                         f"field ({describe(getattr(recipe, role))})",
                                   f"the form needs a browser now: remove sites.{site}.login.http from the catalog")
    assert form is not None
    submit = located["submit"] if located["submit"].ancestor("form") is form else None
    data = [(k, v) for k, v in form_fields(form, submit)
            if k not in (located["username"].attrs["name"], located["password"].attrs["name"])]
    data += [(located["username"].attrs["name"], recipe.account.username), (located["password"].attrs["name"], pw)]
    host = urlsplit(page.url).hostname or ""
    for name in echo_cookies:  # what the site's JS does before submitting
        value = next((v for k, v in data if k == name), None)
        if value:
            session.cookies.set(name, value, domain=host, path="/")
    action = urljoin(page.url, form.attrs.get("action") or page.url)
    method = (form.attrs.get("method") or "get").lower()
    try:
        if method == "post":
            done = session.post(action, data=data, timeout=timeout, headers={"Referer": page.url})
        else:
            done = session.get(action, params=data, timeout=timeout, headers={"Referer": page.url})
    except requests.RequestException as exc:
        raise SiteDown(site, redact(f"{site}: submitting the login form at {url} loaded no page "
                                    f"({type(exc).__name__})", pw), f"check it with 'envctl health {site}'") from None
    if done.status_code >= 500:
        raise SiteDown(site, f"{site}: submitting the login form at {url} answered HTTP {done.status_code}",
                       f"check it with 'envctl health {site}' and 'envctl logs {site}'")
    after = parse(done.text)
    if locate(after, recipe.password) is not None:
        message = redact(page_error(after), pw)
        shown = f"the site says: {message!r}" if message else "the site shows the login form again without a message"
        raise WrongCredentials(site, f"{site}: login as {recipe.account.username!r} failed at {url}; {shown}",
                               f"check sites.{site}.accounts in the catalog (the password is not shown)")


def login_combo(catalog: Catalog, recipes: dict[str, SiteLogin], sites: list[str], headers: dict[str, str],
                timeout: float = 30.0) -> dict[str, Any]:
    """Log ``sites`` (in order) in within one cookie jar, like one browser context; its storage state."""
    with requests.Session() as session:
        session.headers.update(headers)
        for site in sites:
            http = catalog.site(site).login.http  # type: ignore[union-attr]
            login(session, recipes[site], http.echo_cookies if http else (), timeout)
        return storage_state(session.cookies, {urlsplit(recipes[s].url).hostname or "" for s in sites})


# -- the expiry probe over HTTP ---------------------------------------------------------------

def _same_url(a: str, b: str) -> bool:
    norm = lambda u: requests.Request("GET", u).prepare().url  # noqa: E731 - what a browser shows for a URL
    return a == b or norm(a) == norm(b)


def probe_one(spec: ProbeSpec, cookies: list[dict[str, Any]], headers: dict[str, str], timeout: float) -> str:
    """"" when the cookies log ``spec.site`` in, else what was seen (``check.probe_page`` over HTTP)."""
    url, jar = spec.url, [dict(c) for c in cookies]
    with requests.Session() as s:
        s.headers.update(headers)
        for _ in range(MAX_REDIRECTS + 1):
            try:
                r = s.get(url, headers={"Cookie": _cookie_header(jar, url)}, allow_redirects=False, timeout=timeout)
            except requests.RequestException as exc:
                return f"{spec.site}: {spec.url} did not load ({type(exc).__name__})"
            for c in r.cookies:  # a session cookie renewed on the way is used from then on
                jar = [k for k in jar if k["name"] != c.name] + [{"name": c.name, "value": c.value,
                                                                  "domain": urlsplit(url).hostname, "path": c.path}]
            if r.is_redirect and r.headers.get("location"):
                url = urljoin(url, r.headers["location"])
                continue
            break
        else:
            return f"{spec.site}: {spec.url} redirected more than {MAX_REDIRECTS} times"
    if spec.keyword:
        if spec.keyword in r.text:
            return ""
        return f"{spec.site}: keyword {spec.keyword!r} not on {spec.url} (landed on {url})"
    if _same_url(url, spec.url):
        return ""
    return f"{spec.site}: {spec.url} redirected to {url}"


def probe_state(specs: list[ProbeSpec], state: str | Path | dict[str, Any], headers: dict[str, str] | None = None,
                timeout: float = 30.0) -> list[str]:
    """Problems found when ``state``'s cookies are sent to each probe URL (empty list: valid for every site)."""
    import json

    data = state if isinstance(state, dict) else json.loads(Path(state).read_text())
    cookies = list(data.get("cookies", []))
    problems = [probe_one(spec, cookies, headers or {}, timeout) for spec in specs]
    return [p for p in problems if p]
