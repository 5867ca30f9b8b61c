"""The mini GitLab's git repositories: bare repositories on disk in upstream's hashed layout, read and written
with Debian's ``git`` (upstream: through Gitaly, as the ``git`` user, under the same root).

``/var/opt/gitlab/git-data/repositories/@hashed/<h[0:2]>/<h[2:4]>/<h>.git`` with ``h = sha256(project id)``, as
GitLab's hashed storage names them (``project_repositories.disk_path`` holds the part before ``.git``). Pages read
branches, trees, commits and contributors from the repository; the web UI and the API write it the way Gitaly
does: objects first, then a ref moved by compare-and-swap (``update-ref NEW OLD``), so a concurrent writer loses
instead of being overwritten. Loose objects and refs are written by git itself (a lock file renamed into place).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass

ROOT = os.environ.get("GITLAB_REPOSITORIES", "/var/opt/gitlab/git-data/repositories")
# Nothing from a user's or the system's git config but what is set here (safe.directory: the repositories belong
# to 'git', the app runs as root, as Gitaly's callers do not).
GIT_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_COUNT": "1",
           "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*", "LC_ALL": "C"}


class GitError(Exception):
    pass


def disk_path(project_id: int) -> str:
    h = hashlib.sha256(str(project_id).encode()).hexdigest()
    return f"@hashed/{h[:2]}/{h[2:4]}/{h}"


def repo_dir(path: str) -> str:
    return os.path.join(ROOT, path + ".git")


def git(repo: str, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None,
        ok: tuple[int, ...] = (0,)) -> str:
    done = subprocess.run(["git", f"--git-dir={repo}", *args], input=stdin, capture_output=True,
                          env={**GIT_ENV, **(env or {})})
    if done.returncode not in ok:
        raise GitError(done.stderr.decode(errors="replace").strip() or f"git {args[0]} failed")
    return done.stdout.decode(errors="replace")


@dataclass(frozen=True)
class Commit:
    sha: str
    title: str
    author_name: str
    author_email: str
    at: int


def exists(repo: str) -> bool:
    return os.path.isfile(os.path.join(repo, "HEAD"))


def default_branch(repo: str) -> str | None:
    out = git(repo, "symbolic-ref", "-q", "HEAD", ok=(0, 1)).strip()
    return out.removeprefix("refs/heads/") or None


def branches(repo: str) -> list[tuple[str, str]]:
    """(name, commit sha) of every branch, the default first, then by name."""
    if not exists(repo):
        return []
    rows = [line.split("\0") for line in git(repo, "for-each-ref", "--format=%(refname)%00%(objectname)",
                                              "refs/heads").splitlines() if line]
    refs = [(name.removeprefix("refs/heads/"), sha) for name, sha in rows]
    default = default_branch(repo)
    return sorted(refs, key=lambda r: (r[0] != default, r[0]))


def tree(repo: str, ref: str, path: str = "") -> list[tuple[str, str]] | None:
    """(kind 'tree'|'blob', name) of the entries at ``path`` on ``ref``; None when it is not a directory there."""
    spec = f"refs/heads/{ref}^{{tree}}" if not path else f"refs/heads/{ref}:{path}"
    try:
        if git(repo, "cat-file", "-t", spec).strip() != "tree":
            return None
        out = git(repo, "ls-tree", "-z", spec)
    except GitError:
        return None
    entries = []
    for item in out.split("\0"):
        if item:
            meta, name = item.split("\t", 1)
            entries.append((meta.split()[1], name))
    return sorted(entries, key=lambda e: (e[0] != "tree", e[1]))


def blob(repo: str, ref: str, path: str) -> bytes | None:
    try:
        if git(repo, "cat-file", "-t", f"refs/heads/{ref}:{path}").strip() != "blob":
            return None
        done = subprocess.run(["git", f"--git-dir={repo}", "cat-file", "blob", f"refs/heads/{ref}:{path}"],
                              capture_output=True, env=GIT_ENV, check=True)
        return done.stdout
    except (GitError, subprocess.CalledProcessError):
        return None


_FMT = "--format=%H%x00%s%x00%an%x00%ae%x00%at"


def log(repo: str, ref: str, limit: int | None = None) -> list[Commit]:
    args = ["log", _FMT, *([f"-{limit}"] if limit else []), f"refs/heads/{ref}", "--"]
    return [Commit(*parts[:4], int(parts[4])) for parts in
            (line.split("\0") for line in git(repo, *args).splitlines() if line)]


def commit_count(repo: str, ref: str) -> int:
    return int(git(repo, "rev-list", "--count", f"refs/heads/{ref}", "--").strip() or 0)


def valid_branch_name(name: str) -> bool:
    return bool(name) and subprocess.run(["git", "check-ref-format", "--branch", name], capture_output=True,
                                         env=GIT_ENV).returncode == 0 and not name.startswith("-")


def resolve(repo: str, ref: str) -> str | None:
    out = git(repo, "rev-parse", "-q", "--verify", f"{ref}^{{commit}}", ok=(0, 1)).strip()
    return out or None


def create_branch(repo: str, name: str, ref: str) -> str:
    """``refs/heads/NAME`` at ``ref`` (a branch or a commit); refused when it exists. Returns the commit."""
    if not valid_branch_name(name):
        raise GitError(f"Branch name is invalid: {name}")
    sha = resolve(repo, f"refs/heads/{ref}") or resolve(repo, ref)
    if sha is None:
        raise GitError(f"Invalid reference name: {ref}")
    # an empty old value: the ref must not exist yet (atomic, like Gitaly's UserCreateBranch)
    git(repo, "update-ref", "-m", "branch: Created from web", f"refs/heads/{name}", sha, "")
    return sha


def commit_file(repo: str, branch: str, path: str, content: bytes, message: str, author: tuple[str, str], at: int,
                start_branch: str | None = None) -> str:
    """Write ``path`` on ``branch`` (created from ``start_branch`` when new) in one new commit; returns its sha."""
    path = path.strip("/")
    if not path or any(part in ("", ".", "..", ".git") for part in path.split("/")):
        raise GitError(f"Invalid file path: {path!r}")
    ref = f"refs/heads/{branch}"
    parent = old = resolve(repo, ref)
    if parent is None:
        if not valid_branch_name(branch):
            raise GitError(f"Branch name is invalid: {branch}")
        parent = resolve(repo, f"refs/heads/{start_branch}") if start_branch else None
        if start_branch and parent is None:
            raise GitError(f"You can only create or edit files when you are on a branch ({start_branch})")
    blob_sha = git(repo, "hash-object", "-w", "--stdin", stdin=content).strip()
    with tempfile.TemporaryDirectory(prefix="gitlab-index-") as tmp:  # an index outside the repository
        idx = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
        if parent:
            git(repo, "read-tree", f"{parent}^{{tree}}", env=idx)
        git(repo, "update-index", "--add", "--cacheinfo", f"100644,{blob_sha},{path}", env=idx)
        tree_sha = git(repo, "write-tree", env=idx).strip()
    name, email = author
    who = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": f"{at} +0000",
           "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email, "GIT_COMMITTER_DATE": f"{at} +0000"}
    sha = git(repo, "commit-tree", tree_sha, *(["-p", parent] if parent else []), "-m", message, env=who).strip()
    git(repo, "update-ref", "-m", f"commit: {message[:60]}", ref, sha, old or "")  # compare-and-swap
    return sha


# --- build time: the seeded repositories ---------------------------------------------------------------------

def _data(text: str) -> bytes:
    raw = text.encode()
    return b"data %d\n" % len(raw) + raw + b"\n"


def create(path: str, default: str, files: tuple[str, ...], branches_: dict[str, list[tuple[str, str, int, str]]],
           owner: tuple[int, int] | None = None) -> str:
    """A bare repository at ``path`` (under ROOT, without .git) whose branches hold the commits given
    ((author name, email, unix time, title), oldest first); every branch has its own history, its first commit
    adds ``files`` (a name ending in '/' is a directory: it gets a README.md) and the others edit README.md.
    Deterministic: the same input gives the same commits. Written with one ``git fast-import``."""
    repo = repo_dir(path)
    os.makedirs(os.path.dirname(repo), exist_ok=True)
    subprocess.run(["git", "init", "-q", "--bare", f"--initial-branch={default}", repo], check=True, env=GIT_ENV)
    for sample in os.listdir(os.path.join(repo, "hooks")):  # as Gitaly's repositories: no sample hooks
        os.remove(os.path.join(repo, "hooks", sample))
    stream, mark = [], 0
    for branch, commits in branches_.items():
        for k, (name, email, at, title) in enumerate(commits):
            mark += 1
            stream.append(f"commit refs/heads/{branch}\nmark :{mark}\n"
                          f"author {name} <{email}> {at} +0000\ncommitter {name} <{email}> {at} +0000\n".encode())
            stream.append(_data(title))
            if k == 0:
                for f in files:
                    target = f + "README.md" if f.endswith("/") else f
                    if target == "README.md":  # written below, by every commit
                        continue
                    stream.append(b"M 100644 inline " + target.encode() + b"\n" + _data(f"{target}\n"))
            body = f"# {branch}\n\n{title} ({k + 1} of {len(commits)}, by {name})\n"
            stream.append(b"M 100644 inline README.md\n" + _data(body))
            stream.append(b"\n")
    subprocess.run(["git", f"--git-dir={repo}", "fast-import", "--quiet"], input=b"".join(stream), check=True,
                   env=GIT_ENV)
    # packed, as Gitaly's housekeeping leaves repositories: one pack, the refs in packed-refs
    subprocess.run(["git", f"--git-dir={repo}", "repack", "-a", "-d", "-q"], check=True, env=GIT_ENV)
    subprocess.run(["git", f"--git-dir={repo}", "pack-refs", "--all"], check=True, env=GIT_ENV)
    if owner:
        for top, dirs, names in os.walk(repo):
            for n in (*dirs, *names):
                os.chown(os.path.join(top, n), *owner)
        os.chown(repo, *owner)
    return repo
