"""Login state: file names and pairing rule, safe writes, durations, header login file.

No containers here (see test_auth_mini.py for the real sites); the header-login test uses a real
Chromium against a local HTTP server that logs a request in by header.
"""
from __future__ import annotations

import json
import stat
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from envctl.auth import files, headers
from envctl.catalog import load_catalog

WA = {"gitlab_state.json", "shopping_state.json", "shopping_admin_state.json", "reddit_state.json",
      "gitlab.shopping_state.json", "gitlab.shopping_admin_state.json", "gitlab.reddit_state.json",
      "shopping.shopping_admin_state.json"}
VWA = {"classifieds_state.json", "shopping_state.json", "reddit_state.json", "classifieds.shopping_state.json",
       "classifieds.reddit_state.json"}


def names(combos):
    return {files.state_name(c) for c in combos}


def test_plan_matches_upstream_file_names():
    cat = load_catalog()
    login_sites = files.login_sites_of(cat)
    assert names(files.login_combos(cat, login_sites)) == WA | VWA
    wa = [s for s in login_sites if "webarena" in cat.site(s).benchmarks]
    assert names(files.login_combos(cat, wa)) == WA
    vwa = [s for s in login_sites if "visualwebarena" in cat.site(s).benchmarks]
    assert names(files.login_combos(cat, vwa)) == VWA


def test_plan_touching_one_site_pairs_with_partners_only():
    cat = load_catalog()
    assert names(files.login_combos(cat, ["gitlab"])) == {"gitlab_state.json"}
    got = names(files.login_combos(cat, ["reddit"], partners=["gitlab", "shopping", "classifieds"]))
    # reddit never pairs with shopping (one PHPSESSID on one host); gitlab.shopping does not touch reddit
    assert got == {"reddit_state.json", "gitlab.reddit_state.json", "classifieds.reddit_state.json"}


def test_names_round_trip_like_upstream():
    assert files.state_name(["shopping_admin", "shopping"]) == "shopping.shopping_admin_state.json"
    assert files.combo_of("./.auth/shopping.shopping_admin_state.json") == ("shopping", "shopping_admin")
    assert files.combo_of("gitlab_state.json") == ("gitlab",)
    cat = load_catalog()
    assert files.login_order(cat, ("shopping_admin", "shopping")) == ["shopping", "shopping_admin"]


def test_write_private_is_atomic_and_0600(tmp_path):
    p = tmp_path / "a" / "x_state.json"
    files.write_private(p, {"cookies": [], "origins": []})
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert json.loads(p.read_text()) == {"cookies": [], "origins": []}
    files.write_private(p, {"cookies": [{"name": "n"}], "origins": []})
    assert json.loads(p.read_text())["cookies"] == [{"name": "n"}]
    assert [q.name for q in p.parent.iterdir()] == ["x_state.json"]  # no temporary file left


def test_parse_duration():
    assert files.parse_duration("90") == 90
    assert files.parse_duration("30m") == 1800
    assert files.parse_duration("12h") == 43200
    assert files.parse_duration("2d") == 172800
    for bad in ("", "abc", "5x", "-1h"):
        with pytest.raises(ValueError, match="invalid duration"):
            files.parse_duration(bad)


def _without_header_login(cat, site: str):
    """A catalog copy where ``site`` has no header login."""
    s2 = cat.sites[site].model_copy(update={"header_login": None})
    return cat.model_copy(update={"sites": {**cat.sites, site: s2}})


class _HeaderSite(BaseHTTPRequestHandler):
    expected = ""

    def do_GET(self):  # noqa: N802
        ok = self.headers.get("X-M2-Customer-Auto-Login") == self.expected
        body = b"<h1>My Wish List</h1>" if ok else b"<h1>Customer Login</h1>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_header_login_file_nothing_declared(tmp_path):
    cat = load_catalog()
    # the full flavor's images (upstream's 2023 ones) have no header login: no file
    assert headers.write(tmp_path, cat, ["shopping", "reddit"], "full") is None
    assert not (tmp_path / headers.HEADERS_FILE).exists()
    assert headers.render(cat, ["gitlab", "wikipedia", "map"], "mini") == {}


def test_the_catalog_declares_webarena_verifieds_headers():
    """The headers and values of webarena-verified's images (its docker_overrides), on mini and slim only."""
    cat = load_catalog()
    want = {"X-M2-Customer-Auto-Login": "emma.lopez@gmail.com:Password.123",
            "X-M2-Admin-Auto-Login": "admin:admin1234",
            "X-Postmill-Auto-Login": "MarvelsGrantMan136:test1234"}
    for flavor in ("mini", "slim"):
        assert headers.render(cat, ["shopping", "shopping_admin", "reddit", "gitlab"], flavor) == want
    assert headers.render(cat, list(cat.sites), "full") == {}
    assert cat.site("reddit").header_login.wrong == "refused" and cat.site("shopping").header_login.wrong == "guest"


@pytest.mark.browser
def test_header_login_file_logs_a_browser_in(tmp_path):
    cat = _without_header_login(load_catalog(), "shopping_admin")
    path = headers.write(tmp_path, cat, ["shopping", "reddit", "gitlab"], "mini")
    assert path == tmp_path / "extra_headers.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = json.loads(path.read_text())
    assert data == {"X-M2-Customer-Auto-Login": "emma.lopez@gmail.com:Password.123",
                    "X-Postmill-Auto-Login": "MarvelsGrantMan136:test1234"}
    # renewing one site keeps the other's header; a header dropped (refused by its site) leaves the file
    headers.write(tmp_path, cat, ["reddit"], "mini")
    assert json.loads(path.read_text()) == data
    headers.write(tmp_path, cat, ["reddit"], "mini", drop=["X-Postmill-Auto-Login"])
    assert json.loads(path.read_text()) == {"X-M2-Customer-Auto-Login": "emma.lopez@gmail.com:Password.123"}
    headers.write(tmp_path, cat, ["reddit"], "mini")
    assert json.loads(path.read_text()) == data

    _HeaderSite.expected = "emma.lopez@gmail.com:Password.123"
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HeaderSite)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        from playwright.sync_api import sync_playwright

        from envctl.auth.browser import launch_kwargs

        url = f"http://127.0.0.1:{server.server_address[1]}/wishlist/"
        with sync_playwright() as pw:
            browser = pw.chromium.launch(**launch_kwargs())
            # what BrowserGym does with PW_EXTRA_HEADERS: every request carries the headers
            ctx = browser.new_context(extra_http_headers=json.loads(Path(path).read_text()))
            page = ctx.new_page()
            page.goto(url)
            assert "My Wish List" in page.content()
            bare = browser.new_context().new_page()
            bare.goto(url)
            assert "Customer Login" in bare.content()
            browser.close()
    finally:
        server.shutdown()


def test_the_one_cookie_rule_of_the_expiry_probe():
    """Which cookies of a storage_state file the HTTP expiry probe sends to a URL (``httplogin._cookie_header``,
    the only place envctl decides it; a browser's rule, RFC 6265 5.1.3/5.1.4): the host or a parent dot-domain,
    the path or a prefix of it at a '/', secure ones only over https; the port does not matter (cookies are per
    host, so sites on one host see each other's cookies, as in a browser)."""
    from envctl.auth import httplogin

    cookies = [
        {"name": "host", "value": "1", "domain": "127.0.0.1", "path": "/"},
        {"name": "dot", "value": "2", "domain": ".example.org", "path": "/"},
        {"name": "sub", "value": "3", "domain": "shop.example.org", "path": "/admin"},
        {"name": "sec", "value": "4", "domain": "127.0.0.1", "path": "/", "secure": True},
        {"name": "other", "value": "5", "domain": "10.0.0.1", "path": "/"},
        {"name": "nopath", "value": "6", "domain": "127.0.0.1"},
    ]
    send = httplogin._cookie_header
    assert send(cookies, "http://127.0.0.1:9999/forums") == "host=1; nopath=6"
    assert send(cookies, "http://127.0.0.1:7770/") == "host=1; nopath=6"  # another port, same host
    assert send(cookies, "https://127.0.0.1:8023/") == "host=1; sec=4; nopath=6"
    assert send(cookies, "http://shop.example.org/admin/dashboard") == "dot=2; sub=3"
    assert send(cookies, "http://shop.example.org/admin") == "dot=2; sub=3"
    assert send(cookies, "http://shop.example.org/administrator") == "dot=2"  # not a path prefix at '/'
    assert send(cookies, "http://example.org/") == "dot=2"
    assert send(cookies, "http://badexample.org/") == ""  # a dot-domain matches whole labels only
