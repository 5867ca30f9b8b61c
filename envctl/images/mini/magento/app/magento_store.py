"""Storefront of the mini Magento: catalog, search, reviews, customer account, orders, wish list, cart.

URLs follow Magento 2 (``/customer/account/login/``, ``/checkout/cart/``, ``/sales/order/history/``,
``/<category-path>.html``, ``/<product-url-key>.html``). Cart and wish list live in ``quote`` /
``wishlist`` tables, so agents' changes persist in the database.
"""
from __future__ import annotations

from typing import Any

from flask import abort, redirect, request

from miniweb.core import esc
from sites.magento_html import (LOGIN_ERROR, STORE_NAME, customer_login_form, messages, price, store_page,
                                        table)
from sites.magento_seed import check_password

PRODUCT_COLS = "p.entity_id, p.sku, p.name, p.url_key, p.price, p.qty, p.description"


def register(site: Any) -> None:  # site: sites.magento.Site
    app, db, u = site.app, site.db, site.u

    def render(title: str, body: str, *, h1: str | None = None, status: int = 200, canonical: str | None = None) -> Any:
        c = site.customer()
        name = f"{c[2]} {c[3]}" if c else None
        return store_page(u, title, body, customer=name, categories=site.categories(), h1=h1,
                          canonical=canonical), status

    def require_customer() -> tuple | Any:
        c = site.customer()
        return c if c else redirect(u("/customer/account/login/"))

    def grid(rows: list[tuple]) -> str:
        if not rows:
            return '<div class="message info empty"><div>Your search returned no results.</div></div>'
        items = "".join(
            f'<li class="product-item"><a class="product-item-link" href="{u("/" + r[3] + ".html")}">{esc(r[2])}</a>'
            f'<div class="price-box">{price(r[4])}</div></li>' for r in rows)
        return f'<ol class="products list items product-items">{items}</ol>'

    def breadcrumbs(path: str) -> str:
        """Magento's trail above a category: Home, then each parent category, then the category itself."""
        names = {c[3]: c[2] for c in site.categories()}
        parts = path.split("/")
        trail = [("/".join(parts[:i]), names.get("/".join(parts[:i]))) for i in range(1, len(parts) + 1)]
        items = "".join(f'<li class="item category"><a href="{u("/" + p + ".html")}">{esc(n)}</a></li>'
                        for p, n in trail[:-1] if n)
        return (f'<div class="breadcrumbs"><ul class="items"><li class="item home"><a href="{u("/")}">Home</a></li>'
                f'{items}<li class="item category"><strong>{esc(trail[-1][1] or "")}</strong></li></ul></div>')

    @app.get("/")
    def home() -> Any:
        rows = db.all(f"SELECT {PRODUCT_COLS} FROM catalog_product_entity p WHERE status = 1 ORDER BY entity_id")
        return render(STORE_NAME, f'<div class="block widget">{grid(rows)}</div>', h1="Home Page")

    @app.get("/catalogsearch/result/")
    @app.get("/catalogsearch/result/index/")
    def search() -> Any:
        q = request.args.get("q", "").strip()
        like = f"%{q}%"
        rows = db.all(f"SELECT {PRODUCT_COLS} FROM catalog_product_entity p WHERE status = 1 AND"
                      " (name LIKE %s OR description LIKE %s OR sku = %s) ORDER BY entity_id", (like, like, q))
        title = f"Search results for: '{q}'"
        return render(title, f'<p class="toolbar-amount">{len(rows)} items</p>{grid(rows)}')

    @app.get("/<path:path>.html")
    def catalog_page(path: str) -> Any:
        cat = db.one("SELECT entity_id, name FROM catalog_category_entity WHERE url_path = %s", (path,))
        if cat:
            lo, hi = 0.0, 1e12
            if "-" in request.args.get("price", ""):
                a, _, b = request.args["price"].partition("-")
                lo, hi = float(a or 0), float(b or 1e12)
            rows = db.all(f"SELECT {PRODUCT_COLS} FROM catalog_product_entity p JOIN catalog_category_product c"
                          " ON c.product_id = p.entity_id WHERE c.category_id = %s AND p.status = 1"
                          " AND p.price >= %s AND p.price < %s ORDER BY c.position", (cat[0], lo, hi))
            return render(cat[1], breadcrumbs(path) + grid(rows), canonical=f"/{path}.html")
        prod = db.one(f"SELECT {PRODUCT_COLS} FROM catalog_product_entity p WHERE url_key = %s AND status = 1", (path,))
        if not prod:
            abort(404)
        return product_page(prod)

    def product_page(p: tuple, error: str | None = None) -> Any:
        reviews = db.all("SELECT nickname, title, detail, rating, created_at FROM review WHERE product_id = %s"
                         " AND status_id = 1 ORDER BY review_id", (p[0],))
        rev_html = "".join(
            f'<li class="item review-item"><div class="review-title">{esc(t)}</div>'
            f'<div class="rating-result" title="{r * 20}%"><span>{r * 20}%</span></div>'
            f'<div class="review-content">{esc(d)}</div><p class="review-author">Review by '
            f'<strong class="review-details-value">{esc(n)}</strong></p></li>' for n, t, d, r, _ in reviews)
        body = (
            messages(error)
            + f'<div class="product-info-price"><div class="price-box">{price(p[4])}</div>'
            f'<div class="product attribute sku"><strong class="type">SKU</strong> '
            f'<div class="value" itemprop="sku">{esc(p[1])}</div></div></div>'
            f'<div class="stock available">{"In stock" if p[5] > 0 else "Out of stock"}</div>'
            f'<form action="{u("/checkout/cart/add/")}" method="post" id="product_addtocart_form">'
            f'<input type="hidden" name="product" value="{p[0]}"><label for="qty">Qty</label>'
            '<input type="number" name="qty" id="qty" min="1" value="1">'
            '<button type="submit" title="Add to Cart" class="action primary tocart" id="product-addtocart-button">'
            "<span>Add to Cart</span></button></form>"
            f'<form action="{u("/wishlist/index/add/")}" method="post"><input type="hidden" name="product" '
            f'value="{p[0]}"><button type="submit" class="action towishlist"><span>Add to Wish List</span></button>'
            f'</form><div class="product attribute description"><div class="value">{esc(p[6])}</div></div>'
            f'<div id="reviews"><div id="customer-reviews" class="block review-list"><strong>Customer Reviews</strong>'
            f'<ol class="items review-items">{rev_html}</ol></div>'
            f'<form action="{u(f"/review/product/post/id/{p[0]}/")}" method="post" id="review-form">'
            "<legend>You're reviewing: " + esc(p[2]) + "</legend>"
            '<label for="ratings">Rating</label><select id="ratings" name="ratings">'
            + "".join(f'<option value="{i}">{i} star{"s" if i > 1 else ""}</option>' for i in range(5, 0, -1))
            + '</select><label for="nickname_field">Nickname</label><input id="nickname_field" name="nickname" required>'
            '<label for="summary_field">Summary</label><input id="summary_field" name="title" required>'
            '<label for="review_field">Review</label><textarea id="review_field" name="detail" required></textarea>'
            '<button type="submit" class="action submit primary"><span>Submit Review</span></button></form></div>'
        )
        return render(p[2], body, canonical=f"/{p[3]}.html")

    @app.post("/review/product/post/id/<int:product_id>/")
    def review_post(product_id: int) -> Any:
        prod = db.one("SELECT url_key FROM catalog_product_entity WHERE entity_id = %s", (product_id,))
        f = request.form
        if not prod or not all(f.get(k, "").strip() for k in ("nickname", "title", "detail")):
            abort(400)
        c = site.customer()
        rating = min(5, max(1, int(f.get("ratings", "5") or 5)))
        # New reviews wait for moderation (status 2 = Pending), as in Magento.
        db.run("INSERT INTO review (product_id, status_id, customer_id, nickname, title, detail, rating, created_at)"
               " VALUES (%s, 2, %s, %s, %s, %s, %s, NOW())",
               (product_id, c[0] if c else None, f["nickname"].strip(), f["title"].strip(), f["detail"].strip(), rating))
        return redirect(u(f"/{prod[0]}.html"))

    # --- customer account -------------------------------------------------------------------------------
    @app.get("/customer/account/login/")
    def login_form() -> Any:
        if site.customer():
            return redirect(u("/customer/account/"))
        return render("Customer Login", customer_login_form(u))

    @app.post("/customer/account/loginPost/")
    def login_post() -> Any:
        email = request.form.get("login[username]", "").strip().lower()
        password = request.form.get("login[password]", "")
        row = db.one("SELECT entity_id, password_hash FROM customer_entity WHERE email = %s", (email,))
        if not row or not check_password(row[1], password):
            return render("Customer Login", customer_login_form(u, LOGIN_ERROR, email))
        resp = redirect(u("/customer/account/"))
        return site.customer_sessions.start(resp, f"customer:{row[0]}")

    @app.get("/customer/account/logout/")
    def logout() -> Any:
        return site.customer_sessions.end(redirect(u("/customer/account/logoutSuccess/")))

    @app.get("/customer/account/logoutSuccess/")
    def logout_success() -> Any:
        return render("You are signed out", "<p>You have signed out and will go to our homepage in 5 seconds.</p>")

    @app.get("/customer/account/")
    def account() -> Any:
        c = require_customer()
        if not isinstance(c, tuple):
            return c
        body = (f'<div class="block block-dashboard-info"><strong class="box-title">Contact Information</strong>'
                f'<div class="box-content"><p>{esc(c[2])} {esc(c[3])}<br>{esc(c[1])}</p></div></div>'
                f'<ul class="account-nav"><li><a href="{u("/sales/order/history/")}">My Orders</a></li>'
                f'<li><a href="{u("/wishlist/")}">My Wish List</a></li></ul>')
        return render("My Account", body)

    @app.get("/sales/order/history/")
    def order_history() -> Any:
        c = require_customer()
        if not isinstance(c, tuple):
            return c
        rows = db.all("SELECT entity_id, increment_id, created_at, grand_total, status FROM sales_order"
                      " WHERE customer_id = %s ORDER BY created_at DESC", (c[0],))
        cells = [[esc(r[1]), r[2].strftime("%-m/%-d/%y"), price(r[3]), esc(r[4].capitalize()),
                  f'<a class="action view" href="{u(f"/sales/order/view/order_id/{r[0]}/")}">View Order</a>']
                 for r in rows]
        return render("My Orders", table(["Order #", "Date", "Order Total", "Status", "Action"], cells,
                                         "data table table-order-items history"))

    @app.get("/sales/order/view/order_id/<int:order_id>/")
    def order_view(order_id: int) -> Any:
        c = require_customer()
        if not isinstance(c, tuple):
            return c
        o = db.one("SELECT increment_id, status, created_at, subtotal, shipping_amount, grand_total FROM sales_order"
                   " WHERE entity_id = %s AND customer_id = %s", (order_id, c[0]))
        if not o:
            return redirect(u("/sales/order/history/"))
        items = db.all("SELECT name, sku, price, qty_ordered, row_total FROM sales_order_item WHERE order_id = %s"
                       " ORDER BY item_id", (order_id,))
        cells = [[esc(n), esc(s), price(p), f"{float(q):g}", price(t)] for n, s, p, q, t in items]
        body = (f'<span class="order-status">{esc(o[1].capitalize())}</span>'
                f'<div class="order-date">Order Date: {o[2].strftime("%B %-d, %Y")}</div>'
                + table(["Product Name", "SKU", "Price", "Qty", "Subtotal"], cells)
                + f'<div class="order-totals">Subtotal {price(o[3])} Shipping &amp; Handling {price(o[4])}'
                f' <strong>Grand Total {price(o[5])}</strong></div>')
        return render(f"Order # {o[0]}", body)

    # --- wish list ---------------------------------------------------------------------------------------
    def wishlist_id(customer_id: int) -> int:
        db.run("INSERT IGNORE INTO wishlist (customer_id) VALUES (%s)", (customer_id,))
        return db.one("SELECT wishlist_id FROM wishlist WHERE customer_id = %s", (customer_id,))[0]  # type: ignore[index]

    @app.get("/wishlist/")
    @app.get("/wishlist/index/index/")
    def wishlist() -> Any:
        c = require_customer()
        if not isinstance(c, tuple):
            return c
        rows = db.all(f"SELECT {PRODUCT_COLS}, w.wishlist_item_id FROM wishlist_item w JOIN wishlist l ON"
                      " l.wishlist_id = w.wishlist_id JOIN catalog_product_entity p ON p.entity_id = w.product_id"
                      " WHERE l.customer_id = %s ORDER BY w.wishlist_item_id", (c[0],))
        items = "".join(
            f'<li class="product-item"><a class="product-item-link" href="{u("/" + r[3] + ".html")}">{esc(r[2])}</a>'
            f'{price(r[4])}<form method="post" action="{u("/wishlist/index/remove/")}"><input type="hidden" '
            f'name="item" value="{r[7]}"><button type="submit" class="btn-remove action delete">Remove item</button>'
            "</form></li>" for r in rows)
        body = (f'<form class="form-wishlist-items" id="wishlist-view-form"><div class="products-grid wishlist">'
                f'<ol class="product-items">{items}</ol></div></form>' if rows else
                '<div class="message info empty"><span>You have no items in your wish list.</span></div>')
        return render("My Wish List", body)

    @app.post("/wishlist/index/add/")
    def wishlist_add() -> Any:
        c = require_customer()
        if not isinstance(c, tuple):
            return c
        pid = request.form.get("product", type=int)
        if not pid or not db.one("SELECT 1 FROM catalog_product_entity WHERE entity_id = %s", (pid,)):
            abort(400)
        db.run("INSERT IGNORE INTO wishlist_item (wishlist_id, product_id, qty) VALUES (%s, %s, 1)",
               (wishlist_id(c[0]), pid))
        return redirect(u("/wishlist/"))

    @app.post("/wishlist/index/remove/")
    def wishlist_remove() -> Any:
        c = require_customer()
        if not isinstance(c, tuple):
            return c
        db.run("DELETE w FROM wishlist_item w JOIN wishlist l ON l.wishlist_id = w.wishlist_id"
               " WHERE w.wishlist_item_id = %s AND l.customer_id = %s", (request.form.get("item", type=int), c[0]))
        return redirect(u("/wishlist/"))

    # --- cart (a signed-in customer's active quote) ------------------------------------------------------
    def quote_id(customer_id: int) -> int:
        row = db.one("SELECT entity_id FROM quote WHERE customer_id = %s AND is_active = 1", (customer_id,))
        if row:
            return row[0]
        db.run("INSERT INTO quote (customer_id, is_active) VALUES (%s, 1)", (customer_id,))
        return quote_id(customer_id)

    @app.get("/checkout/cart/")
    def cart() -> Any:
        c = require_customer()
        if not isinstance(c, tuple):
            return c
        rows = db.all("SELECT i.item_id, p.name, p.url_key, p.price, i.qty FROM quote_item i JOIN quote q ON"
                      " q.entity_id = i.quote_id JOIN catalog_product_entity p ON p.entity_id = i.product_id"
                      " WHERE q.customer_id = %s AND q.is_active = 1 ORDER BY i.item_id", (c[0],))
        if not rows:
            return render("Shopping Cart", '<div class="cart-empty"><p>You have no items in your shopping cart.</p></div>')
        cells = [[f'<a href="{u("/" + key + ".html")}">{esc(name)}</a>', price(p),
                  f'<label for="cart-{iid}-qty">Qty</label><input id="cart-{iid}-qty" name="cart[{iid}][qty]" '
                  f'type="number" min="0" value="{float(q):g}" class="input-text qty">',
                  price(float(p) * float(q)),
                  f'<button type="submit" form="delete-{iid}" class="action action-delete">Remove item</button>']
                 for iid, name, key, p, q in rows]
        deletes = "".join(f'<form id="delete-{r[0]}" method="post" action="{u("/checkout/cart/delete/")}">'
                          f'<input type="hidden" name="id" value="{r[0]}"></form>' for r in rows)
        total = sum(float(r[3]) * float(r[4]) for r in rows)
        body = (f'<form action="{u("/checkout/cart/updatePost/")}" method="post" id="form-validate">'
                + table(["Item", "Price", "Qty", "Subtotal", ""], cells, "cart items data table")
                + '<button type="submit" name="update_cart_action" value="update_qty" class="action update">'
                "<span>Update Shopping Cart</span></button></form>" + deletes
                + f'<div class="cart-summary">Order Total <strong class="grand-total">{price(total)}</strong></div>')
        return render("Shopping Cart", body)

    @app.post("/checkout/cart/add/")
    def cart_add() -> Any:
        c = site.customer()
        if not c:  # Guest carts are not modelled: sign in first.
            return redirect(u("/customer/account/login/"))
        pid = request.form.get("product", type=int)
        qty = max(1, request.form.get("qty", 1, type=int) or 1)
        if not pid or not db.one("SELECT 1 FROM catalog_product_entity WHERE entity_id = %s AND status = 1", (pid,)):
            abort(400)
        db.run("INSERT INTO quote_item (quote_id, product_id, qty) VALUES (%s, %s, %s)"
               " ON DUPLICATE KEY UPDATE qty = qty + VALUES(qty)", (quote_id(c[0]), pid, qty))
        return redirect(u("/checkout/cart/"))

    @app.post("/checkout/cart/updatePost/")
    def cart_update() -> Any:
        c = require_customer()
        if not isinstance(c, tuple):
            return c
        qid = quote_id(c[0])
        for key, value in request.form.items():
            if key.startswith("cart[") and key.endswith("][qty]"):
                item, qty = int(key[5:-6]), float(value or 0)
                if qty <= 0:
                    db.run("DELETE FROM quote_item WHERE item_id = %s AND quote_id = %s", (item, qid))
                else:
                    db.run("UPDATE quote_item SET qty = %s WHERE item_id = %s AND quote_id = %s", (qty, item, qid))
        return redirect(u("/checkout/cart/"))

    @app.post("/checkout/cart/delete/")
    def cart_delete() -> Any:
        c = require_customer()
        if not isinstance(c, tuple):
            return c
        db.run("DELETE FROM quote_item WHERE item_id = %s AND quote_id = %s",
               (request.form.get("id", type=int), quote_id(c[0])))
        return redirect(u("/checkout/cart/"))
