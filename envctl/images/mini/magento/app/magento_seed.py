"""Schema and deterministic seed data of the mini Magento store (run once, at image build time).

Table and column names follow Magento 2 where the mini site has an equivalent (``core_config_data``,
``customer_entity``, ``sales_order``, ``quote``, ...), simplified to what the pages need. Every id and
timestamp is fixed, so two builds reach the same database state (the fingerprint proves it).

Usage (inside the image build, with MariaDB running): ``python3 -m sites.magento_seed``.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from urllib.parse import urlsplit

from miniweb.core import SESSIONS_DDL, Database

# The stale host the upstream images ship with (WA#18): the configure step must replace it.
STALE_BASE_URL = "http://metis.lti.cs.cmu.edu:7770/"

INDEXERS = [
    ("catalogrule_product", "Catalog Product Rule"),
    ("catalogrule_rule", "Catalog Rule Product"),
    ("catalogsearch_fulltext", "Catalog Search"),
    ("catalog_category_product", "Category Products"),
    ("customer_grid", "Customer Grid"),
    ("design_config_grid", "Design Config Grid"),
    ("inventory", "Inventory"),
    ("catalog_product_category", "Product Categories"),
    ("catalog_product_attribute", "Product EAV"),
    ("catalog_product_price", "Product Price"),
    ("cataloginventory_stock", "Stock"),
]

SCHEMA = [
    """CREATE TABLE core_config_data (
        config_id INT UNSIGNED AUTO_INCREMENT PRIMARY KEY,
        scope VARCHAR(8) NOT NULL DEFAULT 'default', scope_id INT NOT NULL DEFAULT 0,
        path VARCHAR(255) NOT NULL, value TEXT,
        UNIQUE KEY core_config_data_scope_scope_id_path (scope, scope_id, path))""",
    """CREATE TABLE indexer_state (
        state_id INT UNSIGNED AUTO_INCREMENT PRIMARY KEY, indexer_id VARCHAR(255) NOT NULL UNIQUE,
        title VARCHAR(255) NOT NULL, status VARCHAR(16) NOT NULL DEFAULT 'valid')""",
    """CREATE TABLE mview_state (
        state_id INT UNSIGNED AUTO_INCREMENT PRIMARY KEY, view_id VARCHAR(255) NOT NULL UNIQUE,
        mode VARCHAR(16) NOT NULL DEFAULT 'disabled')""",
    """CREATE TABLE admin_user (
        user_id INT UNSIGNED PRIMARY KEY, firstname VARCHAR(32), lastname VARCHAR(32), email VARCHAR(128),
        username VARCHAR(40) NOT NULL UNIQUE, password VARCHAR(255) NOT NULL, is_active TINYINT NOT NULL DEFAULT 1)""",
    """CREATE TABLE oauth_token (
        entity_id INT UNSIGNED AUTO_INCREMENT PRIMARY KEY, admin_id INT UNSIGNED NOT NULL,
        token VARCHAR(32) NOT NULL UNIQUE, created_at BIGINT NOT NULL)""",
    """CREATE TABLE customer_entity (
        entity_id INT UNSIGNED PRIMARY KEY, email VARCHAR(255) NOT NULL UNIQUE, firstname VARCHAR(255),
        lastname VARCHAR(255), password_hash VARCHAR(128) NOT NULL, created_at DATETIME NOT NULL)""",
    """CREATE TABLE catalog_category_entity (
        entity_id INT UNSIGNED PRIMARY KEY, parent_id INT UNSIGNED NOT NULL, name VARCHAR(255) NOT NULL,
        url_path VARCHAR(255) NOT NULL UNIQUE, position INT NOT NULL)""",
    """CREATE TABLE catalog_product_entity (
        entity_id INT UNSIGNED AUTO_INCREMENT PRIMARY KEY, sku VARCHAR(64) NOT NULL UNIQUE,
        name VARCHAR(255) NOT NULL, url_key VARCHAR(255) NOT NULL UNIQUE, price DECIMAL(12,2) NOT NULL,
        status TINYINT NOT NULL DEFAULT 1, qty INT NOT NULL, description TEXT)""",
    """CREATE TABLE catalog_category_product (
        category_id INT UNSIGNED NOT NULL, product_id INT UNSIGNED NOT NULL, position INT NOT NULL DEFAULT 0,
        PRIMARY KEY (category_id, product_id))""",
    """CREATE TABLE review (
        review_id INT UNSIGNED AUTO_INCREMENT PRIMARY KEY, product_id INT UNSIGNED NOT NULL,
        status_id TINYINT NOT NULL, customer_id INT UNSIGNED NULL, nickname VARCHAR(128) NOT NULL,
        title VARCHAR(255) NOT NULL, detail TEXT NOT NULL, rating TINYINT NOT NULL, created_at DATETIME NOT NULL)""",
    """CREATE TABLE sales_order (
        entity_id INT UNSIGNED AUTO_INCREMENT PRIMARY KEY, increment_id VARCHAR(32) NOT NULL UNIQUE,
        customer_id INT UNSIGNED, customer_email VARCHAR(255), customer_firstname VARCHAR(255),
        customer_lastname VARCHAR(255), state VARCHAR(32) NOT NULL, status VARCHAR(32) NOT NULL,
        subtotal DECIMAL(12,2) NOT NULL, shipping_amount DECIMAL(12,2) NOT NULL, grand_total DECIMAL(12,2) NOT NULL,
        created_at DATETIME NOT NULL, updated_at DATETIME NOT NULL)""",
    """CREATE TABLE sales_order_item (
        item_id INT UNSIGNED AUTO_INCREMENT PRIMARY KEY, order_id INT UNSIGNED NOT NULL,
        product_id INT UNSIGNED NOT NULL, sku VARCHAR(64) NOT NULL, name VARCHAR(255) NOT NULL,
        qty_ordered DECIMAL(12,4) NOT NULL, price DECIMAL(12,2) NOT NULL, row_total DECIMAL(12,2) NOT NULL)""",
    """CREATE TABLE quote (
        entity_id INT UNSIGNED AUTO_INCREMENT PRIMARY KEY, customer_id INT UNSIGNED NOT NULL,
        is_active TINYINT NOT NULL DEFAULT 1)""",
    """CREATE TABLE quote_item (
        item_id INT UNSIGNED AUTO_INCREMENT PRIMARY KEY, quote_id INT UNSIGNED NOT NULL,
        product_id INT UNSIGNED NOT NULL, qty DECIMAL(12,4) NOT NULL,
        UNIQUE KEY quote_item_quote_product (quote_id, product_id))""",
    """CREATE TABLE wishlist (
        wishlist_id INT UNSIGNED AUTO_INCREMENT PRIMARY KEY, customer_id INT UNSIGNED NOT NULL UNIQUE)""",
    """CREATE TABLE wishlist_item (
        wishlist_item_id INT UNSIGNED AUTO_INCREMENT PRIMARY KEY, wishlist_id INT UNSIGNED NOT NULL,
        product_id INT UNSIGNED NOT NULL, qty DECIMAL(12,4) NOT NULL DEFAULT 1,
        UNIQUE KEY wishlist_item_product (wishlist_id, product_id))""",
    # Magento's own tables for what the flat tables above hold, kept in step by the triggers below,
    # so the catalog's fingerprint (CHECKSUM TABLE over Magento's table names) sees every write.
    """CREATE TABLE review_detail (
        detail_id INT UNSIGNED AUTO_INCREMENT PRIMARY KEY, review_id INT UNSIGNED NOT NULL UNIQUE,
        store_id SMALLINT UNSIGNED NOT NULL DEFAULT 1, title VARCHAR(255) NOT NULL, detail TEXT NOT NULL,
        nickname VARCHAR(128) NOT NULL, customer_id INT UNSIGNED NULL)""",
    """CREATE TABLE sales_order_grid (
        entity_id INT UNSIGNED PRIMARY KEY, status VARCHAR(32), increment_id VARCHAR(50) UNIQUE,
        customer_id INT UNSIGNED, customer_email VARCHAR(255), customer_name VARCHAR(255),
        subtotal DECIMAL(20,4), shipping_and_handling DECIMAL(20,4), grand_total DECIMAL(20,4),
        created_at DATETIME, updated_at DATETIME)""",
    """CREATE TABLE catalog_product_entity_varchar (
        value_id INT AUTO_INCREMENT PRIMARY KEY, attribute_id SMALLINT UNSIGNED NOT NULL,
        store_id SMALLINT UNSIGNED NOT NULL DEFAULT 0, entity_id INT UNSIGNED NOT NULL, value VARCHAR(255),
        UNIQUE KEY catalog_product_entity_varchar_entity_attribute_store (entity_id, attribute_id, store_id))""",
    """CREATE TABLE catalog_product_entity_decimal (
        value_id INT AUTO_INCREMENT PRIMARY KEY, attribute_id SMALLINT UNSIGNED NOT NULL,
        store_id SMALLINT UNSIGNED NOT NULL DEFAULT 0, entity_id INT UNSIGNED NOT NULL, value DECIMAL(20,6),
        UNIQUE KEY catalog_product_entity_decimal_entity_attribute_store (entity_id, attribute_id, store_id))""",
    """CREATE TABLE catalog_product_entity_int (
        value_id INT AUTO_INCREMENT PRIMARY KEY, attribute_id SMALLINT UNSIGNED NOT NULL,
        store_id SMALLINT UNSIGNED NOT NULL DEFAULT 0, entity_id INT UNSIGNED NOT NULL, value INT,
        UNIQUE KEY catalog_product_entity_int_entity_attribute_store (entity_id, attribute_id, store_id))""",
    """CREATE TABLE customer_address_entity (
        entity_id INT UNSIGNED AUTO_INCREMENT PRIMARY KEY, parent_id INT UNSIGNED NOT NULL,
        firstname VARCHAR(255) NOT NULL, lastname VARCHAR(255) NOT NULL, street TEXT NOT NULL, city VARCHAR(255) NOT NULL,
        region VARCHAR(255), postcode VARCHAR(255), country_id VARCHAR(255) NOT NULL, telephone VARCHAR(255) NOT NULL)""",
    """CREATE TABLE newsletter_subscriber (
        subscriber_id INT UNSIGNED AUTO_INCREMENT PRIMARY KEY, store_id SMALLINT UNSIGNED DEFAULT 1,
        customer_id INT UNSIGNED NOT NULL DEFAULT 0, subscriber_email VARCHAR(150),
        subscriber_status INT NOT NULL DEFAULT 0)""",
    """CREATE TABLE cms_page (
        page_id SMALLINT AUTO_INCREMENT PRIMARY KEY, title VARCHAR(255), page_layout VARCHAR(255),
        identifier VARCHAR(100) UNIQUE, content_heading VARCHAR(255), content MEDIUMTEXT,
        creation_time DATETIME, update_time DATETIME, is_active SMALLINT NOT NULL DEFAULT 1)""",
    """CREATE TABLE cms_block (
        block_id SMALLINT AUTO_INCREMENT PRIMARY KEY, title VARCHAR(255) NOT NULL, identifier VARCHAR(255) NOT NULL,
        content MEDIUMTEXT, creation_time DATETIME, update_time DATETIME, is_active SMALLINT NOT NULL DEFAULT 1)""",
    """CREATE TABLE salesrule (
        rule_id INT UNSIGNED AUTO_INCREMENT PRIMARY KEY, name VARCHAR(255), description TEXT, from_date DATE,
        to_date DATE, uses_per_customer INT NOT NULL DEFAULT 0, is_active SMALLINT NOT NULL DEFAULT 0,
        simple_action VARCHAR(32), discount_amount DECIMAL(20,6) NOT NULL DEFAULT 0, coupon_type SMALLINT NOT NULL
        DEFAULT 1)""",
]

# Magento attribute ids (a default 2.4 install) of the product attributes the flat table holds.
ATTR_NAME, ATTR_PRICE, ATTR_STATUS, ATTR_URL_KEY = 73, 77, 97, 121
_PRODUCT_EAV = f"""
    INSERT INTO catalog_product_entity_varchar (attribute_id, store_id, entity_id, value)
        VALUES ({ATTR_NAME}, 0, NEW.entity_id, NEW.name), ({ATTR_URL_KEY}, 0, NEW.entity_id, NEW.url_key)
        ON DUPLICATE KEY UPDATE value = VALUES(value);
    INSERT INTO catalog_product_entity_decimal (attribute_id, store_id, entity_id, value)
        VALUES ({ATTR_PRICE}, 0, NEW.entity_id, NEW.price) ON DUPLICATE KEY UPDATE value = VALUES(value);
    INSERT INTO catalog_product_entity_int (attribute_id, store_id, entity_id, value)
        VALUES ({ATTR_STATUS}, 0, NEW.entity_id, NEW.status) ON DUPLICATE KEY UPDATE value = VALUES(value);"""
_REVIEW_DETAIL = """
    INSERT INTO review_detail (review_id, store_id, title, detail, nickname, customer_id)
        VALUES (NEW.review_id, 1, NEW.title, NEW.detail, NEW.nickname, NEW.customer_id)
        ON DUPLICATE KEY UPDATE title = VALUES(title), detail = VALUES(detail), nickname = VALUES(nickname),
        customer_id = VALUES(customer_id);"""
_ORDER_GRID = """
    INSERT INTO sales_order_grid (entity_id, status, increment_id, customer_id, customer_email, customer_name, subtotal,
        shipping_and_handling, grand_total, created_at, updated_at)
        VALUES (NEW.entity_id, NEW.status, NEW.increment_id, NEW.customer_id, NEW.customer_email,
        CONCAT_WS(' ', NEW.customer_firstname, NEW.customer_lastname), NEW.subtotal, NEW.shipping_amount,
        NEW.grand_total, NEW.created_at, NEW.updated_at)
        ON DUPLICATE KEY UPDATE status = VALUES(status), customer_email = VALUES(customer_email),
        customer_name = VALUES(customer_name), subtotal = VALUES(subtotal),
        shipping_and_handling = VALUES(shipping_and_handling), grand_total = VALUES(grand_total),
        updated_at = VALUES(updated_at);"""
TRIGGERS = [
    f"CREATE TRIGGER {table}_after_{event.lower()} AFTER {event} ON {table} FOR EACH ROW BEGIN {body}\nEND"
    for table, body in (("catalog_product_entity", _PRODUCT_EAV), ("review", _REVIEW_DETAIL),
                        ("sales_order", _ORDER_GRID))
    for event in ("INSERT", "UPDATE")
]

CMS_PAGES = [  # identifier, title, content heading, content
    ("no-route", "404 Not Found", "Whoops, our bad...", "<p>The page you requested was not found.</p>"),
    ("home", "Home Page", "", "<p>One Stop Market: everything you need, one click away.</p>"),
    ("enable-cookies", "Enable Cookies", "What are Cookies?", "<p>Cookies are short pieces of data.</p>"),
    ("privacy-policy-cookie-restriction-mode", "Privacy and Cookie Policy", "Privacy and Cookie Policy",
     "<p>This privacy policy sets out how this website uses and protects any information that you give.</p>"),
    ("about-us", "About us", "About us", "<p>One Stop Market has served customers since 2022.</p>"),
]
CMS_BLOCKS = [("footer_links_block", "Footer Links", "<ul><li>About us</li><li>Customer Service</li></ul>")]
SALES_RULES = [  # name, description, from, to, active, action, amount
    ("$4 Luma water bottle (save 70%)", "Buy a water bottle for $4", "2022-01-01", None, 1, "by_fixed", 16),
    ("20% OFF Ever $200-plus purchase!*", "20% off orders over $200", "2022-01-01", None, 1, "by_percent", 20),
    ("Spring sale", "Expired promotion", "2022-03-01", "2022-04-30", 0, "by_percent", 10),
]
ADDRESSES = [  # customer, street, city, region, postcode, telephone
    (1, "101 S San Mateo Dr", "San Mateo", "California", "94010", "6505551212"),
    (2, "123 Main Street", "New York", "New York", "10001", "2125551212"),
    (3, "456 Oak Avenue", "Pittsburgh", "Pennsylvania", "15213", "4125551212"),
]

# (path, value); base URLs start out stale, exactly like the upstream images.
CONFIG = [
    ("web/unsecure/base_url", STALE_BASE_URL),
    ("web/secure/base_url", STALE_BASE_URL),
    ("web/secure/use_in_frontend", "1"),
    ("web/secure/use_in_adminhtml", "1"),
    ("web/url/redirect_to_base", "1"),
    ("general/store_information/name", "One Stop Market"),
    ("admin/security/password_is_forced", "1"),
    ("admin/security/password_lifetime", "90"),
]

CATEGORIES = [  # id, parent, name, url_path
    (2, 0, "Beauty & Personal Care", "beauty-personal-care"),
    (3, 0, "Electronics", "electronics"),
    (4, 3, "Headphones", "electronics/headphones"),
    (5, 0, "Video Games", "video-games"),
    (6, 0, "Clothing, Shoes & Jewelry", "clothing-shoes-jewelry"),
    (7, 6, "Women", "clothing-shoes-jewelry/women"),
    (8, 7, "Shoes", "clothing-shoes-jewelry/women/shoes"),
    (9, 0, "Grocery & Gourmet Food", "grocery-gourmet-food"),
]

PRODUCTS = [  # id, sku, name, price, qty, categories
    (1, "B0001MOUTH", "Night Mouth Guard for Teeth Grinding and Jaw Bruxism, 4 Pack", 16.99, 120, (2,)),
    (2, "B0002TOOTH", "Sonic Electric Toothbrush with 3 Brush Heads", 39.95, 45, (2,)),
    (3, "B0003HPWLS", "Over-Ear Wireless Headphones with Noise Cancelling, Black", 129.00, 30, (3, 4)),
    (4, "B0004HPBUD", "True Wireless Earbuds with Charging Case", 49.99, 80, (3, 4)),
    (5, "B0005USBWF", "USB WiFi Adapter AC600 Dual Band", 15.49, 200, (3,)),
    (6, "B0006GMPAD", "Wireless Game Controller for PC and Console", 34.99, 60, (5,)),
    (7, "B0007RACER", "Street Racer Deluxe Edition (Video Game)", 59.99, 25, (5,)),
    (8, "B0008RUNSH", "Women's Lightweight Running Shoes, Grey", 22.50, 40, (6, 7, 8)),
    (9, "B0009SANDL", "Women's Summer Flat Sandals, Tan", 19.99, 35, (6, 7, 8)),
    (10, "B0010BOOTS", "Women's Waterproof Ankle Boots, Brown", 74.00, 15, (6, 7, 8)),
    (11, "B0011COFEE", "Medium Roast Ground Coffee, 32 Ounce", 12.98, 300, (9,)),
    (12, "B0012TEAGR", "Organic Green Tea, 100 Tea Bags", 8.49, 150, (9,)),
]

CUSTOMERS = [  # id, email, first, last, password
    (1, "emma.lopez@gmail.com", "Emma", "Lopez", "Password.123"),
    (2, "john.smith.xyz@gmail.com", "John", "Smith", "Password.123"),
    (3, "hannah.lim@gmail.com", "Hannah", "Lim", "Password.123"),
]

ORDERS = [  # id, customer, state/status, created, [(product, qty)], shipping
    (1, 1, "complete", "2022-09-12 10:15:00", [(8, 1), (11, 2)], 5.00),
    (2, 2, "complete", "2022-10-03 16:40:00", [(3, 1)], 0.00),
    (3, 1, "canceled", "2022-11-20 09:05:00", [(7, 1), (6, 1)], 10.00),
    (4, 3, "processing", "2023-01-08 12:00:00", [(2, 1)], 5.00),
    (5, 1, "complete", "2023-02-14 18:30:00", [(1, 2)], 5.00),
    (6, 2, "pending", "2023-03-01 08:20:00", [(5, 2), (12, 1)], 5.00),
    (7, 1, "pending", "2023-03-05 14:45:00", [(10, 1), (4, 1)], 0.00),
]

REVIEWS = [  # product, status (1 approved, 2 pending), customer, nickname, title, detail, stars, created
    (1, 1, None, "Rachel", "Saved my teeth", "Comfortable fit, helps with my jaw bruxism.", 5, "2022-08-01 10:00:00"),
    (1, 1, 3, "Hannah", "Too bulky", "Disappointed, it is too bulky for me.", 2, "2022-08-15 11:00:00"),
    (3, 1, None, "T. Gannon", "Great sound", "Good fingerprint resistance on the ear cups and great sound.", 4,
     "2022-09-02 12:00:00"),
    (3, 2, 2, "John", "Battery", "Battery lasts two days.", 4, "2022-12-10 13:00:00"),
    (8, 1, 1, "Emma", "Light and comfy", "Perfect for my morning runs.", 5, "2023-01-20 08:30:00"),
    (11, 1, None, "Amazon Customer", "Smooth", "Smooth taste, not bitter.", 4, "2022-07-07 07:07:00"),
]

ADMIN = (1, "admin", "admin1234", "Admin", "User", "admin@example.com")

# --- the tasks' start pages (files/task_pages.json, written by scripts/task_pages.py) ----------------------
# Every WebArena / VisualWebArena task that opens on the shop or its admin must open on a real page, so the
# build adds the catalog items those start URLs name: each category path (with its parents), each product
# URL key, and each product the admin edit URLs name (under that exact entity id).
TASK_PAGES = Path(os.environ.get("MAGENTO_TASK_PAGES", "/usr/local/lib/envctl/magento-task-pages.json"))
# Top-level category names as the upstream store spells them (other levels are titled from the URL key).
CATEGORY_NAMES = {
    "cell-phones-accessories": "Cell Phones & Accessories",
    "health-household": "Health & Household",
    "home-kitchen": "Home & Kitchen",
    "office-products": "Office Products",
    "patio-lawn-garden": "Patio, Lawn & Garden",
    "sports-outdoors": "Sports & Outdoors",
    "tools-home-improvement": "Tools & Home Improvement",
}
# Prices of the admin start pages' products: those the upstream tasks' evaluators imply (webarena/458-463
# change the price by an amount or a percentage and check the result), so these tasks stay solvable.
ADMIN_TASK_PRICES = {1481: 32.00, 237: 69.00, 418: 45.00, 721: 18.00, 710: 18.00, 996: 32.00}
_MINOR_WORDS = {"a", "an", "and", "as", "at", "by", "for", "in", "of", "on", "or", "the", "to", "with", "w"}


def title_from_slug(slug: str) -> str:
    """A readable title from a URL key: words capitalised, minor words lower case, ``men-s`` -> ``Men’s``.

    The possessive uses U+2019, which HTML escaping leaves alone, so the page text keeps the URL key's words.
    """
    words: list[str] = []
    for w in slug.split("-"):
        if w == "s" and words:
            words[-1] += "’s"
        elif w:
            words.append(w)
    return " ".join(w if i and w in _MINOR_WORDS else w[:1].upper() + w[1:] for i, w in enumerate(words))


def task_page_items(pages: list[dict], categories: list[tuple] = CATEGORIES, products: list[tuple] = PRODUCTS,
                    ) -> tuple[list[tuple], list[tuple]]:
    """(new categories, new products) the start pages name, in a fixed order with fixed ids.

    Categories are (id, parent, name, url_path); products are (id, sku, name, url_key, price, qty).
    ``/a/b/c.html`` is a category path (``a``, ``a/b`` and ``a/b/c`` are made); a one-segment ``/x.html`` is
    a top-level category when some category path starts with ``x/`` or ``x`` is one already, else a product
    URL key. Existing ids and URL keys are kept; new ids never collide with them or with each other.
    """
    shop_paths, admin_ids = set(), {}
    for e in pages:
        path = urlsplit(e["path"]).path
        if e["site"] == "shopping" and path.endswith(".html"):
            shop_paths.add(path[1:-5])
        elif e["site"] == "shopping_admin" and path.startswith("/catalog/product/edit/id/"):
            admin_ids.setdefault(int(path.split("/")[5]), e["intent"])
    known_cats = {c[3]: c[0] for c in categories}
    cat_paths = set()
    for path in shop_paths:
        if "/" in path:
            parts = path.split("/")
            cat_paths.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    tops = {p.split("/")[0] for p in cat_paths} | {p for p in known_cats if "/" not in p}
    cat_paths |= {p for p in shop_paths if "/" not in p and p in tops}
    new_cats, next_id = [], max(known_cats.values()) + 1
    for path in sorted(cat_paths - set(known_cats), key=lambda p: (p.count("/"), p)):  # parents first
        parent = known_cats[path.rsplit("/", 1)[0]] if "/" in path else 0
        name = CATEGORY_NAMES.get(path) or title_from_slug(path.rsplit("/", 1)[-1])
        known_cats[path] = next_id
        new_cats.append((next_id, parent, name, path))
        next_id += 1

    taken_ids = {p[0] for p in products} | set(admin_ids)
    taken_keys = {url_key(p[2]) for p in products}
    new_products = []
    for pid, intent in sorted(admin_ids.items()):
        if pid in {p[0] for p in products}:
            continue
        quoted = [q for q in intent.split('"')[1::2] if q.strip()]
        name = quoted[0].strip() if quoted else f"Product {pid}"
        key = url_key(name) if url_key(name) not in taken_keys else f"{url_key(name)}-{pid}"
        taken_keys.add(key)
        price = ADMIN_TASK_PRICES.get(pid) or _slug_price(key)
        new_products.append((pid, f"MINI{pid:06d}", name, key, price, 100))
    pid = max(p[0] for p in products)
    for key in sorted(p for p in shop_paths if "/" not in p and p not in cat_paths and p not in taken_keys):
        pid += 1
        while pid in taken_ids:
            pid += 1
        taken_ids.add(pid)
        letters = "".join(c for c in key.upper() if c.isalnum())[:5].ljust(5, "X")
        new_products.append((pid, f"B{pid:04d}{letters}", title_from_slug(key), key, _slug_price(key), 100))
    return new_cats, sorted(new_products)


def url_key(name: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in name.lower()).split())


def _slug_price(key: str) -> float:
    """A stable price between $5.99 and $94.99, from the URL key alone."""
    return round(5.99 + int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 90, 2)


def load_task_pages(path: Path = TASK_PAGES) -> list[dict]:
    return json.loads(path.read_text()) if path.exists() else []


def password_hash(password: str, salt: str) -> str:
    """Magento-style ``hash:salt:version`` string (PBKDF2-SHA256 here; the salt is fixed per row)."""
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), 10_000).hex()
    return f"{digest}:{salt}:pbkdf2"


def check_password(stored: str, password: str) -> bool:
    import hmac

    try:
        _, salt, _ = stored.split(":")
    except ValueError:
        return False
    return hmac.compare_digest(stored, password_hash(password, salt))


def seed(db: Database, pages: list[dict] | None = None) -> None:
    extra_cats, extra_products = task_page_items(load_task_pages() if pages is None else pages)
    with db.cursor() as cur:
        for ddl in [*SCHEMA, SESSIONS_DDL, *TRIGGERS]:
            cur.execute(ddl)
        cur.executemany("INSERT INTO core_config_data (scope, scope_id, path, value) VALUES ('default', 0, %s, %s)",
                        CONFIG)
        cur.executemany("INSERT INTO indexer_state (indexer_id, title) VALUES (%s, %s)", INDEXERS)
        cur.executemany("INSERT INTO mview_state (view_id, mode) VALUES (%s, 'disabled')", [(i,) for i, _ in INDEXERS])
        uid, user, pw, first, last, email = ADMIN
        cur.execute("INSERT INTO admin_user VALUES (%s, %s, %s, %s, %s, %s, 1)",
                    (uid, first, last, email, user, password_hash(pw, f"admin{uid:04d}")))
        for cid, email, first, last, pw in CUSTOMERS:
            cur.execute("INSERT INTO customer_entity VALUES (%s, %s, %s, %s, %s, '2022-06-01 09:00:00')",
                        (cid, email, first, last, password_hash(pw, f"cust{cid:04d}")))
        cur.executemany("INSERT INTO catalog_category_entity VALUES (%s, %s, %s, %s, %s)",
                        [(i, p, n, u, i) for i, p, n, u in CATEGORIES])
        prices = {}
        for pid, sku, name, price, qty, cats in PRODUCTS:
            prices[pid] = (sku, name, price)
            key = url_key(name)
            cur.execute("INSERT INTO catalog_product_entity VALUES (%s, %s, %s, %s, %s, 1, %s, %s)",
                        (pid, sku, name, key, price, qty, f"{name}. Ships from One Stop Market."))
            cur.executemany("INSERT INTO catalog_category_product VALUES (%s, %s, %s)", [(c, pid, pid) for c in cats])
        # The start pages' items (after the hand-made catalog, so those ids and keys stay as they are).
        cur.executemany("INSERT INTO catalog_category_entity VALUES (%s, %s, %s, %s, %s)",
                        [(i, p, n, u, i) for i, p, n, u in extra_cats])
        cur.executemany("INSERT INTO catalog_product_entity VALUES (%s, %s, %s, %s, %s, 1, %s, %s)",
                        [(pid, sku, name, key, price, qty, f"{name}. Ships from One Stop Market.")
                         for pid, sku, name, key, price, qty in extra_products])
        for oid, cid, status, created, lines, shipping in ORDERS:
            _, email, first, last, _ = CUSTOMERS[cid - 1]
            subtotal = round(sum(prices[p][2] * q for p, q in lines), 2)
            cur.execute("INSERT INTO sales_order VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                        (oid, f"{oid:09d}", cid, email, first, last, "new" if status == "pending" else status, status,
                         subtotal, shipping, round(subtotal + shipping, 2), created, created))
            for p, q in lines:
                sku, name, price = prices[p]
                cur.execute("INSERT INTO sales_order_item (order_id, product_id, sku, name, qty_ordered, price,"
                            " row_total) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                            (oid, p, sku, name, q, price, round(price * q, 2)))
        for r in REVIEWS:
            cur.execute("INSERT INTO review (product_id, status_id, customer_id, nickname, title, detail, rating,"
                        " created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", r)
        for cid, street, city, region, postcode, phone in ADDRESSES:
            _, _, first, last, _ = CUSTOMERS[cid - 1]
            cur.execute("INSERT INTO customer_address_entity (entity_id, parent_id, firstname, lastname, street, city,"
                        " region, postcode, country_id, telephone) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 'US', %s)",
                        (cid, cid, first, last, street, city, region, postcode, phone))
        cur.execute("INSERT INTO newsletter_subscriber (subscriber_id, customer_id, subscriber_email, subscriber_status)"
                    " VALUES (1, 1, 'emma.lopez@gmail.com', 1)")
        for n, (ident, title, heading, content) in enumerate(CMS_PAGES, 1):
            cur.execute("INSERT INTO cms_page (page_id, title, page_layout, identifier, content_heading, content,"
                        " creation_time, update_time, is_active) VALUES (%s, %s, '1column', %s, %s, %s,"
                        " '2022-06-01 09:00:00', '2022-06-01 09:00:00', 1)", (n, title, ident, heading, content))
        for n, (ident, title, content) in enumerate(CMS_BLOCKS, 1):
            cur.execute("INSERT INTO cms_block VALUES (%s, %s, %s, %s, '2022-06-01 09:00:00', '2022-06-01 09:00:00', 1)",
                        (n, title, ident, content))
        for n, (name, desc, start, end, active, action, amount) in enumerate(SALES_RULES, 1):
            cur.execute("INSERT INTO salesrule (rule_id, name, description, from_date, to_date, uses_per_customer,"
                        " is_active, simple_action, discount_amount) VALUES (%s, %s, %s, %s, %s, 0, %s, %s, %s)",
                        (n, name, desc, start, end, active, action, amount))
        # Emma starts with one item in her cart and one in her wish list.
        cur.execute("INSERT INTO quote (entity_id, customer_id, is_active) VALUES (1, 1, 1)")
        cur.execute("INSERT INTO quote_item (quote_id, product_id, qty) VALUES (1, 12, 1)")
        cur.execute("INSERT INTO wishlist (wishlist_id, customer_id) VALUES (1, 1)")
        cur.execute("INSERT INTO wishlist_item (wishlist_id, product_id, qty) VALUES (1, 9, 1)")


if __name__ == "__main__":
    task_pages = load_task_pages()
    cats, prods = task_page_items(task_pages)
    seed(Database(os.environ["MINIWEB_DB"]), task_pages)
    print(f"magento seed: done ({len(task_pages)} task start pages: +{len(cats)} categories,"
          f" +{len(prods)} products)", flush=True)
