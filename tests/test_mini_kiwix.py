"""Mini Wikipedia: Debian's kiwix-serve 3.3.0 serving the build-time ZIM, reached on 127.0.0.1 only."""
from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from urllib.parse import unquote

import pytest
import requests

from conftest import Containers, wait_http

pytestmark = [pytest.mark.docker, pytest.mark.mini]

PORT = 18150
UPSTREAM_ARGS_PORT = 18151
BOOK = "wikipedia_en_all_maxi_2022-05"
LANDING = f"/{BOOK}/A/User:The_other_Kiwix_guy/Landing"
TASK_PAGES = json.loads(
    (Path(__file__).parent.parent / "envctl/images/mini/kiwix/files/task_pages.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def wiki(mini_image, module_containers: Containers) -> str:
    image = mini_image("kiwix")
    start = time.monotonic()
    name = module_containers.run(image, ports={80: PORT})
    base = f"http://127.0.0.1:{PORT}"
    wait_http(base + LANDING, timeout=30, ok=lambda r: r.status_code == 200,
              logs=lambda: module_containers.logs(name))
    print(f"kiwix ready in {time.monotonic() - start:.2f}s")
    return base


def test_image_labels_and_kiwix_version(wiki: str, mini_image) -> None:
    image = mini_image("kiwix")
    labels = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{json .Config.Labels}}", image],
        capture_output=True, text=True, check=True,
    ).stdout
    for label in ('"org.envctl.flavor":"mini"', '"org.envctl.site":"wikipedia"', '"org.envctl.data-version":"1"'):
        assert label in labels
    out = subprocess.run(["docker", "run", "--rm", image, "kiwix-serve", "--version"],
                         capture_output=True, text=True)
    assert "kiwix-tools 3.3.0" in out.stdout + out.stderr


def test_landing_page_at_the_upstream_url(wiki: str) -> None:
    r = requests.get(wiki + LANDING, timeout=10)
    assert r.status_code == 200
    assert "<title>Welcome to Wikipedia</title>" in r.text
    assert 'href="../Pittsburgh"' in r.text  # relative links resolve under /<book>/A/
    assert 'name="content" value="wikipedia_en_all_maxi_2022-05"' in r.text  # kiwix toolbar search form


def test_root_redirects_to_main_page(wiki: str) -> None:
    r = requests.get(f"{wiki}/{BOOK}/", timeout=10, allow_redirects=False)
    assert r.status_code == 302
    assert r.headers["Location"].endswith("/User:The_other_Kiwix_guy/Landing")


@pytest.mark.parametrize("path", [f"/{BOOK}/A/Carnegie_Mellon_University", f"/{BOOK}/Carnegie_Mellon_University"])
def test_article_by_old_and_new_path(wiki: str, path: str) -> None:
    r = requests.get(wiki + path, timeout=10)
    assert r.status_code == 200
    assert '<h1 id="firstHeading" class="firstHeading">Carnegie Mellon University</h1>' in r.text
    assert "Andrew Carnegie" in r.text


def test_missing_article_is_404(wiki: str) -> None:
    assert requests.get(f"{wiki}/{BOOK}/A/No_such_article", timeout=10).status_code == 404


def test_full_text_search_finds_an_article(wiki: str) -> None:
    r = requests.get(f"{wiki}/search", params={"content": BOOK, "pattern": "Steel City"}, timeout=10)
    assert r.status_code == 200
    hits = re.findall(r'<a href="(/' + BOOK + r'/[^"]+)">\s*([^<]+?)\s*</a>', r.text)
    assert (f"/{BOOK}/Pittsburgh", "Pittsburgh") in hits
    # the hit is a full-text one: the snippet shows the matched body words
    assert "<b>Steel</b> City" in r.text
    followed = requests.get(wiki + f"/{BOOK}/Pittsburgh", timeout=10)
    assert followed.status_code == 200 and "Monongahela" in followed.text


def test_search_without_hits(wiki: str) -> None:
    r = requests.get(f"{wiki}/search", params={"content": BOOK, "pattern": "zzyzx"}, timeout=10)
    assert r.status_code == 200
    assert f'<a href="/{BOOK}/' not in r.text.split('class="results"', 1)[-1]


def test_suggest_uses_the_title_index(wiki: str) -> None:
    r = requests.get(f"{wiki}/suggest", params={"content": BOOK, "term": "pitts"}, timeout=10)
    assert r.status_code == 200
    paths = [s.get("path") for s in r.json()]
    assert "Pittsburgh,_Pennsylvania" in paths  # a redirect (see build_zim.py) ...
    follow = requests.get(f"{wiki}/{BOOK}/A/Pittsburgh,_Pennsylvania", timeout=10)
    assert follow.status_code == 200 and "Steel City" in follow.text  # ... that leads to the article
    carnegie = requests.get(f"{wiki}/suggest", params={"content": BOOK, "term": "carnegie"}, timeout=10).json()
    assert "Carnegie_Mellon_University" in [s.get("path") for s in carnegie]


@pytest.mark.parametrize("page", TASK_PAGES, ids=[p["path"].split("/", 2)[2] for p in TASK_PAGES])
def test_task_start_page(wiki: str, page: dict) -> None:
    """Every start page of the benchmark tasks that open on Wikipedia answers 200 with what it names."""
    r = requests.get(wiki + page["path"], timeout=10)
    assert r.status_code == 200, page["task_ids"]
    ns, name = page["path"].split("/", 3)[2:]
    if ns == "I":
        assert r.headers["Content-Type"].startswith("image/webp")
        assert r.content[:4] == b"RIFF" and r.content[8:12] == b"WEBP"
        return
    html = r.content.decode("utf-8")  # kiwix-serve sends no charset (the page's <meta> has it)
    title = "Welcome to Wikipedia" if page["path"] == LANDING else unquote(name).replace("_", " ")
    assert f"<title>{title}</title>" in html
    assert f'<h1 id="firstHeading" class="firstHeading">{title}</h1>' in html
    assert "<p>" in html.split('id="mw-content-text"', 1)[1]
    for src in re.findall(r'<img src="([^"]+)"', html):
        img = requests.get(requests.compat.urljoin(r.url, src), timeout=10)
        assert img.status_code == 200 and img.headers["Content-Type"].startswith("image/"), src


def test_wagyu_has_a_second_picture_of_thin_slices(wiki: str) -> None:
    """visualwebarena/728: "That second picture in the Wikipedia page looks delicious! ... thin slices"."""
    r = requests.get(f"{wiki}/{BOOK}/A/Wagyu", timeout=10)
    images = re.findall(r'<img src="([^"]+)" alt="([^"]+)"', r.text)
    assert len(images) >= 2
    assert "slice" in images[1][0].lower() and "sliced" in images[1][1].lower()
    img = requests.get(requests.compat.urljoin(r.url, images[1][0]), timeout=10)
    assert img.status_code == 200 and img.headers["Content-Type"].startswith("image/webp")
    assert img.content[:4] == b"RIFF" and img.content[8:12] == b"WEBP"


def test_upstream_style_arguments(mini_image, containers: Containers) -> None:
    """``docker run ... wikipedia_en_all_maxi_2022-05.zim`` (upstream's form) serves the same book."""
    name = containers.run(mini_image("kiwix"), ports={80: UPSTREAM_ARGS_PORT}, command=[f"{BOOK}.zim"])
    r = wait_http(f"http://127.0.0.1:{UPSTREAM_ARGS_PORT}{LANDING}", timeout=30,
                  ok=lambda r: r.status_code == 200, logs=lambda: containers.logs(name))
    assert "Welcome to Wikipedia" in r.text


def _stat(c: Containers, name: str) -> str:
    """The site's fingerprint query, as the catalog runs it on every flavor."""
    from envctl.catalog import load_catalog

    (query,) = load_catalog().site("wikipedia").fingerprint_queries("mini")
    return c.exec(name, *query.run).stdout.strip()


def test_an_empty_data_directory_is_seeded_with_the_book(mini_image, containers: Containers, tmp_path: Path) -> None:
    """The catalog mounts {data_dir}/wikipedia on /data on every flavor: an empty one gets the image's ZIM
    (a whole file, the image's mtime), which a second copy on the same directory finds and keeps."""
    data = tmp_path / "wikipedia"
    data.mkdir(mode=0o755)
    image = mini_image("kiwix")
    first = containers.run(image, ports={80: UPSTREAM_ARGS_PORT}, command=[f"{BOOK}.zim"], volumes=[f"{data}:/data"])
    wait_http(f"http://127.0.0.1:{UPSTREAM_ARGS_PORT}{LANDING}", timeout=30, ok=lambda r: r.status_code == 200,
              logs=lambda: containers.logs(first))
    assert [p.name for p in data.iterdir()] == [f"{BOOK}.zim"]  # no temporary file left behind
    seed = containers.exec(first, "stat", "-c", "%s %Y", f"/usr/share/envctl/seed/data/{BOOK}.zim").stdout.split()
    st = (data / f"{BOOK}.zim").stat()
    assert [str(st.st_size), str(int(st.st_mtime))] == seed
    stamp = _stat(containers, first)
    assert stamp == f"/data/{BOOK}.zim {seed[0]} {seed[1]}"
    second = containers.run(image, command=[f"{BOOK}.zim"], volumes=[f"{data}:/data"])
    time.sleep(1)
    assert _stat(containers, second) == stamp and (data / f"{BOOK}.zim").stat().st_ino == st.st_ino  # left as found


def test_a_read_only_empty_data_directory_is_one_line_of_error(mini_image, containers: Containers,
                                                                  tmp_path: Path) -> None:
    data = tmp_path / "ro"
    data.mkdir(mode=0o755)
    name = containers.run(mini_image("kiwix"), command=[f"{BOOK}.zim"], volumes=[f"{data}:/data:ro"])
    code = subprocess.run(["docker", "wait", name], capture_output=True, text=True, timeout=60).stdout.strip()
    logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True)
    assert code == "1", code
    err = logs.stderr.strip().splitlines()
    assert len(err) == 1 and f"/data/{BOOK}.zim is missing and cannot be written" in err[0], logs
    assert list(data.iterdir()) == []


@pytest.mark.browser
def test_browser_opens_landing_and_follows_a_link(wiki: str, browser) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        page.goto(wiki + LANDING, wait_until="load")
        assert page.title() == "Welcome to Wikipedia"
        page.get_by_role("link", name="Fred Rogers").first.click()
        page.wait_for_url(re.compile(r"/Fred_Rogers$"))
        assert page.locator("#firstHeading").inner_text() == "Fred Rogers"
        assert "WQED" in page.locator("#mw-content-text").inner_text()
    finally:
        page.close()
