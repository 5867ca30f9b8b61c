"""What the mini GitLab's areas share: DB, sessions (in Redis), external URL, page layout, project queries, the
project's repository.

``make_site`` returns them as one namespace; ``gitlab_auth``, ``gitlab_pages`` and ``gitlab_api``
register their routes with it.
"""
from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any

from flask import Response, abort, g, jsonify, redirect, request

from miniweb.core import Database, create_app, esc, login_required
from sites import gitlab_cache, gitlab_repo
from sites.gitlab_ctl import GitlabConfig
from sites.gitlab_data import CLUSTER, INVALID_LOGIN, iso

COOKIE = "_gitlab_session"
# --- web app ---------------------------------------------------------------------------------------

FLASH = {
    "invalid_login": ("alert-danger", INVALID_LOGIN),
    "signed_out": ("alert-info", "Signed out successfully."),
    "signed_in_required": ("alert-info", "You need to sign in or sign up before continuing."),
    "profile_updated": ("alert-info", "Profile was successfully updated"),
}
PROJECT_COLS = ("p.id, n.path, p.path, p.name, p.description, p.visibility, p.star_count, p.created_at, "
                "p.last_activity_at, n.id, n.name, n.kind")



def make_site(cfg: GitlabConfig) -> SimpleNamespace:
    os.environ.setdefault("MINIWEB_DB", CLUSTER.url)
    app = create_app("gitlab", cookie=COOKIE)
    db: Database = app.db  # type: ignore[attr-defined]
    # GitLab keeps its sessions in Redis, not in PostgreSQL (the miniweb default): flushing Redis signs out.
    app.sessions = gitlab_cache.RedisSessions(COOKIE)  # type: ignore[attr-defined]
    sessions = app.sessions
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
        return ("(p.visibility <> 'private' OR EXISTS (SELECT 1 FROM members m WHERE m.source_type = 'Project' AND m.source_id = p.id "
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

    def create_issue(project_id: int, author_id: int, title: str, description: str) -> int:
        with db.cursor() as cur:
            cur.execute("SELECT id FROM projects WHERE id = %s FOR UPDATE", (project_id,))
            cur.execute("INSERT INTO issues (project_id, iid, title, description, author_id, created_at) "
                        "VALUES (%s, (SELECT coalesce(max(iid), 0) + 1 FROM issues WHERE project_id = %s), %s, %s, %s, %s) "
                        "RETURNING iid", (project_id, project_id, title, description, author_id, int(time.time())))
            iid = cur.fetchone()[0]
            cur.execute("UPDATE projects SET last_activity_at = %s WHERE id = %s", (int(time.time()), project_id))
        # as Issues::CreateService refreshes Projects::OpenIssuesCountService: the app's own writes expire the cache
        gitlab_cache.expire(*gitlab_cache.project_keys(project_id))
        return iid

    def repository(project_id: int) -> tuple[str, str] | None:
        """(disk path, repository directory) of a project, None when it has none."""
        row = db.one("SELECT disk_path FROM project_repositories WHERE project_id = %s", (project_id,))
        return (row[0], gitlab_repo.repo_dir(row[0])) if row else None

    def repository_info(project_id: int) -> dict | None:
        """The project's branches ([name, sha], the default first) and its default branch's commit count, from the
        Redis cache (GitLab's ``Repository#branch_names`` / ``commit_count``), else read from the repository."""
        found = repository(project_id)
        if found is None:
            return None
        path, repo = found
        refs = gitlab_cache.fetch(f"repository:{path}:branches", lambda: [list(b) for b in gitlab_repo.branches(repo)])
        count = gitlab_cache.fetch(f"repository:{path}:commit_count",
                                   lambda: gitlab_repo.commit_count(repo, refs[0][0]) if refs else 0)
        return {"path": path, "repo": repo, "branches": refs, "commit_count": count}

    def expire_repository(project_id: int) -> None:
        """What a push through GitLab expires (``Repository#expire_branches_cache``, the commit count)."""
        found = repository(project_id)
        if found:
            gitlab_cache.expire(*gitlab_cache.repository_keys(found[0]))
        with db.cursor() as cur:
            cur.execute("UPDATE projects SET last_activity_at = %s WHERE id = %s", (int(time.time()), project_id))

    def ref_selector(branch: str) -> str:
        return (f'<div class="ref-selector"><button class="gl-button dropdown-toggle" data-testid="branches-select">'
                f'<span class="gl-dropdown-button-text">{esc(branch)}</span></button></div>')

    def can_push(project_id: int) -> bool:
        """The signed-in user is at least a Developer of the project (GitLab's push_code ability)."""
        me = current()
        return bool(me) and bool(db.one("SELECT 1 FROM members WHERE source_type = 'Project' AND source_id = %s "
                                        "AND user_id = %s AND access_level >= 30", (project_id, me[0])))

    def api_error(status: int, message: str) -> Response:
        resp = jsonify(message=message)
        resp.status_code = status
        return resp


    return SimpleNamespace(
        app=app, db=db, sessions=sessions, base=base, sign_in_url=sign_in_url, needs_login=needs_login,
        current=current, flash=flash, layout=layout, projects=projects, project_list=project_list,
        find_project=find_project, issue_rows=issue_rows, mr_rows=mr_rows, state_filter=state_filter,
        create_issue=create_issue, api_error=api_error, repository=repository, repository_info=repository_info,
        expire_repository=expire_repository, ref_selector=ref_selector, can_push=can_push)
