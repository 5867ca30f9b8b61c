"""Schema and deterministic seed data of the mini GitLab (PostgreSQL ``gitlabhq_production``).

Table names follow GitLab's where the mini site has an equivalent (``users``, ``namespaces``,
``projects``, ``members``, ``issues``, ``merge_requests``, ``notes``, ``labels``,
``personal_access_tokens``), simplified to what the pages need. Every id and timestamp is fixed, so
two builds reach the same state.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import time

from miniweb import pgembed
from miniweb.core import SEED_EPOCH, Database

CLUSTER = pgembed.Cluster(
    datadir=os.environ.get("MINIWEB_PGDATA", "/var/opt/gitlab/postgresql/data"),
    db="gitlabhq_production", user="gitlab", password="gitlab",
)
# Seeded with explicit ids: each sequence is moved past them.
TABLES = ("users", "namespaces", "projects", "members", "issues", "merge_requests", "labels", "notes",
          "personal_access_tokens")
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
            cur.execute("INSERT INTO members (id, source_id, source_type, user_id, access_level) "
                        "VALUES (%s,%s,'Project',%s,%s)", (i, proj, uid[user], level))
        iids: dict[int, int] = {}
        for i, (proj, author, title, desc, state, labels) in enumerate(ISSUES, 1):
            iids[proj] = iids.get(proj, 0) + 1
            cur.execute("INSERT INTO issues (id, project_id, iid, title, description, author_id, state, labels, "
                        "created_at) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                        (i, proj, iids[proj], title, desc, uid[author], state, labels, SEED_EPOCH - 7200 * (30 - i)))
        labels_seen = sorted({(proj, lb) for proj, _, _, _, _, labels in ISSUES for lb in labels.split(",") if lb})
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
        for table in TABLES:
            cur.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")


def iso(ts: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(ts))
