"""Page frames of the mini Magento store: the Luma-like storefront and the admin panel.

The login forms copy the real Magento 2 markup (ids, names, labels, placeholders, button texts),
because WebArena's auto_login.py and BrowserGym's ui_login select different attributes of them.
All links are absolute and come from the caller's ``u(path)``, built from the configured base URL.
"""
from __future__ import annotations

from typing import Callable, Sequence

from miniweb.core import esc

LOGIN_ERROR = ("The account sign-in was incorrect or your account is disabled temporarily. "
               "Please wait and try again later.")
STORE_NAME = "One Stop Market"

Url = Callable[[str], str]

CSS = (
    "body{font-family:sans-serif;margin:0}header,main,footer{padding:8px 24px}"
    ".header.links li,.navigation li{display:inline;margin-right:14px}ul{padding-left:0}"
    ".message-error{background:#fae5e5;color:#e02b27;padding:8px}.message-success{background:#e5efe5;padding:8px}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px}"
    ".product-item{display:inline-block;width:220px;vertical-align:top;margin:8px}"
)


def messages(error: str | None = None, success: str | None = None) -> str:
    out = ""
    if error:
        out += f'<div class="messages"><div role="alert" class="message-error error message"><div>{esc(error)}</div></div></div>'
    if success:
        out += f'<div class="messages"><div role="alert" class="message-success success message"><div>{esc(success)}</div></div></div>'
    return out


def price(value: object) -> str:
    return f'<span class="price">${float(value):,.2f}</span>'  # type: ignore[arg-type]


def store_page(u: Url, title: str, body: str, *, customer: str | None, categories: Sequence[tuple],
               h1: str | None = None, canonical: str | None = None) -> str:
    """A storefront page. ``categories`` rows are (id, parent_id, name, url_path); ``canonical`` is the
    path of a category's or product's own URL (Magento's ``<link rel="canonical">``)."""
    if customer:
        links = (f'<li class="greet welcome"><span class="logged-in">Welcome, {esc(customer)}!</span></li>'
                 f'<li><a href="{u("/customer/account/")}">My Account</a></li>'
                 f'<li><a href="{u("/wishlist/")}">My Wish List</a></li>'
                 f'<li class="authorization-link"><a href="{u("/customer/account/logout/")}">Sign Out</a></li>')
    else:
        links = ('<li class="greet welcome"><span class="not-logged-in">Default welcome msg!</span></li>'
                 f'<li class="authorization-link"><a href="{u("/customer/account/login/")}">Sign In</a></li>'
                 f'<li><a href="{u("/customer/account/create/")}">Create an Account</a></li>')
    nav = "".join(
        f'<li class="level{0 if parent == 0 else 1}"><a href="{u("/" + path + ".html")}">{esc(name)}</a></li>'
        for _, parent, name, path in categories if parent == 0 or path.count("/") == 1
    )
    head = h1 if h1 is not None else title
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{esc(title)}</title>"
        + (f'<link rel="canonical" href="{u(canonical)}">' if canonical else "")
        + f"<style>{CSS}</style></head><body>"
        f'<header class="page-header"><div class="panel header"><ul class="header links">{links}</ul></div>'
        f'<a class="logo" href="{u("/")}" title="{STORE_NAME}"><strong>{STORE_NAME}</strong></a> '
        f'<a class="action showcart" href="{u("/checkout/cart/")}"><span class="text">My Cart</span></a>'
        f'<form class="form minisearch" id="search_mini_form" action="{u("/catalogsearch/result/")}" method="get">'
        '<label class="label" for="search">Search</label>'
        '<input id="search" type="text" name="q" placeholder="Search entire store here..." class="input-text">'
        '<button type="submit" title="Search" class="action search">Search</button></form>'
        f'<nav class="navigation"><ul>{nav}</ul></nav></header>'
        f'<main id="maincontent" class="page-main"><h1 class="page-title"><span class="base">{esc(head)}</span></h1>'
        f"{body}</main><footer class=\"page-footer\">Copyright &copy; 2013-present Magento, Inc. All rights reserved."
        "</footer></body></html>"
    )


def customer_login_form(u: Url, error: str | None = None, email: str = "") -> str:
    """The real Magento customer login block (ids email/pass, names login[username]/login[password])."""
    return (
        messages(error)
        + '<div class="block block-customer-login"><div class="block-title"><strong id="block-customer-login-heading"'
        ' role="heading" aria-level="2">Registered Customers</strong></div><div class="block-content">'
        f'<form class="form form-login" action="{u("/customer/account/loginPost/")}" method="post" id="login-form">'
        '<fieldset class="fieldset login" data-hasrequired="* Required Fields">'
        '<div class="field note">If you have an account, sign in with your email address.</div>'
        '<div class="field email required"><label class="label" for="email"><span>Email</span></label>'
        f'<div class="control"><input name="login[username]" value="{esc(email)}" autocomplete="off" id="email" '
        'type="email" class="input-text" title="Email" required></div></div>'
        '<div class="field password required"><label for="pass" class="label"><span>Password</span></label>'
        '<div class="control"><input name="login[password]" type="password" autocomplete="off" class="input-text" '
        'id="pass" title="Password" required></div></div>'
        '<div class="actions-toolbar"><div class="primary"><button type="submit" class="action login primary" '
        'name="send" id="send2"><span>Sign In</span></button></div>'
        f'<div class="secondary"><a class="action remind" href="{u("/customer/account/forgotpassword/")}">'
        "<span>Forgot Your Password?</span></a></div></div></fieldset></form></div></div>"
    )


ADMIN_MENU = [
    ("/admin/admin/dashboard/", "Dashboard"),
    ("/admin/sales/order/", "Orders"),
    ("/admin/catalog/product/", "Products"),
    ("/admin/customer/index/", "Customers"),
    ("/admin/review/product/", "Reviews"),
    ("/admin/cms/page/", "Pages"),
]


def admin_login_page(u: Url, action: str, error: str | None = None) -> str:
    """The real Magento admin login page; it must not mention the word the expiry probe looks for."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Magento Admin</title>"
        f"<style>{CSS}</style></head><body class=\"adminhtml-auth-login\"><main class=\"page-wrapper\">"
        '<section class="page-wrapper"><div class="login-content">'
        f'<form method="post" action="{esc(action)}" id="login-form" autocomplete="off">'
        '<fieldset class="admin__fieldset"><legend class="admin__legend"><span>Welcome, please sign in</span>'
        f"</legend><br>{messages(error)}"
        '<div class="admin__field _required field-username"><label for="username" class="admin__field-label">'
        '<span>Username</span></label><div class="admin__field-control"><input id="username" '
        'class="admin__control-text" type="text" name="login[username]" autofocus value="" placeholder="user name" '
        'autocomplete="off" required></div></div>'
        '<div class="admin__field _required field-password"><label for="login" class="admin__field-label">'
        '<span>Password</span></label><div class="admin__field-control"><input id="login" class="admin__control-text" '
        'type="password" name="login[password]" value="" placeholder="password" autocomplete="off" required></div></div>'
        '<div class="form-actions"><div class="actions"><button class="action-login action-primary" type="submit">'
        "<span>Sign in</span></button></div>"
        f'<div class="links"><a class="action-forgotpassword" href="{u("/admin/admin/auth/forgotpassword/")}">'
        "Forgot your password?</a></div></div></fieldset></form></div></section></main>"
        "<footer>Copyright &copy; Magento Commerce Inc. All rights reserved.</footer></body></html>"
    )


def admin_page(u: Url, title: str, body: str, *, user: str, form_key: str = "") -> str:
    menu = "".join(f'<li><a href="{u(path)}">{esc(label)}</a></li>' for path, label in ADMIN_MENU)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{esc(title)} / Magento Admin</title><style>{CSS}</style></head><body class=\"adminhtml\">"
        f'<header><nav class="admin__menu"><ul class="header links">{menu}</ul></nav>'
        f'<div class="admin-user"><span class="admin-user-account-text">{esc(user)}</span> '
        f'<a class="account-signout" href="{u("/admin/admin/auth/logout/")}">Sign Out</a></div></header>'
        f'<main class="page-content"><h1 class="page-title">{esc(title)}</h1>{body}</main></body></html>'
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "data-grid") -> str:
    """``rows`` hold HTML cells (already escaped by the caller)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
