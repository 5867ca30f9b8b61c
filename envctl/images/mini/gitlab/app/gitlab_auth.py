"""Mini GitLab: health endpoints, sign in / sign out (WebArena's and BrowserGym's login forms), profile."""
from __future__ import annotations

from types import SimpleNamespace

from flask import Response, g, jsonify, redirect, request

from miniweb.core import esc
from sites.gitlab_data import check_password


def register(site: SimpleNamespace) -> None:
    app, db, sessions, base = site.app, site.db, site.sessions, site.base
    current, flash, layout, needs_login, sign_in_url = (site.current, site.flash, site.layout, site.needs_login,
                                                        site.sign_in_url)

    @app.get("/-/readiness")
    def readiness() -> Response:
        try:
            db.one("SELECT 1")
            return jsonify(status="ok", master_check=[{"status": "ok"}])
        except Exception:
            return jsonify(status="failed", master_check=[{"status": "failed", "message": "database"}]), 503

    @app.get("/-/liveness")
    def liveness() -> Response:
        return jsonify(status="ok")

    @app.get("/-/health")
    def health() -> Response:
        return Response("GitLab OK", mimetype="text/plain")

    @app.get("/users/sign_in")
    def sign_in() -> Response:
        if g.user:
            return redirect(f"{base}/")
        form = (
            '<div class="login-page"><h1 class="gl-sr-only">Sign in</h1>'
            f'<form class="new_user gl-show-field-errors" id="new_user" action="{base}/users/sign_in" method="post">'
            '<div class="form-group"><label for="user_login">Username or email</label>'
            '<input class="form-control gl-form-input top js-username-field" autocomplete="username" autofocus '
            'autocapitalize="off" autocorrect="off" required title="This field is required." '
            'data-testid="username-field" type="text" name="user[login]" id="user_login"></div>'
            '<div class="form-group"><label for="user_password">Password</label>'
            '<input class="form-control gl-form-input bottom" autocomplete="current-password" required '
            'title="This field is required." data-testid="password-field" type="password" name="user[password]" '
            'id="user_password"></div>'
            '<div class="gl-mb-3"><label class="gl-font-weight-normal" for="user_remember_me">'
            '<input name="user[remember_me]" type="hidden" value="0"><input class="remember-me-checkbox" '
            'type="checkbox" value="1" name="user[remember_me]" id="user_remember_me"> <span>Remember me</span></label>'
            f'<div class="gl-float-right"><a href="{base}/users/password/new">Forgot your password?</a></div></div>'
            '<button type="submit" class="btn gl-button btn-confirm" data-testid="sign-in-button">Sign in</button>'
            "</form></div>")
        return layout("Sign in", form)

    @app.post("/users/sign_in")
    def sign_in_post() -> Response:
        login, password = request.form.get("user[login]", ""), request.form.get("user[password]", "")
        row = db.one("SELECT username, encrypted_password FROM users WHERE lower(username) = lower(%s) "
                     "OR lower(email) = lower(%s)", (login, login))
        if row and check_password(row[1], password):
            return sessions.start(redirect(f"{base}/"), row[0])
        return flash(redirect(sign_in_url()), "invalid_login")

    @app.route("/users/sign_out", methods=["GET", "POST"])
    def sign_out() -> Response:
        return flash(sessions.end(redirect(sign_in_url())), "signed_out")

    @app.route("/-/profile", methods=["GET", "POST"])
    @needs_login
    def profile() -> Response:
        me = current()
        if request.method == "POST":
            f = request.form
            db.run("UPDATE users SET name = %s, bio = %s, website_url = %s, location = %s WHERE id = %s",
                   (f.get("user[name]", me[2]).strip() or me[2], f.get("user[bio]", me[4]).strip(),
                    f.get("user[website_url]", me[5]).strip(), f.get("user[location]", me[6]).strip(), me[0]))
            return flash(redirect(f"{base}/-/profile"), "profile_updated")
        _, username, name, email, bio, website, location, _ = me

        def field(fid: str, label: str, value: str, kind: str = "text") -> str:
            return (f'<div class="form-group"><label for="user_{fid}">{label}</label>'
                    f'<input class="form-control gl-form-input" type="{kind}" name="user[{fid}]" id="user_{fid}" '
                    f'value="{esc(value)}"></div>')

        body = (f'<h1 class="page-title">Edit Profile</h1><h2>User Settings</h2><p>Username: {esc(username)}</p>'
                f'<form class="edit-user" id="edit_user" action="{base}/-/profile" method="post">'
                + field("name", "Full name", name) + field("email", "Email", email, "email")
                + field("website_url", "Website url", website) + field("location", "Location", location)
                + f'<div class="form-group"><label for="user_bio">Bio</label><textarea class="form-control" '
                  f'name="user[bio]" id="user_bio">{esc(bio)}</textarea></div>'
                '<button type="submit" class="btn gl-button btn-confirm" data-testid="update-profile-button">'
                "Update profile settings</button></form>")
        return layout("Edit Profile", body)
