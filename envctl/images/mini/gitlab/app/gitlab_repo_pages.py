"""Mini GitLab repository pages and API, read from and written to the project's bare repository: branches, tree,
blob and raw file, contributors graph; a new branch and a new file (a commit) from the web UI and ``/api/v4``."""
from __future__ import annotations

import re
import time
from types import SimpleNamespace

from flask import Response, abort, jsonify, redirect, request

from miniweb.core import esc
from sites import gitlab_repo
from sites.gitlab_data import iso


def register(site: SimpleNamespace) -> None:
    app, db, base = site.app, site.db, site.base
    layout, needs_login, find_project, current = site.layout, site.needs_login, site.find_project, site.current
    breadcrumbs_of = lambda p: (f'<nav class="breadcrumbs" aria-label="Breadcrumbs"><a href="{base}/{esc(p[1])}">'  # noqa: E731
                                f'{esc(p[10])}</a> / <a href="{base}/{esc(p[1])}/{esc(p[2])}">{esc(p[3])}</a></nav>')

    def repo_of(p: tuple) -> str:
        found = site.repository(p[0])
        if found is None or not gitlab_repo.exists(found[1]):
            abort(404)
        return found[1]

    def split_ref(repo: str, rest: str) -> tuple[str, str]:
        """The branch ``rest`` starts with (the longest name, as branch names may hold slashes) and the path after."""
        for name, _ in sorted(gitlab_repo.branches(repo), key=lambda b: -len(b[0])):
            if rest == name or rest.startswith(name + "/"):
                return name, rest[len(name):].strip("/")
        abort(404)

    @app.get("/<ns>/<proj>/-/branches")
    def branches_page(ns: str, proj: str) -> Response:
        p = find_project(ns, proj)
        repo = repo_of(p)
        url = f"{base}/{esc(p[1])}/{esc(p[2])}"
        default = gitlab_repo.default_branch(repo)
        badge = ' <span class="badge">default</span>'
        items = "".join(f'<li class="branch-item" data-name="{esc(b)}"><a class="item-title" href="{url}/-/tree/{esc(b)}">'
                        f'{esc(b)}</a> <code>{sha[:8]}</code>{badge if b == default else ""}</li>'
                        for b, sha in gitlab_repo.branches(repo))
        new = f'<a class="btn gl-button btn-confirm" href="{url}/-/branches/new">New branch</a>' if site.can_push(p[0]) else ""
        return layout(f"Branches · {p[3]}", f'{breadcrumbs_of(p)}<h1 class="page-title">Branches</h1>{new}'
                      f'<ul class="content-list all-branches">{items}</ul>')

    @app.get("/<ns>/<proj>/-/branches/new")
    @needs_login
    def new_branch(ns: str, proj: str) -> Response:
        p = find_project(ns, proj)
        repo = repo_of(p)
        form = (f'<h1 class="page-title">New Branch</h1><form id="new-branch-form" method="post" '
                f'action="{base}/{esc(p[1])}/{esc(p[2])}/-/branches"><div class="form-group"><label for="branch_name">'
                'Branch name</label><input class="form-control" type="text" name="branch_name" id="branch_name" required '
                'data-testid="branch-name-field"></div><div class="form-group"><label for="ref">Create from</label>'
                f'<input class="form-control" type="text" name="ref" id="ref" value="{esc(gitlab_repo.default_branch(repo) or "")}">'
                '</div><button type="submit" class="btn gl-button btn-confirm" data-testid="create-branch-button">'
                "Create branch</button></form>")
        return layout("New Branch", form)

    @app.post("/<ns>/<proj>/-/branches")
    @needs_login
    def create_branch_form(ns: str, proj: str) -> Response:
        p = find_project(ns, proj)
        repo = repo_of(p)
        if not site.can_push(p[0]):
            abort(403)
        name, ref = request.form.get("branch_name", "").strip(), request.form.get("ref", "").strip()
        try:
            gitlab_repo.create_branch(repo, name, ref or gitlab_repo.default_branch(repo) or "")
        except gitlab_repo.GitError as exc:
            return layout("New Branch", f'<div class="gl-alert flash-danger">{esc(exc)}</div>', 400)
        site.expire_repository(p[0])
        return redirect(f"{base}/{p[1]}/{p[2]}/-/tree/{name}")

    @app.get("/<ns>/<proj>/-/tree/<path:rest>")
    def tree_page(ns: str, proj: str, rest: str) -> Response:
        p = find_project(ns, proj)
        repo = repo_of(p)
        branch, sub = split_ref(repo, rest)
        entries = gitlab_repo.tree(repo, branch, sub)
        if entries is None:
            abort(404)
        last = gitlab_repo.log(repo, branch, 1)
        url = f"{base}/{esc(p[1])}/{esc(p[2])}"
        commit = (f'<div class="commit-detail" data-testid="last-commit"><span class="commit-row-message">'
                  f'{esc(last[0].title)}</span> <span class="commit-author-name">{esc(last[0].author_name)}</span> authored '
                  f'<time datetime="{iso(last[0].at)}">{iso(last[0].at)}</time> <code class="commit-sha">'
                  f'{last[0].sha[:8]}</code></div>') if last else ""
        prefix = f"{sub}/" if sub else ""
        rows = "".join(
            f'<tr class="tree-item"><td class="tree-item-file-name"><a href="{url}/-/{"tree" if kind == "tree" else "blob"}'
            f'/{esc(branch)}/{esc(prefix + name)}"><span>{esc(name)}</span></a></td></tr>' for kind, name in entries)
        new = (f'<a class="btn gl-button" href="{url}/-/new/{esc(branch)}" data-testid="new-file">New file</a>'
               if site.can_push(p[0]) else "")
        return layout(f"{p[1]} / {p[3]} · {branch}",
                      f'{breadcrumbs_of(p)}{site.ref_selector(branch)}<h1 class="page-title tree-ref-header">'
                      f'{esc(p[3])}</h1>{commit}{new}<table class="table tree-table" id="tree-slider"><tbody>{rows}'
                      "</tbody></table>")

    @app.get("/<ns>/<proj>/-/blob/<path:rest>")
    @app.get("/<ns>/<proj>/-/raw/<path:rest>")
    def blob_page(ns: str, proj: str, rest: str) -> Response:
        p = find_project(ns, proj)
        repo = repo_of(p)
        branch, path = split_ref(repo, rest)
        data = gitlab_repo.blob(repo, branch, path) if path else None
        if data is None:
            abort(404)
        if "/-/raw/" in request.path:
            return Response(data, mimetype="text/plain")
        return layout(f"{path} · {branch}", f'{breadcrumbs_of(p)}{site.ref_selector(branch)}<div class="file-holder">'
                      f'<div class="file-title" data-testid="file-title-content">{esc(path)}</div><pre class="blob-content">'
                      f'{esc(data.decode(errors="replace"))}</pre></div>')

    @app.get("/<ns>/<proj>/-/new/<path:branch>")
    @needs_login
    def new_file(ns: str, proj: str, branch: str) -> Response:
        p = find_project(ns, proj)
        repo_of(p)
        form = (f'<h1 class="page-title">New file</h1><form id="new-file-form" method="post" '
                f'action="{base}/{esc(p[1])}/{esc(p[2])}/-/create/{esc(branch)}">'
                '<div class="form-group"><label for="file_name">File name</label><input class="form-control" type="text" '
                'name="file_name" id="file_name" required data-testid="file-name-field"></div>'
                '<div class="form-group"><label for="content">Content</label><textarea class="form-control" name="content" '
                'id="content"></textarea></div><div class="form-group"><label for="commit_message">Commit message</label>'
                '<input class="form-control" type="text" name="commit_message" id="commit_message" value="Add new file">'
                '</div><div class="form-group"><label for="branch_name">Target Branch</label><input class="form-control" '
                f'type="text" name="branch_name" id="branch_name" value="{esc(branch)}"></div>'
                '<button type="submit" class="btn gl-button btn-confirm" data-testid="commit-button">Commit changes'
                "</button></form>")
        return layout("New file", form)

    def commit(p: tuple, repo: str, branch: str, path: str, content: str, message: str, start: str | None) -> str:
        me = current()
        sha = gitlab_repo.commit_file(repo, branch, path, content.encode(), message or f"Add {path}",
                                      (me[2], me[3]), int(time.time()), start_branch=start)
        site.expire_repository(p[0])
        return sha

    @app.post("/<ns>/<proj>/-/create/<path:branch>")
    @needs_login
    def create_file_form(ns: str, proj: str, branch: str) -> Response:
        p = find_project(ns, proj)
        repo = repo_of(p)
        if not site.can_push(p[0]):
            abort(403)
        f = request.form
        target = f.get("branch_name", "").strip() or branch
        path = f.get("file_name", "").strip()
        try:
            commit(p, repo, target, path, f.get("content", ""), f.get("commit_message", "").strip(),
                   branch if target != branch else None)
        except gitlab_repo.GitError as exc:
            return layout("New file", f'<div class="gl-alert flash-danger">{esc(exc)}</div>', 400)
        return redirect(f"{base}/{p[1]}/{p[2]}/-/blob/{target}/{path.strip('/')}")

    @app.get("/<ns>/<proj>/-/graphs/<path:rest>")
    def contributors_page(ns: str, proj: str, rest: str) -> Response:
        p = find_project(ns, proj)
        repo = repo_of(p)
        branch, sub = split_ref(repo, rest)
        if sub:
            abort(404)
        commits = gitlab_repo.log(repo, branch)
        if request.args.get("format") == "json":  # what upstream's contributors chart fetches
            return jsonify([{"author_name": c.author_name, "author_email": c.author_email, "date": iso(c.at)[:10]}
                            for c in commits])
        counts: dict[tuple[str, str], int] = {}
        for c in commits:
            counts[(c.author_name, c.author_email)] = counts.get((c.author_name, c.author_email), 0) + 1
        rows = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][0]))
        people = "".join(f'<div class="contributor gl-my-5" data-testid="contributor"><h4 class="gl-mb-2 gl-mt-0">'
                         f'{esc(n)}</h4><p class="gl-mb-3">{c} commit{"" if c == 1 else "s"} '
                         f'(<span class="contributor-email">{esc(e)}</span>)</p></div>' for (n, e), c in rows)
        return layout(f"Contributors · {p[1]} / {p[3]}",
                      f'{breadcrumbs_of(p)}{site.ref_selector(branch)}<div class="js-contributors-graph">'
                      f'<h1 class="page-title">Contributors</h1><h3>Commits to {esc(branch)}</h3>'
                      f'<p>{len(commits)} commits in total</p><div class="contributors-list">{people}</div></div>')

    # -- /api/v4/projects/:id/repository/... (dispatched by gitlab_api's project route) ----------------------------
    def api(p: tuple, me: tuple | None, sub: str) -> Response:
        repo = repo_of(p)
        data = request.get_json(silent=True) or request.form or request.args
        if sub == "branches" and request.method == "GET":
            default = gitlab_repo.default_branch(repo)
            return jsonify([{"name": b, "default": b == default, "commit": {"id": sha},
                             "web_url": f"{base}/{p[1]}/{p[2]}/-/tree/{b}"} for b, sha in gitlab_repo.branches(repo)])
        if sub == "branches" and request.method == "POST":
            if me is None or not push_allowed(p, me):
                return site.api_error(401 if me is None else 403, "401 Unauthorized" if me is None else "403 Forbidden")
            name = (data.get("branch") or "").strip()
            try:
                sha = gitlab_repo.create_branch(repo, name, (data.get("ref") or "").strip())
            except gitlab_repo.GitError as exc:
                return site.api_error(400, str(exc))
            site.expire_repository(p[0])
            return jsonify(name=name, default=False, commit={"id": sha}), 201
        m = re.fullmatch(r"files/(.+?)(/raw)?", sub)
        if m and request.method == "GET":
            branch = request.args.get("ref") or gitlab_repo.default_branch(repo) or ""
            blob = gitlab_repo.blob(repo, branch, m.group(1))
            if blob is None:
                return site.api_error(404, "404 File Not Found")
            return Response(blob, mimetype="text/plain")
        if m and request.method == "POST" and not m.group(2):
            if me is None or not push_allowed(p, me):
                return site.api_error(401 if me is None else 403, "401 Unauthorized" if me is None else "403 Forbidden")
            branch = (data.get("branch") or "").strip()
            try:
                who = (me[2], me[3])
                sha = gitlab_repo.commit_file(repo, branch, m.group(1), (data.get("content") or "").encode(),
                                              (data.get("commit_message") or "").strip() or f"Add {m.group(1)}", who,
                                              int(time.time()), start_branch=data.get("start_branch") or None)
            except gitlab_repo.GitError as exc:
                return site.api_error(400, str(exc))
            site.expire_repository(p[0])
            return jsonify(file_path=m.group(1), branch=branch, commit_id=sha), 201
        return site.api_error(404, "404 Not Found")

    def push_allowed(p: tuple, me: tuple) -> bool:
        return bool(db.one("SELECT 1 FROM members WHERE source_type = 'Project' AND source_id = %s AND user_id = %s "
                           "AND access_level >= 30", (p[0], me[0])))

    site.repository_api = api
