"""Mini classifieds: an Osclass-like site (VisualWebArena's "classifieds") on the miniweb core.

Like Osclass, every page is ``index.php`` with ``page``/``action`` parameters and every link is
``CLASSIFIEDS + 'index.php?...'`` (Osclass's ``WEB_PATH`` concatenation: a base URL without its
trailing slash breaks links exactly as upstream). The database is a separate MariaDB container
(``DB_HOST``, root / password, database ``osclass``); sessions live server-side in that DB under
Osclass's cookie name ``osclass``. ``POST index.php?page=reset`` with ``token=RESET_TOKEN`` runs
``classifieds_restore.sql`` through the mysql client, as upstream's reset controller does.

Environment: ``CLASSIFIEDS`` (public base URL, trailing slash), ``RESET_TOKEN``, ``DB_HOST``,
``DB_USER``, ``DB_PASSWORD``, ``DB_NAME``, ``MINIWEB_PORT`` (default 9980).
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import os
import struct
import subprocess
import zlib
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import quote, unquote, urlencode

DB_HOST = os.environ.get("DB_HOST", "db")
DB_USER = os.environ.get("DB_USER", "root")
DB_PASSWORD = os.environ.get("DB_PASSWORD", "password")
DB_NAME = os.environ.get("DB_NAME", "osclass")
os.environ.setdefault(
    "MINIWEB_DB", f"mysql://{quote(DB_USER, safe='')}:{quote(DB_PASSWORD, safe='')}@{DB_HOST}:3306/{DB_NAME}"
)

from flask import Response, g, make_response, redirect, request  # noqa: E402

from miniweb.core import create_app, esc, serve  # noqa: E402

WEB = os.environ.get("CLASSIFIEDS", "http://127.0.0.1:9980/")
RESET_TOKEN = os.environ.get("RESET_TOKEN", "4b61655535e7ed388f0d40a93600254c")
RESTORE_SQL = os.environ.get("CLASSIFIEDS_RESTORE_SQL", "/usr/src/myapp/classifieds_restore.sql")
PAGE_SIZE = 10
FLASH_COOKIE = "osc_flash"

app = create_app("classifieds", cookie="osclass")
db = app.db  # type: ignore[attr-defined]
sessions = app.sessions  # type: ignore[attr-defined]


# ---------------------------------------------------------------- URLs, formatting, flash messages

def url(**params: Any) -> str:
    """``WEB_PATH . 'index.php?...'`` as Osclass builds it."""
    return WEB + "index.php" + ("?" + urlencode(params) if params else "")


def item_url(item_id: int) -> str:
    return url(page="item", id=item_id)


def format_price(i_price: int | None) -> str:
    if i_price is None:
        return "Check with seller"
    if i_price == 0:
        return "Free"
    return f"{Decimal(i_price) / 1_000_000:.2f} $"


def format_date(value: datetime | None) -> str:
    return value.strftime("%B %d, %Y") if value else ""


def flash(response: Response, message: str, kind: str = "ok") -> Response:
    response.set_cookie(FLASH_COOKIE, quote(f"{kind}|{message}"), path="/", httponly=True, samesite="Lax")
    return response


def take_flash() -> str:
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw:
        return ""
    kind, _, message = unquote(raw).partition("|")
    g.clear_flash = True
    return f'<div id="flashmessage" class="flashmessage flashmessage-{esc(kind)}">{esc(message)}</div>'


@app.after_request
def _clear_flash(response: Response) -> Response:
    if g.get("clear_flash") and FLASH_COOKIE not in str(response.headers.get_all("Set-Cookie")):
        response.delete_cookie(FLASH_COOKIE, path="/")
    return response


def param(name: str, default: str = "") -> str:
    """Osclass's Params::getParam: GET and POST alike."""
    return request.values.get(name, default)


# ---------------------------------------------------------------- data access

ITEM_SELECT = (
    "SELECT i.pk_i_id, i.fk_i_user_id, i.fk_i_category_id, i.dt_pub_date, i.dt_mod_date, i.i_price,"
    " i.s_contact_name, i.s_contact_email, i.s_secret, d.s_title, d.s_description, l.s_city, l.s_region,"
    " l.s_zip, cd.s_name, (SELECT MIN(r.pk_i_id) FROM oc_t_item_resource r WHERE r.fk_i_item_id = i.pk_i_id)"
    " FROM oc_t_item i JOIN oc_t_item_description d ON d.fk_i_item_id = i.pk_i_id AND d.fk_c_locale_code = 'en_US'"
    " LEFT JOIN oc_t_item_location l ON l.fk_i_item_id = i.pk_i_id"
    " LEFT JOIN oc_t_category_description cd ON cd.fk_i_category_id = i.fk_i_category_id"
    " AND cd.fk_c_locale_code = 'en_US'"
)
ITEM_KEYS = ("id", "user_id", "category_id", "pub_date", "mod_date", "price", "contact_name", "contact_email",
             "secret", "title", "description", "city", "region", "zip", "category", "resource")


def _item(row: tuple | None) -> dict[str, Any] | None:
    return dict(zip(ITEM_KEYS, row)) if row else None


def get_item(item_id: int) -> dict[str, Any] | None:
    return _item(db.one(ITEM_SELECT + " WHERE i.pk_i_id = %s AND i.b_enabled = 1", (item_id,)))


def categories() -> list[tuple[int, int | None, str]]:
    return db.all(
        "SELECT c.pk_i_id, c.fk_i_parent_id, d.s_name FROM oc_t_category c JOIN oc_t_category_description d"
        " ON d.fk_i_category_id = c.pk_i_id AND d.fk_c_locale_code = 'en_US' WHERE c.b_enabled = 1"
        " ORDER BY c.i_position")


def current_user() -> dict[str, Any] | None:
    if not g.get("user"):
        return None
    if "user_row" not in g:
        row = db.one("SELECT pk_i_id, s_name, s_email FROM oc_t_user WHERE pk_i_id = %s", (g.user,))
        g.user_row = dict(zip(("id", "name", "email"), row)) if row else None
    return g.user_row


def verify_password(stored: str, password: str) -> bool:
    try:
        scheme, iterations, salt, digest = stored.split("$")
    except ValueError:
        return False
    if scheme != "pbkdf2_sha256":
        return False
    got = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), int(iterations)).hex()
    return hmac.compare_digest(got, digest)


# ---------------------------------------------------------------- layout

CSS = """
body{font-family:Arial,Helvetica,sans-serif;margin:0;color:#3d3d3d;background:#f7f7f7}
.wrapper{max-width:1000px;margin:0 auto;padding:0 10px}
#header{background:#fff;border-bottom:1px solid #ddd;padding:10px 0}
#logo a{font-size:26px;font-weight:bold;color:#2d7ec3;text-decoration:none}
#header .nav{float:right;list-style:none;margin:0;padding:0}#header .nav li{display:inline;margin-left:8px}
.btn-publish{background:#f2a900;color:#fff;padding:5px 10px;border-radius:3px;text-decoration:none}
.search{clear:both;background:#2d7ec3;padding:10px}
.search input,.search select{padding:5px}
.flashmessage{padding:10px;margin:10px 0;border-radius:3px}.flashmessage-ok{background:#dff0d8}
.flashmessage-error{background:#f2dede;color:#a94442}
.listing-card-list{list-style:none;padding:0}.listing-card{background:#fff;margin:6px 0;padding:8px;overflow:hidden}
.listing-thumb img{float:left;margin-right:10px;width:120px;height:90px}
.currency-value{font-weight:bold;color:#2d7ec3}.price{font-size:20px;font-weight:bold;color:#2d7ec3}
#sidebar{float:right;width:260px}#main{margin-right:280px}
.breadcrumb{list-style:none;padding:0}.breadcrumb li{display:inline}.breadcrumb li+li:before{content:" > "}
label{display:block;margin-top:8px}.control-group input[type=text],.control-group textarea{width:60%}
"""


def layout(title: str, body: str, *, sidebar: str = "") -> str:
    user = current_user()
    if user:
        nav = (f'<li class="first logged"><span>Hi {esc(user["name"])}!  ·  </span>'
               f'<strong><a href="{esc(url(page="user", action="dashboard"))}">My account</a></strong></li>'
               f'<li><a href="{esc(url(page="main", action="logout"))}">Logout</a></li>')
    else:
        nav = f'<li><a id="login_open" href="{esc(url(page="login"))}">Login</a></li>'
    nav += f'<li class="publish"><a class="btn-publish" href="{esc(url(page="item", action="item_add"))}">Publish Ad</a></li>'
    options = "".join(
        f'<option value="{cid}"{" selected" if param("sCategory") == str(cid) else ""}>'
        f'{"&nbsp;&nbsp;" if parent else ""}{esc(name)}</option>'
        for cid, parent, name in categories()
    )
    search = (
        f'<form action="{esc(WEB)}index.php" method="get" class="search nocsrf">'
        '<input type="hidden" name="page" value="search"/>'
        f'<input type="text" name="sPattern" id="query" class="input-text" value="{esc(param("sPattern"))}"'
        ' placeholder="ie. PHP Programmer" aria-label="Search"/>'
        f'<select name="sCategory" id="sCategory" aria-label="Category"><option value="">Select a category</option>{options}</select>'
        '<button class="ui-button ui-button-big js-submit" type="submit">Search</button></form>'
    )
    main = f'<div id="sidebar">{sidebar}</div><div id="main">{body}</div>' if sidebar else f'<div id="main-full">{body}</div>'
    return (
        "<!DOCTYPE html>\n<html lang=\"en-US\" dir=\"ltr\"><head><meta charset=\"utf-8\">"
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f'<header id="header"><div class="wrapper"><div id="logo"><a href="{esc(WEB)}">Classifieds</a></div>'
        f'<ul class="nav">{nav}</ul></div>{search}</header>'
        f'<div class="wrapper" id="content"><div id="flash_js"></div>{take_flash()}{main}</div>'
        '<footer><div class="wrapper"><p>This website is proudly using the classifieds scripts software'
        " <strong>Osclass</strong></p></div></footer></body></html>"
    )


def listing_cards(items: list[dict[str, Any]], *, owner_links: bool = False) -> str:
    if not items:
        return '<p class="empty">There are no results matching your search.</p>'
    out = ['<ul class="listing-card-list" id="listing-card-list">']
    for it in items:
        thumb = (f'<img src="{esc(WEB)}oc-content/uploads/0/{it["resource"]}_thumbnail.png" title="{esc(it["title"])}"'
                 f' alt="{esc(it["title"])}" width="240" height="200">') if it["resource"] else ""
        links = ""
        if owner_links:
            links = (f'<div class="item-actions"><a href="{esc(url(page="item", action="item_edit", id=it["id"]))}">Edit item</a>'
                     f' <span>|</span> <a class="delete" onclick="return confirm(\'This action can not be undone.'
                     f' Are you sure you want to continue?\')" href="'
                     f'{esc(url(page="item", action="item_delete", id=it["id"], secret=it["secret"]))}">Delete</a></div>')
        desc = it["description"][:250]
        out.append(
            f'<li class="listing-card"><a class="listing-thumb" href="{esc(item_url(it["id"]))}" title="{esc(it["title"])}">{thumb}</a>'
            '<div class="listing-detail"><div class="listing-cell"><div class="listing-data"><div class="listing-basicinfo">'
            f'<a href="{esc(item_url(it["id"]))}" class="title" title="{esc(it["title"])}">{esc(it["title"])}</a>'
            f'<div class="listing-attributes"><span class="category">{esc(it["category"] or "")}</span> -'
            f' <span class="location">{esc(it["city"] or "")} ({esc(it["region"] or "")})</span> <span class="g-hide">-</span>'
            f' {format_date(it["pub_date"])}<span class="currency-value">{esc(format_price(it["price"]))}</span></div>'
            f'<p>{esc(desc)}</p></div>{links}</div></div></div></li>'
        )
    out.append("</ul>")
    return "".join(out)


def html_response(body: str, status: int = 200) -> Response:
    resp = make_response(body, status)
    resp.headers["Content-Type"] = "text/html; charset=UTF-8"
    return resp


def go(target: str) -> Response:
    return redirect(target, code=302)


def user_menu() -> str:
    links = [("Dashboard", url(page="user", action="dashboard")), ("Manage your listings", url(page="user", action="items")),
             ("Logout", url(page="main", action="logout"))]
    return '<ul class="user_menu">' + "".join(f'<li><a href="{esc(h)}">{esc(t)}</a></li>' for t, h in links) + "</ul>"


# ---------------------------------------------------------------- pages

def home() -> Response:
    cats = categories()
    parents = [c for c in cats if c[1] is None]
    cat_html = "".join(
        f'<li><h2><a class="category" href="{esc(url(page="search", sCategory=pid))}">{esc(name)}</a></h2><ul>'
        + "".join(f'<li><a href="{esc(url(page="search", sCategory=cid))}">{esc(cn)}</a></li>' for cid, par, cn in cats if par == pid)
        + "</ul></li>"
        for pid, _, name in parents
    )
    rows = db.all(ITEM_SELECT + " WHERE i.b_enabled = 1 AND i.b_active = 1 ORDER BY i.dt_pub_date DESC, i.pk_i_id DESC LIMIT 12")
    body = (f'<div class="home-categories"><ul class="r-list">{cat_html}</ul></div>'
            f'<div class="latest_ads"><h1><strong>Latest Listings</strong></h1>{listing_cards([_item(r) for r in rows])}'
            f'<p class="see_more_link"><a href="{esc(url(page="search"))}"><strong>See all listings &raquo;</strong></a></p></div>')
    return html_response(layout("Classifieds", body))


def search() -> Response:
    pattern = param("sPattern").strip()
    where, args = ["i.b_enabled = 1", "i.b_active = 1"], []
    if pattern:
        where.append("(d.s_title LIKE %s OR d.s_description LIKE %s)")
        like = "%" + pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        args += [like, like]
    cat = param("sCategory")
    if cat.isdigit():
        where.append("(i.fk_i_category_id = %s OR i.fk_i_category_id IN (SELECT pk_i_id FROM oc_t_category WHERE fk_i_parent_id = %s))")
        args += [int(cat), int(cat)]
    order = "i.i_price" if param("sOrder") == "i_price" else "i.dt_pub_date"
    direction = "ASC" if param("iOrderType") == "asc" else "DESC"
    page_no = int(param("iPage")) if param("iPage").isdigit() and int(param("iPage")) > 0 else 1
    sql_where = " WHERE " + " AND ".join(where)
    total = db.one("SELECT COUNT(*) FROM oc_t_item i JOIN oc_t_item_description d ON d.fk_i_item_id = i.pk_i_id" + sql_where, tuple(args))[0]
    rows = db.all(ITEM_SELECT + sql_where + f" ORDER BY {order} {direction}, i.pk_i_id DESC LIMIT %s OFFSET %s",
                  tuple(args) + (PAGE_SIZE, (page_no - 1) * PAGE_SIZE))
    first = (page_no - 1) * PAGE_SIZE + 1 if total else 0
    last = min(page_no * PAGE_SIZE, total)
    pages = "".join(
        f'<a class="searchPaginationNonSelected" href="{esc(url(page="search", sPattern=pattern, sCategory=cat, iPage=n))}">{n}</a>'
        if n != page_no else f'<span class="searchPaginationSelected">{n}</span>'
        for n in range(1, (total + PAGE_SIZE - 1) // PAGE_SIZE + 1)
    )
    title = f'Search results for "{pattern}"' if pattern else "Search results"
    body = (f'<div class="list-header"><h1>{esc(title)}</h1><p class="counter-search">{first} - {last} of {total} listings</p></div>'
            f'{listing_cards([_item(r) for r in rows])}<div class="paginate">{pages}</div>')
    return html_response(layout(f"{title} - Classifieds", body))


def item_page(item_id: int) -> Response:
    it = get_item(item_id)
    if not it:
        return html_response(layout("Classifieds", '<div class="flashmessage flashmessage-error">This listing doesn\'t exist</div>'), 404)
    user = current_user()
    owner = bool(user and it["user_id"] == user["id"])
    photo = (f'<div id="photos"><img src="{esc(WEB)}oc-content/uploads/0/{it["resource"]}.png" alt="{esc(it["title"])}"'
             f' title="{esc(it["title"])}"></div>') if it["resource"] else ""
    edit = (f'<p id="edit_item_view"><strong><a href="{esc(url(page="item", action="item_edit", id=it["id"]))}">Edit item</a>'
            "</strong></p>") if owner else ""
    body = (
        f'<ul class="breadcrumb"><li><a href="{esc(WEB)}">Classifieds</a></li>'
        f'<li><a href="{esc(url(page="search", sCategory=it["category_id"]))}">{esc(it["category"] or "")}</a></li>'
        f'<li>{esc(it["title"])}</li></ul>'
        f'<div id="item-content"><ul class="item-header"><li><span class="price">{esc(format_price(it["price"]))}</span></li>'
        f'<li class="date">Published date: {format_date(it["pub_date"])}</li>'
        + (f'<li class="date">Modified date: {format_date(it["mod_date"])}</li>' if it["mod_date"] else "")
        + f'</ul><h1><strong>{esc(it["title"])}</strong></h1>{edit}{photo}'
        f'<div id="description"><p class="desc">{esc(it["description"])}</p>'
        f'<ul id="item_location"><li>Location: {esc(it["city"] or "")}, {esc(it["region"] or "")} {esc(it["zip"] or "")}</li></ul></div></div>'
    )
    sidebar = (f'<div id="contact" class="widget-box form-container form-vertical"><h2>Contact publisher</h2>'
               f'<p class="name">Name: {esc(it["contact_name"] or "")}</p></div>')
    return html_response(layout(f'{it["title"]} - Classifieds', body, sidebar=sidebar))


def login_form() -> Response:
    body = (
        '<div class="form-container form-horizontal"><div class="header"><h1>Access to your account</h1></div>'
        f'<div class="resp-wrapper"><form action="{esc(WEB)}index.php" method="post">'
        '<input type="hidden" name="page" value="login"/><input type="hidden" name="action" value="login_post"/>'
        '<div class="control-group"><label class="control-label" for="email">E-mail</label>'
        '<div class="controls"><input id="email" type="text" name="email" value=""/></div></div>'
        '<div class="control-group"><label class="control-label" for="password">Password</label>'
        '<div class="controls"><input id="password" type="password" name="password" value="" autocomplete="off"/></div></div>'
        '<div class="control-group"><div class="controls checkbox"><input type="checkbox" name="remember" id="remember" value="1"/>'
        ' <label for="remember">Remember me</label></div>'
        '<div class="controls"><button type="submit" class="ui-button ui-button-middle ui-button-main">Log in</button></div></div>'
        '</form></div></div>'
    )
    return html_response(layout("Login - Classifieds", body))


def login_post() -> Response:
    email, password = param("email").strip(), param("password")
    row = db.one("SELECT pk_i_id, s_password, b_enabled FROM oc_t_user WHERE s_email = %s OR s_username = %s", (email, email))
    if not row:
        return flash(go(url(page="login")), "The user doesn't exist", "error")
    if not verify_password(row[1], password):
        return flash(go(url(page="login")), "The password is incorrect", "error")
    if not row[2]:
        return flash(go(url(page="login")), "The user has been suspended", "error")
    return sessions.start(go(url(page="user", action="dashboard")), str(row[0]))


def logout() -> Response:
    return sessions.end(go(WEB))


def require_login() -> Response | None:
    if not current_user():
        return flash(go(url(page="login")), "You need to login first", "error")
    return None


def user_page(action: str) -> Response:
    user = current_user()
    assert user is not None
    rows = db.all(ITEM_SELECT + " WHERE i.fk_i_user_id = %s ORDER BY i.dt_pub_date DESC, i.pk_i_id DESC", (user["id"],))
    items = [_item(r) for r in rows]
    if action == "items":
        body = f'<h1>My listings</h1>{listing_cards(items, owner_links=True)}'
        return html_response(layout("My listings - Classifieds", body, sidebar=user_menu()))
    body = (f'<h1>Dashboard</h1><h2>Hi {esc(user["name"])}!</h2><h2>My listings</h2>'
            f'{listing_cards(items[:5], owner_links=True)}')
    return html_response(layout("Dashboard - Classifieds", body, sidebar=user_menu()))


def item_form(it: dict[str, Any] | None) -> Response:
    editing = it is not None
    it = it or {"id": "", "secret": "", "category_id": None, "title": "", "description": "", "price": None,
                "city": "", "region": "", "zip": ""}
    price = "" if it["price"] is None else f'{Decimal(it["price"]) / 1_000_000:.2f}'
    options = "".join(
        f'<option value="{cid}"{" selected" if cid == it["category_id"] else ""}>{"&nbsp;&nbsp;" if parent else ""}{esc(name)}</option>'
        for cid, parent, name in categories()
    )
    action = "item_edit_post" if editing else "item_add_post"
    body = (
        f'<div class="form-container form-vertical"><div class="header"><h1>{"Update your listing" if editing else "Publish a listing"}</h1></div>'
        f'<form name="item" action="{esc(WEB)}index.php" method="post">'
        f'<input type="hidden" name="action" value="{action}"/><input type="hidden" name="page" value="item"/>'
        f'<input type="hidden" name="id" value="{esc(it["id"])}"/><input type="hidden" name="secret" value="{esc(it["secret"])}"/>'
        '<fieldset><h2>General Information</h2>'
        f'<div class="control-group"><label class="control-label" for="catId">Category</label><div class="controls">'
        f'<select name="catId" id="catId"><option value="">Select a category</option>{options}</select></div></div>'
        '<div class="control-group"><label class="control-label" for="titleen_US">Title</label><div class="controls">'
        f'<input id="titleen_US" type="text" name="title[en_US]" value="{esc(it["title"])}"/></div></div>'
        '<div class="control-group"><label class="control-label" for="descriptionen_US">Description</label><div class="controls">'
        f'<textarea id="descriptionen_US" name="description[en_US]" rows="10">{esc(it["description"])}</textarea></div></div>'
        '<div class="control-group"><label class="control-label" for="price">Price</label><div class="controls">'
        f'<input id="price" type="text" name="price" value="{price}"/> <select name="currency" aria-label="Currency">'
        '<option value="USD" selected>$</option></select></div></div>'
        '<h2>Listing Location</h2>'
        f'<div class="control-group"><label class="control-label" for="region">Region</label><div class="controls">'
        f'<input id="region" type="text" name="region" value="{esc(it["region"] or "")}"/></div></div>'
        f'<div class="control-group"><label class="control-label" for="city">City</label><div class="controls">'
        f'<input id="city" type="text" name="city" value="{esc(it["city"] or "")}"/></div></div>'
        f'<div class="control-group"><label class="control-label" for="zip">ZIP</label><div class="controls">'
        f'<input id="zip" type="text" name="zip" value="{esc(it["zip"] or "")}"/></div></div>'
        f'<div class="controls"><button type="submit" class="ui-button ui-button-middle ui-button-main">'
        f'{"Update" if editing else "Publish"}</button></div></fieldset></form></div>'
    )
    return html_response(layout(("Edit your listing" if editing else "Publish a listing") + " - Classifieds", body))


def parse_listing_form() -> tuple[dict[str, Any] | None, str]:
    title = param("title[en_US]").strip()
    desc = param("description[en_US]").strip()
    cat = param("catId")
    raw_price = param("price").replace(",", "").replace("$", "").strip()
    if not cat.isdigit() or not db.one("SELECT 1 FROM oc_t_category WHERE pk_i_id = %s", (int(cat),)):
        return None, "Category invalid."
    if not title:
        return None, "Title too short (en_US)."
    if not desc:
        return None, "Description too short (en_US)."
    price: int | None = None
    if raw_price:
        try:
            price = int(Decimal(raw_price) * 1_000_000)
        except InvalidOperation:
            return None, "Price: wrong format"
        if price < 0:
            return None, "Price: wrong format"
    return {"cat": int(cat), "title": title[:100], "desc": desc, "price": price,
            "city": param("city").strip()[:100], "region": param("region").strip()[:100], "zip": param("zip").strip()[:15]}, ""


def owned_item(item_id_raw: str) -> dict[str, Any] | None:
    user = current_user()
    if not item_id_raw.isdigit() or not user:
        return None
    it = get_item(int(item_id_raw))
    return it if it and it["user_id"] == user["id"] else None


def item_edit_post() -> Response:
    it = owned_item(param("id"))
    if not it:
        return flash(go(WEB), "You don't have permission to edit this listing", "error")
    data, error = parse_listing_form()
    if error:
        return flash(go(url(page="item", action="item_edit", id=it["id"])), error, "error")
    with db.cursor() as cur:
        cur.execute("UPDATE oc_t_item SET fk_i_category_id = %s, i_price = %s, dt_mod_date = NOW() WHERE pk_i_id = %s",
                    (data["cat"], data["price"], it["id"]))
        cur.execute("UPDATE oc_t_item_description SET s_title = %s, s_description = %s WHERE fk_i_item_id = %s"
                    " AND fk_c_locale_code = 'en_US'", (data["title"], data["desc"], it["id"]))
        cur.execute("UPDATE oc_t_item_location SET s_city = %s, s_region = %s, s_zip = %s WHERE fk_i_item_id = %s",
                    (data["city"], data["region"], data["zip"], it["id"]))
    return flash(go(item_url(it["id"])), "Great! We've just updated your listing")


def item_add_post() -> Response:
    user = current_user()
    assert user is not None
    data, error = parse_listing_form()
    if error:
        return flash(go(url(page="item", action="item_add")), error, "error")
    secret = hashlib.sha1(os.urandom(16)).hexdigest()[:8]
    with db.cursor() as cur:
        cur.execute(
            "INSERT INTO oc_t_item (fk_i_user_id, fk_i_category_id, dt_pub_date, i_price, fk_c_currency_code,"
            " s_contact_name, s_contact_email, s_ip, b_enabled, b_active, s_secret, b_show_email)"
            " VALUES (%s, %s, NOW(), %s, 'USD', %s, %s, %s, 1, 1, %s, 0)",
            (user["id"], data["cat"], data["price"], user["name"], user["email"], request.remote_addr or "", secret))
        new_id = cur.lastrowid
        cur.execute("INSERT INTO oc_t_item_description VALUES (%s, 'en_US', %s, %s)", (new_id, data["title"], data["desc"]))
        cur.execute("INSERT INTO oc_t_item_location (fk_i_item_id, fk_c_country_code, s_country, s_zip, s_region, s_city)"
                    " VALUES (%s, 'US', 'United States', %s, %s, %s)", (new_id, data["zip"], data["region"], data["city"]))
        cur.execute("UPDATE oc_t_user SET i_items = i_items + 1 WHERE pk_i_id = %s", (user["id"],))
    return flash(go(item_url(new_id)), "Your listing has been published")


def item_delete() -> Response:
    it = owned_item(param("id"))
    if not it or not hmac.compare_digest(param("secret"), it["secret"] or ""):
        return flash(go(url(page="user", action="items")), "The listing you are trying to delete couldn't be deleted", "error")
    with db.cursor() as cur:
        for table, col in (("oc_t_item_resource", "fk_i_item_id"), ("oc_t_item_location", "fk_i_item_id"),
                           ("oc_t_item_description", "fk_i_item_id"), ("oc_t_item", "pk_i_id")):
            cur.execute(f"DELETE FROM {table} WHERE {col} = %s", (it["id"],))
        cur.execute("UPDATE oc_t_user SET i_items = GREATEST(i_items, 1) - 1 WHERE pk_i_id = %s", (it["user_id"],))
    return flash(go(url(page="user", action="items")), "Your listing has been deleted")


def reset() -> Response:
    """Upstream's reset controller: token check, then the mysql client runs the restore file (always HTTP 200)."""
    if request.method != "POST" or not hmac.compare_digest(param("token").encode(), RESET_TOKEN.encode()):
        return html_response("Error: Invalid token")
    shown = f"mysql -h {DB_HOST} -u {DB_USER} --password=*** {DB_NAME} < {RESTORE_SQL}"
    env = dict(os.environ, MYSQL_PWD=DB_PASSWORD)
    try:
        with open(RESTORE_SQL, "rb") as sql:
            proc = subprocess.run(["mysql", "-h", DB_HOST, "-u", DB_USER, DB_NAME], stdin=sql, capture_output=True,
                                  env=env, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return html_response(f"Command: {esc(shown)}<br>Error occurred: {esc(exc)}")
    if proc.returncode != 0:
        detail = proc.stderr.decode(errors="replace").strip() or f"exit code {proc.returncode}"
        return html_response(f"Command: {esc(shown)}<br>Error occurred: {esc(detail)}")
    return html_response(f"Command: {esc(shown)}<br>SQL file executed successfully.")


# ---------------------------------------------------------------- dispatch

@app.route("/", methods=["GET", "POST"])
@app.route("/index.php", methods=["GET", "POST"])
@app.route("/<path:_path>", methods=["GET", "POST"])
def index(_path: str = "") -> Response:
    """index.php's dispatch on ``page``/``action``. Upstream runs with friendly URLs: Apache's .htaccess
    rewrites every path that is not a file to index.php (query string kept), so ``/php?page=search``
    is the search page there too; the catch-all route does the same here."""
    page, action = param("page"), param("action")
    if page == "reset":
        return reset()
    if page == "main" and action == "logout":
        return logout()
    if page == "login":
        if action == "login_post" and request.method == "POST":
            return login_post()
        if current_user():
            return go(url(page="user", action="dashboard"))
        return login_form()
    if page == "user":
        return require_login() or user_page("items" if action == "items" else "dashboard")
    if page == "item":
        if action in ("item_add", "item_add_post", "item_edit", "item_edit_post", "item_delete"):
            denied = require_login()
            if denied:
                return denied
            if action == "item_add":
                return item_form(None)
            if action == "item_add_post" and request.method == "POST":
                return item_add_post()
            if action == "item_edit":
                it = owned_item(param("id"))
                return item_form(it) if it else flash(go(WEB), "You don't have permission to edit this listing", "error")
            if action == "item_edit_post" and request.method == "POST":
                return item_edit_post()
            if action == "item_delete":
                return item_delete()
        if param("id").isdigit():
            return item_page(int(param("id")))
        return go(WEB)
    if page == "search":
        return search()
    return home()


def _png(width: int, height: int, seed: int) -> bytes:
    """A small deterministic PNG (two colour bands from the seed) standing in for a listing photo."""
    h = hashlib.sha256(str(seed).encode()).digest()
    top, bottom = bytes(h[0:3]), bytes(h[3:6])
    rows = b"".join(b"\x00" + (top if y < height * 2 // 3 else bottom) * width for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


@functools.lru_cache(maxsize=256)
def listing_image(resource_id: int, thumbnail: bool) -> bytes:
    return _png(240, 200, resource_id) if thumbnail else _png(640, 480, resource_id)


@app.route("/oc-content/uploads/<int:folder>/<name>")
def upload(folder: int, name: str) -> Response:
    stem = name.removesuffix(".png")
    thumb = stem.endswith("_thumbnail")
    rid = stem.removesuffix("_thumbnail")
    if not name.endswith(".png") or not rid.isdigit():
        return html_response("Not Found", 404)
    if not db.one("SELECT 1 FROM oc_t_item_resource WHERE pk_i_id = %s", (int(rid),)):
        return html_response("Not Found", 404)
    resp = make_response(listing_image(int(rid), thumb))
    resp.headers["Content-Type"] = "image/png"
    resp.headers["Cache-Control"] = "public, max-age=86400"
    return resp


@app.errorhandler(Exception)
def _error_page(exc: Exception) -> Response:
    """A plain error page (as Osclass shows when MySQL is unreachable), never a stack trace."""
    from werkzeug.exceptions import HTTPException

    if isinstance(exc, HTTPException):
        return exc  # type: ignore[return-value]
    import pymysql

    app.logger.error("request failed: %s: %s", type(exc).__name__, exc)
    if isinstance(exc, pymysql.err.OperationalError):
        message, status = "Cannot connect to the database. Please try again later.", 503
    else:
        message, status = "An error occurred while processing your request.", 500
    return html_response(f"<!DOCTYPE html><html><head><title>Error</title></head><body><p>{message}</p></body></html>", status)


if __name__ == "__main__":
    serve(app, int(os.environ.get("MINIWEB_PORT", "9980")))
