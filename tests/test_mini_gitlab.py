"""The mini GitLab image, driven like the omnibus one: upstream run command, the README's configure
steps via docker exec, both login styles, the expiry probe, writes (UI and API) that land in
PostgreSQL and in the bare git repositories (upstream's hashed layout), Redis as GitLab's cache and
session store, server-side sessions in a recreated container and a clean SIGTERM stop."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
import requests

from conftest import Containers, wait_http

pytestmark = [pytest.mark.docker, pytest.mark.mini]

PORT, SECOND_PORT = 18023, 18024
BASE = f"http://127.0.0.1:{PORT}"
USER, PASSWORD = "byteblaze", "hello1234"
TOKEN = "glpat-envctlMiniByteblaze1"
RUN_CMD = ["/opt/gitlab/embedded/bin/runsvdir-start"]
TASK_PAGES = Path(__file__).resolve().parents[1] / "envctl/images/mini/gitlab/files/task_pages.json"


def configure(c: Containers, name: str, port: int) -> subprocess.CompletedProcess:
    """The upstream README steps, verbatim apart from the host (gasse's puma line included)."""
    c.exec(name, "sed", "-i", f"s|^external_url.*|external_url 'http://127.0.0.1:{port}'|", "/etc/gitlab/gitlab.rb")
    c.exec(name, "bash", "-c", "printf '\\n\\npuma[\"worker_processes\"] = 4' >> /etc/gitlab/gitlab.rb")
    return c.exec(name, "gitlab-ctl", "reconfigure")


def start(c: Containers, image: str, port: int) -> tuple[str, float]:
    t0 = time.monotonic()
    # Container port = public port, as for the real image (nginx listens on external_url's port).
    name = c.run(image, ports={port: port}, command=RUN_CMD)
    done = configure(c, name, port)
    assert "gitlab Reconfigured!" in done.stdout, done.stdout + done.stderr
    wait_http(f"http://127.0.0.1:{port}/-/readiness", timeout=60, ok=lambda r: r.status_code == 200,
              logs=lambda: c.logs(name))
    return name, time.monotonic() - t0


def fingerprint(c: Containers, name: str) -> dict[str, tuple[int, int, str]]:
    """The catalog's own fingerprint command (the full flavor's) over the tables, parsed: table -> (rows, max id,
    md5)."""
    from envctl.catalog import load_catalog

    query = next(q for q in load_catalog().site("gitlab").fingerprint_queries("mini")
                 if q.name == "issues-mrs-notes-projects")
    out = c.exec(name, *query.run).stdout
    rows = [line.split("|") for line in out.strip().splitlines()]
    assert rows and all(len(r) == 4 for r in rows), out
    return {t: (int(n), int(m), s) for t, n, m, s in rows}


@pytest.fixture(scope="module")
def gitlab(mini_image, module_containers: Containers) -> Iterator[str]:
    name, took = start(module_containers, mini_image("gitlab"), PORT)
    print(f"\ngitlab boot+configure-to-ready: {took:.2f}s")
    yield name


def http_login(base: str = BASE) -> requests.Session:
    s = requests.Session()
    r = s.post(f"{base}/users/sign_in", data={"user[login]": USER, "user[password]": PASSWORD}, allow_redirects=False)
    assert r.status_code == 302 and r.headers["Location"] == f"{base}/", r.text[:300]
    return s


def test_configure_sets_external_url_and_port_idempotently(gitlab: str, module_containers: Containers) -> None:
    rb = module_containers.exec(gitlab, "cat", "/etc/gitlab/gitlab.rb").stdout
    assert f"external_url 'http://127.0.0.1:{PORT}'" in rb and "metis.lti.cs.cmu.edu" not in rb
    ready = requests.get(f"{BASE}/-/readiness", timeout=10)
    assert ready.json()["status"] == "ok"
    explore = requests.get(f"{BASE}/explore", timeout=10).text
    assert f'href="{BASE}/byteblaze/a11y-webring.club"' in explore
    assert f'href="{BASE}/a11yproject/a11yproject.com"' in explore
    assert "metis" not in explore
    # The container's original port (8023) is no longer served: the app moved to external_url's port.
    probe = module_containers.exec(gitlab, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                   "http://127.0.0.1:8023/-/readiness", check=False)
    assert probe.stdout.strip() == "000"
    again = configure(module_containers, gitlab, PORT)
    assert again.returncode == 0 and "gitlab Reconfigured!" in again.stdout
    assert requests.get(f"{BASE}/explore", timeout=10).status_code == 200
    status = module_containers.exec(gitlab, "gitlab-ctl", "status")
    assert "run: postgresql:" in status.stdout and "run: puma:" in status.stdout
    restart = module_containers.exec(gitlab, "gitlab-ctl", "restart")
    assert restart.returncode == 0 and "ok: run: puma" in restart.stdout
    assert requests.get(f"{BASE}/-/readiness", timeout=10).json()["status"] == "ok"


def test_image_labels_and_pages(gitlab: str, mini_image) -> None:
    labels = subprocess.run(["docker", "inspect", "-f", "{{json .Config.Labels}}", mini_image("gitlab")],
                            capture_output=True, text=True, check=True).stdout
    for want in ('"org.envctl.flavor":"mini"', '"org.envctl.site":"gitlab"', '"org.envctl.data-version":"2"'):
        assert want in labels
    s = http_login()
    assert "a11y-syntax-highlighting" in s.get(f"{BASE}/dashboard/projects").text
    assert "timeit" in s.get(f"{BASE}/dashboard/projects").text
    assert requests.get(f"{BASE}/byteblaze/timeit", allow_redirects=False, timeout=10).status_code == 302
    issues = requests.get(f"{BASE}/byteblaze/a11y-syntax-highlighting/-/issues", timeout=10).text
    assert "Add a high-contrast theme variant" in issues
    issue = requests.get(f"{BASE}/byteblaze/a11y-syntax-highlighting/-/issues/2", timeout=10).text
    assert "Comment colour fails WCAG AA on dark theme" in issue
    mrs = requests.get(f"{BASE}/byteblaze/a11y-syntax-highlighting/-/merge_requests", timeout=10).text
    assert "Fix comment colour contrast" in mrs
    assert requests.get(f"{BASE}/byteblaze/no-such-project", timeout=10).status_code == 404
    r = requests.get(f"{BASE}/", allow_redirects=False, timeout=10)
    assert r.status_code == 302 and r.headers["Location"] == f"{BASE}/users/sign_in"


def test_task_start_pages_answer_for_byteblaze(gitlab: str) -> None:
    """Every WebArena start page on GitLab (task_pages.json) opens, logged in as the tasks' user, on the
    project it names (its namespace linked), and the graph/tree pages on the branch they name."""
    pages = json.loads(TASK_PAGES.read_text())
    assert len(pages) == 11
    s = http_login()
    failures = []
    for entry in pages:
        path = entry["path"]
        r = s.get(f"{BASE}{path}", timeout=10)
        why = ""
        head, _, rest = path.strip("/").partition("/-/")
        if r.status_code != 200:
            why = f"HTTP {r.status_code}"
        elif "/users/sign_in" in r.url or 'data-testid="sign-in-button"' in r.text:
            why = f"sign-in page ({r.url})"
        elif head:
            ns, proj = head.split("/")
            if f">{proj}<" not in r.text:
                why = f"does not show the project {proj!r}"
            elif f'href="{BASE}/{ns}"' not in r.text:
                why = f"does not link the namespace {ns!r}"
            elif rest and rest.partition("/")[2] not in r.text:
                why = f"does not show the branch {rest.partition('/')[2]!r}"
        if why:
            failures.append(f"{path}: {why}")
    assert not failures, "\n".join(failures)
    graph = s.get(f"{BASE}/dehenne/awesome-visibility/-/graphs/master", timeout=10).text
    assert "Commits to master" in graph and "58 commits" in graph and "dehenne@users.noreply.github.com" in graph
    php52 = s.get(f"{BASE}/amwhalen/archive-my-tweets/-/graphs/php52", timeout=10).text
    assert php52.index("Andrew M. Whalen</h4>") < php52.index("Kevin Marsh</h4>")
    profile = s.get(f"{BASE}/amwhalen", timeout=10).text
    assert "@amwhalen" in profile and "Massachusetts" in profile
    tree = s.get(f"{BASE}/amwhalen/archive-my-tweets/-/tree/github/fork/chtitux/addRssFeed", timeout=10).text
    assert "config.sample.php" in tree
    assert s.get(f"{BASE}/amwhalen/archive-my-tweets/-/tree/no-such-branch", timeout=10).status_code == 404
    commits = s.get(f"{BASE}/vinta/awesome-python/-/graphs/main?format=json", timeout=10).json()
    assert sum(c["author_name"] == "Vinta Chen" for c in commits) == 412
    assert "primer/design" in s.get(f"{BASE}/dashboard/projects", timeout=10).text


@pytest.mark.browser
def test_auto_login_style_and_expiry_probe(gitlab: str, browser) -> None:
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        page.goto(f"{BASE}/users/sign_in")
        page.get_by_test_id("username-field").click()
        page.get_by_test_id("username-field").fill(USER)
        page.get_by_test_id("username-field").press("Tab")
        page.get_by_test_id("password-field").fill(PASSWORD)
        page.get_by_test_id("sign-in-button").click()
        page.wait_for_url(f"{BASE}/")
        # auto_login's is_expired() for gitlab: the probe URL must load without redirect.
        page.goto(f"{BASE}/-/profile")
        assert page.url == f"{BASE}/-/profile"
    finally:
        ctx.close()


@pytest.mark.browser
def test_browsergym_ui_login_and_sign_out(gitlab: str, browser) -> None:
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        page.goto(f"{BASE}/users/sign_in")
        page.get_by_label("Username or email").fill(USER)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{BASE}/")
        assert page.get_by_test_id("user-menu").count() == 1
        page.goto(f"{BASE}/users/sign_out")
        page.get_by_text("Signed out successfully.").wait_for()
        page.goto(f"{BASE}/-/profile")
        assert page.url == f"{BASE}/users/sign_in"
    finally:
        ctx.close()


@pytest.mark.browser
def test_wrong_password_shows_site_error(gitlab: str, browser) -> None:
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        page.goto(f"{BASE}/users/sign_in")
        page.get_by_label("Username or email").fill(USER)
        page.get_by_label("Password").fill("not-the-password")
        page.get_by_role("button", name="Sign in").click()
        page.get_by_text("Invalid login or password.").wait_for()
        assert page.url == f"{BASE}/users/sign_in"
        assert "Traceback" not in page.content()
    finally:
        ctx.close()


def test_expiry_probe_anonymous_redirects_to_sign_in(gitlab: str) -> None:
    r = requests.get(f"{BASE}/-/profile", allow_redirects=False, timeout=10)
    assert r.status_code == 302 and r.headers["Location"] == f"{BASE}/users/sign_in"
    r = requests.get(f"{BASE}/-/profile", cookies={"_gitlab_session": "forged"}, allow_redirects=False, timeout=10)
    assert r.status_code == 302


def test_api_with_personal_access_token(gitlab: str, module_containers: Containers) -> None:
    hdr = {"PRIVATE-TOKEN": TOKEN}
    me = requests.get(f"{BASE}/api/v4/user", headers=hdr, timeout=10)
    assert me.status_code == 200 and me.json()["username"] == USER
    assert requests.get(f"{BASE}/api/v4/user", timeout=10).status_code == 401
    assert requests.get(f"{BASE}/api/v4/user", headers={"PRIVATE-TOKEN": "glpat-wrong"}, timeout=10).status_code == 401
    public = {p["path_with_namespace"] for p in requests.get(f"{BASE}/api/v4/projects", timeout=10).json()}
    mine = {p["path_with_namespace"] for p in requests.get(f"{BASE}/api/v4/projects", headers=hdr, timeout=10).json()}
    assert "byteblaze/timeit" not in public and "byteblaze/timeit" in mine
    project = requests.get(f"{BASE}/api/v4/projects/byteblaze%2Fdotfiles", timeout=10).json()
    assert project["web_url"] == f"{BASE}/byteblaze/dotfiles"
    before = fingerprint(module_containers, gitlab)
    issues = requests.get(f"{BASE}/api/v4/projects/{project['id']}/issues", timeout=10).json()
    assert [i["title"] for i in issues] == ["Document the install script"]
    r = requests.post(f"{BASE}/api/v4/projects/{project['id']}/issues", headers=hdr,
                      json={"title": "Created over the API", "description": "by envctl tests"}, timeout=10)
    assert r.status_code == 201 and r.json()["iid"] == 2, r.text
    assert requests.post(f"{BASE}/api/v4/projects/{project['id']}/issues", json={"title": "x"},
                         timeout=10).status_code == 401
    assert "Created over the API" in requests.get(f"{BASE}/byteblaze/dotfiles/-/issues/2", timeout=10).text
    after = fingerprint(module_containers, gitlab)
    assert after["issues"][0] == before["issues"][0] + 1 and after["issues"][2] != before["issues"][2]
    # WebArena task 418's backend request, checked the way its evaluator reads the profile page.
    r = requests.put(f"{BASE}/api/v4/user/status", headers=hdr, json={"message": "Busy"}, timeout=10)
    assert r.status_code == 200 and r.json()["message"] == "Busy"
    assert '<div class="cover-status">Busy</div>' in requests.get(f"{BASE}/byteblaze", timeout=10).text
    assert fingerprint(module_containers, gitlab)["users"][2] != after["users"][2]


@pytest.mark.browser
def test_new_issue_form_writes_to_db(gitlab: str, module_containers: Containers, browser) -> None:
    before = fingerprint(module_containers, gitlab)
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        page.goto(f"{BASE}/users/sign_in")
        page.get_by_label("Username or email").fill(USER)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{BASE}/")
        page.goto(f"{BASE}/byteblaze/a11y-webring.club/-/issues/new")
        page.get_by_label("Title").fill("Issue from the browser")
        page.get_by_label("Description").fill("Filed by the envctl test")
        page.get_by_role("button", name="Create issue").click()
        page.wait_for_url(f"{BASE}/byteblaze/a11y-webring.club/-/issues/3")
        assert page.get_by_test_id("issue-title").inner_text() == "Issue from the browser"
    finally:
        ctx.close()
    after = fingerprint(module_containers, gitlab)
    assert after["issues"][:2] == (before["issues"][0] + 1, before["issues"][1] + 1)
    # Signing in (a session row) is not agent state and leaves the fingerprint alone.
    http_login()
    assert fingerprint(module_containers, gitlab) == after


REPOS = "/var/opt/gitlab/git-data/repositories"


def git(c: Containers, name: str, repo: str, *args: str, check: bool = True) -> str:
    return c.exec(name, "git", f"--git-dir={REPOS}/{repo}.git", *args, check=check).stdout


def disk_path(c: Containers, name: str, project: str) -> str:
    ns, path = project.split("/")
    return c.exec(name, "gitlab-psql", "-At", "-c", "SELECT r.disk_path FROM project_repositories r JOIN projects p ON "
                  f"p.id = r.project_id JOIN namespaces n ON n.id = p.namespace_id WHERE n.path = '{ns}' AND "
                  f"p.path = '{path}'").stdout.strip()


def test_bare_repositories_in_upstream_hashed_layout_are_what_pages_show(gitlab: str, module_containers: Containers) -> None:
    """One bare repository per project at @hashed/<h[0:2]>/<h[2:4]>/<h>.git (h = sha256 of the project id), owned by
    git, as GitLab's hashed storage lays them out; the branches, tree and contributors pages read them."""
    import hashlib

    c = module_containers
    rows = c.exec(gitlab, "gitlab-psql", "-At", "-F", " ", "-c", "SELECT p.id, r.disk_path FROM projects p "
                  "LEFT JOIN project_repositories r ON r.project_id = p.id ORDER BY p.id").stdout.strip().split("\n")
    assert len(rows) == 14
    for row in rows:
        pid, path = row.split(" ")
        h = hashlib.sha256(pid.encode()).hexdigest()
        assert path == f"@hashed/{h[:2]}/{h[2:4]}/{h}", row
        assert git(c, gitlab, path, "config", "core.bare").strip() == "true"
    owners = c.exec(gitlab, "find", REPOS, "-mindepth", "4", "-maxdepth", "4", "-name", "*.git", "-printf", "%u:%g\n")
    assert owners.stdout.split() == ["git:git"] * 14
    design = disk_path(c, gitlab, "primer/design")
    heads = git(c, gitlab, design, "for-each-ref", "--format=%(refname:lstrip=2)", "refs/heads").split()
    assert sorted(heads) == ["bump-doctocat", "dialog", "dialog-component", "main"]
    page = requests.get(f"{BASE}/primer/design/-/branches", timeout=10).text
    assert all(f'data-name="{h}"' in page for h in heads)
    total = int(git(c, gitlab, design, "rev-list", "--count", "main"))
    assert f"{total} commits in total" in requests.get(f"{BASE}/primer/design/-/graphs/main", timeout=10).text
    assert f"<strong>{total}</strong> Commits" in requests.get(f"{BASE}/primer/design", timeout=10).text
    readme = git(c, gitlab, design, "show", "main:README.md")
    assert readme and readme in requests.get(f"{BASE}/primer/design/-/raw/main/README.md", timeout=10).text


def test_ui_and_api_writes_land_in_the_bare_repository(gitlab: str, module_containers: Containers) -> None:
    """As GitLab writes through Gitaly: a branch made in the web UI and a file committed there or over the API are
    refs and objects in the project's bare repository, and the pages read them back."""
    c, project = module_containers, "byteblaze/a11y-syntax-highlighting"
    repo = disk_path(c, gitlab, project)
    s = http_login()
    r = s.post(f"{BASE}/{project}/-/branches", data={"branch_name": "ui-branch", "ref": "main"}, allow_redirects=False)
    assert r.status_code == 302 and r.headers["Location"] == f"{BASE}/{project}/-/tree/ui-branch", r.text[:300]
    assert git(c, gitlab, repo, "rev-parse", "refs/heads/ui-branch") == git(c, gitlab, repo, "rev-parse", "refs/heads/main")
    r = s.post(f"{BASE}/{project}/-/create/ui-branch", data={"file_name": "docs/ui.md", "content": "from the UI\n",
                                                             "commit_message": "Add docs/ui.md", "branch_name": "ui-branch"},
               allow_redirects=False)
    assert r.status_code == 302, r.text[:300]
    assert git(c, gitlab, repo, "show", "ui-branch:docs/ui.md") == "from the UI\n"
    assert git(c, gitlab, repo, "log", "-1", "--format=%an|%s", "ui-branch").strip() == "Byte Blaze|Add docs/ui.md"
    assert "ui.md" in s.get(f"{BASE}/{project}/-/tree/ui-branch/docs").text
    hdr = {"PRIVATE-TOKEN": TOKEN}
    r = requests.post(f"{BASE}/api/v4/projects/1/repository/files/api.txt", headers=hdr,
                      data={"branch": "api-branch", "start_branch": "main", "content": "over the API",
                            "commit_message": "Add api.txt"}, timeout=10)
    assert r.status_code == 201, r.text
    assert git(c, gitlab, repo, "show", "api-branch:api.txt") == "over the API"
    names = {b["name"] for b in requests.get(f"{BASE}/api/v4/projects/1/repository/branches", timeout=10).json()}
    assert {"main", "fix-contrast", "ui-branch", "api-branch"} <= names
    # the same refusals as GitLab: anonymous, an existing branch, a bad name
    assert requests.post(f"{BASE}/{project}/-/branches", data={"branch_name": "x"}, allow_redirects=False,
                         timeout=10).status_code == 302
    assert s.post(f"{BASE}/{project}/-/branches", data={"branch_name": "ui-branch", "ref": "main"}).status_code == 400
    assert s.post(f"{BASE}/{project}/-/branches", data={"branch_name": "bad..name", "ref": "main"}).status_code == 400


def test_redis_is_the_cache_and_the_session_store(gitlab: str, module_containers: Containers) -> None:
    """Redis on upstream's socket, under gitlab-ctl: the project's counts are cached there and expired only by the
    app's own writes (a write underneath shows stale until the cache is flushed); sessions live there too."""
    c = module_containers
    cli = ["/opt/gitlab/embedded/bin/redis-cli", "-s", "/var/opt/gitlab/redis/redis.socket"]
    assert "run: redis:" in c.exec(gitlab, "gitlab-ctl", "status").stdout
    assert c.exec(gitlab, *cli, "CONFIG", "GET", "maxmemory").stdout.split()[1] == str(16 * 1024 * 1024)
    project = "byteblaze/accessible-html-content-patterns"

    def open_issues() -> str:
        page = requests.get(f"{BASE}/{project}", timeout=10).text
        return page.split('/-/issues">Issues <span class="badge">')[1].split("<")[0]

    before = open_issues()
    assert c.exec(gitlab, *cli, "GET", "cache:gitlab:projects/3/open_issues_count").stdout.strip() == before
    c.exec(gitlab, "gitlab-psql", "-c", "INSERT INTO issues (project_id, iid, title, author_id, created_at) "
           "VALUES (3, 99, 'written underneath', 2, 0)")
    assert open_issues() == before  # as GitLab: the cached count, until something expires it
    s = http_login()
    assert any(k.startswith("session:gitlab:") for k in c.exec(gitlab, *cli, "KEYS", "*").stdout.split())
    assert c.exec(gitlab, *cli, "FLUSHALL").stdout.strip() == "OK"
    assert open_issues() == str(int(before) + 1)
    assert s.get(f"{BASE}/-/profile", allow_redirects=False).status_code == 302  # signed out with the flush


def test_gitlab_psql_is_the_clusters_superuser(gitlab: str, module_containers: Containers) -> None:
    """As upstream's gitlab-psql (chpst -U gitlab-psql: the role initdb made), which the in-place steps need."""
    out = module_containers.exec(gitlab, "gitlab-psql", "-At", "-c",
                                 "SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user").stdout
    assert out.strip() == "gitlab-psql|t"


def test_recreated_container_is_pristine_and_stops_like_upstream(gitlab: str, containers: Containers,
                                                                  mini_image) -> None:
    """Like the omnibus image: a plain 'docker stop' kills PostgreSQL (PID 1 runsvdir exits at once), leaving
    postmaster.pid, and the next start refuses it (upstream's "502"); 'gitlab-ctl stop' first is clean."""
    s = http_login()
    assert s.get(f"{BASE}/-/profile", allow_redirects=False).status_code == 200
    fresh, took = start(containers, mini_image("gitlab"), SECOND_PORT)
    print(f"\ngitlab second boot+configure-to-ready: {took:.2f}s")
    fresh_base = f"http://127.0.0.1:{SECOND_PORT}"
    r = requests.get(f"{fresh_base}/-/profile", cookies=s.cookies.get_dict(), allow_redirects=False, timeout=10)
    assert r.status_code == 302 and r.headers["Location"] == f"{fresh_base}/users/sign_in"
    fp = fingerprint(containers, fresh)
    assert fp["issues"][:2] == (13, 13) and fp["notes"][:2] == (3, 3) and fp["members"][:2] == (17, 17)

    # gitlab-ctl stop, then docker stop: a clean shutdown, a clean restart
    out = subprocess.run(["docker", "exec", fresh, "gitlab-ctl", "stop"], capture_output=True, text=True)
    assert out.returncode == 0 and "ok: down: postgresql" in out.stdout, out.stdout + out.stderr
    assert "ok: down: redis" in out.stdout
    t0 = time.monotonic()
    subprocess.run(["docker", "stop", "-t", "20", fresh], check=True, capture_output=True)
    took = time.monotonic() - t0
    code = subprocess.run(["docker", "inspect", "-f", "{{.State.ExitCode}}", fresh], capture_output=True, text=True,
                          check=True).stdout.strip()
    logs = containers.logs(fresh)
    assert code == "0", logs
    assert "database system is shut down" in logs
    assert took < 10, f"docker stop took {took:.1f}s"

    # a plain docker stop: PostgreSQL dies with PID 1 and the next start refuses its stale lock file
    subprocess.run(["docker", "start", fresh], check=True, capture_output=True)
    deadline = time.monotonic() + 30
    while subprocess.run(["docker", "exec", fresh, "gitlab-ctl", "status"], capture_output=True).returncode != 0:
        assert time.monotonic() < deadline, containers.logs(fresh)
        time.sleep(0.3)
    subprocess.run(["docker", "stop", "-t", "20", fresh], check=True, capture_output=True)
    subprocess.run(["docker", "start", fresh], check=True, capture_output=True)
    deadline = time.monotonic() + 20
    while "lock file" not in containers.logs(fresh):
        assert time.monotonic() < deadline, containers.logs(fresh)
        time.sleep(0.3)
