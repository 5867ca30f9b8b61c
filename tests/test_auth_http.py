"""Login over HTTP (catalog ``login.http``) against the real mini sites: no browser on the reset path.

One instance (``hl``, port offset 53000) with reddit and classifieds (both form posts, and a pair
file of the two). Files made with one form post are checked by the expiry probes over HTTP, and by
a real Chromium context loaded with them; a wrong password is one line without the password; an
in-place reset and a spare swap renew the files while the browser executable does not exist.
"""
from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from envctl.auth import LoginFailed, WrongCredentials, login, login_sites
from envctl.auth import httplogin
from envctl.auth.browser import launch_kwargs
from envctl.auth.flows import SiteLogin
from envctl.auth.run import Target
from envctl.catalog import Account, load_catalog
from envctl.errors import NoBrowser
from envctl.lab import Lab
from conftest import browser_probe, catalog_copy, probe_specs

pytestmark = [pytest.mark.docker, pytest.mark.browser, pytest.mark.mini, pytest.mark.slow, pytest.mark.timeout(900)]

INSTANCE, OFFSET = "hl", 53000
SITES = ["reddit", "classifieds"]
FILES = {"reddit_state.json", "classifieds_state.json", "classifieds.reddit_state.json"}
NO_BROWSER = "/nonexistent/chromium"
COOKIE_KEYS = {"name", "value", "domain", "path", "expires", "httpOnly", "secure", "sameSite"}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = Lab(instance=INSTANCE, auth_dir=tmp_path_factory.mktemp("auth"))
    lab.down()
    result = lab.up(SITES, flavor="mini", port_offset=OFFSET, login=False, spares=0)
    assert result.ok, result.to_dict()
    yield lab
    lab.down()


def _session(path: Path, name: str) -> str:
    return next(c["value"] for c in json.loads(path.read_text())["cookies"] if c["name"] == name)


# -- without containers: the parser and the storage-state shape --------------------------------

def test_form_fields_and_locate_follow_the_catalogs_descriptions():
    from envctl.catalog import LoginField

    root = httplogin.parse(
        '<form action="/x" method="post"><input type="hidden" name="_csrf_token" value="t0k">'
        '<label for="u">Username</label><input id="u" name="_username">'
        '<label>Password <input type="password" name="_password"></label>'
        '<input type="checkbox" name="remember"><input type="checkbox" name="on" checked>'
        '<select name="s"><option value="a">A</option><option value="b" selected>B</option></select>'
        '<button type="submit" name="send">Log in</button></form>'
        '<div class="alert" hidden>not shown</div><div role="alert"> Invalid  credentials. </div>')
    assert httplogin.locate(root, LoginField(label="Username")).attrs["name"] == "_username"
    assert httplogin.locate(root, LoginField(label="Password")).attrs["name"] == "_password"
    assert httplogin.locate(root, LoginField(selector="input[name=_password]")).attrs["name"] == "_password"
    submit = httplogin.locate(root, LoginField(button="Log in"))
    assert submit is not None and submit.tag == "button"
    assert httplogin.locate(root, LoginField(label="Email")) is None
    form = submit.ancestor("form")
    assert httplogin.form_fields(form, submit) == [("_csrf_token", "t0k"), ("_username", ""), ("_password", ""),
                                                    ("on", "on"), ("s", "b"), ("send", "")]
    assert httplogin.page_error(root) == "Invalid credentials."
    assert not httplogin.supported(LoginField(selector="input:not([disabled])"))


def test_storage_state_has_playwrights_shape():
    import requests

    from http.cookiejar import Cookie

    def cookie(name, value, domain, rest, expires=None, specified=False):  # as http.cookiejar parses Set-Cookie
        return Cookie(0, name, value, None, False, domain, specified, domain.startswith("."), "/", False, False,
                      expires, expires is None, None, None, rest)

    jar = requests.cookies.RequestsCookieJar()
    jar.set_cookie(cookie("PHPSESSID", "abc", "127.0.0.1", {"HttpOnly": None}))  # host-only
    jar.set_cookie(cookie("pref", "1", "localhost.local", {"SameSite": "strict"}, 4102444800))  # a dotless host
    jar.set_cookie(cookie("wide", "2", ".example.org", {}, specified=True))  # Domain=example.org
    jar.set_cookie(cookie("gone", "3", "127.0.0.1", {}, 1000))  # expired
    state = httplogin.storage_state(jar, {"127.0.0.1", "localhost"})
    assert state["origins"] == []
    by = {c["name"]: c for c in state["cookies"]}
    assert all(set(c) == COOKIE_KEYS for c in by.values())
    assert by["PHPSESSID"] | {} == {"name": "PHPSESSID", "value": "abc", "domain": "127.0.0.1", "path": "/",
                                    "expires": -1, "httpOnly": True, "secure": False, "sameSite": "Lax"}
    assert by["pref"]["domain"] == "localhost" and by["pref"]["sameSite"] == "Strict"
    assert by["pref"]["expires"] == 4102444800 and by["pref"]["httpOnly"] is False
    assert by["wide"]["domain"] == ".example.org" and "gone" not in by


# -- against the mini sites --------------------------------------------------------------------

def test_http_files_pass_the_probes_and_log_a_real_chromium_in(lab, tmp_path):
    target = Target.of_lab(lab)
    report = login(target, SITES, http=True)
    assert report.ok, report.to_dict()
    assert {f.name for f in report.files} == FILES
    assert {f.method for f in report.files} == {"http"} and {f.action for f in report.files} == {"written"}
    auth = Path(lab.auth_dir)
    for f in report.files:
        path = Path(f.path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, f.name
        assert httplogin.probe_state(probe_specs(target, f.sites), path) == [], f.name
        assert browser_probe(target, f.sites, path) == [], f.name
    assert {p.name for p in auth.iterdir()} == FILES | {"extra_headers.json"}  # no temporary files left (reddit logs in by header on mini)
    # Not logged in without the cookies (the probe tells the difference over HTTP too).
    for site in SITES:
        assert httplogin.probe_state(probe_specs(target, [site]), {"cookies": [], "origins": []}), site
    # Same shape as the browser path's file for the same site.
    browser_made = login(Target(target.catalog, target.deployment, tmp_path / "browser", target.flavor), ["reddit"],
                         pairs=False)
    assert browser_made.ok and browser_made.files[0].method == "browser", browser_made.to_dict()
    http_state = json.loads((auth / "reddit_state.json").read_text())
    browser_state = json.loads((tmp_path / "browser" / "reddit_state.json").read_text())
    assert set(http_state) == set(browser_state) == {"cookies", "origins"}
    strip = lambda st: sorted((c["name"], c["domain"], c["path"], c["expires"], c["httpOnly"], c["secure"],  # noqa: E731
                               c["sameSite"], tuple(sorted(c))) for c in st["cookies"])
    assert strip(http_state) == strip(browser_state)
    assert http_state["origins"] == browser_state["origins"] == []
    # What a harness does: a plain Playwright context with the file, on upstream's probe pages.
    from playwright.sync_api import sync_playwright

    reddit, classifieds = lab.env("webarena")["REDDIT"], lab.env("visualwebarena")["CLASSIFIEDS"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(**launch_kwargs())
        ctx = browser.new_context(storage_state=str(auth / "classifieds.reddit_state.json"))
        page = ctx.new_page()
        page.goto(f"{reddit}/user/MarvelsGrantMan136/account")
        assert page.url.endswith("/user/MarvelsGrantMan136/account") and "Delete" in page.content()
        page.goto(f"{classifieds}/index.php?page=user&action=items")
        assert "My listings" in page.content()
        browser.close()


def test_wrong_password_is_wrong_credentials_in_one_line(lab, tmp_path):
    target = Target.of_lab(lab)
    good = SiteLogin.of(target.catalog, "reddit", target.deployment)
    secret = "Wrong.Pass.987"
    bad = SiteLogin(good.site, good.url, Account(username=good.account.username, password=secret),
                    good.username, good.password, good.submit)
    with pytest.raises(WrongCredentials) as exc:
        httplogin.login_combo(target.catalog, {"reddit": bad}, ["reddit"], {})
    msg = str(exc.value)
    assert exc.value.kind == "credentials" and exc.value.site == "reddit"
    assert "Invalid credentials." in msg and "\n" not in exc.value.message and secret not in msg

    def edit(sites):
        sites["reddit"]["accounts"][0]["password"] = secret

    wrong = Lab(catalog=load_catalog(catalog_copy(tmp_path, edit)), instance=INSTANCE, auth_dir=tmp_path / "auth")
    report = login(Target.of_lab(wrong), ["reddit"], pairs=False, http=True)
    (f,) = report.files
    assert (f.ok, f.kind, f.method) == (False, "credentials", "http")
    assert "Invalid credentials." in f.error and "\n" not in f.error
    assert secret not in json.dumps(report.to_dict()) and not Path(f.path).exists()
    with pytest.raises(LoginFailed) as raised:
        login_sites(Target.of_lab(wrong), ["reddit"], http=True)
    assert secret not in str(raised.value)


def test_site_down_over_http_is_site_down(lab):
    target = Target.of_lab(lab)
    recipe = SiteLogin.of(target.catalog, "reddit", target.deployment)
    closed = SiteLogin(recipe.site, "http://127.0.0.1:9/login", recipe.account, recipe.username, recipe.password,
                       recipe.submit)
    with pytest.raises(httplogin.SiteDown, match="reddit is down"):
        httplogin.login_combo(target.catalog, {"reddit": closed}, ["reddit"], {})


def test_a_form_the_http_recipe_cannot_read_falls_back_to_the_browser(lab, tmp_path, monkeypatch):
    def edit(sites):  # a selector only a browser evaluates
        sites["reddit"]["login"]["password"] = {"selector": "input[type=password]:not([disabled])"}

    cat = load_catalog(catalog_copy(tmp_path, edit))
    base = Target.of_lab(lab)
    target = Target(cat, base.deployment, tmp_path / "a", base.flavor)
    report = login(target, ["reddit"], pairs=False, http=True)
    (f,) = report.files
    assert f.ok and f.method == "browser" and "HTTP login failed" in f.note and "password field" in f.note, f
    assert httplogin.probe_state(probe_specs(target, ["reddit"]), Path(f.path)) == []
    monkeypatch.setenv("ENVCTL_CHROMIUM", NO_BROWSER)  # no browser to fall back to: the HTTP failure stands
    (f,) = login(Target(cat, base.deployment, tmp_path / "b", base.flavor), ["reddit"], pairs=False, http=True).files
    assert (f.ok, f.kind, f.method) == (False, "page-changed", "http") and "password field" in f.error


def test_inplace_reset_renews_login_files_without_chromium(lab, monkeypatch):
    auth = Path(lab.auth_dir)
    assert login(Target.of_lab(lab), SITES, http=True).ok
    before = {n: _session(auth / n, "PHPSESSID") for n in ("reddit_state.json", "classifieds.reddit_state.json")}
    monkeypatch.setenv("ENVCTL_CHROMIUM", NO_BROWSER)
    with pytest.raises(NoBrowser):  # the control: the browser path cannot run in this environment
        login(Target.of_lab(lab), ["reddit"], pairs=False)
    (r,) = lab.reset(["reddit"], tier="inplace", refill=False)
    assert r.ok and r.tier == "inplace" and not r.escalations, r.to_dict()
    assert r.note == "", r.note  # a browser-less renewal would say "login files not renewed"
    target = Target.of_lab(lab)
    for name, old in before.items():
        path = auth / name
        assert _session(path, "PHPSESSID") != old, name  # a new session, made during the reset
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert httplogin.probe_state(probe_specs(target, name.rsplit("_", 1)[0].split(".")), path) == [], name
    monkeypatch.delenv("ENVCTL_CHROMIUM")
    assert browser_probe(target, ["reddit", "classifieds"], auth / "classifieds.reddit_state.json") == []


def test_spare_is_logged_in_through_its_backend_header_without_chromium(lab, monkeypatch):
    """The spare's files are made over HTTP on the public URL with X-Envctl-Backend, then swapped in."""
    auth = Path(lab.auth_dir)
    monkeypatch.setenv("ENVCTL_CHROMIUM", NO_BROWSER)
    (slot,) = lab.replenish("reddit", 1)
    staged = auth / ".spares" / f"reddit-{slot}"
    # only the spare's own site is staged: the pair file is composed at the swap from it and the partner's file
    assert {p.name for p in staged.iterdir()} == {"reddit_state.json"}
    (r,) = lab.reset(["reddit"], refill=False)
    assert r.ok and r.tier == "spare" and r.note == "", r.to_dict()
    target = Target.of_lab(lab)
    assert httplogin.probe_state(probe_specs(target, ["reddit"]), auth / "reddit_state.json") == []
    pair = auth / "classifieds.reddit_state.json"
    assert httplogin.probe_state(probe_specs(target, ["classifieds", "reddit"]), pair) == []
    monkeypatch.delenv("ENVCTL_CHROMIUM")
    assert browser_probe(target, ["reddit"], auth / "reddit_state.json") == []
    with lab.running().routing._routing() as st:
        st.ready.wanted.setdefault("reddit", {})["golden"] = 0
