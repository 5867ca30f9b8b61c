"""A hand-made multi-page site for smoke tests, served by a threaded http.server on 127.0.0.1.

Pages: a shop list and product pages, a search, a login form (cookie session), an account form that
changes a bio shown on the public profile, and a pristine-state ``reset()``.
"""
from __future__ import annotations

import html
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

PRODUCTS = {1: ("Quest Lumaflex™ Band", "19.00"), 2: ("Overnight Duffle", "45.00"), 3: ("Joust Bag", "34.00")}
SESSION = "s3cr3t-session"
USER = ("emma@example.com", "Password.123")
DEFAULT_BIO = "Just a shopper"


def _page(title: str, body: str) -> bytes:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
            f"<body><nav><a href='/'>Home</a> <a href='/products'>Products</a> <a href='/account'>Account</a></nav>"
            f"<main>{body}</main></body></html>").encode()


class SmokeSite:
    def __init__(self) -> None:
        self.bio = DEFAULT_BIO
        self.posts: list[str] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _logged_in(self) -> bool:
                return f"sid={SESSION}" in (self.headers.get("Cookie") or "")

            def do_GET(self) -> None:
                u = urlparse(self.path)
                q = parse_qs(u.query)
                if u.path == "/":
                    self._send(200, _page("Home", "<h1>Smoke shop</h1><form action='/search'>"
                                          "<input name='q' placeholder='Search entire store here...'>"
                                          "<button type='submit'>Search</button></form>"))
                elif u.path == "/products":
                    rows = "".join(f"<tr><td><a href='/products/{i}'>{html.escape(n)}</a></td><td class='price'>${p}</td></tr>"
                                   for i, (n, p) in PRODUCTS.items())
                    self._send(200, _page("Products", f"<h1>Products</h1><table id='grid'>{rows}</table>"))
                elif u.path.startswith("/products/"):
                    pid = int(u.path.rsplit("/", 1)[1])
                    n, p = PRODUCTS[pid]
                    self._send(200, _page(n, f"<h1 class='title'>{html.escape(n)}</h1><span class='price'>${p}</span>"))
                elif u.path == "/search":
                    term = q.get("q", [""])[0]
                    hits = [n for n, _ in PRODUCTS.values() if term.lower() in n.lower()]
                    self._send(200, _page("Search", f"<h1>Results for &quot;{html.escape(term)}&quot;</h1><ul>"
                                          + "".join(f"<li class='hit'>{html.escape(h)}</li>" for h in hits) + "</ul>"))
                elif u.path == "/login":
                    self._send(200, _page("Sign in", "<form method='post' action='/login'>"
                                          "<label for='e'>Email</label><input id='e' name='email'>"
                                          "<label for='p'>Password</label><input id='p' name='password' type='password'>"
                                          "<button type='submit'>Sign In</button></form>"))
                elif u.path == "/account":
                    if not self._logged_in():
                        self._send(302, headers={"Location": "/login"})
                        return
                    self._send(200, _page("My account", "<h1>Welcome, Emma</h1>"
                                          "<form method='post' action='/account/bio'><label for='b'>Biography</label>"
                                          f"<textarea id='b' name='bio'>{html.escape(site.bio)}</textarea>"
                                          "<select name='visibility' aria-label='Visibility'><option>public</option>"
                                          "<option>private</option></select>"
                                          "<button type='submit' data-testid='save-bio'>Save</button></form>"))
                elif u.path == "/user/emma":
                    self._send(200, _page("Emma", f"<h1>Emma</h1><p class='user-bio'>{html.escape(site.bio)}</p>"))
                else:
                    self._send(404, _page("Not found", "<h1>404</h1>"))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                if self.path == "/login":
                    if (form.get("email"), form.get("password")) == USER:
                        self._send(302, headers={"Location": "/account", "Set-Cookie": f"sid={SESSION}; Path=/"})
                    else:
                        self._send(200, _page("Sign in", "<p class='error'>Invalid login</p>"))
                elif self.path == "/account/bio" and self._logged_in():
                    site.bio = form.get("bio", "")
                    self._send(302, headers={"Location": "/user/emma"})
                else:
                    self._send(403, _page("Forbidden", "<h1>403</h1>"))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def reset(self) -> None:
        self.bio = DEFAULT_BIO

    def __enter__(self) -> SmokeSite:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def storage_state(self) -> dict:
        """A Playwright storage_state holding the logged-in session cookie."""
        return {"cookies": [{"name": "sid", "value": SESSION, "domain": "127.0.0.1", "path": "/", "expires": -1,
                             "httpOnly": False, "secure": False, "sameSite": "Lax"}], "origins": []}
