"""The homepage image (both flavors): site cards from env vars, calculator, scratchpad, static images."""
from __future__ import annotations

import re
import struct
import time
from typing import Iterator

import pytest
import requests

from conftest import Containers, wait_http

pytestmark = [pytest.mark.docker, pytest.mark.mini]

WA_PORT, VWA_PORT = 18140, 18141
H = "http://wa.example:1"  # any host: the page only renders links, it never contacts the sites
WA_ENV = {
    "SHOPPING": f"{H}:7770", "SHOPPING_ADMIN": f"{H}:7780/admin", "REDDIT": f"{H}:9999", "GITLAB": f"{H}:8023",
    "MAP": f"{H}:3000", "WIKIPEDIA": f"{H}:8888/wikipedia_en_all_maxi_2022-05/A/User:The_other_Kiwix_guy/Landing",
}
VWA_ENV = {"CLASSIFIEDS": "http://vwa.example:9980", "SHOPPING": "vwa.example:7770", "REDDIT": "http://vwa.example:9999/",
           "WIKIPEDIA": "http://vwa.example:8888"}


@pytest.fixture(scope="module")
def homepages(mini_image, module_containers: Containers) -> Iterator[dict[str, str]]:
    image = mini_image("homepage")
    urls = {}
    for flavor, port, env in (("wa", WA_PORT, WA_ENV), ("vwa", VWA_PORT, VWA_ENV)):
        start = time.monotonic()
        name = module_containers.run(image, ports={4399: port}, env=env)
        urls[flavor] = f"http://127.0.0.1:{port}"
        wait_http(urls[flavor] + "/", ok=lambda r: r.status_code == 200, logs=lambda: module_containers.logs(name))
        print(f"\nhomepage ({flavor}) boot {time.monotonic() - start:.1f}s")
    yield urls


def _cards(html: str) -> dict[str, str]:
    """aria-label of each card region -> its link."""
    return dict(re.findall(r'role="region" aria-label="([^"]+)">\s*<img[^>]*>\s*<a href="([^"]+)"', html))


def test_wa_links_follow_the_env_vars(homepages: dict[str, str]) -> None:
    cards = _cards(requests.get(homepages["wa"] + "/", timeout=10).text)
    assert cards == {
        "OneStopShop": f"{H}:7770",
        "Merchant Admin Portal": f"{H}:7780/admin",
        "Reddit": f"{H}:9999/forums/all",
        "Gitlab": f"{H}:8023/explore",
        "Map": f"{H}:3000",
        "Calculator": "calculator.html",
        "Scratchpad": "scratchpad.html",
        "Wikipedia": WA_ENV["WIKIPEDIA"],
        "Gitlab Manual": "https://docs.gitlab.com/",
        "Admin Manual": "https://experienceleague.adobe.com/docs/commerce-admin/user-guides/home.html?lang=en",
    }


def test_vwa_shows_only_configured_sites_with_full_urls(homepages: dict[str, str]) -> None:
    cards = _cards(requests.get(homepages["vwa"] + "/", timeout=10).text)
    assert cards == {
        "Classifieds": "http://vwa.example:9980",
        "OneStopShop": "http://vwa.example:7770",  # a scheme-less value gets http://, not a broken href
        "Reddit": "http://vwa.example:9999/forums/all",
        "Calculator": "calculator.html",
        "Scratchpad": "scratchpad.html",
        "Wikipedia": "http://vwa.example:8888/wikipedia_en_all_maxi_2022-05/A/User:The_other_Kiwix_guy/Landing",
    }


def test_static_images_and_missing_password_page(homepages: dict[str, str]) -> None:
    base = homepages["vwa"]
    for rel, size in (("input_images/classifieds/task_8/input_0.png", (160, 120)),
                      ("input_images/reddit/task_113/input_2.png", (160, 120)),
                      ("input_images/shopping/task_2/input_1.png", (160, 120)),
                      ("figures/classifieds.png", (96, 96))):
        r = requests.get(f"{base}/static/{rel}", timeout=10)
        assert r.status_code == 200 and r.headers["Content-Type"] == "image/png", rel
        assert r.content[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", r.content[16:24]) == size
    again = requests.get(f"{base}/static/input_images/classifieds/task_8/input_0.png", timeout=10).content
    other = requests.get(f"{homepages['wa']}/static/input_images/classifieds/task_8/input_0.png", timeout=10).content
    assert again == other  # deterministic across containers
    assert requests.get(f"{base}/static/input_images/classifieds/task_99999/input_0.png", timeout=10).status_code == 404
    assert requests.get(f"{base}/password.html", timeout=10).status_code == 404


@pytest.mark.browser
def test_calculator_computes(homepages: dict[str, str], browser) -> None:
    page = browser.new_page()
    try:
        page.goto(homepages["wa"] + "/")
        page.get_by_role("link", name="Calculator").click()
        page.wait_for_load_state()
        assert page.url == homepages["wa"] + "/calculator.html"
        page.get_by_label("Expression").fill("12*(3+4)-5/2")
        page.keyboard.press("Enter")
        assert page.locator("#result").inner_text() == "81.5"
        page.get_by_role("button", name="C", exact=True).click()
        for key in ("7", "plus", "8", "multiply", "2"):
            page.get_by_role("button", name=key, exact=True).click()
        page.get_by_role("button", name="=", exact=True).click()
        assert page.get_by_label("Expression").input_value() == "7+8*2"
        assert page.locator("#result").inner_text() == "23"
        page.get_by_label("Expression").fill("1/0")
        page.get_by_role("button", name="=", exact=True).click()
        assert page.locator("#result").inner_text() == "Error: Division by zero"
    finally:
        page.close()


@pytest.mark.browser
def test_scratchpad_keeps_notes_in_local_storage(homepages: dict[str, str], browser) -> None:
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        page.goto(homepages["vwa"] + "/scratchpad.html")
        page.get_by_label("Note").fill("price of the white car: $30000")
        page.get_by_role("button", name="Save").click()
        page.reload()
        assert page.locator("#notes li").count() == 1
        assert "price of the white car: $30000" in page.locator("#notes li").inner_text()
        assert "white car" in page.evaluate("localStorage.getItem('scratchpad-notes')")
        fresh = browser.new_context().new_page()  # another browser profile: nothing stored server-side
        fresh.goto(homepages["vwa"] + "/scratchpad.html")
        assert fresh.locator("#notes li").count() == 0
        fresh.context.close()
        page.get_by_role("button", name="Delete note 1").click()
        assert page.locator("#notes li").count() == 0
    finally:
        ctx.close()
