"""The mini reddit (Postmill) image: logins as WebArena's auto_login and BrowserGym's ui_login do them,
the expiry probe, writes that land in PostgreSQL, server-side sessions and a clean SIGTERM stop."""
from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote, urlparse

import pytest
import requests

from conftest import Containers, wait_http

from envctl.images.build import mini_tag

pytestmark = [pytest.mark.docker, pytest.mark.mini]

PORT, SECOND_PORT = 18010, 18011
BASE = f"http://127.0.0.1:{PORT}"
USER, PASSWORD = "MarvelsGrantMan136", "test1234"
PROBE = f"/user/{USER}/account"  # WebArena's expiry probe; keyword "Delete"
# The start pages of the WebArena/VWA tasks that open on this site (scripts/task_pages.py); the image's
# seed adds every forum and submission they name to its own 12 submissions.
TASK_PAGES = json.loads((Path(__file__).resolve().parents[1] / "envctl/images/mini/postmill/files/task_pages.json")
                        .read_text())
SEED_SUBMISSIONS = 12


def task_submission_ids() -> set[int]:
    ids = set()
    for e in TASK_PAGES:
        parts = urlparse(e["path"]).path.split("/")
        if len(parts) >= 4 and parts[1] == "f" and parts[3].isdigit():
            ids.add(int(parts[3]))
    return ids


SEEDED = (SEED_SUBMISSIONS + len(task_submission_ids()), max(task_submission_ids()))  # submissions: (rows, max id)


def fingerprint(c: Containers, name: str) -> dict[str, tuple[int, int, str]]:
    """The catalog's own fingerprint command (the full flavor's), parsed: table -> (rows, max id, md5)."""
    from envctl.catalog import load_catalog

    (query,) = load_catalog().site("reddit").fingerprint_queries("mini")
    out = c.exec(name, *query.run).stdout
    rows = [line.split("|") for line in out.strip().splitlines()]
    assert rows and all(len(r) == 4 for r in rows), out
    return {t: (int(n), int(m), s) for t, n, m, s in rows}


def start(c: Containers, image: str, port: int) -> tuple[str, float]:
    t0 = time.monotonic()
    name = c.run(image, ports={80: port})
    wait_http(f"http://127.0.0.1:{port}/forums", timeout=60, ok=lambda r: r.status_code == 200,
              logs=lambda: c.logs(name))
    return name, time.monotonic() - t0


@pytest.fixture(scope="module")
def forum(mini_image, module_containers: Containers) -> Iterator[str]:
    image = mini_image("postmill")
    name, took = start(module_containers, image, PORT)
    print(f"\npostmill boot-to-ready: {took:.2f}s")
    yield name


def http_login(base: str = BASE) -> requests.Session:
    s = requests.Session()
    r = s.post(f"{base}/login_check", data={"_username": USER, "_password": PASSWORD}, allow_redirects=False)
    assert r.status_code == 302 and r.headers["Location"] == "/", r.text[:300]
    return s


def test_image_labels_and_seed(forum: str, module_containers: Containers) -> None:
    labels = subprocess.run(["docker", "inspect", "-f", "{{json .Config.Labels}}", mini_tag("postmill")],
                            capture_output=True, text=True, check=True).stdout
    for want in ('"org.envctl.flavor":"mini"', '"org.envctl.site":"reddit"', '"org.envctl.data-version":"1"'):
        assert want in labels
    fp = fingerprint(module_containers, forum)
    assert set(fp) == {"users", "forums", "submissions", "comments", "submission_votes", "comment_votes"}
    assert fp["users"][:2] == (5, 5) and fp["submissions"][:2] == SEEDED
    forums = requests.get(f"{BASE}/forums", timeout=10).text
    for f in ("books", "gaming", "news"):
        assert f'href="/f/{f}"' in forums
    assert "A Christmas Carol" in requests.get(f"{BASE}/f/books", timeout=10).text
    assert requests.get(f"{BASE}/forums/all", timeout=10).status_code == 200


@pytest.mark.browser
def test_auto_login_style_and_expiry_probe(forum: str, browser) -> None:
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        page.goto(f"{BASE}/login")
        page.get_by_label("Username").fill(USER)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(f"{BASE}/")
        # auto_login's is_expired(): keyword "Delete" must be in the probe page's content.
        page.goto(f"{BASE}{PROBE}")
        assert page.url == f"{BASE}{PROBE}"
        assert "Delete" in page.content()
    finally:
        ctx.close()


@pytest.mark.browser
def test_browsergym_ui_login_and_sign_out(forum: str, browser) -> None:
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        page.goto(BASE)
        page.get_by_role("link", name="Log in").click()
        page.get_by_label("Username").fill(USER)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.get_by_role("link", name="Log out").wait_for()
        assert page.locator("#login-username").count() == 0
        page.get_by_role("link", name="Log out").click()
        page.get_by_role("link", name="Log in").wait_for()
        page.goto(f"{BASE}{PROBE}")
        assert page.url == f"{BASE}/login"  # a signed-out session is dead server-side
    finally:
        ctx.close()


@pytest.mark.browser
def test_wrong_password_shows_site_error(forum: str, browser) -> None:
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        page.goto(f"{BASE}/login")
        page.locator("#login-username").fill(USER)
        page.locator("#login-password").fill("wrong-password")
        page.get_by_role("button", name="Log in").click()
        page.get_by_text("Invalid credentials.").wait_for()
        assert page.url == f"{BASE}/login"
        assert "Traceback" not in page.content()
        page.goto(f"{BASE}{PROBE}")
        assert page.url == f"{BASE}/login"
    finally:
        ctx.close()


def _words(text: str) -> str:
    return " ".join(re.sub(r"[^0-9a-z]+", " ", unquote(text).lower()).split())


def test_every_task_start_page_answers(forum: str) -> None:
    """Each start page of a WebArena/VWA task on this site answers 200 for the logged-in benchmark user, is no
    login page, and shows the forum it names (and a submission URL the submission, titled from its slug)."""
    assert len(TASK_PAGES) >= 90 and all(e["site"] == "reddit" for e in TASK_PAGES)
    s = http_login()
    failures = []
    for e in TASK_PAGES:
        path = e["path"]
        r = s.get(f"{BASE}{path}", timeout=30)
        parts = [unquote(p) for p in urlparse(path).path.split("/")]
        why = ""
        if r.status_code != 200:
            why = f"HTTP {r.status_code}"
        elif urlparse(r.url).path == "/login" or 'id="login-username"' in r.text:
            why = f"login page {r.url}"
        elif parts[1:2] == ["submission_images"]:
            why = "" if r.headers["content-type"] == "image/jpeg" and r.content[:2] == b"\xff\xd8" else "not a JPEG"
        elif parts[1:2] == ["f"]:
            words = _words(r.text)
            if f'href="/f/{parts[2]}"' not in r.text or _words(parts[2]) not in words:
                why = f"does not show forum {parts[2]!r}"
            elif len(parts) >= 4 and parts[3].isdigit():
                sid = parts[3]
                title = " ".join(parts[4].split("-")) if len(parts) >= 5 and parts[4] else f"{parts[2]} post {sid}"
                if f'id="submission_{sid}"' not in r.text or 'submission--full' not in r.text:
                    why = f"does not render submission {sid}"
                elif _words(title) not in words:
                    why = f"does not show the title {title!r}"
            elif not re.search(r'class="submission"|There doesn&#x27;t seem|There doesn\'t seem', r.text):
                why = "not a listing"
        if why:
            failures.append(f"{path}: {why}")
    assert not failures, f"{len(failures)} of {len(TASK_PAGES)} task start pages fail:\n" + "\n".join(failures)


def test_listing_sorts_and_pagination(forum: str, module_containers: Containers) -> None:
    """Postmill's sort routes and keyset pagination: following "More" walks every submission exactly once."""
    total = fingerprint(module_containers, forum)["submissions"][0]
    for start in ("/", "/all/new", "/active", "/top?t=all", "/controversial", "/most_commented?t=all"):
        url, seen = f"{BASE}{start}", []
        for _ in range(20):
            text = requests.get(url, timeout=10).text
            seen += [int(i) for i in re.findall(r'id="submission_(\d+)"', text)]
            more = re.search(r'<nav class="pagination"><a href="([^"]+)"', text)
            if not more:
                break
            url = BASE + more.group(1).replace("&amp;", "&")
        assert sorted(seen) == sorted(set(seen)) and len(seen) == total, (start, len(seen))
    ids = [int(i) for i in re.findall(r'id="submission_(\d+)"', requests.get(f"{BASE}/all/new", timeout=10).text)]
    assert len(ids) == 25 and ids == sorted(ids, reverse=True) and max(task_submission_ids()) in ids
    # A cursor past the end of a forum still answers with a (possibly empty) listing.
    r = requests.get(f"{BASE}/f/books/top?t=all&next%5BnetScore%5D=-99&next%5Bid%5D=1", timeout=10)
    assert r.status_code == 200 and "/f/books" in r.text
    assert requests.get(f"{BASE}/f/books/sideways", timeout=10).status_code == 404


def test_expiry_probe_anonymous_redirects_to_login(forum: str) -> None:
    r = requests.get(f"{BASE}{PROBE}", allow_redirects=False, timeout=10)
    assert r.status_code == 302 and r.headers["Location"] == "/login"
    r = requests.get(f"{BASE}/user/{USER}/account", cookies={"PHPSESSID": "forged"}, allow_redirects=False, timeout=10)
    assert r.status_code == 302


@pytest.mark.browser
def test_writes_land_in_db_and_change_fingerprint(forum: str, module_containers: Containers, browser) -> None:
    before = fingerprint(module_containers, forum)
    s = http_login()
    # New submission.
    r = s.post(f"{BASE}/submit", data={"submission[title]": "envctl mini test post", "submission[body]": "hello",
                                       "submission[forum]": "2"}, allow_redirects=False)
    new = before["submissions"][1] + 1  # the sequence was moved past the task pages' submission ids
    assert r.status_code == 302 and r.headers["Location"] == f"/f/gaming/{new}/envctl-mini-test-post"
    post = s.get(f"{BASE}{r.headers['Location']}").text
    assert "envctl mini test post" in post
    # Comment and vote on it.
    r = s.post(f"{BASE}/f/gaming/{new}/-/comment", data={f"reply_to_submission_{new}[comment]": "first!"},
               allow_redirects=False)
    assert r.status_code == 302
    assert "first!" in s.get(f"{BASE}{r.headers['Location']}").text
    assert s.post(f"{BASE}/sv/{new}", data={"choice": "1"}, allow_redirects=False).status_code == 302
    after_post = fingerprint(module_containers, forum)
    assert after_post["submissions"][:2] == (before["submissions"][0] + 1, new)
    assert after_post["comments"][0] == before["comments"][0] + 1
    assert after_post["submission_votes"][0] == before["submission_votes"][0] + 1

    # Biography edit through the UI, checked like WebArena task 400's program_html evaluator.
    bio = "Pro Python Developer with 20 years of Experience"
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        page.goto(f"{BASE}/login")
        page.get_by_label("Username").fill(USER)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(f"{BASE}/")
        page.goto(f"{BASE}/user/{USER}/edit_biography")
        page.get_by_label("Biography").fill(bio)
        page.get_by_role("button", name="Save").click()
        page.wait_for_url(f"{BASE}/user/{USER}")
        assert page.evaluate("() => document.querySelector('.user-bio__biography').outerText") == bio
    finally:
        ctx.close()
    after_bio = fingerprint(module_containers, forum)
    assert after_bio["users"][:2] == after_post["users"][:2] and after_bio["users"][2] != after_post["users"][2]
    # Logging in (sessions table) is not agent state: the fingerprint only moved because of the writes.
    http_login()
    assert fingerprint(module_containers, forum) == after_bio


def test_recreated_container_is_pristine_and_stops_cleanly(forum: str, containers: Containers, mini_image) -> None:
    s = http_login()
    assert s.get(f"{BASE}{PROBE}", allow_redirects=False).status_code == 200
    fresh, took = start(containers, mini_image("postmill"), SECOND_PORT)
    print(f"\npostmill second boot-to-ready: {took:.2f}s")
    fresh_base = f"http://127.0.0.1:{SECOND_PORT}"
    r = requests.get(f"{fresh_base}{PROBE}", cookies=s.cookies.get_dict(), allow_redirects=False, timeout=10)
    assert r.status_code == 302 and r.headers["Location"] == "/login"
    fp = fingerprint(containers, fresh)
    assert fp["submissions"][:2] == SEEDED and fp["comments"][:2] == (15, 15)

    t0 = time.monotonic()
    subprocess.run(["docker", "stop", "-t", "20", fresh], check=True, capture_output=True)
    took = time.monotonic() - t0
    code = subprocess.run(["docker", "inspect", "-f", "{{.State.ExitCode}}", fresh], capture_output=True, text=True,
                          check=True).stdout.strip()
    logs = containers.logs(fresh)
    assert code == "0", logs
    assert "database system is shut down" in logs
    assert took < 10, f"docker stop took {took:.1f}s"
