"""GitLab's in-place reset tier on the mini flavor (issue #39): the catalog's own save/restore/has steps, the
fingerprint over the repositories and the change signal, driven through the CLI on a real copy.

The restore decides what changed from the server's own bookkeeping (PostgreSQL's per-table counters, a listing of
the repositories' files) and must restore only that, flush Redis after, and leave an untouched copy untouched.
Instance h2t at port offset 45200 (nothing else uses either)."""
from __future__ import annotations

import re
import subprocess
import time
import uuid
from contextlib import contextmanager
from typing import Iterator

import pytest
import requests

from conftest import envctl_cli, remove_instance_images

pytestmark = [pytest.mark.docker, pytest.mark.mini]

INSTANCE, OFFSET = "h2t", 45200
BASE = f"http://127.0.0.1:{8023 + OFFSET}"
USER, PASSWORD = "byteblaze", "hello1234"
PROJECT, PROJECT_ID = "byteblaze/a11y-webring.club", 2
REPOS = "/var/opt/gitlab/git-data/repositories"
REDIS = ["/opt/gitlab/embedded/bin/redis-cli", "-s", "/var/opt/gitlab/redis/redis.socket"]
SUMMARY = re.compile(r"restored (\d+) tables, (\d+) repositories(?:: (.+))?")


def cli(*args: str) -> subprocess.CompletedProcess:
    return envctl_cli(*args, "-i", INSTANCE)


@pytest.fixture(scope="module")
def web(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The mini gitlab up in its own instance; the name of its web container."""
    from envctl.catalog import load_catalog
    from envctl.images.build import build_for_sites

    build_for_sites(load_catalog(), ["gitlab"], "mini")
    cli("down", "--volumes")
    remove_instance_images(INSTANCE)  # a golden left by an interrupted run would be booted instead of the image
    try:
        up = cli("up", "gitlab", "--flavor", "mini", "--port-offset", str(OFFSET), "--spares", "0",
                 "--auth-dir", str(tmp_path_factory.mktemp("auth")))
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
        yield container()
    finally:
        cli("down", "--volumes")
        remove_instance_images(INSTANCE)


def container() -> str:
    names = subprocess.run(["docker", "ps", "--filter", f"label=envctl.instance={INSTANCE}", "--filter",
                            "label=envctl.site=gitlab", "--filter", "label=envctl.service=web", "--format",
                            "{{.Names}}"], capture_output=True, text=True, check=True).stdout.split()
    assert len(names) == 1, names
    return names[0]


def sh(web: str, *argv: str, check: bool = True) -> str:
    done = subprocess.run(["docker", "exec", web, *argv], capture_output=True, text=True)
    assert not check or done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def sql(web: str, query: str) -> str:
    return sh(web, "gitlab-psql", "-X", "-At", "-c", query).strip()


def step_argv(kind: str, state: str = "pristine") -> list[str]:
    """A catalog query or in-place step, rendered as envctl renders it."""
    from envctl.catalog import load_catalog
    from envctl.catalog.render import Deployment, Renderer

    cat = load_catalog()
    site = cat.site("gitlab")
    run = {"restore": site.reset.inplace.restore[0].run, "has": site.reset.inplace.has[0].run,
           "changes": site.changes[0].run, "repositories": site.fingerprint[1].run}[kind]
    return Renderer(cat, "gitlab", Deployment(), {}, state).argv(run)


def restore(web: str) -> tuple[int, int, list[str]]:
    """The catalog's restore step run in the copy: (tables, repositories, names) from its one summary line."""
    out = sh(web, *step_argv("restore")).strip()
    m = SUMMARY.fullmatch(out)
    assert m, f"not one summary line: {out!r}"
    return int(m.group(1)), int(m.group(2)), (m.group(3) or "").split()


def changes(web: str) -> str:
    return sh(web, *step_argv("changes"))


def login() -> requests.Session:
    s = requests.Session()
    r = s.post(f"{BASE}/users/sign_in", data={"user[login]": USER, "user[password]": PASSWORD}, allow_redirects=False)
    assert r.status_code == 302, r.text[:300]
    return s


def project_counts(s: requests.Session | None = None) -> tuple[int, int, int]:
    """(open issues, branches, commits) as the project page shows them (from GitLab's Redis cache)."""
    page = (s or requests).get(f"{BASE}/{PROJECT}", timeout=10).text
    issues = int(page.split('/-/issues">Issues <span class="badge">')[1].split("<")[0])
    commits = int(page.split('data-testid="commit-count"><strong>')[1].split("<")[0])
    branches = int(page.split('data-testid="branch-count"><strong>')[1].split("<")[0])
    return issues, branches, commits


def repo_of(web: str, project_id: int) -> str:
    return sql(web, f"SELECT disk_path FROM project_repositories WHERE project_id = {project_id}") + ".git"


def git(web: str, repo: str, *args: str, check: bool = True) -> str:
    return sh(web, "git", f"--git-dir={REPOS}/{repo}", *args, check=check)


def db_view(web: str) -> str:
    """PostgreSQL's own view: every user table's counters and file, the sequences, the WAL position."""
    return sql(web, "SELECT string_agg(format('%s.%s %s/%s/%s/%s', schemaname, relname, n_tup_ins, n_tup_upd, n_tup_del, "
                    "pg_relation_filenode(relid)), ' ' ORDER BY relid) FROM pg_stat_user_tables") + "\n" + \
        sql(web, "SELECT string_agg(format('%s=%s', sequencename, last_value), ' ' ORDER BY sequencename) "
                 "FROM pg_sequences") + "\n" + sql(web, "SELECT pg_current_wal_lsn()")


def fs_view(web: str) -> str:
    """The filesystem's own view of the repositories and the saved state: every entry's inode, times and size."""
    return sh(web, "find", REPOS, "/var/opt/gitlab/envctl-saved", "-printf", "%p %i %T@ %C@ %s\n")


@contextmanager
def wal_settled(web: str, timeout: float = 90) -> Iterator[None]:
    """For the block, only writes move the WAL: autovacuum is off (PostgreSQL's own housekeeping after earlier writes,
    saves and ANALYZEs: it writes WAL on an idle copy, which the change signal reports as a possible change), a
    CHECKPOINT is taken (no timed one comes), and the standby snapshot the background writer logs after it (within
    15 s, later when it hibernates) has been written."""
    sql(web, "ALTER SYSTEM SET autovacuum = off")
    sql(web, "SELECT pg_reload_conf()")
    try:
        while sql(web, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'") != "0":
            time.sleep(0.5)
        sql(web, "CHECKPOINT")
        lsn, deadline = sql(web, "SELECT pg_current_wal_lsn()"), time.monotonic() + timeout
        while sql(web, "SELECT pg_current_wal_lsn()") == lsn:
            assert time.monotonic() < deadline, f"no standby snapshot after the checkpoint within {timeout}s"
            time.sleep(0.5)
        time.sleep(2)
        yield
    finally:
        sql(web, "ALTER SYSTEM RESET autovacuum")
        sql(web, "SELECT pg_reload_conf()")


def test_ui_writes_are_undone_and_the_first_page_shows_the_restored_state(web: str) -> None:
    s = login()
    before = project_counts(s)  # loaded before the write: now in Redis
    repo = repo_of(web, PROJECT_ID)
    branch, title = f"topic-{uuid.uuid4().hex[:6]}", f"Issue {uuid.uuid4().hex[:6]}"
    r = s.post(f"{BASE}/{PROJECT}/-/issues", data={"issue[title]": title, "issue[description]": "from the UI"},
               allow_redirects=False)
    assert r.status_code == 302, r.text[:300]
    issue_url = r.headers["Location"]
    assert s.post(f"{BASE}/{PROJECT}/-/branches", data={"branch_name": branch, "ref": "main"},
                  allow_redirects=False).status_code == 302
    assert s.post(f"{BASE}/{PROJECT}/-/create/main", data={"file_name": "NOTES.md", "content": "episode\n",
                                                           "commit_message": "Add notes", "branch_name": "main"},
                  allow_redirects=False).status_code == 302
    after = project_counts(s)
    assert after == (before[0] + 1, before[1] + 1, before[2] + 1)
    # the written state is what Redis holds now: a restore that left the cache would show it
    assert sh(web, *REDIS, "GET", f"cache:gitlab:projects/{PROJECT_ID}/open_issues_count").strip() == str(after[0])
    assert git(web, repo, "rev-parse", "-q", "--verify", f"refs/heads/{branch}", check=False).strip()
    assert cli("verify", "gitlab").returncode != 0

    t = time.monotonic()
    reset = cli("reset", "gitlab", "--tier", "inplace")
    took = time.monotonic() - t
    assert reset.returncode == 0, reset.stdout[-2000:] + reset.stderr[-2000:]
    print(f"\nenvctl reset gitlab --tier inplace: {took:.2f}s")

    assert project_counts() == before  # the first page after the reset: the restored state, not the cached one
    assert requests.get(issue_url, timeout=10).status_code == 404
    assert sql(web, f"SELECT count(*) FROM issues WHERE title = '{title}'") == "0"
    assert git(web, repo, "rev-parse", "-q", "--verify", f"refs/heads/{branch}", check=False).strip() == ""
    assert subprocess.run(["docker", "exec", web, "git", f"--git-dir={REPOS}/{repo}", "cat-file", "-e", "main:NOTES.md"],
                          capture_output=True).returncode != 0
    git(web, repo, "fsck", "--no-progress", "--connectivity-only")  # whole: every object the refs need is there
    assert s.get(f"{BASE}/-/profile", allow_redirects=False).status_code == 302  # sessions went with Redis
    verify = cli("verify", "gitlab")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_restore_of_an_untouched_copy_restores_and_changes_nothing(web: str) -> None:
    restore(web)  # settle whatever an earlier test left (verified pristine)
    with wal_settled(web):
        signal, db, fs = changes(web), db_view(web), fs_view(web)
        for path in ("/explore", f"/{PROJECT}", f"/{PROJECT}/-/branches", f"/{PROJECT}/-/tree/main",
                     f"/{PROJECT}/-/issues", "/primer/design/-/graphs/main"):  # anonymous reads, each a cache fill
            assert requests.get(f"{BASE}{path}", timeout=10).status_code == 200, path
        time.sleep(2)
        assert changes(web) == signal  # page reads and an idle copy do not move the change signal
        for _ in range(2):
            assert restore(web) == (0, 0, [])
        assert db_view(web) == db  # no table rewritten, no counter moved, no WAL written
        assert fs_view(web) == fs  # no repository replaced, the saved copy untouched
        assert changes(web) == signal
    assert subprocess.run(["docker", "exec", web, *step_argv("has")]).returncode == 0
    assert subprocess.run(["docker", "exec", web, *step_argv("has", "snap_nothing")]).returncode != 0


def test_writes_bypassing_the_app_are_undone_and_move_the_change_signal(web: str) -> None:
    """Straight into PostgreSQL and with git inside the copy (no app, no proxy): the counters and the listing see
    them, the change signal moves with each, the restore undoes exactly them."""
    repo = repo_of(web, 6)  # a11yproject/a11yproject.com
    head = git(web, repo, "rev-parse", "main").strip()
    fingerprint = sh(web, *step_argv("repositories"))
    signal = changes(web)
    sql(web, "INSERT INTO notes (project_id, noteable_type, noteable_id, author_id, note, created_at) "
             "VALUES (6, 'Issue', 6, 2, 'written in SQL', 0)")
    sql(web, "UPDATE projects SET description = 'changed in SQL' WHERE id = 3")
    moved = changes(web)
    assert moved.split()[0] != signal.split()[0]  # the WAL position
    # a branch and a commit made with git itself, and a repository nobody registered
    git(web, repo, "update-ref", "refs/heads/sneaky", head)
    tree = git(web, repo, "rev-parse", "main^{tree}").strip()
    commit = sh(web, "env", "GIT_AUTHOR_NAME=x", "GIT_AUTHOR_EMAIL=x@x", "GIT_COMMITTER_NAME=x",
                "GIT_COMMITTER_EMAIL=x@x", "git", f"--git-dir={REPOS}/{repo}", "commit-tree", tree, "-p", head,
                "-m", "moved main").strip()
    git(web, repo, "update-ref", "refs/heads/main", commit, head)
    stray = "@hashed/00/00/0000stray.git"
    sh(web, "git", "init", "-q", "--bare", f"{REPOS}/{stray}")
    assert changes(web).split()[1:] != moved.split()[1:]  # the repositories' newest time and count
    assert sh(web, *step_argv("repositories")) != fingerprint
    assert cli("verify", "gitlab").returncode != 0

    tables, repos, names = restore(web)
    assert (tables, repos) == (2, 2), names
    assert set(names) == {"notes", "projects", repo, stray}
    assert sql(web, "SELECT count(*) FROM notes WHERE note = 'written in SQL'") == "0"
    assert sql(web, "SELECT description FROM projects WHERE id = 3") != "changed in SQL"
    assert git(web, repo, "rev-parse", "main").strip() == head
    assert git(web, repo, "rev-parse", "-q", "--verify", "refs/heads/sneaky", check=False).strip() == ""
    assert subprocess.run(["docker", "exec", web, "test", "-e", f"{REPOS}/{stray}"]).returncode != 0
    assert sh(web, *step_argv("repositories")) == fingerprint
    assert restore(web) == (0, 0, [])  # settled: the next restore finds nothing
    verify = cli("verify", "gitlab")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_sequences_and_the_saved_copy_survive_a_restore(web: str) -> None:
    """An insert that was rolled back still moves a sequence (and the table's counter): both are set back; the saved
    copy's objects are hard links, and a restore leaves them so (nothing is copied per byte)."""
    seq = sql(web, "SELECT last_value FROM labels_id_seq")
    sh(web, "gitlab-psql", "-X", "-q", "-c", "BEGIN", "-c",
       "INSERT INTO labels (project_id, title, created_at) VALUES (1, 'rolled back', 0)", "-c", "ROLLBACK")
    assert sql(web, "SELECT last_value FROM labels_id_seq") != seq
    assert restore(web)[:2] == (1, 0)
    assert sql(web, "SELECT last_value FROM labels_id_seq") == seq
    packs = sh(web, "find", REPOS, "-path", "*/objects/pack/*.pack", "-links", "1")
    assert packs == "", f"packs not shared with the saved state: {packs}"
