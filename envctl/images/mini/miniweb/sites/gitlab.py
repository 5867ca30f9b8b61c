"""Mini stand-in for WebArena's GitLab (the omnibus image on port 8023).

Behaves like the omnibus image where provisioning touches it: ``/etc/gitlab/gitlab.rb`` holds
``external_url``; ``gitlab-ctl reconfigure`` applies it (the app then builds every link from that URL
and listens on its port, so container port = public port); ``gitlab-ctl restart|status`` work; the
container main is ``/opt/gitlab/embedded/bin/runsvdir-start``. Pages mirror the markup that
WebArena's auto_login (test ids) and BrowserGym's ui_login (labels, button names) use, plus a small
``/api/v4`` with personal access tokens.

CLI (``python3 -m miniweb.sites.gitlab``): ``build``, ``start``, ``serve``, ``ctl ARGS``, ``fingerprint``.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import signal
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlparse

from flask import Response, abort, g, jsonify, redirect, request

from miniweb import pgembed
from miniweb.core import SEED_EPOCH, Database, create_app, esc, login_required, serve

COOKIE = "_gitlab_session"
CLUSTER = pgembed.Cluster(
    datadir=os.environ.get("MINIWEB_PGDATA", "/var/opt/gitlab/postgresql/data"),
    db="gitlabhq_production", user="gitlab", password="gitlab",
)
GITLAB_RB = os.environ.get("GITLAB_RB", "/etc/gitlab/gitlab.rb")
APPLIED = os.environ.get("GITLAB_APPLIED", "/var/opt/gitlab/envctl-applied-config.json")
PIDFILE = "/run/gitlab/puma.pid"
TABLES = ("users", "namespaces", "projects", "project_members", "issues", "merge_requests", "personal_access_tokens")
# Deterministic seeded token for byteblaze (mini flavor only; documented in the envctl report).
SEED_TOKEN = "glpat-envctlMiniByteblaze1"
INVALID_LOGIN = "Invalid login or password."

SCHEMA = """
CREATE TABLE users (id SERIAL PRIMARY KEY, username TEXT UNIQUE NOT NULL, name TEXT NOT NULL, email TEXT NOT NULL,
  encrypted_password TEXT NOT NULL, bio TEXT NOT NULL DEFAULT '', website_url TEXT NOT NULL DEFAULT '',
  location TEXT NOT NULL DEFAULT '', status_message TEXT NOT NULL DEFAULT '', created_at BIGINT NOT NULL);
CREATE TABLE namespaces (id SERIAL PRIMARY KEY, path TEXT UNIQUE NOT NULL, name TEXT NOT NULL, kind TEXT NOT NULL,
  owner_id INT REFERENCES users(id));
CREATE TABLE projects (id SERIAL PRIMARY KEY, namespace_id INT NOT NULL REFERENCES namespaces(id), path TEXT NOT NULL,
  name TEXT NOT NULL, description TEXT NOT NULL DEFAULT '', visibility TEXT NOT NULL, star_count INT NOT NULL DEFAULT 0,
  created_at BIGINT NOT NULL, last_activity_at BIGINT NOT NULL, UNIQUE (namespace_id, path));
CREATE TABLE project_members (id SERIAL PRIMARY KEY, project_id INT NOT NULL REFERENCES projects(id),
  user_id INT NOT NULL REFERENCES users(id), access_level INT NOT NULL, UNIQUE (project_id, user_id));
CREATE TABLE issues (id SERIAL PRIMARY KEY, project_id INT NOT NULL REFERENCES projects(id), iid INT NOT NULL,
  title TEXT NOT NULL, description TEXT NOT NULL DEFAULT '', author_id INT NOT NULL REFERENCES users(id),
  state TEXT NOT NULL DEFAULT 'opened', labels TEXT NOT NULL DEFAULT '', created_at BIGINT NOT NULL,
  UNIQUE (project_id, iid));
CREATE TABLE merge_requests (id SERIAL PRIMARY KEY, project_id INT NOT NULL REFERENCES projects(id), iid INT NOT NULL,
  title TEXT NOT NULL, description TEXT NOT NULL DEFAULT '', author_id INT NOT NULL REFERENCES users(id),
  assignee_id INT REFERENCES users(id), state TEXT NOT NULL DEFAULT 'opened', source_branch TEXT NOT NULL,
  target_branch TEXT NOT NULL, created_at BIGINT NOT NULL, UNIQUE (project_id, iid));
CREATE TABLE personal_access_tokens (id SERIAL PRIMARY KEY, user_id INT NOT NULL REFERENCES users(id),
  name TEXT NOT NULL, token_digest TEXT UNIQUE NOT NULL, scopes TEXT NOT NULL, revoked BOOLEAN NOT NULL DEFAULT false,
  created_at BIGINT NOT NULL);
"""
ACCESS = {10: "Guest", 20: "Reporter", 30: "Developer", 40: "Maintainer", 50: "Owner"}
USERS = [  # (username, name, password, bio)
    ("root", "Administrator", "envctlRootPass1", ""),
    ("byteblaze", "Byte Blaze", "hello1234", "Web accessibility enthusiast."),
    ("abisubramanya27", "Abishek S", "abishekpass1", ""),
    ("yjlou", "Yi-Jen Lou", "yjloupass1", ""),
    ("kilian", "Kilian Valkhof", "kilianpass1", ""),
]
GROUPS = [("a11yproject", "The A11Y Project")]
PROJECTS = [  # (namespace, path, name, description, visibility, stars)
    ("byteblaze", "a11y-syntax-highlighting", "a11y-syntax-highlighting",
     "Accessible light and dark syntax highlighting themes", "public", 1),
    ("byteblaze", "a11y-webring.club", "a11y-webring.club", "A webring for digital accessibility practitioners.",
     "public", 2),
    ("byteblaze", "accessible-html-content-patterns", "accessible-html-content-patterns",
     "The full HTML5 Doctor Element Index as well as common markup patterns.", "public", 0),
    ("byteblaze", "dotfiles", "dotfiles", "Computer setup", "public", 0),
    ("byteblaze", "timeit", "timeit", "Simple timing utility", "private", 0),
    ("a11yproject", "a11yproject.com", "a11yproject.com", "The A11Y Project is a community-driven effort to make "
     "digital accessibility easier.", "public", 21),
]
MEMBERS = [  # (project no., username, access level)
    (1, "byteblaze", 50), (2, "byteblaze", 50), (3, "byteblaze", 50), (4, "byteblaze", 50), (5, "byteblaze", 50),
    (6, "byteblaze", 40), (6, "kilian", 40), (2, "yjlou", 30), (4, "abisubramanya27", 10),
]
ISSUES = [  # (project no., author, title, description, state, labels)
    (1, "byteblaze", "Add a high-contrast theme variant", "Some users need more contrast than AA.", "opened", "enhancement"),
    (1, "yjlou", "Comment colour fails WCAG AA on dark theme", "Contrast ratio is 3.9:1.", "opened", "bug"),
    (2, "byteblaze", "Add a join form", "Members should be able to apply via a form.", "opened", "feature"),
    (2, "kilian", "Broken link in footer", "The footer links to a 404.", "closed", "bug"),
    (4, "byteblaze", "Document the install script", "README needs usage notes.", "opened", ""),
    (6, "kilian", "Outdated resources in the checklist", "Several links point to retired tools.", "opened", "content"),
    (6, "yjlou", "Skip link is not visible on focus", "It should appear when focused.", "opened", "bug,question"),
    (6, "byteblaze", "Dark mode flashes on load", "Theme is applied late.", "closed", "bug"),
]
MRS = [  # (project no., author, assignee, title, state, source branch)
    (1, "yjlou", "byteblaze", "Fix comment colour contrast", "opened", "fix-contrast"),
    (2, "kilian", None, "Update footer links", "merged", "footer-links"),
    (6, "kilian", "byteblaze", "Refresh checklist resources", "opened", "refresh-checklist"),
]


# --- gitlab.rb / gitlab-ctl ------------------------------------------------------------------------

@dataclass(frozen=True)
class GitlabConfig:
    external_url: str
    puma_workers: int | None = None

    @property
    def port(self) -> int:
        parts = urlparse(self.external_url)
        return parts.port or (443 if parts.scheme == "https" else 80)


def parse_gitlab_rb(text: str) -> GitlabConfig:
    """Read the settings the mini site honours; other Ruby lines are accepted and ignored."""
    url, workers = None, None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#"):
            continue
        m = re.match(r"""external_url\s*\(?\s*['"]([^'"]+)['"]""", line)
        if m:
            url = m.group(1)
        m = re.match(r"""puma\[\s*['"]worker_processes['"]\s*\]\s*=\s*(\d+)""", line)
        if m:
            workers = int(m.group(1))
    if not url:
        raise ValueError(f"{GITLAB_RB} has no external_url line, e.g. external_url 'http://myhost:8023'")
    parts = urlparse(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"external_url {url!r} is not an http(s) URL with a host")
    return GitlabConfig(url.rstrip("/"), workers)


def applied_config() -> GitlabConfig:
    try:
        with open(APPLIED) as f:
            return GitlabConfig(**json.load(f))
    except FileNotFoundError:
        with open(GITLAB_RB) as f:
            return parse_gitlab_rb(f.read())


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def read_pid(path: str) -> int | None:
    try:
        with open(path) as f:
            pid = int(f.readline().strip())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def wait_ready(port: int, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/readiness", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def restart_app(cfg: GitlabConfig) -> bool:
    """SIGHUP makes the app re-exec itself with the applied config (same pid, so the supervisor is unaffected)."""
    pid = read_pid(PIDFILE)
    if pid is None:
        return False
    before = start_marker()
    os.kill(pid, signal.SIGHUP)
    # Probe only once the re-exec'd process has rewritten the pidfile, never the old one.
    deadline = time.monotonic() + 30
    while start_marker() == before:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return wait_ready(cfg.port)


def start_marker() -> str:
    try:
        with open(PIDFILE) as f:
            return f.read()
    except OSError:
        return ""


def ctl(argv: list[str]) -> int:
    cmd = argv[0] if argv else "help"
    if cmd == "reconfigure":
        try:
            with open(GITLAB_RB) as f:
                cfg = parse_gitlab_rb(f.read())
        except (OSError, ValueError) as exc:
            print(f"gitlab-ctl reconfigure failed: {exc}", file=sys.stderr)
            return 1
        try:
            with open(APPLIED) as f:
                old = GitlabConfig(**json.load(f))
        except (OSError, ValueError, TypeError):
            old = None
        os.makedirs(os.path.dirname(APPLIED), exist_ok=True)
        with open(APPLIED + ".tmp", "w") as f:
            json.dump(asdict(cfg), f)
        os.replace(APPLIED + ".tmp", APPLIED)
        print(f"Recipe: gitlab::default\n  * external_url: {cfg.external_url} (listening on port {cfg.port})")
        if cfg.puma_workers is not None:
            print(f"  * puma['worker_processes']: {cfg.puma_workers}")
        if read_pid(PIDFILE) is not None:
            if cfg != old:
                print("Running handlers:\n  * restarting puma")
                if not restart_app(cfg):
                    print(f"gitlab-ctl reconfigure: puma did not become ready on port {cfg.port}", file=sys.stderr)
                    return 1
            elif not wait_ready(cfg.port):
                print(f"gitlab-ctl reconfigure: puma is not ready on port {cfg.port}", file=sys.stderr)
                return 1
        print("gitlab Reconfigured!")
        return 0
    if cmd == "restart":
        cfg = applied_config()
        pid = read_pid(PIDFILE)
        if pid is None or not restart_app(cfg):
            print("fail: puma: not running or not ready after restart", file=sys.stderr)
            return 1
        print(f"ok: run: puma: (pid {pid}) 0s")
        return 0
    if cmd == "status":
        code = 0
        for name, path in (("postgresql", os.path.join(CLUSTER.datadir, "postmaster.pid")), ("puma", PIDFILE)):
            pid = read_pid(path)
            if pid is None:
                print(f"down: {name}: 0s, normally up")
                code = 3
            else:
                up = int(time.time() - os.stat(path).st_mtime)
                print(f"run: {name}: (pid {pid}) {up}s")
        return code
    print("usage: gitlab-ctl reconfigure|restart|status (mini flavor)", file=sys.stderr)
    return 1


# --- data ------------------------------------------------------------------------------------------

def hash_password(username: str, password: str) -> str:
    salt = hashlib.sha256(f"gitlab:{username}".encode()).hexdigest()[:16]
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), 20_000).hex()
    return f"pbkdf2_sha256$20000${salt}${digest}"


def check_password(stored: str, password: str) -> bool:
    try:
        _, iterations, salt, digest = stored.split("$")
    except ValueError:
        return False
    got = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), int(iterations)).hex()
    return hmac.compare_digest(got, digest)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def seed(db: Database) -> None:
    with db.cursor() as cur:
        cur.execute(SCHEMA)
        uid, nsid = {}, {}
        for i, (username, name, pw, bio) in enumerate(USERS, 1):
            cur.execute("INSERT INTO users (id, username, name, email, encrypted_password, bio, created_at) "
                        "VALUES (%s,%s,%s,%s,%s,%s,%s)",
                        (i, username, name, f"{username}@example.com", hash_password(username, pw), bio,
                         SEED_EPOCH - 86400 * (90 - i)))
            cur.execute("INSERT INTO namespaces (id, path, name, kind, owner_id) VALUES (%s,%s,%s,'user',%s)",
                        (i, username, name, i))
            uid[username] = nsid[username] = i
        for j, (path, name) in enumerate(GROUPS, len(USERS) + 1):
            cur.execute("INSERT INTO namespaces (id, path, name, kind) VALUES (%s,%s,%s,'group')", (j, path, name))
            nsid[path] = j
        for i, (ns, path, name, desc, vis, stars) in enumerate(PROJECTS, 1):
            cur.execute("INSERT INTO projects (id, namespace_id, path, name, description, visibility, star_count, "
                        "created_at, last_activity_at) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                        (i, nsid[ns], path, name, desc, vis, stars, SEED_EPOCH - 86400 * (80 - i), SEED_EPOCH - 3600 * i))
        for i, (proj, user, level) in enumerate(MEMBERS, 1):
            cur.execute("INSERT INTO project_members (id, project_id, user_id, access_level) VALUES (%s,%s,%s,%s)",
                        (i, proj, uid[user], level))
        iids: dict[int, int] = {}
        for i, (proj, author, title, desc, state, labels) in enumerate(ISSUES, 1):
            iids[proj] = iids.get(proj, 0) + 1
            cur.execute("INSERT INTO issues (id, project_id, iid, title, description, author_id, state, labels, "
                        "created_at) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                        (i, proj, iids[proj], title, desc, uid[author], state, labels, SEED_EPOCH - 7200 * (30 - i)))
        mr_iids: dict[int, int] = {}
        for i, (proj, author, assignee, title, state, branch) in enumerate(MRS, 1):
            mr_iids[proj] = mr_iids.get(proj, 0) + 1
            cur.execute("INSERT INTO merge_requests (id, project_id, iid, title, author_id, assignee_id, state, "
                        "source_branch, target_branch, created_at) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,'main',%s)",
                        (i, proj, mr_iids[proj], title, uid[author], uid.get(assignee or ""), state, branch,
                         SEED_EPOCH - 5400 * (20 - i)))
        cur.execute("INSERT INTO personal_access_tokens (id, user_id, name, token_digest, scopes, created_at) "
                    "VALUES (1, %s, 'envctl', %s, 'api', %s)", (uid["byteblaze"], token_digest(SEED_TOKEN), SEED_EPOCH))
        for table in TABLES:
            cur.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")


def iso(ts: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(ts))


# --- web app ---------------------------------------------------------------------------------------

FLASH = {
    "invalid_login": ("alert-danger", INVALID_LOGIN),
    "signed_out": ("alert-info", "Signed out successfully."),
    "signed_in_required": ("alert-info", "You need to sign in or sign up before continuing."),
    "profile_updated": ("alert-info", "Profile was successfully updated"),
}
PROJECT_COLS = ("p.id, n.path, p.path, p.name, p.description, p.visibility, p.star_count, p.created_at, "
                "p.last_activity_at, n.id, n.name, n.kind")


def make_app(cfg: GitlabConfig) -> Any:
    os.environ.setdefault("MINIWEB_DB", CLUSTER.url)
    app = create_app("gitlab", cookie=COOKIE)
    db: Database = app.db  # type: ignore[attr-defined]
    sessions = app.sessions  # type: ignore[attr-defined]
    base = cfg.external_url

    def sign_in_url() -> str:
        return f"{base}/users/sign_in"

    needs_login = login_required(sign_in_url)

    @app.after_request
    def _log(resp: Response) -> Response:
        print(f'gitlab: {request.remote_addr} "{request.method} {request.full_path.rstrip("?")}" {resp.status_code}',
              flush=True)
        return resp

    def current() -> tuple | None:
        if not g.user:
            return None
        return db.one("SELECT id, username, name, email, bio, website_url, location, status_message FROM users "
                      "WHERE username = %s", (g.user,))

    def flash(resp: Response, key: str) -> Response:
        resp.set_cookie("_gitlab_flash", key, httponly=True, samesite="Lax", path="/")
        return resp

    def layout(title: str, body: str, status: int = 200) -> Response:
        user = g.user
        if user:
            u = esc(user)
            right = (f'<a href="{base}/{u}" class="header-user-dropdown-toggle" data-testid="user-menu">'
                     f'<span class="gl-sr-only">{u}</span>@{u}</a>'
                     f'<ul class="dropdown-menu"><li><a href="{base}/-/profile" data-testid="edit-profile-link">'
                     f'Edit profile</a></li><li><a class="sign-out-link" data-testid="sign-out-link" rel="nofollow" '
                     f'data-method="post" href="{base}/users/sign_out">Sign out</a></li></ul>')
            left = (f'<a href="{base}/dashboard/projects">Projects</a> <a href="{base}/dashboard/issues">Issues</a> '
                    f'<a href="{base}/dashboard/merge_requests">Merge requests</a> '
                    f'<a href="{base}/dashboard/todos">To-Do List</a>')
        else:
            right = f'<a href="{base}/users/sign_in?redirect_to_referer=yes">Sign in / Register</a>'
            left = ""
        key = request.cookies.get("_gitlab_flash", "")
        alert = ""
        if key in FLASH:
            cls, text = FLASH[key]
            alert = f'<div class="flash-container"><div class="gl-alert flash-{cls.split("-")[1]}" data-testid="{cls}">' \
                    f'<div class="gl-alert-body">{esc(text)}</div></div></div>'
        html = ("<!DOCTYPE html>\n<html lang=\"en\" class=\"gl-light\"><head><meta charset=\"utf-8\">"
                f"<title>{esc(title)} · GitLab</title></head><body data-page=\"{esc(request.endpoint or '')}\">"
                f'<header class="navbar navbar-gitlab" data-testid="navbar"><a href="{base}/" class="brand-logo">'
                f'<span class="gl-sr-only">Homepage</span>GitLab</a> <a href="{base}/explore">Explore</a> {left} '
                f'<div class="navbar-collapse">{right}</div></header><main class="content-wrapper">{alert}{body}'
                "</main></body></html>")
        resp = Response(html, status=status, mimetype="text/html")
        if key:
            resp.delete_cookie("_gitlab_flash", path="/")
        return resp

    def visible_clause(user_row: tuple | None) -> tuple[str, tuple]:
        if user_row is None:
            return "p.visibility = 'public'", ()
        return ("(p.visibility <> 'private' OR EXISTS (SELECT 1 FROM project_members m WHERE m.project_id = p.id "
                "AND m.user_id = %s))", (user_row[0],))

    def projects(where: str = "TRUE", args: tuple = (), user_row: tuple | None = None) -> list[tuple]:
        vis, vargs = visible_clause(user_row)
        return db.all(f"SELECT {PROJECT_COLS} FROM projects p JOIN namespaces n ON n.id = p.namespace_id "
                      f"WHERE {vis} AND ({where}) ORDER BY p.last_activity_at DESC, p.id", vargs + args)

    def project_list(rows: list[tuple]) -> str:
        items = "".join(
            f'<li class="project-row" data-testid="project-row"><div class="project-details">'
            f'<h2 class="project-title"><a class="project" href="{base}/{esc(ns)}/{esc(path)}">'
            f'<span class="namespace-name">{esc(nsname)} / </span><span class="project-name">{esc(name)}</span></a></h2>'
            f'<div class="description"><p>{esc(desc)}</p></div></div>'
            f'<div class="controls"><span class="star-count">{stars}</span> <span class="visibility">{esc(vis)}</span>'
            f' Updated <time datetime="{iso(act)}">{iso(act)}</time></div></li>'
            for _, ns, path, name, desc, vis, stars, _, act, _, nsname, _ in rows)
        return f'<ul class="projects-list content-list">{items}</ul>' if items else \
            '<div class="nothing-here-block">No projects found</div>'

    def find_project(ns: str, path: str) -> tuple:
        user_row = current()
        rows = projects("n.path = %s AND p.path = %s", (ns, path), user_row)
        if rows:
            return rows[0]
        exists = db.one("SELECT 1 FROM projects p JOIN namespaces n ON n.id = p.namespace_id "
                        "WHERE n.path = %s AND p.path = %s", (ns, path))
        if exists and user_row is None:
            abort(flash(redirect(sign_in_url()), "signed_in_required"))
        abort(404)

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

    @app.get("/")
    def root() -> Response:
        if not g.user:
            return redirect(sign_in_url())
        return dashboard_projects()

    @app.get("/explore")
    @app.get("/explore/projects")
    def explore() -> Response:
        rows = projects(user_row=current())
        return layout("Explore projects", f'<h1 class="page-title">Explore projects</h1>{project_list(rows)}')

    @app.get("/dashboard/projects")
    @needs_login
    def dashboard_projects() -> Response:
        me = current()
        rows = projects("EXISTS (SELECT 1 FROM project_members m WHERE m.project_id = p.id AND m.user_id = %s)",
                        (me[0],), me)
        return layout("Projects", f'<h1 class="page-title">Projects</h1>{project_list(rows)}')

    def issue_rows(where: str, args: tuple) -> str:
        rows = db.all("SELECT i.iid, i.title, i.state, i.labels, u.username, n.path, p.path, i.created_at "
                      "FROM issues i JOIN projects p ON p.id = i.project_id JOIN namespaces n ON n.id = p.namespace_id "
                      f"JOIN users u ON u.id = i.author_id WHERE {where} ORDER BY i.created_at DESC, i.id DESC", args)
        items = "".join(
            f'<li class="issue" data-testid="issuable-container"><div class="issue-title title">'
            f'<a href="{base}/{esc(ns)}/{esc(pp)}/-/issues/{iid}">{esc(title)}</a></div>'
            f'<span class="issuable-reference">{esc(ns)}/{esc(pp)}#{iid}</span> · opened by '
            f'<a href="{base}/{esc(author)}">{esc(author)}</a> '
            + "".join(f'<span class="gl-label">{esc(lb)}</span>' for lb in labels.split(",") if lb)
            + f' <span class="issuable-status">{"Closed" if state == "closed" else "Open"}</span></li>'
            for iid, title, state, labels, author, ns, pp, _ in rows)
        return f'<ul class="content-list issues-list">{items}</ul>' if items else \
            '<div class="empty-state">There are no issues to show</div>'

    def mr_rows(where: str, args: tuple) -> str:
        rows = db.all("SELECT m.iid, m.title, m.state, u.username, n.path, p.path FROM merge_requests m "
                      "JOIN projects p ON p.id = m.project_id JOIN namespaces n ON n.id = p.namespace_id "
                      f"JOIN users u ON u.id = m.author_id WHERE {where} ORDER BY m.id DESC", args)
        items = "".join(
            f'<li class="merge-request"><div class="merge-request-title title">'
            f'<a href="{base}/{esc(ns)}/{esc(pp)}/-/merge_requests/{iid}">{esc(title)}</a></div>'
            f'<span class="issuable-reference">{esc(ns)}/{esc(pp)}!{iid}</span> · opened by {esc(author)} '
            f'<span class="issuable-status">{esc(state)}</span></li>'
            for iid, title, state, author, ns, pp in rows)
        return f'<ul class="content-list mr-list">{items}</ul>' if items else \
            '<div class="empty-state">There are no merge requests to show</div>'

    def state_filter(alias: str) -> tuple[str, tuple]:
        state = request.args.get("state", "opened")
        if state in ("opened", "closed", "merged"):
            return f"{alias}.state = %s", (state,)
        return "TRUE", ()

    @app.get("/dashboard/issues")
    @needs_login
    def dashboard_issues() -> Response:
        sf, sa = state_filter("i")
        return layout("Issues", "<h1>Issues</h1>" + issue_rows(f"i.author_id = %s AND {sf}", (current()[0], *sa)))

    @app.get("/dashboard/merge_requests")
    @needs_login
    def dashboard_mrs() -> Response:
        me = current()
        sf, sa = state_filter("m")
        who = request.args.get("assignee_username") or request.args.get("author_username") or me[1]
        col = "m.author_id" if request.args.get("author_username") else "m.assignee_id"
        return layout("Merge requests", "<h1>Merge requests</h1>" + mr_rows(
            f"{col} = (SELECT id FROM users WHERE username = %s) AND {sf}", (who, *sa)))

    @app.get("/dashboard/todos")
    @needs_login
    def todos() -> Response:
        return layout("To-Do List", '<h1>To-Do List</h1><div class="empty-state">Your To-Do List shows what to work '
                                    'on next</div>')

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

    @app.get("/<ns>")
    def namespace_page(ns: str) -> Response:
        user = db.one("SELECT id, username, name, bio, website_url, location, status_message, created_at FROM users "
                      "WHERE lower(username) = lower(%s)", (ns,))
        me = current()
        if user:
            uid, username, name, bio, website, location, status, created = user
            site = (f'<a itemprop="url" href="{esc(website)}">{esc(re.sub(r"^https?://", "", website))}</a>'
                    if website else "")
            rows = projects("EXISTS (SELECT 1 FROM project_members m WHERE m.project_id = p.id AND m.user_id = %s)",
                            (uid,), me)
            body = (f'<div class="user-profile"><div class="cover-block"><div class="profile-header">'
                    f'<div class="user-info"><h1 class="cover-title">{esc(name)}</h1><p class="user-username">'
                    f'@{esc(username)}</p><div class="cover-status">{esc(status)}</div>{site}'
                    f'<span itemprop="addressLocality">{esc(location)}</span>'
                    f'<p class="profile-user-bio">{esc(bio)}</p></div></div></div>'
                    f'<h2>Personal projects</h2>{project_list(rows)}</div>')
            return layout(name, body)
        group = db.one("SELECT id, name FROM namespaces WHERE kind = 'group' AND lower(path) = lower(%s)", (ns,))
        if not group:
            abort(404)
        body = f'<h1 class="group-title">{esc(group[1])}</h1>' + project_list(projects("n.id = %s", (group[0],), me))
        return layout(group[1], body)

    @app.get("/<ns>/<proj>")
    def project_page(ns: str, proj: str) -> Response:
        p = find_project(ns, proj)
        pid, nsp, path, name, desc, vis = p[:6]
        nissues = db.one("SELECT count(*) FROM issues WHERE project_id = %s AND state = 'opened'", (pid,))[0]
        nmrs = db.one("SELECT count(*) FROM merge_requests WHERE project_id = %s AND state = 'opened'", (pid,))[0]
        url = f"{base}/{esc(nsp)}/{esc(path)}"
        body = (f'<nav class="nav-sidebar"><a href="{url}">Project information</a> '
                f'<a href="{url}/-/issues">Issues <span class="badge">{nissues}</span></a> '
                f'<a href="{url}/-/merge_requests">Merge requests <span class="badge">{nmrs}</span></a> '
                f'<a href="{url}/-/project_members">Members</a></nav>'
                f'<div class="project-home-panel"><h1 class="home-panel-title" data-testid="project-name-content">'
                f'{esc(name)}</h1><p>Project ID: {pid}</p><div class="home-panel-description">{esc(desc)}</div>'
                f'<span class="visibility">{esc(vis)}</span><div class="clone-url"><input readonly '
                f'value="{esc(base)}/{esc(nsp)}/{esc(path)}.git" aria-label="Clone with HTTP"></div></div>')
        return layout(f"{name}", body)

    @app.get("/<ns>/<proj>/-/project_members")
    def members(ns: str, proj: str) -> Response:
        p = find_project(ns, proj)
        rows = db.all("SELECT u.username, u.name, m.access_level FROM project_members m JOIN users u ON u.id = m.user_id "
                      "WHERE m.project_id = %s ORDER BY m.id", (p[0],))
        trs = "".join(f'<tr><td data-label="Account"><span class="gl-avatar-labeled-label">{esc(n)}</span>'
                      f'<span class="gl-avatar-labeled-sublabel">@{esc(u)}</span></td>'
                      f'<td class="col-max-role"><span>{ACCESS.get(a, "Guest")}</span></td></tr>' for u, n, a in rows)
        return layout("Members", f'<h1>Project members</h1><table class="table"><tbody>{trs}</tbody></table>')

    @app.get("/<ns>/<proj>/-/issues")
    @app.get("/<ns>/<proj>/-/issues/")
    @app.get("/<ns>/<proj>/issues")
    def issues(ns: str, proj: str) -> Response:
        p = find_project(ns, proj)
        sf, sa = state_filter("i")
        where, args = f"i.project_id = %s AND {sf}", (p[0], *sa)
        labels = request.args.getlist("label_name[]")
        for lb in labels:
            where += " AND (',' || i.labels || ',') LIKE %s"
            args += (f"%,{lb},%",)
        new = (f'<a class="btn gl-button btn-confirm" href="{base}/{esc(p[1])}/{esc(p[2])}/-/issues/new">New issue</a>'
               if g.user else "")
        return layout(f"Issues · {p[3]}", f'<h1 class="page-title">Issues</h1>{new}{issue_rows(where, args)}')

    @app.get("/<ns>/<proj>/-/issues/new")
    @needs_login
    def new_issue(ns: str, proj: str) -> Response:
        p = find_project(ns, proj)
        form = (f'<h1 class="page-title">New Issue</h1><form class="issue-form" id="new_issue" '
                f'action="{base}/{esc(p[1])}/{esc(p[2])}/-/issues" method="post">'
                '<div class="form-group"><label for="issue_title">Title</label><input class="form-control" type="text" '
                'name="issue[title]" id="issue_title" required data-testid="issuable-form-title-field" '
                'placeholder="Title"></div>'
                '<div class="form-group"><label for="issue_description">Description</label><textarea '
                'class="form-control" name="issue[description]" id="issue_description" '
                'placeholder="Write a description or drag your files here…"></textarea></div>'
                '<button type="submit" class="btn gl-button btn-confirm" data-testid="issuable-create-button">'
                "Create issue</button></form>")
        return layout("New Issue", form)

    def create_issue(project_id: int, author_id: int, title: str, description: str) -> int:
        with db.cursor() as cur:
            cur.execute("SELECT id FROM projects WHERE id = %s FOR UPDATE", (project_id,))
            cur.execute("INSERT INTO issues (project_id, iid, title, description, author_id, created_at) "
                        "VALUES (%s, (SELECT coalesce(max(iid), 0) + 1 FROM issues WHERE project_id = %s), %s, %s, %s, %s) "
                        "RETURNING iid", (project_id, project_id, title, description, author_id, int(time.time())))
            iid = cur.fetchone()[0]
            cur.execute("UPDATE projects SET last_activity_at = %s WHERE id = %s", (int(time.time()), project_id))
            return iid

    @app.post("/<ns>/<proj>/-/issues")
    @needs_login
    def create_issue_form(ns: str, proj: str) -> Response:
        p = find_project(ns, proj)
        title = request.form.get("issue[title]", "").strip()
        if not title:
            return layout("New Issue", '<div class="gl-alert flash-danger">Title can\'t be blank</div>', 400)
        iid = create_issue(p[0], current()[0], title, request.form.get("issue[description]", "").strip())
        return redirect(f"{base}/{p[1]}/{p[2]}/-/issues/{iid}")

    @app.get("/<ns>/<proj>/-/issues/<int:iid>")
    def issue_page(ns: str, proj: str, iid: int) -> Response:
        p = find_project(ns, proj)
        row = db.one("SELECT i.title, i.description, i.state, i.labels, u.username, u.name, i.created_at FROM issues i "
                     "JOIN users u ON u.id = i.author_id WHERE i.project_id = %s AND i.iid = %s", (p[0], iid))
        if not row:
            abort(404)
        title, desc, state, labels, author, aname, created = row
        body = (f'<div class="detail-page-header"><span class="issuable-status-badge" data-testid="issue-state-badge">'
                f'{"Closed" if state == "closed" else "Open"}</span> Issue created '
                f'<time datetime="{iso(created)}">{iso(created)}</time> by <a href="{base}/{esc(author)}">{esc(aname)}</a>'
                f'</div><h1 class="title qa-title" data-testid="issue-title">{esc(title)}</h1>'
                f'<div class="description"><div class="md">{esc(desc)}</div></div>'
                + "".join(f'<span class="gl-label">{esc(lb)}</span>' for lb in labels.split(",") if lb))
        return layout(f"{title} (#{iid}) · Issues", body)

    @app.get("/<ns>/<proj>/-/merge_requests")
    def merge_requests(ns: str, proj: str) -> Response:
        p = find_project(ns, proj)
        sf, sa = state_filter("m")
        return layout(f"Merge requests · {p[3]}",
                      f'<h1 class="page-title">Merge requests</h1>{mr_rows(f"m.project_id = %s AND {sf}", (p[0], *sa))}')

    @app.get("/<ns>/<proj>/-/merge_requests/<int:iid>")
    def merge_request_page(ns: str, proj: str, iid: int) -> Response:
        p = find_project(ns, proj)
        row = db.one("SELECT m.title, m.description, m.state, u.name, m.source_branch, m.target_branch FROM "
                     "merge_requests m JOIN users u ON u.id = m.author_id WHERE m.project_id = %s AND m.iid = %s",
                     (p[0], iid))
        if not row:
            abort(404)
        title, desc, state, author, src, dst = row
        return layout(f"{title} (!{iid}) · Merge requests",
                      f'<span class="issuable-status-badge">{esc(state.capitalize())}</span>'
                      f'<h1 class="title" data-testid="title-content">{esc(title)}</h1><p>{esc(author)} requested to merge '
                      f'<code>{esc(src)}</code> into <code>{esc(dst)}</code></p><div class="description">{esc(desc)}</div>')

    # --- /api/v4 ---

    def api_error(status: int, message: str) -> Response:
        resp = jsonify(message=message)
        resp.status_code = status
        return resp

    def api_user() -> tuple | None:
        token = request.headers.get("PRIVATE-TOKEN") or request.args.get("private_token")
        auth = request.headers.get("Authorization", "")
        if not token and auth.startswith("Bearer "):
            token = auth[7:]
        if not token:
            return None
        row = db.one("SELECT u.id, u.username, u.name, u.email, u.bio, u.website_url, u.location, u.status_message "
                     "FROM personal_access_tokens t JOIN users u ON u.id = t.user_id "
                     "WHERE t.token_digest = %s AND NOT t.revoked", (token_digest(token),))
        if row is None:
            abort(api_error(401, "401 Unauthorized"))
        return row

    def project_json(p: tuple) -> dict:
        pid, ns, path, name, desc, vis, stars, created, act, nsid, nsname, kind = p
        return {"id": pid, "description": desc, "name": name, "name_with_namespace": f"{nsname} / {name}",
                "path": path, "path_with_namespace": f"{ns}/{path}", "created_at": iso(created),
                "default_branch": "main", "web_url": f"{base}/{ns}/{path}",
                "http_url_to_repo": f"{base}/{ns}/{path}.git", "visibility": vis, "star_count": stars,
                "last_activity_at": iso(act),
                "namespace": {"id": nsid, "name": nsname, "path": ns, "kind": kind, "full_path": ns,
                              "web_url": f"{base}/{ns}"}}

    def issue_json(row: tuple) -> dict:
        iid_id, pid, iid, title, desc, state, labels, created, uid, username, name, ns, pp = row
        return {"id": iid_id, "iid": iid, "project_id": pid, "title": title, "description": desc, "state": state,
                "labels": [lb for lb in labels.split(",") if lb], "created_at": iso(created),
                "author": {"id": uid, "username": username, "name": name, "web_url": f"{base}/{username}"},
                "web_url": f"{base}/{ns}/{pp}/-/issues/{iid}"}

    def paginate(items: list) -> Response:
        try:
            per_page = max(1, min(100, int(request.args.get("per_page", 20))))
            pg = max(1, int(request.args.get("page", 1)))
        except ValueError:
            abort(api_error(400, "400 Bad request - per_page, page are invalid"))
        resp = jsonify(items[(pg - 1) * per_page: pg * per_page])
        resp.headers["X-Total"] = str(len(items))
        resp.headers["X-Page"], resp.headers["X-Per-Page"] = str(pg), str(per_page)
        return resp

    @app.get("/api/v4/user")
    def api_current_user() -> Response:
        me = api_user()
        if me is None:
            return api_error(401, "401 Unauthorized")
        uid, username, name, email, bio, website, location, status = me
        return jsonify(id=uid, username=username, name=name, email=email, state="active", bio=bio,
                       website_url=website, location=location, web_url=f"{base}/{username}")

    @app.route("/api/v4/user/status", methods=["GET", "PUT"])
    def api_user_status() -> Response:
        me = api_user()
        if me is None:
            return api_error(401, "401 Unauthorized")
        if request.method == "PUT":
            data = request.get_json(silent=True) or request.form or request.args
            db.run("UPDATE users SET status_message = %s WHERE id = %s", ((data.get("message") or "").strip(), me[0]))
            me = api_user()
        return jsonify(emoji="speech_balloon" if me[7] else None, message=me[7] or None, availability="not_set")

    @app.get("/api/v4/projects")
    def api_projects() -> Response:
        me = api_user()
        where, args = "TRUE", ()
        if request.args.get("search"):
            where, args = "p.name ILIKE %s", (f"%{request.args['search']}%",)
        if me and request.args.get("membership") in ("true", "1"):
            where += " AND EXISTS (SELECT 1 FROM project_members m WHERE m.project_id = p.id AND m.user_id = %s)"
            args += (me[0],)
        return paginate([project_json(p) for p in projects(where, args, me)])

    def api_project(ident: str, me: tuple | None) -> tuple:
        if ident.isdigit():
            rows = projects("p.id = %s", (int(ident),), me)
        else:
            ns, _, path = ident.rpartition("/")
            rows = projects("n.path = %s AND p.path = %s", (ns, path), me)
        if not rows:
            abort(api_error(404, "404 Project Not Found"))
        return rows[0]

    ISSUE_SQL = ("SELECT i.id, i.project_id, i.iid, i.title, i.description, i.state, i.labels, i.created_at, u.id, "
                 "u.username, u.name, n.path, p.path FROM issues i JOIN users u ON u.id = i.author_id "
                 "JOIN projects p ON p.id = i.project_id JOIN namespaces n ON n.id = p.namespace_id ")

    @app.route("/api/v4/projects/<path:rest>", methods=["GET", "POST"])
    def api_project_routes(rest: str) -> Response:
        me = api_user()
        m = re.fullmatch(r"(.+?)(?:/(issues)(?:/(\d+))?)?", rest)
        ident, sub, iid = m.group(1), m.group(2), m.group(3)
        p = api_project(ident, me)
        if sub is None:
            return jsonify(project_json(p)) if request.method == "GET" else api_error(405, "405 Method Not Allowed")
        if iid is not None:
            row = db.one(ISSUE_SQL + "WHERE i.project_id = %s AND i.iid = %s", (p[0], int(iid)))
            return jsonify(issue_json(row)) if row else api_error(404, "404 Not found")
        if request.method == "POST":
            if me is None:
                return api_error(401, "401 Unauthorized")
            data = request.get_json(silent=True) or request.form or request.args
            title = (data.get("title") or "").strip()
            if not title:
                resp = jsonify(error="title is missing")
                resp.status_code = 400
                return resp
            new_iid = create_issue(p[0], me[0], title, (data.get("description") or "").strip())
            return jsonify(issue_json(db.one(ISSUE_SQL + "WHERE i.project_id = %s AND i.iid = %s", (p[0], new_iid)))), 201
        where, args = "i.project_id = %s", (p[0],)
        if request.args.get("state") in ("opened", "closed"):
            where += " AND i.state = %s"
            args += (request.args["state"],)
        return paginate([issue_json(r) for r in db.all(ISSUE_SQL + f"WHERE {where} ORDER BY i.created_at DESC", args)])

    @app.errorhandler(404)
    def not_found(_: Any) -> Response:
        if request.path.startswith("/api/"):
            return api_error(404, "404 Not Found")
        return layout("Not Found", '<div class="container"><h1>404</h1><h3>Page Not Found</h3><p>Make sure the address '
                      "is correct and the page hasn't moved.</p></div>", 404)

    @app.errorhandler(500)
    def server_error(_: Any) -> Response:
        if request.path.startswith("/api/"):
            return api_error(500, "500 Internal Server Error")
        return Response("<h1>500</h1><h3>We're sorry, something went wrong on our end.</h3>", 500, mimetype="text/html")

    return app


def serve_app() -> None:
    """Serve with the applied config; SIGHUP re-execs this process so a reconfigure takes effect.

    Order matters for a reconfigure racing with boot: the SIGHUP handler exists before the pidfile
    announces this process, and the config is read only after that, so a reconfigure either signals
    us or has already written the config we are about to read.
    """

    def reexec(*_: object) -> None:
        print("gitlab: SIGHUP, restarting puma with the applied configuration", flush=True)
        os.execv(sys.executable, [sys.executable, "-m", "miniweb.sites.gitlab", "serve"])

    signal.signal(signal.SIGHUP, reexec)
    os.makedirs(os.path.dirname(PIDFILE), exist_ok=True)
    with open(PIDFILE + ".tmp", "w") as f:
        f.write(f"{os.getpid()}\n{time.time_ns()}\n")
    os.replace(PIDFILE + ".tmp", PIDFILE)
    cfg = applied_config()
    print(f"gitlab: external_url {cfg.external_url}", flush=True)
    serve(make_app(cfg), cfg.port)


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "start"
    if cmd == "build":
        pgembed.build(CLUSTER, seed)
        return ctl(["reconfigure"])
    if cmd == "start":
        # A pidfile left by a previous run of this container would point reconfigure at a stranger.
        if os.path.exists(PIDFILE):
            os.remove(PIDFILE)
        return pgembed.run(CLUSTER, "puma", [sys.executable, "-m", "miniweb.sites.gitlab", "serve"])
    if cmd == "serve":
        serve_app()
        return 0
    if cmd == "ctl":
        return ctl(argv[1:])
    if cmd == "fingerprint":
        print("\n".join(pgembed.fingerprint(Database(CLUSTER.url), TABLES)))
        return 0
    print(f"usage: python3 -m miniweb.sites.gitlab [build|start|serve|ctl|fingerprint], not {cmd!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
