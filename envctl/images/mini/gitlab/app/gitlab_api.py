"""Mini GitLab ``/api/v4``: personal access tokens, the current user and status, projects and issues (the
repository routes, branches and files, are in ``gitlab_repo_pages``)."""
from __future__ import annotations

import re
from types import SimpleNamespace

from flask import Response, abort, jsonify, request

from sites.gitlab_data import iso, token_digest


def register(site: SimpleNamespace) -> None:
    app, db, base = site.app, site.db, site.base
    projects, create_issue, api_error = site.projects, site.create_issue, site.api_error

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
            where += " AND EXISTS (SELECT 1 FROM members m WHERE m.source_type = 'Project' AND m.source_id = p.id AND m.user_id = %s)"
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
        repo_route = re.fullmatch(r"(\d+|[^/]+/[^/]+)/repository/(.+)", rest)
        if repo_route:  # branches and files: gitlab_repo_pages
            return site.repository_api(api_project(repo_route.group(1), me), me, repo_route.group(2))
        m = re.fullmatch(r"(.+?)(?:/(issues)(?:/(\d+))?)?", rest)
        ident, sub, iid = m.group(1), m.group(2), m.group(3)
        p = api_project(ident, me)
        if sub is None:
            if request.method != "GET":
                return api_error(405, "405 Method Not Allowed")
            info = site.repository_info(p[0])
            return jsonify({**project_json(p), "default_branch": info["branches"][0][0] if info and info["branches"]
                            else None})
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
