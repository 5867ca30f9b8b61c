"""Every task's start page exists on the mini flavor (issue 12).

A harness's CI on the mini flavor only means something if each task opens on a real page. This
walks the real task files, WebArena's 812 tasks (818 start URLs) and VisualWebArena's 910 (980),
taken from the PyPI wheels ``scripts/task_pages.py`` pins, against the session's mini instance
brought up with ``envctl up --all`` (``mini_all`` in tests/conftest.py; this test only reads). Each
start URL is fetched with the cookies of the task's own ``storage_state`` (as the harness would),
and must answer 200 after redirects, not on a login page, and show the item it names: the product
(from its URL key), the forum, the project, the article.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import requests

from conftest import MiniAll

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from task_pages import IMAGE_OF, start_pages, task_files  # noqa: E402

pytestmark = [pytest.mark.docker, pytest.mark.mini, pytest.mark.slow, pytest.mark.timeout(1500)]

LOGIN_PATHS = re.compile(r"/(login|users/sign_in|customer/account/login|admin/?$)|page=login")


def envctl(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("ENVCTL_CATALOG", "ENVCTL_INSTANCE")}
    return subprocess.run([sys.executable, "-m", "envctl", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


@pytest.fixture(scope="module")
def instance(mini_all: MiniAll) -> tuple[dict, Path]:
    """The session's mini ``up --all`` instance (tests/conftest.py): its URLs per benchmark and login files."""
    urls = {}
    for bench in ("webarena", "visualwebarena"):
        p = envctl("env", "-i", mini_all.instance, "--json", "--benchmark", bench)
        assert p.returncode == 0, p.stderr
        urls[bench] = json.loads(p.stdout)
    return urls, mini_all.auth


def _words(text: str) -> str:
    return " ".join(re.sub(r"[^0-9a-z]+", " ", unquote(text).lower()).split())


def _named(site: str, path: str) -> str | None:
    """The words the page must show for the item ``path`` names, or None (a listing, a search)."""
    p = urlparse(path).path
    if site == "shopping" and p.endswith(".html"):
        return " ".join(_words(p[1:-5]).split()[:3])
    if site == "reddit" and p.startswith("/f/"):
        return _words(p.split("/")[2])
    if site == "gitlab" and len(p.strip("/").split("/")) >= 2:
        return _words(p.strip("/").split("/")[1])
    if site == "wikipedia" and "/A/" in p and not p.split("/A/", 1)[1].startswith("User:"):  # User: is the portal
        return _words(p.split("/A/", 1)[1])
    return None


def _session(auth: Path, storage_state: str | None) -> requests.Session:
    s = requests.Session()
    if storage_state:
        state = auth / Path(storage_state).name
        assert state.exists(), f"the task's login state {storage_state} has no counterpart in {auth}"
        for c in json.loads(state.read_text())["cookies"]:
            s.cookies.set(c["name"], c["value"], domain=c["domain"], path=c["path"])
    return s


def test_every_task_start_page_answers_on_the_mini_flavor(instance: tuple[dict, Path]) -> None:
    urls, auth = instance
    tasks = task_files()
    assert len(tasks["webarena"]) == 812 and len(tasks["visualwebarena"]) == 910
    rows = start_pages(tasks)
    counts = {b: sum(1 for r in rows if r[0] == b) for b in tasks}
    assert counts == {"webarena": 818, "visualwebarena": 980}, counts
    checked: dict[tuple[str, str | None], str] = {}
    failures = []
    for bench, ph, path, task in rows:
        var = ph.strip("_")
        base = urls[bench].get(var) or urls["visualwebarena"].get(var) or urls["webarena"][var]
        url = base + path
        key = (url, task.get("storage_state"))
        if key not in checked:
            site = ph.strip("_").lower()
            why = ""
            try:
                r = _session(auth, task.get("storage_state")).get(url, timeout=60)
                final = urlparse(r.url)
                named = _named(site, path)
                if r.status_code != 200:
                    why = f"HTTP {r.status_code}"
                elif LOGIN_PATHS.search(final.path + ("?" + final.query if final.query else "")) and \
                        not LOGIN_PATHS.search(urlparse(url).path):
                    why = f"landed on a login page {r.url}"
                elif named and r.headers.get("content-type", "").startswith("text/html") and named not in _words(r.text):
                    why = f"does not show {named!r}"
            except requests.RequestException as exc:
                why = type(exc).__name__
            checked[key] = why
        if checked[key]:
            failures.append(f"{bench}/{task['task_id']} ({IMAGE_OF[ph]}): {ph}{path}: {checked[key]}")
    print(f"\n{len(rows)} start URLs ({len(checked)} distinct with their login state) checked; {len(failures)} failed")
    distinct = sorted({f.split(" ", 1)[1] for f in failures})
    assert not failures, (f"{len(failures)} task start pages ({len(distinct)} distinct) fail on the mini flavor:\n"
                          + "\n".join(distinct[:80]))
