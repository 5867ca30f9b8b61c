"""Header login, as webarena-verified's Magento images do it (their ``CustomerAutoLoginPlugin`` and
``AutoLoginPlugin``, run before every request is dispatched):

- ``X-M2-Customer-Auto-Login: email:password`` on a storefront page (the frontend area: not ``/admin``,
  ``/rest`` or ``/static``) signs the customer in when nobody is: the password is checked like the
  login form's, a session is started (its cookie set on the response) and the request is served
  signed in. A wrong value is served as a guest (upstream logs a warning and goes on).
- ``X-M2-Admin-Auto-Login: username:password`` does the same on admin pages (``/admin...``) for an
  active admin user, with the admin session.

The value is split on the first ``:``; an empty email, user or password is ignored, as upstream.
"""
from __future__ import annotations

import secrets
import time
from typing import Any

from flask import g, request

from sites.magento_seed import check_password

CUSTOMER_HEADER = "X-M2-Customer-Auto-Login"
ADMIN_HEADER = "X-M2-Admin-Auto-Login"


def _credentials(header: str) -> tuple[str, str] | None:
    value = request.headers.get(header)
    if not value or ":" not in value:
        return None
    user, password = value.split(":", 1)
    return (user, password) if user and password else None


def _is_admin(path: str) -> bool:
    return path == "/admin" or path.startswith("/admin/")


def register(site: Any) -> None:  # site: sites.magento.Site
    app, db = site.app, site.db

    def start_session(sessions: Any, username: str) -> str:
        sid = secrets.token_hex(24)
        db.run("INSERT INTO miniweb_sessions (id, username, created) VALUES (%s, %s, %s)",
               (sid, username, int(time.time())))
        g.autologin_cookie = (sessions.cookie, sid)
        return sid

    @app.before_request
    def header_login() -> None:
        path = request.path
        if path.startswith(("/rest/", "/static/")):
            return
        if _is_admin(path):
            creds = _credentials(ADMIN_HEADER)
            if creds is None or site.admin():
                return
            row = db.one("SELECT user_id, password FROM admin_user WHERE username = %s AND is_active = 1", (creds[0],))
            if row and check_password(row[1], creds[1]):
                g.admin_sid = start_session(site.admin_sessions, f"admin:{row[0]}")
                g.admin_user = f"admin:{row[0]}"
            else:
                print(f"magento: admin auto-login failed for {creds[0]!r}", flush=True)
            return
        creds = _credentials(CUSTOMER_HEADER)
        if creds is None or site.customer():
            return
        email = creds[0].strip().lower()
        row = db.one("SELECT entity_id, password_hash FROM customer_entity WHERE email = %s", (email,))
        if row and check_password(row[1], creds[1]):
            start_session(site.customer_sessions, f"customer:{row[0]}")
            g.user = f"customer:{row[0]}"
        else:
            print(f"magento: customer auto-login failed for {email!r}", flush=True)

    @app.after_request
    def set_session_cookie(response: Any) -> Any:
        pending = g.get("autologin_cookie")
        if pending:
            response.set_cookie(pending[0], pending[1], httponly=True, samesite="Lax", path="/")
        return response
