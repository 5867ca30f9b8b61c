"""The in-place reset tier of shopping and shopping_admin (issue 39), on the mini flavor with a real engine.

The catalog's ``reset.inplace`` steps (sh + the mysql client, as on the upstream image) restore only the tables the
binary log says changed since the saved state, put back what their triggers wrote, flush Magento's caches, and
record where the log stands; the ``changes`` query moves with every write and not on reads. Writes come through
each site's UI over HTTP (through the instance's proxy) and straight into MySQL (``docker exec``, bypassing the
app and the proxy); the database's own view (binary log, CHECKSUM TABLE against the saved copy, AUTO_INCREMENT)
and the storefront's full-page cache are checked after each reset.

Instance h1t at port offset 44100 (nothing else uses them).
"""
from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import requests

from conftest import envctl_cli, tear_down
from envctl.catalog import load_catalog
from envctl.images.build import build_for_sites
from envctl.lab import Lab

pytestmark = [pytest.mark.docker, pytest.mark.mini]
INSTANCE, OFFSET = "h1t", 44100
SITES = ["shopping", "shopping_admin"]
EMMA = {"login[username]": "emma.lopez@gmail.com", "login[password]": "Password.123"}
ADMIN = {"login[username]": "admin", "login[password]": "admin1234"}
CACHE = "X-Magento-Cache-Debug"
# written by envctl itself after every reset (its HTTP logins and the REST probe), not by the tests' writes
ENVCTL_WRITES = {"miniweb_sessions", "oauth_token"}
SUMMARY = re.compile(r"restored (0 tables|[1-9][0-9]* tables: [a-z0-9_]+( [a-z0-9_]+)*)\n")


@pytest.fixture(scope="module")
def lab(docker_engine, tmp_path_factory):
    cat = load_catalog()
    build_for_sites(cat, SITES, "mini")
    lab = Lab(cat, instance=INSTANCE, auth_dir=tmp_path_factory.mktemp("auth"))
    lab.down(volumes=True)
    res = lab.up(SITES, flavor="mini", port_offset=OFFSET, login=False, spares=0)
    assert res.ok, [s.error for s in res.sites if not s.ok]
    yield lab
    tear_down(lab)


def url(lab: Lab, site: str) -> str:
    return lab.settings().deployment.url(lab.catalog.site(site))


def sql(lab: Lab, site: str, query: str, *, user: tuple[str, ...] = ("-uroot",)) -> str:
    """A query in the routed copy's MySQL, straight through ``docker exec`` (not the app, not the proxy)."""
    p = subprocess.run(["docker", "exec", lab.container(site), "mysql", *user, "-N", "-B", "magentodb", "-e", query],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout


def step(lab: Lab, site: str, what: str) -> subprocess.CompletedProcess:
    """The catalog's in-place ``what`` steps (save / restore / has) of the pristine state, run in the routed copy
    as envctl runs them, with stdout and stderr apart."""
    [st] = getattr(lab.catalog.site(site).reset.inplace, what)
    argv = [a.replace("{state}", "pristine") for a in st.run]
    return subprocess.run(["docker", "exec", lab.container(site), *argv], capture_output=True, text=True)


def changes(lab: Lab, site: str) -> str:
    """The catalog's change signal, as envctl reads it (magentouser)."""
    out = []
    for q in lab.catalog.site(site).changes:
        p = subprocess.run(["docker", "exec", lab.container(site), *q.run], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        out.append(p.stdout)
    return "".join(out)


def settled(lab: Lab, site: str, quiet: float = 15, timeout: float = 120) -> str:
    """The change signal once InnoDB's background work after the last write is done (it moves the log sequence
    number a few seconds after a write: purge, persistent statistics): unchanged for ``quiet`` seconds."""
    deadline, last, since = time.monotonic() + timeout, changes(lab, site), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(3)
        now = changes(lab, site)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return now
    pytest.fail(f"{site}: the change signal kept moving for {timeout}s at idle: {last!r}")


def reset_inplace(lab: Lab, site: str) -> dict:
    p = envctl_cli("reset", site, "--tier", "inplace", "-i", INSTANCE, "--auth-dir", str(lab.auth_dir), "--json")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    [r] = json.loads(p.stdout)
    assert r["ok"] and r["tier"] == "inplace" and r["escalations"] == [], r
    return r


def verify_rc(site: str) -> int:
    return envctl_cli("verify", site, "-i", INSTANCE).returncode


def checksums(lab: Lab, site: str, schema: str = "magentodb") -> dict[str, str]:
    tables = sql(lab, site, f"SELECT table_name FROM information_schema.tables WHERE table_schema = '{schema}'"
                             " AND table_type = 'BASE TABLE' ORDER BY table_name").split()
    out = sql(lab, site, "CHECKSUM TABLE " + ", ".join(f"`{schema}`.`{t}`" for t in tables))
    return {line.split("\t")[0].split(".", 1)[1]: line.split("\t")[1] for line in out.splitlines()}


def assert_as_saved(lab: Lab, site: str) -> None:
    """Every table of magentodb (changelogs and trigger targets too) holds the saved copy's rows and its
    AUTO_INCREMENT counter, but for what envctl's own login and probes wrote since the reset."""
    live, saved = checksums(lab, site), checksums(lab, site, "envctl_pristine")
    assert live.keys() == saved.keys()
    assert {t for t in live if live[t] != saved[t]} <= ENVCTL_WRITES
    counters = sql(lab, site, "SELECT t.table_name, t.auto_increment, a.value FROM information_schema.tables t"
                              " JOIN envctl.autoinc a ON a.state = 'pristine' AND a.tbl = t.table_name"
                              " WHERE t.table_schema = 'magentodb'")
    moved = {t for t, live_ai, saved_ai in (line.split("\t") for line in counters.splitlines()) if live_ai != saved_ai}
    assert moved <= ENVCTL_WRITES, moved


def product(lab: Lab, site: str, entity_id: int) -> tuple[str, str]:
    """(URL key, name) of a product."""
    key, name = sql(lab, site, f"SELECT url_key, name FROM catalog_product_entity WHERE entity_id = {entity_id}") \
        .rstrip("\n").split("\t")
    return key, name


def form_key(page: str) -> str:
    return re.search(r'name="form_key" type="hidden" value="(\w+)"', page)[1]


def test_the_change_signal_is_still_at_idle_and_on_guest_pages(lab):
    base = url(lab, "shopping")
    before = settled(lab, "shopping")
    assert re.search(r"Innodb_(lsn_current|redo_log_current_lsn)\t[0-9]+", before), before
    for path in ("/", "/electronics.html", "/electronics/headphones.html", "/catalogsearch/result/?q=tea",
                 "/customer/account/login/", "/admin"):
        for _ in range(2):  # a miss, then the page cache
            assert requests.get(base + path, timeout=30).status_code == 200, path
    time.sleep(5)
    assert changes(lab, "shopping") == before


def test_a_write_straight_into_mysql_is_undone_and_the_cached_page_follows(lab):
    """SQL into MySQL bypasses the app: the page cache keeps the page as it was rendered with the write, the change
    signal moves, and the in-place reset puts the rows back, also what the triggers wrote (EAV values, the
    changelogs of the indexers the configure steps put in "schedule" mode), and flushes the page cache."""
    base = url(lab, "shopping")
    assert "catalog_product_price" in sql(lab, "shopping", "SELECT view_id FROM mview_state WHERE mode = 'enabled'")
    key, name = product(lab, "shopping", 6)
    changelog = sql(lab, "shopping", "SELECT COUNT(*) FROM envctl_pristine.catalog_product_price_cl")
    before = settled(lab, "shopping")
    sql(lab, "shopping", "UPDATE catalog_product_entity SET name = 'Controller written by SQL', price = 1.23"
                         " WHERE entity_id = 6", user=("-u", "magentouser", "-pMyPassword"))
    assert changes(lab, "shopping") != before
    assert int(sql(lab, "shopping", "SELECT COUNT(*) FROM catalog_product_price_cl")) > int(changelog)  # a trigger
    first = requests.get(f"{base}/{key}.html", timeout=30)
    cached = requests.get(f"{base}/{key}.html", timeout=30)
    assert (first.headers[CACHE], cached.headers[CACHE]) == ("MISS", "HIT")
    assert "Controller written by SQL" in cached.text and "$1.23" in cached.text
    assert verify_rc("shopping") != 0

    reset_inplace(lab, "shopping")
    after = requests.get(f"{base}/{key}.html", timeout=30)
    assert after.headers[CACHE] == "MISS", "the page cache was flushed"
    assert name in after.text and "Controller written by SQL" not in after.text
    assert verify_rc("shopping") == 0
    assert sql(lab, "shopping", "SELECT COUNT(*) FROM catalog_product_price_cl") == changelog
    assert_as_saved(lab, "shopping")


def test_a_storefront_write_through_the_ui_is_undone(lab):
    """A signed-in customer adds to the wish list and writes a review (the review's trigger fills review_detail);
    the guest's product page stays cached meanwhile (a pending review is not shown), and is rendered afresh after
    the reset."""
    base = url(lab, "shopping")
    key, name = product(lab, "shopping", 4)
    requests.get(f"{base}/{key}.html", timeout=30)
    page = requests.get(f"{base}/{key}.html", timeout=30)
    assert page.headers[CACHE] == "HIT" and name in page.text

    s = requests.Session()
    assert s.post(f"{base}/customer/account/loginPost/", data=EMMA, timeout=30).ok
    assert s.post(f"{base}/wishlist/index/add/", data={"product": "4"}, timeout=30).ok
    assert name in s.get(f"{base}/wishlist/", timeout=30).text
    review = {"nickname": "Emma", "title": "Written through the UI", "detail": "Reset me.", "ratings": "2"}
    assert s.post(f"{base}/review/product/post/id/4/", data=review, timeout=30).ok
    assert sql(lab, "shopping", "SELECT COUNT(*) FROM review_detail WHERE title = 'Written through the UI'") == "1\n"
    assert requests.get(f"{base}/{key}.html", timeout=30).headers[CACHE] == "HIT"
    assert verify_rc("shopping") != 0

    reset_inplace(lab, "shopping")
    assert sql(lab, "shopping", "SELECT COUNT(*) FROM wishlist_item WHERE product_id = 4") == "0\n"
    assert sql(lab, "shopping", "SELECT COUNT(*) FROM review WHERE title = 'Written through the UI'") == "0\n"
    assert verify_rc("shopping") == 0
    after = requests.get(f"{base}/{key}.html", timeout=30)
    assert after.headers[CACHE] == "MISS" and name in after.text
    s = requests.Session()  # the old session went with the restore: sign in again
    assert s.post(f"{base}/customer/account/loginPost/", data=EMMA, timeout=30).ok
    wishlist = s.get(f"{base}/wishlist/", timeout=30).text
    assert name not in wishlist and "Sandals" in wishlist  # Emma's seeded item only
    assert_as_saved(lab, "shopping")


def test_an_admin_write_through_the_ui_is_undone_and_the_cached_page_follows(lab):
    """The admin renames a product and a CMS page through /admin forms (the save cleans the page cache, as
    Magento's cache tags do); the guest's product page is cached with the new name; after the in-place reset
    the first page shows the saved name."""
    base = url(lab, "shopping_admin")
    key, name = product(lab, "shopping_admin", 5)
    s = requests.Session()
    assert s.post(f"{base}/admin", data=ADMIN, timeout=30).ok
    edit = s.get(f"{base}/admin/catalog/product/edit/id/5/", timeout=30).text
    data = {"product[name]": "Adapter renamed in the admin", "product[price]": "99.00", "product[qty]": "7",
            "product[status]": "1", "form_key": form_key(edit)}
    assert s.post(f"{base}/admin/catalog/product/save/id/5/", data=data, timeout=30).ok
    edit = s.get(f"{base}/admin/cms/page/edit/page_id/5/", timeout=30).text
    assert s.post(f"{base}/admin/cms/page/save/page_id/5/", timeout=30,
                  data={"title": "About us, edited", "identifier": "about-us", "content_heading": "About us",
                        "content": "<p>Edited.</p>", "is_active": "1", "form_key": form_key(edit)}).ok
    assert sql(lab, "shopping_admin", "SELECT title FROM cms_page WHERE page_id = 5") == "About us, edited\n"
    requests.get(f"{base}/{key}.html", timeout=30)
    cached = requests.get(f"{base}/{key}.html", timeout=30)
    assert cached.headers[CACHE] == "HIT" and "Adapter renamed in the admin" in cached.text
    assert verify_rc("shopping_admin") != 0

    reset_inplace(lab, "shopping_admin")
    after = requests.get(f"{base}/{key}.html", timeout=30)
    assert after.headers[CACHE] == "MISS" and name in after.text and "renamed" not in after.text
    assert sql(lab, "shopping_admin", "SELECT title FROM cms_page WHERE page_id = 5") == "About us\n"
    assert verify_rc("shopping_admin") == 0
    assert_as_saved(lab, "shopping_admin")


def test_a_restore_of_an_untouched_copy_restores_nothing(lab):
    """The restore step's summary names what it put back; run again on a copy nothing wrote to, it reads an empty
    binary log, restores 0 tables and writes nothing at all (not even its own bookkeeping to the log)."""
    sql(lab, "shopping", "INSERT INTO wishlist_item (wishlist_id, product_id) VALUES (1, 3)")
    first = step(lab, "shopping", "restore")
    assert first.returncode == 0 and SUMMARY.fullmatch(first.stdout), (first.stdout, first.stderr)
    assert "wishlist_item" in first.stdout.split(": ", 1)[1].split()

    position = sql(lab, "shopping", "SHOW MASTER STATUS").split("\t")[:2]
    recorded = sql(lab, "shopping", "SELECT log_file, log_pos FROM envctl.saved WHERE state = 'pristine'").split()
    assert recorded == position, "the restore recorded where the log stands"
    sums = checksums(lab, "shopping")
    signal = settled(lab, "shopping")
    t = time.monotonic()
    again = step(lab, "shopping", "restore")
    took = time.monotonic() - t
    assert again.returncode == 0 and again.stdout == "restored 0 tables\n", (again.stdout, again.stderr)
    assert sql(lab, "shopping", "SHOW MASTER STATUS").split("\t")[:2] == position
    assert sql(lab, "shopping", f"SHOW BINLOG EVENTS IN '{position[0]}' FROM {position[1]}") == ""
    assert checksums(lab, "shopping") == sums
    assert changes(lab, "shopping") == signal, "not a row written"
    assert step(lab, "shopping", "has").returncode == 0
    print(f"restore of an untouched copy: {took:.3f}s (docker exec included)")


def test_a_lost_binary_log_position_falls_back_to_every_table(lab):
    """A saved state whose log file is gone (purged, or another server's): every table is compared, said on
    stderr, and the write is undone all the same."""
    sql(lab, "shopping", "UPDATE envctl.saved SET log_file = 'mysql-bin.999999' WHERE state = 'pristine'")
    sql(lab, "shopping", "UPDATE customer_entity SET firstname = 'emma' WHERE entity_id = 1")  # a change of case
    out = step(lab, "shopping", "restore")
    assert out.returncode == 0 and "is gone" in out.stderr and "comparing every table" in out.stderr, out.stderr
    assert "customer_entity" in out.stdout and SUMMARY.fullmatch(out.stdout), out.stdout
    assert sql(lab, "shopping", "SELECT firstname FROM customer_entity WHERE entity_id = 1") == "Emma\n"
    assert step(lab, "shopping", "restore").stdout == "restored 0 tables\n"  # the position is recorded again
    assert verify_rc("shopping") == 0


def test_rows_removed_by_a_foreign_key_cascade_come_back(lab):
    """InnoDB's cascades are not in the binary log (only the parent's delete is): the restore takes the children
    of a table with deletes along, to any depth. Upstream's schema has foreign keys everywhere; the mini's none,
    so the test adds three tables to the saved state and takes them out again."""
    assert step(lab, "shopping", "restore").returncode == 0
    sql(lab, "shopping", "CREATE TABLE zz_parent (id INT PRIMARY KEY) ENGINE=InnoDB;"
                         " CREATE TABLE zz_child (id INT PRIMARY KEY, parent INT, FOREIGN KEY (parent)"
                         " REFERENCES zz_parent (id) ON DELETE CASCADE) ENGINE=InnoDB;"
                         " CREATE TABLE zz_grandchild (id INT PRIMARY KEY, child INT, FOREIGN KEY (child)"
                         " REFERENCES zz_child (id) ON DELETE CASCADE) ENGINE=InnoDB;"
                         " INSERT INTO zz_parent VALUES (1), (2); INSERT INTO zz_child VALUES (10, 1), (20, 2);"
                         " INSERT INTO zz_grandchild VALUES (100, 10), (200, 20)")
    try:
        assert step(lab, "shopping", "save").returncode == 0
        sql(lab, "shopping", "DELETE FROM zz_parent WHERE id = 1")
        assert sql(lab, "shopping", "SELECT COUNT(*) FROM zz_grandchild") == "1\n"
        out = step(lab, "shopping", "restore")
        assert out.returncode == 0 and {"zz_parent", "zz_child", "zz_grandchild"} <= set(out.stdout.split()), out
        assert sql(lab, "shopping", "SELECT COUNT(*) FROM zz_parent; SELECT COUNT(*) FROM zz_child;"
                                    " SELECT COUNT(*) FROM zz_grandchild") == "2\n2\n2\n"
    finally:
        sql(lab, "shopping", "DROP TABLE IF EXISTS zz_grandchild, zz_child, zz_parent")
        assert step(lab, "shopping", "save").returncode == 0  # the saved state as it was
    assert verify_rc("shopping") == 0
