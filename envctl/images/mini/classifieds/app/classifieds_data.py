"""Seed data of the mini classifieds site (Osclass-like schema) and the two SQL files made from it.

``osclass_craigslist.sql`` is the full populate script (drop, create, insert: re-running it gives
the same state, as the upstream populate step expects). ``classifieds_restore.sql`` is the narrow
reset the web container's ``index.php?page=reset`` runs: it deletes every listing with an id at or
above ``RESTORE_FROM_ID`` (Blake's listings and anything agents posted) and re-inserts Blake's
seed listings, like upstream's restore file. Everything is fixed: ids, texts, timestamps.

Every listing id a VisualWebArena start page names (``task_pages.json``, made by
``scripts/task_pages.py``) is added with that exact id, so ``index.php?page=item&id=N`` opens a
listing as it does upstream (see ``task_items``). The file is looked up next to this module (as the
images copy it) or in the source tree's ``classifieds/files/``; ``TASK_PAGES`` overrides the path.

Usage: ``python3 -m sites.classifieds_data {craigslist|restore} OUT.sql``
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlparse
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

SEED_NOW = datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc)  # miniweb.core.SEED_EPOCH
RESTORE_FROM_ID = 84143  # upstream's restore deletes items with id >= 84143
BENCHMARK_EMAIL = "blake.sullivan@gmail.com"
BENCHMARK_PASSWORD = "Password.123"
PASSWORD_ITERATIONS = 1000


def hash_password(password: str, salt: str) -> str:
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), PASSWORD_ITERATIONS).hex()
    return f"pbkdf2_sha256${PASSWORD_ITERATIONS}${salt}${digest}"


@dataclass(frozen=True)
class Category:
    id: int
    parent: int | None
    name: str
    slug: str


@dataclass(frozen=True)
class User:
    id: int
    name: str
    username: str
    email: str
    password: str
    phone: str
    city: str
    region: str


@dataclass(frozen=True)
class Item:
    id: int
    user: int | None
    category: int
    title: str
    description: str
    price: int | None  # whole dollars; stored like Osclass as i_price = dollars * 1_000_000
    city: str
    region: str
    zip: str
    days_ago: int
    images: int = 1


CATEGORIES = [
    Category(1, None, "For Sale", "for-sale"),
    Category(2, 1, "Antiques", "antiques"),
    Category(3, 1, "Appliances", "appliances"),
    Category(4, 1, "Bicycles", "bicycles"),
    Category(5, 1, "Cars + trucks", "cars-trucks"),
    Category(6, 1, "Cell phones", "cell-phones"),
    Category(7, 1, "Computers", "computers"),
    Category(8, 1, "Electronics", "electronics"),
    Category(9, 1, "Furniture", "furniture"),
    Category(10, 1, "Musical instruments", "musical-instruments"),
    Category(11, 1, "Video gaming", "video-gaming"),
    Category(12, None, "Housing", "housing"),
    Category(13, 12, "Apartments / housing for rent", "apartments-housing-for-rent"),
    Category(14, None, "Services", "services"),
    Category(15, 14, "Household services", "household-services"),
]

USERS = [
    User(1, "Blake Sullivan", "blake", BENCHMARK_EMAIL, BENCHMARK_PASSWORD, "412-555-0147", "Pittsburgh", "Pennsylvania"),
    User(2, "Maria Gonzalez", "mgonzalez", "maria.gonzalez@example.com", "Maria.2023", "412-555-0112", "Pittsburgh", "Pennsylvania"),
    User(3, "Kevin Chen", "kchen", "kevin.chen@example.com", "Kevin.2023", "215-555-0190", "Philadelphia", "Pennsylvania"),
    User(4, "Aisha Patel", "apatel", "aisha.patel@example.com", "Aisha.2023", "614-555-0133", "Columbus", "Ohio"),
    User(5, "Tom Becker", "tbecker", "tom.becker@example.com", "Tom.2023", "216-555-0178", "Cleveland", "Ohio"),
]

# Listings by other users; ids are spread over upstream's range (a few are ids VWA tasks name).
_OTHER = [
    (4799, 5, "2012 Honda Civic LX sedan, silver", "Clean title, 98k miles, new tires and brakes. Silver exterior, gray cloth interior.", 7800),
    (10066, 9, "Mid-century walnut dresser", "Solid walnut six-drawer dresser from the 1960s. Minor scratches on top.", 350),
    (35838, 4, "Trek FX 2 hybrid bike, size M", "Ridden one season. Includes lights and a lock. Blue frame.", 520),
    (39343, 8, "Sony 55 inch 4K TV", "Works perfectly, wall mount included. Remote and original box.", 400),
    (1201, 2, "Antique brass telescope", "Decorative brass telescope on a wooden tripod, about 1920s.", 180),
    (2417, 3, "Whirlpool front-load washer", "Energy Star washer, 4.5 cu ft. Pick up only.", 250),
    (5532, 6, "iPhone 12, 128GB, unlocked", "Black, battery health 86%. Small scratch on the back.", 330),
    (7718, 7, "Dell XPS 13 laptop (2020)", "i7, 16GB RAM, 512GB SSD. Charger included.", 600),
    (12950, 10, "Yamaha acoustic guitar FG800", "Natural finish, with gig bag and spare strings.", 150),
    (15004, 11, "Nintendo Switch with two games", "Neon red/blue Joy-Cons, Mario Kart 8 and Zelda.", 260),
    (18321, 5, "2008 Ford F-150 XLT, red", "4x4, 150k miles, towing package, runs great.", 9500),
    (21876, 9, "Gray sectional sofa", "L-shaped sectional, pet-free and smoke-free home.", 450),
    (25410, 13, "1BR apartment in Shadyside", "Sunny one-bedroom, heat included, available December 1.", 1250),
    (28733, 15, "House cleaning, weekly or biweekly", "Experienced cleaner, references available. Price per visit.", 90),
    (31290, 4, "Kids bike 20 inch, green", "Great starter bike, training wheels removed.", 60),
    (42012, 8, "Bose SoundLink speaker", "Bluetooth speaker, black, like new.", 70),
    (45577, 9, "Oak dining table with 4 chairs", "Seats six with the leaf. Some wear on chairs.", 275),
    (50231, 5, "2015 Toyota Camry SE, black", "One owner, 72k miles, backup camera.", 13900),
    (55802, 7, "Mechanical keyboard, brown switches", "Tenkeyless, white backlight, USB-C.", 45),
    (61007, 3, "Stainless steel microwave", "1.1 cu ft countertop microwave, works fine.", 40),
    (66190, 10, "Digital piano Casio PX-160", "88 weighted keys, stand and pedal included.", 380),
    (70455, 11, "PlayStation 4 Pro 1TB", "Two controllers, HDMI cable, no games.", 210),
    (74318, 6, "Samsung Galaxy S21, gray", "Unlocked, case and screen protector since day one.", 290),
    (78840, 2, "Victorian oak rocking chair", "Hand-carved rocking chair, sturdy.", 120),
    (81122, 13, "Room for rent near Oakland", "Furnished room in a 3BR house, utilities included.", 700),
]

# Blake Sullivan's listings (the benchmark account); 84144 is the white car of VWA classifieds task 4.
_BLAKE = [
    (84143, 9, "Blue velvet armchair", "Comfortable blue velvet armchair, great condition. Asking $150.", 150),
    (84144, 5, "2016 Toyota Corolla LE, white", "White 2016 Corolla, 45k miles, single owner. Asking $30000 or best offer.", 30000),
    (84145, 7, "MacBook Air M1 2020", "Space gray, 8GB/256GB, battery cycle count 120. Asking $650.", 650),
    (84146, 4, "Specialized road bike, 56cm", "Aluminum frame, Shimano 105. Asking $700.", 700),
    (84147, 8, "Canon EOS Rebel T7 camera kit", "Two lenses, bag and 64GB card. Asking $400.", 400),
    (84148, 9, "White IKEA bookshelf", "Billy bookshelf, white, 80x202 cm. Asking $40.", 40),
    (84149, 10, "Fender Stratocaster, sunburst", "Mexican Strat, 2018, with hard case. Asking $550.", 550),
    (84150, 11, "Xbox Series S", "512GB, one controller, box included. Asking $220.", 220),
    (84151, 3, "KitchenAid stand mixer, red", "Artisan 5-quart, lightly used. Asking $200.", 200),
    (84152, 6, "Google Pixel 7, 128GB", "Obsidian, unlocked, with charger. Asking $320.", 320),
    (84153, 2, "Antique mantel clock", "Wooden mantel clock, chimes every hour. Asking $90.", 90),
    (84154, 15, "Lawn mowing service", "Weekly lawn mowing in Pittsburgh east end. $35 per visit.", 35),
]
NEXT_ITEM_ID = 84155


def _items() -> list[Item]:
    out = []
    for n, (iid, cat, title, desc, price) in enumerate(_OTHER):
        u = USERS[1 + n % (len(USERS) - 1)]
        out.append(Item(iid, u.id, cat, title, desc, price, u.city, u.region, f"15{200 + n:03d}", 40 - n))
    for n, (iid, cat, title, desc, price) in enumerate(_BLAKE):
        out.append(Item(iid, 1, cat, title, desc, price, "Pittsburgh", "Pennsylvania", "15213", 12 - n))
    return out


ITEMS = _items()

# Listings the VWA start pages name (by id) that the seed above lacks: (category, title, description,
# price), the title taken from what the task's intent says about the item. An id named by a start page
# but missing here still gets a listing, with a readable generic title (``_generic``).
TASK_ITEM_HINTS: dict[int, tuple[int, str, str, int]] = {
    13215: (2, "Vintage Christmas cards and envelopes", "A lot of vintage holiday greeting cards with their envelopes,"
            " some Santa Claus themed. Sold together.", 25),
    16826: (2, "Framed insect specimen", "Real insect specimen mounted in a glass-front shadow box frame.", 40),
    23338: (2, "Sterling silver ring", "Sterling silver ring, size 7. Lightly worn, polished.", 45),
    27156: (1, "Wooden pallets", "Used wooden pallets in good shape, 48 x 40 inches. Price is per pallet;"
            " ask about larger quantities.", 8),
    28914: (11, "Cartoon character figures", "Set of collectible cartoon character figures, about 4 inches tall.", 30),
    34501: (9, "Round wooden side table", "Small round side table, solid wood. Diameter stated as 20 inches.", 60),
    41938: (8, "Portable external hard drive, 2TB", "2TB portable hard drive with its original cable. Works perfectly.", 55),
    42770: (2, "Vintage gold ring", "Vintage 14k gold ring with a small stone, size 6.", 120),
    43183: (1, "Watercolor paint palette", "Artist watercolor palette, barely used. Full pans in many colors.", 18),
    43887: (8, "Wireless router", "Dual-band wireless router with power adapter. Reset to factory settings.", 35),
    47824: (2, "Handmade silver band ring", "Hand-hammered silver band ring, size 8.", 35),
    48575: (3, "Set of ceramic bowls", "Matching set of ceramic cereal bowls, dishwasher and microwave safe.", 20),
    65673: (1, "Eyeshadow palette", "Eyeshadow palette, swatched once. Shades shown in the photo.", 22),
    74603: (1, "Sports jerseys", "Two replica sports jerseys, adult size L. Numbers as shown in the photo.", 50),
    79640: (2, "Elvis Presley concert photo print", "Framed print of Elvis Presley performing on stage.", 75),
}
_GENERIC = ["Household item", "Collectible", "Home decor piece", "Miscellaneous item", "Gift item"]


def _generic(item_id: int) -> tuple[int, str, str, int]:
    noun = _GENERIC[item_id % len(_GENERIC)]
    return 1, f"{noun} #{item_id}", f"{noun} in good condition. Pick up or local delivery.", 10 + item_id % 90


def task_pages_path() -> Path:
    """``task_pages.json``: ``$TASK_PAGES``, else next to this module (images), else the source tree's copy."""
    if os.environ.get("TASK_PAGES"):
        return Path(os.environ["TASK_PAGES"])
    here = Path(__file__).resolve().parent
    for candidate in (here / "task_pages.json", here.parent / "files" / "task_pages.json"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"task_pages.json not found next to {here} (set TASK_PAGES)")


def task_item_ids(pages: list[dict]) -> list[int]:
    """Every listing id a start page names (``page=item&id=N``, any path: Apache rewrites it to index.php)."""
    ids = set()
    for entry in pages:
        query = parse_qs(urlparse(entry["path"]).query)
        if query.get("page") == ["item"] and query.get("id", [""])[0].isdigit():
            ids.add(int(query["id"][0]))
    return sorted(ids)


def task_items(path: Path | None = None) -> list[Item]:
    """Listings for the start pages' ids the seed lacks (seed ids stay as they are); deterministic."""
    pages = json.loads((path or task_pages_path()).read_text(encoding="utf-8"))
    seeded = {i.id for i in ITEMS}
    sellers = USERS[1:]  # never Blake: his listings are the ones the reset restores
    out = []
    for iid in task_item_ids(pages):
        if iid in seeded:
            continue
        cat, title, desc, price = TASK_ITEM_HINTS.get(iid) or _generic(iid)
        u = sellers[iid % len(sellers)]
        # Older than every seed listing, so the home page's latest listings stay Blake's.
        out.append(Item(iid, u.id, cat, title, desc, price, u.city, u.region, f"15{iid % 1000:03d}", 45 + iid % 60))
    return out


def all_items() -> list[Item]:
    return ITEMS + task_items()


def next_item_id(items: list[Item]) -> int:
    return max([NEXT_ITEM_ID] + [i.id + 1 for i in items])

DDL = [
    """CREATE TABLE oc_t_category (
  pk_i_id INT UNSIGNED NOT NULL AUTO_INCREMENT, fk_i_parent_id INT UNSIGNED NULL,
  i_position INT NOT NULL DEFAULT 0, b_enabled TINYINT(1) NOT NULL DEFAULT 1, s_icon VARCHAR(250) NULL,
  PRIMARY KEY (pk_i_id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE oc_t_category_description (
  fk_i_category_id INT UNSIGNED NOT NULL, fk_c_locale_code CHAR(5) NOT NULL,
  s_name VARCHAR(100) NULL, s_description TEXT NULL, s_slug VARCHAR(255) NOT NULL,
  PRIMARY KEY (fk_i_category_id, fk_c_locale_code)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE oc_t_user (
  pk_i_id INT UNSIGNED NOT NULL AUTO_INCREMENT, dt_reg_date DATETIME NOT NULL, dt_mod_date DATETIME NULL,
  s_name VARCHAR(100) NOT NULL, s_username VARCHAR(100) NOT NULL, s_password VARCHAR(160) NOT NULL,
  s_secret VARCHAR(40) NULL, s_email VARCHAR(100) NULL, s_website VARCHAR(100) NULL,
  s_phone_land VARCHAR(45) NULL, s_phone_mobile VARCHAR(45) NULL, b_enabled TINYINT(1) NOT NULL DEFAULT 1,
  b_active TINYINT(1) NOT NULL DEFAULT 0, s_country VARCHAR(40) NULL, s_region VARCHAR(100) NULL,
  s_city VARCHAR(100) NULL, i_items INT UNSIGNED NULL DEFAULT 0,
  PRIMARY KEY (pk_i_id), UNIQUE KEY (s_email)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE oc_t_item (
  pk_i_id INT UNSIGNED NOT NULL AUTO_INCREMENT, fk_i_user_id INT UNSIGNED NULL, fk_i_category_id INT UNSIGNED NOT NULL,
  dt_pub_date DATETIME NOT NULL, dt_mod_date DATETIME NULL, i_price BIGINT NULL, fk_c_currency_code CHAR(3) NULL,
  s_contact_name VARCHAR(100) NULL, s_contact_email VARCHAR(140) NULL, s_ip VARCHAR(64) NOT NULL DEFAULT '',
  b_premium TINYINT(1) NOT NULL DEFAULT 0, b_enabled TINYINT(1) NOT NULL DEFAULT 1,
  b_active TINYINT(1) NOT NULL DEFAULT 0, b_spam TINYINT(1) NOT NULL DEFAULT 0, s_secret VARCHAR(40) NULL,
  b_show_email TINYINT(1) NULL, dt_expiration DATETIME NOT NULL DEFAULT '9999-12-31 23:59:59',
  PRIMARY KEY (pk_i_id), KEY (fk_i_user_id), KEY (fk_i_category_id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE oc_t_item_description (
  fk_i_item_id INT UNSIGNED NOT NULL, fk_c_locale_code CHAR(5) NOT NULL,
  s_title VARCHAR(100) NOT NULL, s_description MEDIUMTEXT NOT NULL,
  PRIMARY KEY (fk_i_item_id, fk_c_locale_code), FULLTEXT KEY (s_description, s_title))
  ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE oc_t_item_location (
  fk_i_item_id INT UNSIGNED NOT NULL, fk_c_country_code CHAR(2) NULL, s_country VARCHAR(40) NULL,
  s_address VARCHAR(100) NULL, s_zip VARCHAR(15) NULL, fk_i_region_id INT UNSIGNED NULL, s_region VARCHAR(100) NULL,
  fk_i_city_id INT UNSIGNED NULL, s_city VARCHAR(100) NULL, s_city_area VARCHAR(200) NULL,
  PRIMARY KEY (fk_i_item_id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE oc_t_item_resource (
  pk_i_id INT UNSIGNED NOT NULL AUTO_INCREMENT, fk_i_item_id INT UNSIGNED NOT NULL, s_name VARCHAR(60) NULL,
  s_extension VARCHAR(10) NULL, s_content_type VARCHAR(40) NULL, s_path VARCHAR(250) NULL,
  PRIMARY KEY (pk_i_id), KEY (fk_i_item_id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE oc_t_item_comment (
  pk_i_id INT UNSIGNED NOT NULL AUTO_INCREMENT, fk_i_item_id INT UNSIGNED NOT NULL, dt_pub_date DATETIME NOT NULL,
  s_title VARCHAR(200) NOT NULL, s_author_name VARCHAR(100) NOT NULL, s_author_email VARCHAR(100) NOT NULL,
  s_body TEXT NOT NULL, b_enabled TINYINT(1) NOT NULL DEFAULT 1, b_active TINYINT(1) NOT NULL DEFAULT 0,
  b_spam TINYINT(1) NOT NULL DEFAULT 0, fk_i_user_id INT UNSIGNED NULL, i_rating INT UNSIGNED NULL,
  PRIMARY KEY (pk_i_id), KEY (fk_i_item_id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
]
TABLES = ["oc_t_item_comment", "oc_t_item_resource", "oc_t_item_location", "oc_t_item_description", "oc_t_item",
          "oc_t_user", "oc_t_category_description", "oc_t_category"]
SESSIONS_DDL = (
    "CREATE TABLE IF NOT EXISTS miniweb_sessions ("
    " id VARCHAR(64) PRIMARY KEY, username VARCHAR(255) NOT NULL, created BIGINT NOT NULL)"
)


def q(value: object) -> str:
    """A SQL literal (the data is ours and fixed; this only has to escape quotes and backslashes)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, datetime):
        return "'" + value.strftime("%Y-%m-%d %H:%M:%S") + "'"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "''") + "'"


def _insert(table: str, rows: list[tuple]) -> str:
    return f"INSERT INTO {table} VALUES\n" + ",\n".join("(" + ", ".join(q(v) for v in r) + ")" for r in rows) + ";"


def _secret(seed: str) -> str:
    return hashlib.sha1(seed.encode()).hexdigest()[:8]


def item_rows(items: list[Item]) -> list[str]:
    users = {u.id: u for u in USERS}
    item, desc, loc, res = [], [], [], []
    for it in items:
        pub = (SEED_NOW - timedelta(days=it.days_ago, hours=it.id % 11)).replace(tzinfo=None)
        u = users.get(it.user) if it.user else None
        price = None if it.price is None else it.price * 1_000_000
        item.append((it.id, it.user, it.category, pub, None, price, "USD", u.name if u else None,
                     u.email if u else None, "", 0, 1, 1, 0, _secret(f"item{it.id}"), 0,
                     datetime(9999, 12, 31, 23, 59, 59)))
        desc.append((it.id, "en_US", it.title, it.description))
        loc.append((it.id, "US", "United States", None, it.zip, None, it.region, None, it.city, None))
        for k in range(it.images):
            rid = it.id * 10 + k
            res.append((rid, it.id, f"{rid}", "png", "image/png", "oc-content/uploads/0/"))
    return [_insert("oc_t_item", item), _insert("oc_t_item_description", desc),
            _insert("oc_t_item_location", loc), _insert("oc_t_item_resource", res)]


def comment_rows() -> list[tuple]:
    """Two seeded comments on listings the reset leaves alone (ids below RESTORE_FROM_ID)."""
    others = [i for i in ITEMS if i.id < RESTORE_FROM_ID][:2]
    users = {u.id: u for u in USERS}
    rows = []
    for n, it in enumerate(others, 1):
        u = users[1 + n]
        pub = (SEED_NOW - timedelta(days=it.days_ago - 1)).replace(tzinfo=None)
        rows.append((n, it.id, pub, "Still available?", u.name, u.email, f"Is the {it.title.lower()} still available?",
                     1, 1, 0, u.id, None))
    return rows


def craigslist_sql() -> str:
    out = ["-- osclass_craigslist.sql: full populate of the mini classifieds DB (idempotent).",
           "SET NAMES utf8mb4;", "SET FOREIGN_KEY_CHECKS=0;"]
    out += [f"DROP TABLE IF EXISTS {t};" for t in TABLES]
    out += [d + ";" for d in DDL]
    out.append(SESSIONS_DDL + ";")
    out.append(_insert("oc_t_category", [(c.id, c.parent, c.id, 1, None) for c in CATEGORIES]))
    out.append(_insert("oc_t_category_description", [(c.id, "en_US", c.name, None, c.slug) for c in CATEGORIES]))
    reg = (SEED_NOW - timedelta(days=400)).replace(tzinfo=None)
    items = all_items()
    out.append(_insert("oc_t_user", [
        (u.id, reg, None, u.name, u.username, hash_password(u.password, f"salt{u.id:04d}"), _secret(u.email), u.email,
         None, u.phone, None, 1, 1, "United States", u.region, u.city, sum(1 for i in items if i.user == u.id))
        for u in USERS]))
    out += item_rows(items)
    out.append(_insert("oc_t_item_comment", comment_rows()))
    nxt = next_item_id(items)
    out.append(f"ALTER TABLE oc_t_item AUTO_INCREMENT = {nxt};")
    out.append(f"ALTER TABLE oc_t_item_resource AUTO_INCREMENT = {nxt * 10};")
    out.append("SET FOREIGN_KEY_CHECKS=1;")
    return "\n".join(out) + "\n"


def restore_sql() -> str:
    items = all_items()
    restored = [i for i in items if i.id >= RESTORE_FROM_ID]  # Blake's seed (and any start-page id up there)
    blake = [i for i in restored if i.user == 1]
    out = ["-- classifieds_restore.sql: restore the listings agents can change (like upstream's restore).",
           "SET NAMES utf8mb4;", "START TRANSACTION;"]
    for table, col in (("oc_t_item_comment", "fk_i_item_id"), ("oc_t_item_resource", "fk_i_item_id"), ("oc_t_item_location", "fk_i_item_id"),
                       ("oc_t_item_description", "fk_i_item_id"), ("oc_t_item", "pk_i_id")):
        out.append(f"DELETE FROM {table} WHERE {col} >= {RESTORE_FROM_ID};")
    out += item_rows(restored)
    out.append(f"UPDATE oc_t_user SET i_items = {len(blake)}, dt_mod_date = NULL WHERE pk_i_id = 1;")
    out.append("COMMIT;")
    nxt = next_item_id(items)
    out.append(f"ALTER TABLE oc_t_item AUTO_INCREMENT = {nxt};")
    out.append(f"ALTER TABLE oc_t_item_resource AUTO_INCREMENT = {nxt * 10};")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("craigslist", "restore"):
        print("usage: python3 -m sites.classifieds_data {craigslist|restore} OUT.sql", file=sys.stderr)
        return 2
    text = craigslist_sql() if argv[0] == "craigslist" else restore_sql()
    with open(argv[1], "w", encoding="utf-8") as fh:
        fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
