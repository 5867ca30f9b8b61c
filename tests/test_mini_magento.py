"""The mini Magento image (sites shopping / shopping_admin) against the upstream contract.

Real container, real HTTP on 127.0.0.1, real Chromium. The upstream configure commands run via
``docker exec`` exactly as WebArena's README writes them. Ports 17700-17799.
"""
from __future__ import annotations

import html
import json
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from conftest import Containers, wait_http

pytestmark = [pytest.mark.docker, pytest.mark.mini]

STALE = "http://metis.lti.cs.cmu.edu:7770/"
LOGIN_ERROR = ("The account sign-in was incorrect or your account is disabled temporarily. "
               "Please wait and try again later.")
EMMA = ("emma.lopez@gmail.com", "Password.123")
ADMIN = {"username": "admin", "password": "admin1234"}
TASK_PAGES = Path(__file__).resolve().parents[1] / "envctl/images/mini/magento/files/task_pages.json"


@dataclass
class Shop:
    name: str
    base: str  # like $SHOPPING: no trailing slash
    boot_seconds: float
    fingerprint: str  # right after boot, before any write


def upstream_configure(c: Containers, name: str, base: str) -> list[subprocess.CompletedProcess]:
    """The README's post-start steps for shopping / shopping_admin, verbatim (hostname substituted)."""
    steps = [
        ["/var/www/magento2/bin/magento", "setup:store-config:set", f"--base-url={base}"],
        ["mysql", "-u", "magentouser", "-pMyPassword", "magentodb", "-e",
         f'UPDATE core_config_data SET value="{base}/" WHERE path = "web/secure/base_url";'],
        ["/var/www/magento2/bin/magento", "cache:flush"],
        ["php", "/var/www/magento2/bin/magento", "config:set", "admin/security/password_is_forced", "0"],
        ["php", "/var/www/magento2/bin/magento", "config:set", "admin/security/password_lifetime", "0"],
        ["/var/www/magento2/bin/magento", "indexer:set-mode", "schedule", "catalogrule_product"],
        ["/var/www/magento2/bin/magento", "indexer:set-mode", "schedule", "catalogsearch_fulltext"],
    ]
    return [c.exec(name, *argv) for argv in steps]


def catalog_fingerprint(c: Containers, name: str, *sites: str) -> str:
    """The output of the catalog's own fingerprint commands (the full flavor's) run in container ``name``."""
    from envctl.catalog import load_catalog

    catalog = load_catalog()
    return "".join(c.exec(name, *q.run).stdout for s in sites for q in catalog.site(s).fingerprint_queries("mini"))


def boot(c: Containers, image: str, port: int) -> Shop:
    t0 = time.monotonic()
    name = c.run(image, ports={80: port})
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/", timeout=60, logs=lambda: c.logs(name))
    took = time.monotonic() - t0
    return Shop(name, base, took, catalog_fingerprint(c, name, "shopping", "shopping_admin"))


def sql(c: Containers, name: str, query: str) -> str:
    return c.exec(name, "mysql", "-N", "-B", "-u", "magentouser", "-pMyPassword", "magentodb", "-e", query).stdout


def customer_session(base: str) -> requests.Session:
    s = requests.Session()
    r = s.post(f"{base}/customer/account/loginPost/",
               data={"login[username]": EMMA[0], "login[password]": EMMA[1]}, allow_redirects=False)
    assert r.status_code == 302 and r.headers["Location"] == f"{base}/customer/account/", r.text[:300]
    assert "PHPSESSID" in s.cookies
    return s


def admin_token(base: str) -> str:
    r = requests.post(f"{base}/rest/default/V1/integration/admin/token", json=ADMIN, timeout=10)
    assert r.status_code == 200, r.text
    token = r.json()
    assert isinstance(token, str) and len(token) >= 16
    return token


@pytest.fixture(scope="module")
def shop(mini_image, module_containers: Containers) -> Shop:
    image = mini_image("magento")
    s = boot(module_containers, image, 17701)
    for p in upstream_configure(module_containers, s.name, s.base):
        assert p.returncode == 0, p.stderr
    wait_http(s.base + "/", timeout=10, ok=lambda r: r.status_code == 200)
    print(f"mini magento boot-to-ready: {s.boot_seconds:.2f}s")
    return s


# --- storefront ---------------------------------------------------------------------------------------
def test_home_catalog_search_and_product_pages(shop: Shop) -> None:
    home = requests.get(shop.base + "/", allow_redirects=False)
    assert home.status_code == 200
    assert re.search(r"<title>[^<]*One Stop Market", home.text)
    links = re.findall(r'href="([^"]+)"', home.text)
    assert links and all(link.startswith(shop.base + "/") for link in links), links[:5]

    cat = requests.get(shop.base + "/clothing-shoes-jewelry/women/shoes.html?price=0-25", allow_redirects=False)
    assert cat.status_code == 200
    assert "Running Shoes" in cat.text and "Ankle Boots" not in cat.text  # 74.00 is above the filter

    found = requests.get(shop.base + "/catalogsearch/result/", params={"q": "jaw bruxism"})
    assert "Search results for: &#x27;jaw bruxism&#x27;" in found.text and "Mouth Guard" in found.text
    product_url = re.search(r'href="([^"]+mouth-guard[^"]+\.html)"', found.text)[1]
    product = requests.get(product_url, allow_redirects=False)
    assert product.status_code == 200 and "$16.99" in product.text and "Rachel" in product.text
    assert requests.get(shop.base + "/no-such-thing.html").status_code == 404


def test_order_history_and_account_of_emma(shop: Shop) -> None:
    s = customer_session(shop.base)
    account = s.get(shop.base + "/customer/account/", allow_redirects=False)
    assert account.status_code == 200 and "My Account" in account.text and "Emma Lopez" in account.text
    history = s.get(shop.base + "/sales/order/history/", allow_redirects=False).text
    assert history.count("View Order") == 4  # Emma's orders only
    assert "000000007" in history and "000000002" not in history
    view = s.get(shop.base + "/sales/order/view/order_id/7/").text
    assert "Pending" in view and "Ankle Boots" in view


def test_wishlist_probe_http(shop: Shop) -> None:
    """auto_login's shopping probe: {SHOPPING}/wishlist/ must not redirect when the cookie is valid."""
    anon = requests.get(shop.base + "/wishlist/", allow_redirects=False)
    assert anon.status_code == 302 and anon.headers["Location"] == shop.base + "/customer/account/login/"
    s = customer_session(shop.base)
    r = s.get(shop.base + "/wishlist/", allow_redirects=False)
    assert r.status_code == 200 and "products-grid wishlist" in r.text
    s.get(shop.base + "/customer/account/logout/")
    assert s.get(shop.base + "/wishlist/", allow_redirects=False).status_code == 302


@pytest.mark.browser
def test_customer_login_in_browser(shop: Shop, browser) -> None:
    """WebArena auto_login.py and BrowserGym ui_login use these exact selectors for shopping."""
    ctx = browser.new_context()
    page = ctx.new_page()
    try:
        page.goto(f"{shop.base}/customer/account/login/")
        page.get_by_label("Email", exact=True).fill(EMMA[0])
        page.get_by_label("Password", exact=True).fill("wrong-password")
        page.get_by_role("button", name="Sign In").click()
        page.wait_for_load_state()
        assert page.get_by_text(LOGIN_ERROR).is_visible()
        assert "Traceback" not in page.content()

        page.get_by_label("Email", exact=True).fill(EMMA[0])
        page.get_by_label("Password", exact=True).fill(EMMA[1])
        page.get_by_role("button", name="Sign In").click()
        page.wait_for_url(f"{shop.base}/customer/account/")
        assert "Welcome, Emma Lopez!" in page.content()
        assert any(c["name"] == "PHPSESSID" for c in ctx.cookies())

        probe = f"{shop.base}/wishlist/"
        page.goto(probe)
        assert page.url == probe  # valid cookie: no redirect

        page.goto(f"{shop.base}/customer/account/logout/")
        page.goto(probe)
        assert page.url == f"{shop.base}/customer/account/login/"
    finally:
        ctx.close()


# --- admin ---------------------------------------------------------------------------------------------
@pytest.mark.browser
def test_admin_login_in_browser_both_harnesses(shop: Shop, browser) -> None:
    admin = shop.base + "/admin"  # $SHOPPING_ADMIN
    ctx = browser.new_context()
    page = ctx.new_page()
    try:
        page.goto(f"{admin}/dashboard")  # the expiry probe, logged out: login form, no keyword
        assert "Dashboard" not in page.content()
        assert page.get_by_text("Welcome, please sign in").is_visible()

        page.goto(admin)  # wrong password, WebArena's selectors
        page.get_by_placeholder("user name").fill("admin")
        page.get_by_placeholder("password").fill("nope")
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_load_state()
        assert page.get_by_text(LOGIN_ERROR).is_visible()

        page.goto(admin)  # right password, WebArena's selectors
        page.get_by_placeholder("user name").fill(ADMIN["username"])
        page.get_by_placeholder("password").fill(ADMIN["password"])
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{admin}/admin/dashboard/")
        page.goto(f"{admin}/dashboard")
        assert "Dashboard" in page.content()
    finally:
        ctx.close()

    ctx = browser.new_context()  # BrowserGym's ui_login selects by label
    page = ctx.new_page()
    try:
        page.goto(admin)
        page.get_by_label("Username").fill(ADMIN["username"])
        page.get_by_label("Password").fill(ADMIN["password"])
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{admin}/admin/dashboard/")
        page.goto(f"{admin}/sales/order/")
        assert "7 records found" in page.content()
    finally:
        ctx.close()


def admin_session(base: str) -> requests.Session:
    s = requests.Session()
    r = s.post(f"{base}/admin/dashboard/", data={"login[username]": "admin", "login[password]": "admin1234"},
               allow_redirects=False)
    assert r.status_code == 302 and "admin" in s.cookies
    return s


def test_admin_pages_and_product_edit_writes_db(shop: Shop, module_containers: Containers) -> None:
    s = admin_session(shop.base)
    for path, text in [("/admin/sales/order/", "Emma Lopez"), ("/admin/catalog/product/", "B0005USBWF"),
                       ("/admin/customer/index/", "hannah.lim@gmail.com"), ("/admin/review/product/", "Pending")]:
        r = s.get(shop.base + path, allow_redirects=False)
        assert r.status_code == 200 and text in r.text, path
    edit = s.get(shop.base + "/admin/catalog/product/edit/id/5/").text
    form_key = re.search(r'name="form_key" type="hidden" value="(\w+)"', edit)[1]
    save = f"{shop.base}/admin/catalog/product/save/id/5/"
    data = {"product[name]": "USB WiFi Adapter AC1200", "product[price]": "10.49", "product[qty]": "200",
            "product[status]": "1"}
    s.post(save, data={**data, "form_key": "forged"})  # a wrong form key changes nothing
    assert sql(module_containers, shop.name, "SELECT price FROM catalog_product_entity WHERE entity_id=5").strip() \
        == "15.49"
    s.post(save, data={**data, "form_key": form_key})
    assert sql(module_containers, shop.name,
               "SELECT name, price FROM catalog_product_entity WHERE entity_id=5").strip() \
        == "USB WiFi Adapter AC1200\t10.49"
    assert 'value="10.49"' in s.get(shop.base + "/admin/catalog/product/edit/id/5/").text
    assert requests.get(shop.base + "/admin/catalog/product/edit/id/5/").text.count("10.49") == 0  # anonymous


# --- REST -------------------------------------------------------------------------------------------------
def test_rest_token_orders_and_reviews(shop: Shop) -> None:
    assert requests.get(shop.base + "/rest/V1/orders").status_code == 401
    bad = requests.post(shop.base + "/rest/default/V1/integration/admin/token", json={**ADMIN, "password": "x"})
    assert bad.status_code == 401 and "message" in bad.json()
    assert requests.get(shop.base + "/rest/V1/orders", headers={"Authorization": "Bearer nope"}).status_code == 401
    auth = {"Authorization": f"Bearer {admin_token(shop.base)}"}

    everything = requests.get(shop.base + "/rest/V1/orders", headers=auth).json()
    assert everything["total_count"] == 7 and len(everything["items"]) == 7
    latest = requests.get(shop.base + "/rest/V1/orders", headers=auth, params={
        "searchCriteria[sortOrders][0][field]": "created_at",
        "searchCriteria[sortOrders][0][direction]": "DESC",
        "searchCriteria[pageSize]": "1",
        "searchCriteria[filter_groups][0][filters][0][field]": "customer_email",
        "searchCriteria[filter_groups][0][filters][0][value]": EMMA[0],
        "searchCriteria[filter_groups][0][filters][0][condition_type]": "eq",
        "searchCriteria[filter_groups][0][filters][0][bogus]": "ignored",
    }).json()
    assert latest["total_count"] == 4 and [o["increment_id"] for o in latest["items"]] == ["000000007"]
    assert latest["items"][0]["items"][0]["sku"]

    reviews = requests.get(shop.base + "/rest/V1/products/B0001MOUTH/reviews", headers=auth).json()
    assert [r["nickname"] for r in reviews] == ["Rachel", "Hannah"] and reviews[-1]["ratings"][0]["percent"] == 40
    assert requests.get(shop.base + "/rest/V1/products/B0001MOUTH/reviews").status_code == 401


# --- state in the DB -------------------------------------------------------------------------------------
def test_cart_changes_persist_in_db(shop: Shop, module_containers: Containers) -> None:
    c, name = module_containers, shop.name
    before = catalog_fingerprint(c, name, "shopping", "shopping_admin")
    s = customer_session(shop.base)
    cart_sql = ("SELECT i.product_id, i.qty FROM quote_item i JOIN quote q ON q.entity_id = i.quote_id"
                " WHERE q.customer_id = 1 AND q.is_active = 1 ORDER BY i.product_id")
    assert sql(c, name, cart_sql).split() == ["12", "1.0000"]

    s.post(shop.base + "/checkout/cart/add/", data={"product": "3", "qty": "2"})
    added = catalog_fingerprint(c, name, "shopping", "shopping_admin")
    changed = {line.split("\t")[0] for line in set(before.splitlines()) ^ set(added.splitlines())}
    assert changed == {"magentodb.quote_item"}
    cart = s.get(shop.base + "/checkout/cart/").text
    assert "Over-Ear Wireless Headphones" in cart and "$266.49" in cart  # 2 x 129.00 + 8.49
    assert sql(c, name, cart_sql).split() == ["3", "2.0000", "12", "1.0000"]

    item = re.search(r'name="cart\[(\d+)\]\[qty\]" type="number" min="0" value="2"', cart)[1]
    s.post(shop.base + "/checkout/cart/updatePost/", data={f"cart[{item}][qty]": "5"})
    assert sql(c, name, cart_sql).split() == ["3", "5.0000", "12", "1.0000"]
    s.post(shop.base + "/checkout/cart/delete/", data={"id": item})
    assert sql(c, name, cart_sql).split() == ["12", "1.0000"]

    after = catalog_fingerprint(c, name, "shopping", "shopping_admin")
    assert after == before  # CHECKSUM TABLE is over content: the cart is as it was

    # Sessions are not part of the fingerprint: signing in again changes nothing.
    customer_session(shop.base)
    assert catalog_fingerprint(c, name, "shopping", "shopping_admin") == after


# --- configure steps, base URL, cache ---------------------------------------------------------------------
def test_upstream_configure_steps_set_base_url_and_are_idempotent(mini_image, containers: Containers,
                                                                   shop: Shop) -> None:
    image = mini_image("magento")
    s = boot(containers, image, 17702)
    assert s.fingerprint == shop.fingerprint  # every container starts from the same seeded state
    name, base = s.name, s.base
    fp = s.fingerprint.splitlines()
    assert len(fp) == 25 and all(len(line.split("\t")) == 2 for line in fp)

    # Out of the box the store points at the upstream's stale host (WA#18): a visible redirect.
    r = requests.get(base + "/sales/order/history/?x=1", allow_redirects=False)
    assert r.status_code == 302 and r.headers["Location"] == STALE + "sales/order/history/?x=1"

    def bin_magento(*args: str) -> str:
        return containers.exec(name, "/var/www/magento2/bin/magento", *args).stdout

    # Only the README's first step + flush: unsecure base is right, secure one is still stale.
    bin_magento("setup:store-config:set", f"--base-url={base}")
    assert requests.get(base + "/", allow_redirects=False).status_code == 302  # config is cached until a flush
    bin_magento("cache:flush")
    assert bin_magento("config:show", "web/unsecure/base_url").strip() == base + "/"
    assert requests.get(base + "/", allow_redirects=False).status_code == 200
    login = requests.get(base + "/customer/account/login/", allow_redirects=False)
    assert login.status_code == 302 and login.headers["Location"] == STALE + "customer/account/login/"

    results = upstream_configure(containers, name, base)
    assert all(p.returncode == 0 for p in results), [p.stderr for p in results]
    login = requests.get(base + "/customer/account/login/", allow_redirects=False)
    assert login.status_code == 200 and f'action="{base}/customer/account/loginPost/"' in login.text
    assert requests.get(base + "/admin", allow_redirects=False).status_code == 200

    config_sql = "SELECT config_id, path, value FROM core_config_data ORDER BY config_id"
    modes_sql = "SELECT view_id, mode FROM mview_state ORDER BY view_id"
    state = (sql(containers, name, config_sql), sql(containers, name, modes_sql))
    assert "admin/security/password_is_forced\t0" in state[0] and "catalogrule_product\tenabled" in state[1]
    again = upstream_configure(containers, name, base)
    assert all(p.returncode == 0 for p in again)
    assert (sql(containers, name, config_sql), sql(containers, name, modes_sql)) == state
    assert "has not been changed" in again[5].stdout
    assert requests.get(base + "/customer/account/login/", allow_redirects=False).status_code == 200
    assert catalog_fingerprint(containers, name, "shopping", "shopping_admin") == s.fingerprint

    # A host that differs from the base URL is redirected to it (what a wrong base URL looks like).
    other = requests.get("http://localhost:17702/catalogsearch/result/?q=tea", allow_redirects=False)
    assert other.status_code == 302 and other.headers["Location"] == f"{base}/catalogsearch/result/?q=tea"
    assert containers.exec(name, "/var/www/magento2/bin/magento", "no:such", check=False).returncode != 0


def test_recreated_container_rejects_old_cookie_and_stops_cleanly(mini_image, containers: Containers) -> None:
    image = mini_image("magento")
    s = boot(containers, image, 17703)
    upstream_configure(containers, s.name, s.base)
    session = customer_session(s.base)
    assert session.get(s.base + "/wishlist/", allow_redirects=False).status_code == 200
    # once MariaDB and the app were up, the supervisor exec'd into the stdlib-only watcher (same pid 1)
    pid1 = containers.exec(s.name, "cat", "/proc/1/cmdline").stdout.split("\0")
    assert "--watch" in pid1 and "-S" in pid1 and not any("sites.magento" in a for a in pid1), pid1

    t0 = time.monotonic()
    subprocess.run(["docker", "stop", "-t", "20", s.name], check=True, capture_output=True)
    stop_seconds = time.monotonic() - t0
    code = subprocess.run(["docker", "inspect", "-f", "{{.State.ExitCode}}", s.name], capture_output=True,
                          text=True).stdout.strip()
    logs = containers.logs(s.name)
    assert code == "0" and stop_seconds < 10, (code, stop_seconds, logs)
    assert "mariadbd: Shutdown complete" in logs
    print(f"mini magento docker stop: {stop_seconds:.2f}s")

    subprocess.run(["docker", "rm", s.name], check=True, capture_output=True)
    s2 = boot(containers, image, 17703)
    upstream_configure(containers, s2.name, s2.base)
    r = session.get(s2.base + "/wishlist/", allow_redirects=False)  # same URL, same cookie, new container
    assert r.status_code == 302 and r.headers["Location"] == s2.base + "/customer/account/login/"


# --- the catalog's fingerprint sees the writes agents make -----------------------------------------------
def test_an_app_that_dies_stops_the_database_and_the_container(mini_image, containers: Containers) -> None:
    """The watcher the supervisor exec'd into keeps its rule: a child that exits stops the others (the
    database shut down cleanly) and the container exits with that child's code, so a restart policy or
    envctl's health check sees it."""
    s = boot(containers, mini_image("magento"), 17704)
    pid1 = containers.exec(s.name, "cat", "/proc/1/cmdline").stdout.split("\0")
    [web] = [a.split(":")[0] for a in pid1 if a.endswith(":web")]  # the watcher's children: pid:name
    containers.exec(s.name, "kill", "-KILL", web)
    deadline = time.monotonic() + 30
    state = ""
    while time.monotonic() < deadline:
        state = subprocess.run(["docker", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", s.name],
                               capture_output=True, text=True).stdout.strip()
        if state.startswith("exited"):
            break
        time.sleep(0.3)
    logs = containers.logs(s.name)
    assert state == "exited 247", (state, logs)  # -SIGKILL, as the first supervisor reported it
    assert "supervise: web exited with -9" in logs and "mariadbd: Shutdown complete" in logs, logs


def test_writes_through_the_site_change_the_catalog_fingerprint(shop: Shop, module_containers: Containers) -> None:
    """Magento's own table names answer the full flavor's CHECKSUM TABLE: each write moves the right tables."""
    c, name = module_containers, shop.name

    def changed_by(write) -> set[str]:
        before = catalog_fingerprint(c, name, "shopping", "shopping_admin")
        write()
        after = catalog_fingerprint(c, name, "shopping", "shopping_admin")
        return {line.split("\t")[0].split(".")[1] for line in set(before.splitlines()) ^ set(after.splitlines())}

    s = customer_session(shop.base)
    assert changed_by(lambda: s.post(shop.base + "/wishlist/index/add/", data={"product": "4"})) == {"wishlist_item"}
    review = {"nickname": "Emma", "title": "Nice", "detail": "Works well.", "ratings": "4"}
    assert changed_by(lambda: s.post(shop.base + "/review/product/post/id/4/", data=review)) == {
        "review", "review_detail"}

    admin = admin_session(shop.base)
    view = admin.get(shop.base + "/admin/sales/order/view/order_id/6/").text
    form_key = re.search(r'name="form_key" type="hidden" value="(\w+)"', view)[1]
    assert changed_by(lambda: admin.post(shop.base + "/admin/sales/order/cancel/order_id/6/",
                                         data={"form_key": form_key})) == {"sales_order", "sales_order_grid"}
    edit = admin.get(shop.base + "/admin/catalog/product/edit/id/2/").text
    form_key = re.search(r'name="form_key" type="hidden" value="(\w+)"', edit)[1]
    data = {"product[name]": "Sonic Electric Toothbrush, 4 Heads", "product[price]": "44.95", "product[qty]": "45",
            "product[status]": "1", "form_key": form_key}
    assert changed_by(lambda: admin.post(shop.base + "/admin/catalog/product/save/id/2/", data=data)) == {
        "catalog_product_entity", "catalog_product_entity_varchar", "catalog_product_entity_decimal"}


def test_admin_cms_page_edit_changes_the_fingerprint(shop: Shop, module_containers: Containers) -> None:
    admin = admin_session(shop.base)
    assert "About us" in admin.get(shop.base + "/admin/cms/page/").text
    edit = admin.get(shop.base + "/admin/cms/page/edit/page_id/5/").text
    form_key = re.search(r'name="form_key" type="hidden" value="(\w+)"', edit)[1]
    before = catalog_fingerprint(module_containers, shop.name, "shopping_admin")
    admin.post(shop.base + "/admin/cms/page/save/page_id/5/",
               data={"title": "About One Stop Market", "identifier": "about-us", "content_heading": "About us",
                     "content": "<p>Since 2022.</p>", "is_active": "1", "form_key": form_key})
    assert 'value="About One Stop Market"' in admin.get(shop.base + "/admin/cms/page/edit/page_id/5/").text
    after = catalog_fingerprint(module_containers, shop.name, "shopping_admin")
    assert {line.split("\t")[0] for line in set(before.splitlines()) ^ set(after.splitlines())} == {"magentodb.cms_page"}


# --- the WebArena / VisualWebArena tasks' start pages ------------------------------------------------------
def test_every_task_start_page_answers_and_shows_its_item(shop: Shop, module_containers: Containers) -> None:
    """Each start page of files/task_pages.json answers 200 for the task's signed-in user (Emma, the admin),
    is no login page, and shows what its URL names: the product, the category, the admin product's form."""
    pages = json.loads(TASK_PAGES.read_text())
    assert len(pages) > 200 and {e["site"] for e in pages} == {"shopping", "shopping_admin"}

    def rows(query: str) -> dict[str, str]:
        return dict(line.split("\t", 1) for line in sql(module_containers, shop.name, query).splitlines())

    products = rows("SELECT url_key, name FROM catalog_product_entity WHERE status = 1")
    by_id = rows("SELECT entity_id, name FROM catalog_product_entity")
    categories = rows("SELECT url_path, name FROM catalog_category_entity")
    customer, admin = customer_session(shop.base), admin_session(shop.base)
    failures, counted = [], {"product": 0, "category": 0, "admin product": 0}
    for e in pages:
        session, url = (customer, shop.base + e["path"]) if e["site"] == "shopping" else \
            (admin, shop.base + "/admin" + e["path"])
        path = urlsplit(e["path"]).path
        r = session.get(url, timeout=30)
        text = html.unescape(r.text)
        expect = None
        if e["site"] == "shopping" and path.endswith(".html"):
            key = path[1:-5]
            kind = "category" if key in categories else "product"
            expect = categories.get(key) or products.get(key)
            if expect is None:
                failures.append(f"{url}: no {kind} {key!r} in the database")
                continue
            counted[kind] += 1
        elif e["site"] == "shopping_admin" and path.startswith("/catalog/product/edit/id/"):
            pid = path.split("/")[5]
            if pid not in by_id:
                failures.append(f"{url}: no product {pid} in the database")
                continue
            counted["admin product"] += 1
            expect = f'name="product[name]" value="{by_id[pid]}"'
        if r.status_code != 200:
            failures.append(f"{url}: HTTP {r.status_code}")
        elif "/customer/account/login" in urlsplit(r.url).path or "Welcome, please sign in" in text \
                or "block-customer-login" in text:
            failures.append(f"{url}: landed on a login page ({r.url})")
        elif e["site"] == "shopping" and "Welcome, Emma Lopez!" not in text:
            failures.append(f"{url}: Emma is not signed in on the page")
        elif expect and expect not in text:
            failures.append(f"{url}: does not show {expect!r}")
    print(f"{len(pages)} start pages checked: {counted}; {len(failures)} failed")
    assert not failures, f"{len(failures)} of {len(pages)} start pages fail:\n" + "\n".join(failures[:40])
    assert counted["admin product"] == 6 and counted["product"] >= 79


# --- full-page cache and changelog triggers (the in-place reset's contract: tests/test_inplace_magento.py) -------
def test_guest_pages_come_from_the_page_cache_until_a_flush_or_an_admin_save(shop: Shop,
                                                                              module_containers: Containers) -> None:
    """Like Magento's built-in full-page cache: a guest's product page is served from var/page_cache; SQL straight
    into MySQL leaves it stale, a signed-in customer is not served from it, bin/magento cache:flush empties it,
    and a product saved in the admin cleans it."""
    c, name = module_containers, shop.name
    key, title = sql(c, name, "SELECT url_key, name FROM catalog_product_entity WHERE entity_id = 11").strip().split("\t")
    page = f"{shop.base}/{key}.html"
    assert [requests.get(page).headers["X-Magento-Cache-Debug"] for _ in range(2)] == ["MISS", "HIT"]
    assert int(c.exec(name, "sh", "-c", "ls /var/www/magento2/var/page_cache | wc -l").stdout) > 0
    try:
        sql(c, name, "UPDATE catalog_product_entity SET name = 'Coffee renamed by SQL' WHERE entity_id = 11")
        stale = requests.get(page)
        assert stale.headers["X-Magento-Cache-Debug"] == "HIT" and title in stale.text  # the bypass: not invalidated
        signed_in = customer_session(shop.base).get(page)
        assert "X-Magento-Cache-Debug" not in signed_in.headers and "Coffee renamed by SQL" in signed_in.text
        c.exec(name, "/var/www/magento2/bin/magento", "cache:flush")
        fresh = requests.get(page)
        assert fresh.headers["X-Magento-Cache-Debug"] == "MISS" and "Coffee renamed by SQL" in fresh.text
        assert requests.get(page).headers["X-Magento-Cache-Debug"] == "HIT"

        admin = admin_session(shop.base)
        edit = admin.get(f"{shop.base}/admin/catalog/product/edit/id/11/").text
        form_key = re.search(r'name="form_key" type="hidden" value="(\w+)"', edit)[1]
        admin.post(f"{shop.base}/admin/catalog/product/save/id/11/", data={
            "product[name]": title, "product[price]": "12.98", "product[qty]": "300", "product[status]": "1",
            "form_key": form_key})
        saved = requests.get(page)
        assert saved.headers["X-Magento-Cache-Debug"] == "MISS" and title in saved.text
    finally:
        sql(c, name, f"UPDATE catalog_product_entity SET name = '{title}' WHERE entity_id = 11")
        c.exec(name, "/var/www/magento2/bin/magento", "cache:flush")


def test_schedule_mode_keeps_changelogs_by_triggers(shop: Shop, module_containers: Containers) -> None:
    """Like Magento's mview: an indexer in "schedule" mode has a changelog <indexer>_cl that triggers on the
    tables it follows fill with the changed entity's id (an id per write); "realtime" takes its triggers away."""
    c, name = module_containers, shop.name
    bin_magento = "/var/www/magento2/bin/magento"

    def logged() -> tuple[int, int]:
        return tuple(int(sql(c, name, f"SELECT COUNT(*) FROM {v}_cl WHERE entity_id = 12"))  # type: ignore[return-value]
                     for v in ("catalogrule_product", "catalogsearch_fulltext"))

    touch = "UPDATE catalog_product_entity SET qty = qty + 1 WHERE entity_id = 12"
    before = logged()
    sql(c, name, touch)  # the product and, through the mini's own triggers, its EAV values: each logs the id
    once = logged()
    assert once[0] > before[0] and once[1] > before[1], (before, once)
    try:
        assert "was changed" in c.exec(name, bin_magento, "indexer:set-mode", "realtime", "catalogsearch_fulltext").stdout
        sql(c, name, touch)
        twice = logged()
        assert twice[0] > once[0] and twice[1] == once[1], (once, twice)
    finally:
        c.exec(name, bin_magento, "indexer:set-mode", "schedule", "catalogsearch_fulltext")
        sql(c, name, "UPDATE catalog_product_entity SET qty = qty - 2 WHERE entity_id = 12")
