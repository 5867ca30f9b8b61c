"""Mini GitLab HTML pages: explore, dashboards, user and group pages, projects, issues, merge requests (the
repository's pages are ``gitlab_repo_pages``)."""
from __future__ import annotations

import re
from types import SimpleNamespace

from flask import Response, abort, g, redirect, request

from miniweb.core import esc
from sites import gitlab_cache
from sites.gitlab_data import ACCESS, iso


def register(site: SimpleNamespace) -> None:
    app, db, sessions, base = site.app, site.db, site.sessions, site.base
    current, flash, layout, needs_login, sign_in_url = (site.current, site.flash, site.layout, site.needs_login,
                                                        site.sign_in_url)
    projects, project_list, find_project = site.projects, site.project_list, site.find_project
    issue_rows, mr_rows, state_filter, create_issue = site.issue_rows, site.mr_rows, site.state_filter, site.create_issue

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
        rows = projects("EXISTS (SELECT 1 FROM members m WHERE m.source_type = 'Project' AND m.source_id = p.id AND m.user_id = %s)",
                        (me[0],), me)
        return layout("Projects", f'<h1 class="page-title">Projects</h1>{project_list(rows)}')

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

    @app.get("/<ns>")
    def namespace_page(ns: str) -> Response:
        user = db.one("SELECT id, username, name, bio, website_url, location, status_message, created_at FROM users "
                      "WHERE lower(username) = lower(%s)", (ns,))
        me = current()
        if user:
            uid, username, name, bio, website, location, status, created = user
            site = (f'<a itemprop="url" href="{esc(website)}">{esc(re.sub(r"^https?://", "", website))}</a>'
                    if website else "")
            rows = projects("EXISTS (SELECT 1 FROM members m WHERE m.source_type = 'Project' AND m.source_id = p.id AND m.user_id = %s)",
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

    def breadcrumbs(p: tuple) -> str:
        return (f'<nav class="breadcrumbs" aria-label="Breadcrumbs"><a href="{base}/{esc(p[1])}">{esc(p[10])}</a> / '
                f'<a href="{base}/{esc(p[1])}/{esc(p[2])}">{esc(p[3])}</a></nav>')

    @app.get("/<ns>/<proj>")
    def project_page(ns: str, proj: str) -> Response:
        p = find_project(ns, proj)
        pid, nsp, path, name, desc, vis = p[:6]
        # Cached in Redis like GitLab's counts and repository data (expired by the app's own writes only)
        nissues = gitlab_cache.fetch(f"projects/{pid}/open_issues_count", lambda: db.one(
            "SELECT count(*) FROM issues WHERE project_id = %s AND state = 'opened'", (pid,))[0])
        nmrs = gitlab_cache.fetch(f"projects/{pid}/open_merge_requests_count", lambda: db.one(
            "SELECT count(*) FROM merge_requests WHERE project_id = %s AND state = 'opened'", (pid,))[0])
        url = f"{base}/{esc(nsp)}/{esc(path)}"
        repo = ""
        info = site.repository_info(pid)
        if info and info["branches"]:
            default = info["branches"][0][0]
            repo = (f'<div class="project-stats"><span data-testid="commit-count"><strong>{info["commit_count"]}</strong> '
                    f'Commits</span> <a href="{url}/-/branches" data-testid="branch-count"><strong>'
                    f'{len(info["branches"])}</strong> Branches</a></div>'
                    f'{site.ref_selector(default)}<a href="{url}/-/tree/{esc(default)}">Repository</a> '
                    f'<a href="{url}/-/graphs/{esc(default)}">Contributors</a>')
        body = (f'{breadcrumbs(p)}<nav class="nav-sidebar"><a href="{url}">Project information</a> '
                f'<a href="{url}/-/issues">Issues <span class="badge">{nissues}</span></a> '
                f'<a href="{url}/-/merge_requests">Merge requests <span class="badge">{nmrs}</span></a> '
                f'<a href="{url}/-/project_members">Members</a></nav>'
                f'<div class="project-home-panel"><h1 class="home-panel-title" data-testid="project-name-content">'
                f'{esc(name)}</h1><p>Project ID: {pid}</p><div class="home-panel-description">{esc(desc)}</div>'
                f'<span class="visibility">{esc(vis)}</span><div class="clone-url"><input readonly '
                f'value="{esc(base)}/{esc(nsp)}/{esc(path)}.git" aria-label="Clone with HTTP"></div></div>{repo}')
        return layout(f"{name}", body)

    @app.get("/<ns>/<proj>/-/project_members")
    def members(ns: str, proj: str) -> Response:
        p = find_project(ns, proj)
        rows = db.all("SELECT u.username, u.name, m.access_level FROM members m JOIN users u ON u.id = m.user_id "
                      "WHERE m.source_type = 'Project' AND m.source_id = %s ORDER BY m.id", (p[0],))
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
        row = db.one("SELECT i.title, i.description, i.state, i.labels, u.username, u.name, i.created_at, i.id "
                     "FROM issues i JOIN users u ON u.id = i.author_id WHERE i.project_id = %s AND i.iid = %s",
                     (p[0], iid))
        if not row:
            abort(404)
        title, desc, state, labels, author, aname, created, issue_id = row
        notes = db.all("SELECT u.username, u.name, n.note, n.created_at FROM notes n JOIN users u ON u.id = n.author_id "
                       "WHERE n.noteable_type = 'Issue' AND n.noteable_id = %s ORDER BY n.id", (issue_id,))
        body = (f'<div class="detail-page-header"><span class="issuable-status-badge" data-testid="issue-state-badge">'
                f'{"Closed" if state == "closed" else "Open"}</span> Issue created '
                f'<time datetime="{iso(created)}">{iso(created)}</time> by <a href="{base}/{esc(author)}">{esc(aname)}</a>'
                f'</div><h1 class="title qa-title" data-testid="issue-title">{esc(title)}</h1>'
                f'<div class="description"><div class="md">{esc(desc)}</div></div>'
                + "".join(f'<span class="gl-label">{esc(lb)}</span>' for lb in labels.split(",") if lb)
                + '<ul class="notes main-notes-list">'
                + "".join(f'<li class="note" data-testid="noteable-note-container"><a href="{base}/{esc(nu)}">'
                          f'{esc(nn)}</a> <time datetime="{iso(nc)}">{iso(nc)}</time>'
                          f'<div class="note-text md">{esc(nt)}</div></li>' for nu, nn, nt, nc in notes)
                + "</ul>")
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
