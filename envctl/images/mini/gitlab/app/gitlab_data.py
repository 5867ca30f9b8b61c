"""Schema and deterministic seed data of the mini GitLab (PostgreSQL ``gitlabhq_production``).

Table names follow GitLab's where the mini site has an equivalent (``users``, ``namespaces``,
``projects``, ``members``, ``issues``, ``merge_requests``, ``notes``, ``labels``,
``personal_access_tokens``), simplified to what the pages need. Every id and timestamp is fixed, so
two builds reach the same state.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import time

from miniweb import pgembed
from miniweb.core import SEED_EPOCH, Database
from sites import gitlab_repo

CLUSTER = pgembed.Cluster(
    datadir=os.environ.get("MINIWEB_PGDATA", "/var/opt/gitlab/postgresql/data"),
    db="gitlabhq_production", user="gitlab", password="gitlab",
)
# Seeded with explicit ids: each sequence is moved past them.
TABLES = ("users", "namespaces", "projects", "members", "issues", "merge_requests", "labels", "notes",
          "personal_access_tokens", "project_repositories")
# The WebArena start pages on GitLab (scripts/task_pages.py writes it; the Dockerfile copies it next to
# this module). Every project a path names is seeded (see ``task_page_seed``).
TASK_PAGES = os.environ.get("GITLAB_TASK_PAGES", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                               "task_pages.json"))
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
CREATE TABLE members (id SERIAL PRIMARY KEY, source_id INT NOT NULL, source_type TEXT NOT NULL DEFAULT 'Project',
  user_id INT NOT NULL REFERENCES users(id), access_level INT NOT NULL, UNIQUE (source_type, source_id, user_id));
CREATE TABLE issues (id SERIAL PRIMARY KEY, project_id INT NOT NULL REFERENCES projects(id), iid INT NOT NULL,
  title TEXT NOT NULL, description TEXT NOT NULL DEFAULT '', author_id INT NOT NULL REFERENCES users(id),
  state TEXT NOT NULL DEFAULT 'opened', labels TEXT NOT NULL DEFAULT '', created_at BIGINT NOT NULL,
  UNIQUE (project_id, iid));
CREATE TABLE merge_requests (id SERIAL PRIMARY KEY, project_id INT NOT NULL REFERENCES projects(id), iid INT NOT NULL,
  title TEXT NOT NULL, description TEXT NOT NULL DEFAULT '', author_id INT NOT NULL REFERENCES users(id),
  assignee_id INT REFERENCES users(id), state TEXT NOT NULL DEFAULT 'opened', source_branch TEXT NOT NULL,
  target_branch TEXT NOT NULL, created_at BIGINT NOT NULL, UNIQUE (project_id, iid));
CREATE TABLE labels (id SERIAL PRIMARY KEY, project_id INT NOT NULL REFERENCES projects(id), title TEXT NOT NULL,
  color TEXT NOT NULL DEFAULT '#6699cc', description TEXT NOT NULL DEFAULT '', created_at BIGINT NOT NULL,
  UNIQUE (project_id, title));
CREATE TABLE notes (id SERIAL PRIMARY KEY, project_id INT NOT NULL REFERENCES projects(id), noteable_type TEXT NOT NULL,
  noteable_id INT NOT NULL, author_id INT NOT NULL REFERENCES users(id), note TEXT NOT NULL, system BOOLEAN NOT NULL
  DEFAULT false, created_at BIGINT NOT NULL);
-- As upstream: which repository on disk holds a project's git data (hashed storage: '@hashed/ab/cd/<sha256 of
-- the id>'; the repository itself is '<disk_path>.git' under /var/opt/gitlab/git-data/repositories).
CREATE TABLE project_repositories (id SERIAL PRIMARY KEY, shard_id INT NOT NULL DEFAULT 1,
  disk_path TEXT UNIQUE NOT NULL, project_id INT UNIQUE NOT NULL REFERENCES projects(id));
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
NOTES = [  # (issue no., author, note)
    (1, "yjlou", "A 7:1 variant would also help people with low vision."),
    (2, "byteblaze", "Confirmed, I will bump it to #6a737d."),
    (6, "byteblaze", "Thanks, a pull request is welcome."),
]
LABEL_COLORS = {"bug": "#d9534f", "enhancement": "#5cb85c", "feature": "#428bca", "content": "#f0ad4e",
                "question": "#5843ad"}
MRS = [  # (project no., author, assignee, title, state, source branch)
    (1, "yjlou", "byteblaze", "Fix comment colour contrast", "opened", "fix-contrast"),
    (2, "kilian", None, "Update footer links", "merged", "footer-links"),
    (6, "kilian", "byteblaze", "Refresh checklist resources", "opened", "refresh-checklist"),
]
# The hand-written projects' repositories: project no. -> (files of the tree, {branch: [(author, commits)]});
# the first branch is the default, the merge requests' source branches are there too.
HAND_REPOS = {
    1: (("themes/", "LICENSE", "README.md", "package.json"),
        {"main": [("Byte Blaze", "byteblaze@example.com", 8), ("Yi-Jen Lou", "yjlou@example.com", 2)],
         "fix-contrast": [("Yi-Jen Lou", "yjlou@example.com", 1)]}),
    2: (("src/", "README.md", "package.json"),
        {"main": [("Byte Blaze", "byteblaze@example.com", 12), ("Yi-Jen Lou", "yjlou@example.com", 3)],
         "footer-links": [("Kilian Valkhof", "kilian@example.com", 1)]}),
    3: (("patterns/", "README.md", "index.html"), {"main": [("Byte Blaze", "byteblaze@example.com", 6)]}),
    4: ((".bashrc", ".gitconfig", "README.md", "install.sh"), {"main": [("Byte Blaze", "byteblaze@example.com", 5)]}),
    5: (("README.md", "timeit.py"), {"main": [("Byte Blaze", "byteblaze@example.com", 3)]}),
    6: (("src/", "CONTRIBUTING.md", "README.md", "package.json"),
        {"main": [("Kilian Valkhof", "kilian@example.com", 20), ("Byte Blaze", "byteblaze@example.com", 7)],
         "refresh-checklist": [("Kilian Valkhof", "kilian@example.com", 2)]}),
}

# --- what the WebArena start pages name (task_pages.json) ------------------------------------------
# Namespaces the hand-written seed lacks: path -> (kind, display name, location, public email). As in
# WebArena's GitLab, where the importer made a user per GitHub owner: tasks add "primer" as a member
# and reviewer ("Primer"), follow "Vinta Chen", ask amwhalen's account name and location and dehenne's
# followers. Nothing tells CellularPrivacy's kind: a group.
TASK_NAMESPACES = {
    "CellularPrivacy": ("group", "CellularPrivacy", "", ""),
    "amwhalen": ("user", "Andrew M. Whalen", "Massachusetts", "github@amwhalen.com"),
    "dehenne": ("user", "dehenne", "", ""),
    "primer": ("user", "Primer", "", ""),
    "vinta": ("user", "Vinta Chen", "", ""),
}
# "namespace/path" -> (name, description, members {user: level}, files of the tree,
#                      {branch: [(author name, author email, commits)]}; the first branch is the default).
# The top contributors are the ones the tasks' reference answers name (webarena 308, 784-788).
TASK_PROJECTS = {
    "CellularPrivacy/Android-IMSI-Catcher-Detector": (
        "Android-IMSI-Catcher-Detector", "AIMSICD - Fight IMSI-Catcher, StingRay and silent SMS!", {},
        ("AIMSICD/", "gradle/", ".gitignore", "CONTRIBUTING.md", "LICENSE", "README.md", "build.gradle"),
        {"main": [("SecUpwN", "secupwn@users.noreply.github.com", 64), ("He3556", "he3556@users.noreply.github.com", 37),
                  ("E3V3A", "e3v3a@users.noreply.github.com", 29)],
         "gh-page": [("SecUpwN", "secupwn@users.noreply.github.com", 12), ("E3V3A", "e3v3a@users.noreply.github.com", 4)]}),
    "amwhalen/archive-my-tweets": (
        "archive-my-tweets", "Archive your tweets to easily browse and search them - all on your own website.",
        {"amwhalen": 50}, ("amt/", "css/", "img/", "js/", ".gitignore", "README.md", "config.sample.php", "index.php"),
        {"master": [("Andrew M. Whalen", "github@amwhalen.com", 45), ("Kevin Marsh", "kevin.marsh@example.com", 3)],
         "php52": [("Andrew M. Whalen", "github@amwhalen.com", 31), ("Kevin Marsh", "kevin.marsh@example.com", 2)],
         "github/fork/chtitux/addRssFeed": [("Andrew M. Whalen", "github@amwhalen.com", 24),
                                            ("chtitux", "chtitux@users.noreply.github.com", 2)]}),
    "byteblaze/gimmiethat.space": (
        "gimmiethat.space", "A personal site, built with Eleventy.", {"byteblaze": 50},
        ("css/", "index.html", "README.md"), {"main": [("Byte Blaze", "byteblaze@example.com", 14)]}),
    "byteblaze/solarized-prism-theme": (
        "solarized-prism-theme", "A Solarized theme for Prism syntax highlighting.", {"byteblaze": 50},
        ("LICENSE", "README.md", "prism-solarized-light.css"), {"main": [("Byte Blaze", "byteblaze@example.com", 9)]}),
    "dehenne/awesome-visibility": (
        "awesome-visibility", "A curated list of awesome visibility and SEO tools and resources.", {"dehenne": 50},
        ("CONTRIBUTING.md", "LICENSE", "README.md"),
        {"master": [("dehenne", "dehenne@users.noreply.github.com", 58), ("Anna Weber", "anna.weber@example.com", 9),
                    ("Tom Fischer", "tom.fischer@example.com", 4)]}),
    "primer/design": (
        "design", "Primer Design Guide", {"primer": 50, "byteblaze": 40},
        ("content/", "src/", ".gitignore", "README.md", "package.json"),
        {"main": [("Shawn Allen", "shawnbot@users.noreply.github.com", 193), ("Cole Bemis", "colebemis@example.com", 88),
                  ("Caroline Stewart", "caroline.stewart@example.com", 41)],
         "bump-doctocat": [("Cole Bemis", "colebemis@example.com", 2)],
         "dialog": [("Caroline Stewart", "caroline.stewart@example.com", 5)],
         "dialog-component": [("Caroline Stewart", "caroline.stewart@example.com", 7)]}),
    "root/metaseq": (
        "metaseq", "Repo for external large-scale work", {"root": 50},
        ("metaseq/", "projects/", "README.md", "setup.py"),
        {"main": [("Stephen Roller", "roller@example.com", 120), ("Susan Zhang", "susan.zhang@example.com", 75)]}),
    "vinta/awesome-python": (
        "awesome-python", "A curated list of awesome Python frameworks, libraries, software and resources",
        {"vinta": 50}, ("CONTRIBUTING.md", "LICENSE", "README.md", "sort.py"),
        {"main": [("Vinta Chen", "vinta@users.noreply.github.com", 412), ("Ryan Kim", "ryan.kim@example.com", 37),
                  ("Maria Lopez", "maria.lopez@example.com", 21)]}),
}
COMMIT_TITLES = ("Update README.md", "Fix typo", "Add new entries", "Clean up formatting", "Fix broken links",
                 "Bump dependencies", "Refactor layout")
# Issues the start pages' tasks list (webarena 46, 340-343): (project, author, title, description, state, labels).
TASK_ISSUES = [
    ("primer/design", "primer", "Flash alerts need guidance on dismissal", "When should a flash alert be dismissible?",
     "opened", "documentation"),
    ("primer/design", "byteblaze", "Broken image on the octovisuals page", "The hero image 404s.", "opened", "bug"),
    ("root/metaseq", "root", "Feature request: support for bf16 inference", "Would make serving cheaper.",
     "opened", "enhancement"),
    ("root/metaseq", "root", "How much memory does OPT-175B need?", "Question about OPT model requirements.",
     "opened", "question"),
    ("root/metaseq", "root", "Training diverges after resuming", "Loss spikes after a restart.", "opened", ""),
]


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


def load_task_pages(path: str = TASK_PAGES) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def page_target(path: str) -> tuple[str, str, str | None] | None:
    """``/ns/project[/-/tree|graphs/REF]`` -> (namespace, project, branch or None); None for other pages."""
    head, _, rest = path.strip("/").partition("/-/")
    parts = head.split("/")
    if len(parts) != 2 or not all(parts):
        return None
    kind, _, ref = rest.partition("/")
    return parts[0], parts[1], ref if kind in ("tree", "graphs") and ref else None


def task_page_seed(pages: list[dict]) -> tuple[list, list, list, list]:
    """What the start pages name beyond the hand-written seed, in the files' order (so ids are fixed):
    (namespaces [(path, kind, name, location, email)], projects [(ns, path, name, desc, members, tree,
    branches)], members [(project key, user, level)], issues [(project key, ...)]). The trees and branches are
    written into each project's repository by ``seed``."""
    known_ns = {u[0] for u in USERS} | {g[0] for g in GROUPS}
    known_proj = {f"{ns}/{path}" for ns, path, *_ in PROJECTS}
    namespaces: list = []
    projects: dict[str, tuple] = {}
    for page in pages:
        target = page_target(page["path"])
        if target is None:
            continue
        ns, path, ref = target
        key = f"{ns}/{path}"
        if ns not in known_ns:
            kind, name, location, email = TASK_NAMESPACES.get(ns, ("group", ns, "", ""))
            namespaces.append((ns, kind, name, location, email))
            known_ns.add(ns)
        if key in known_proj:
            continue
        if key not in projects:
            name, desc, members, tree, branches = TASK_PROJECTS.get(
                key, (path, f"{path}, as a WebArena task names it.", {}, ("README.md",),
                      {"main": [(ns, f"{ns}@example.com", 1)]}))
            projects[key] = (ns, path, name, desc, dict(members), tree, {b: list(c) for b, c in branches.items()})
        if ref and ref not in projects[key][6]:  # a page names a branch the data lacks: one commit on it
            projects[key][6][ref] = [(ns, f"{ns}@example.com", 1)]
    members = [(key, user, level) for key, p in projects.items() for user, level in p[4].items()]
    issues = [row for row in TASK_ISSUES if row[0] in projects]
    return namespaces, list(projects.values()), members, issues


def seed(db: Database, pages: list[dict] | None = None) -> None:
    pages = load_task_pages() if pages is None else pages
    extra_ns, extra_projects, extra_members, extra_issues = task_page_seed(pages)
    with db.cursor() as cur:
        cur.execute(SCHEMA)
        uid, nsid = {}, {}
        users = [(u, n, pw, bio, f"{u}@example.com", "") for u, n, pw, bio in USERS]
        users += [(path, name, f"{path}pass1", "", email or f"{path}@example.com", location)
                  for path, kind, name, location, email in extra_ns if kind == "user"]
        for i, (username, name, pw, bio, email, location) in enumerate(users, 1):
            cur.execute("INSERT INTO users (id, username, name, email, encrypted_password, bio, location, created_at) "
                        "VALUES (%s,%s,%s,%s,%s,%s,%s,%s)",
                        (i, username, name, email, hash_password(username, pw), bio, location,
                         SEED_EPOCH - 86400 * (90 - i)))
            uid[username] = i
        # Namespace ids: the users' of the hand-written seed (same as their user ids), its groups, then the
        # task pages' namespaces in order.
        namespaces = [(u[0], u[1], "user") for u in USERS] + [(path, name, "group") for path, name in GROUPS]
        namespaces += [(path, name, kind) for path, kind, name, _, _ in extra_ns]
        for j, (path, name, kind) in enumerate(namespaces, 1):
            cur.execute("INSERT INTO namespaces (id, path, name, kind, owner_id) VALUES (%s,%s,%s,%s,%s)",
                        (j, path, name, kind, uid[path] if kind == "user" else None))
            nsid[path] = j
        projects = [(ns, path, name, desc, vis, stars) for ns, path, name, desc, vis, stars in PROJECTS]
        projects += [(ns, path, name, desc, "public", 0) for ns, path, name, desc, *_ in extra_projects]
        pid = {}
        for i, (ns, path, name, desc, vis, stars) in enumerate(projects, 1):
            cur.execute("INSERT INTO projects (id, namespace_id, path, name, description, visibility, star_count, "
                        "created_at, last_activity_at) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                        (i, nsid[ns], path, name, desc, vis, stars, SEED_EPOCH - 86400 * (80 - i), SEED_EPOCH - 3600 * i))
            pid[f"{ns}/{path}"] = i
        members = list(MEMBERS) + [(pid[key], user, level) for key, user, level in extra_members]
        for i, (proj, user, level) in enumerate(members, 1):
            cur.execute("INSERT INTO members (id, source_id, source_type, user_id, access_level) "
                        "VALUES (%s,%s,'Project',%s,%s)", (i, proj, uid[user], level))
        issues = list(ISSUES) + [(pid[key], *rest) for key, *rest in extra_issues]
        iids: dict[int, int] = {}
        for i, (proj, author, title, desc, state, labels) in enumerate(issues, 1):
            iids[proj] = iids.get(proj, 0) + 1
            cur.execute("INSERT INTO issues (id, project_id, iid, title, description, author_id, state, labels, "
                        "created_at) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                        (i, proj, iids[proj], title, desc, uid[author], state, labels, SEED_EPOCH - 7200 * (30 - i)))
        labels_seen = sorted({(proj, lb) for proj, _, _, _, _, labels in issues for lb in labels.split(",") if lb})
        for i, (proj, title) in enumerate(labels_seen, 1):
            cur.execute("INSERT INTO labels (id, project_id, title, color, created_at) VALUES (%s,%s,%s,%s,%s)",
                        (i, proj, title, LABEL_COLORS.get(title, "#6699cc"), SEED_EPOCH - 86400 * 60))
        for i, (issue, author, note) in enumerate(NOTES, 1):
            cur.execute("INSERT INTO notes (id, project_id, noteable_type, noteable_id, author_id, note, created_at) "
                        "VALUES (%s,%s,'Issue',%s,%s,%s,%s)",
                        (i, ISSUES[issue - 1][0], issue, uid[author], note, SEED_EPOCH - 3600 * (20 - i)))
        mr_iids: dict[int, int] = {}
        for i, (proj, author, assignee, title, state, branch) in enumerate(MRS, 1):
            mr_iids[proj] = mr_iids.get(proj, 0) + 1
            cur.execute("INSERT INTO merge_requests (id, project_id, iid, title, author_id, assignee_id, state, "
                        "source_branch, target_branch, created_at) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,'main',%s)",
                        (i, proj, mr_iids[proj], title, uid[author], uid.get(assignee or ""), state, branch,
                         SEED_EPOCH - 5400 * (20 - i)))
        cur.execute("INSERT INTO personal_access_tokens (id, user_id, name, token_digest, scopes, created_at) "
                    "VALUES (1, %s, 'envctl', %s, 'api', %s)", (uid["byteblaze"], token_digest(SEED_TOKEN), SEED_EPOCH))
        repos = [(no, files, branches) for no, (files, branches) in HAND_REPOS.items()]
        repos += [(pid[f"{ns}/{path}"], tree, branches) for ns, path, *_, tree, branches in extra_projects]
        for i, (project_id, files, branches) in enumerate(sorted(repos), 1):
            path = gitlab_repo.disk_path(project_id)
            cur.execute("INSERT INTO project_repositories (id, disk_path, project_id) VALUES (%s,%s,%s)",
                        (i, path, project_id))
            seed_repository(path, files, branches)
        for table in TABLES:
            cur.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")


def history(contributors: list[tuple[str, str, int]]) -> list[tuple[str, str, int, str]]:
    """A branch's commits, oldest first: round-robin over the contributors (so the history interleaves them),
    one hour apart, the newest three days before the seed's "now"."""
    left = {email: n for _, email, n in contributors}
    queue = []
    while any(left.values()):
        for name, email, _ in contributors:
            if left[email]:
                left[email] -= 1
                queue.append((name, email))
    return [(name, email, SEED_EPOCH - 86400 * 3 - 3600 * (len(queue) - k), COMMIT_TITLES[k % len(COMMIT_TITLES)])
            for k, (name, email) in enumerate(queue)]


def seed_repository(path: str, files: tuple[str, ...], branches: dict[str, list[tuple[str, str, int]]]) -> None:
    """The project's bare repository under the repositories root, owned by 'git' as upstream's."""
    try:
        import pwd

        git_user = pwd.getpwnam("git")
        owner: tuple[int, int] | None = (git_user.pw_uid, git_user.pw_gid)
    except KeyError:
        owner = None
    default = next(iter(branches))
    gitlab_repo.create(path, default, files, {b: history(c) for b, c in branches.items()}, owner)


def iso(ts: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(ts))
