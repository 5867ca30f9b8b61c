"""Admin panel of the mini Magento at ``/admin``: login, dashboard, orders, products, customers, reviews.

Like Magento, every admin URL shows the sign-in form (HTTP 200, same URL) to an anonymous visitor,
and a successful sign-in posted to that URL redirects back to it. Admin sessions use their own
cookie (``admin``), separate from the storefront's ``PHPSESSID``. State-changing forms carry a
per-session ``form_key``.
"""
from __future__ import annotations

import hmac
from typing import Any

from flask import abort, redirect, request

from miniweb.core import esc
from sites.magento_html import LOGIN_ERROR, admin_login_page, admin_page, price, table
from sites.magento_seed import check_password

STATUS_LABELS = {1: "Approved", 2: "Pending", 3: "Not Approved"}


def register(site: Any) -> None:  # site: sites.magento.Site
    app, db, u = site.app, site.db, site.u

    @app.before_request
    def admin_gate() -> Any:
        path = request.path
        if not (path == "/admin" or path.startswith("/admin/")) or path.startswith("/admin/admin/auth/logout"):
            return None
        if site.admin():
            if request.method == "POST" and "login[username]" not in request.form:
                if not hmac.compare_digest(request.form.get("form_key", ""), site.form_key()):
                    return redirect(u(path))  # Magento silently redirects on a bad form key
            elif request.method == "POST":
                return redirect(u(path))
            return None
        if request.method == "POST" and "login[username]" in request.form:
            row = db.one("SELECT user_id, password FROM admin_user WHERE username = %s AND is_active = 1",
                         (request.form.get("login[username]", ""),))
            if row and check_password(row[1], request.form.get("login[password]", "")):
                target = u(path) if path.rstrip("/") != "/admin" else u("/admin/admin/dashboard/")
                return site.admin_sessions.start(redirect(target), f"admin:{row[0]}")
            return admin_login_page(u, u(path), LOGIN_ERROR), 200
        return admin_login_page(u, u(path)), 200

    def render(title: str, body: str) -> str:
        a = site.admin()
        return admin_page(u, title, body, user=a[1] if a else "")

    def hidden_key() -> str:
        return f'<input name="form_key" type="hidden" value="{site.form_key()}">'

    @app.route("/admin/admin/auth/logout/")
    def admin_logout() -> Any:
        return site.admin_sessions.end(redirect(u("/admin/")))

    @app.route("/admin/", methods=["GET", "POST"])
    def admin_root() -> Any:
        return redirect(u("/admin/admin/dashboard/"))

    @app.route("/admin/dashboard/", methods=["GET", "POST"])
    @app.route("/admin/admin/dashboard/", methods=["GET", "POST"])
    @app.route("/admin/admin/dashboard/index/", methods=["GET", "POST"])
    def admin_dashboard() -> Any:
        lifetime = db.one("SELECT COALESCE(SUM(grand_total), 0) FROM sales_order WHERE status <> 'canceled'")
        orders = db.all("SELECT entity_id, customer_firstname, customer_lastname, grand_total FROM sales_order"
                        " ORDER BY created_at DESC LIMIT 5")
        cells = [[f'<a href="{u(f"/admin/sales/order/view/order_id/{o[0]}/")}">{esc(o[1])} {esc(o[2])}</a>',
                  price(o[3])] for o in orders]
        body = (f'<div class="dashboard-totals"><span class="dashboard-totals-label">Lifetime Sales</span> '
                f'<strong class="dashboard-totals-value">{price(lifetime[0])}</strong></div>'  # type: ignore[index]
                "<h2>Last Orders</h2>" + table(["Customer", "Total"], cells))
        return render("Dashboard", body)

    @app.route("/admin/sales/order/", methods=["GET", "POST"])
    def admin_orders() -> Any:
        rows = db.all("SELECT entity_id, increment_id, created_at, customer_firstname, customer_lastname, grand_total,"
                      " status FROM sales_order ORDER BY entity_id")
        cells = [[esc(r[1]), str(r[2]), f"{esc(r[3])} {esc(r[4])}", price(r[5]), esc(r[6].capitalize()),
                  f'<a href="{u(f"/admin/sales/order/view/order_id/{r[0]}/")}">View</a>'] for r in rows]
        body = (f'<div class="admin__data-grid-header"><span>{len(rows)} records found</span></div>'
                + table(["ID", "Purchase Date", "Bill-to Name", "Grand Total (Purchased)", "Status", "Action"], cells))
        return render("Orders", body)

    @app.route("/admin/sales/order/view/order_id/<int:order_id>/", methods=["GET", "POST"])
    def admin_order_view(order_id: int) -> Any:
        o = db.one("SELECT increment_id, status, customer_firstname, customer_lastname, customer_email, grand_total"
                   " FROM sales_order WHERE entity_id = %s", (order_id,))
        if not o:
            abort(404)
        items = db.all("SELECT name, sku, price, qty_ordered FROM sales_order_item WHERE order_id = %s", (order_id,))
        cancel = ""
        if o[1] in ("pending", "processing"):
            cancel = (f'<form method="post" action="{u(f"/admin/sales/order/cancel/order_id/{order_id}/")}">'
                      f'{hidden_key()}<button type="submit" id="order-view-cancel-button">Cancel</button></form>')
        body = (cancel + f'<div>Order Status <span id="order_status">{esc(o[1].capitalize())}</span></div>'
                f'<div class="customer">{esc(o[2])} {esc(o[3])} &lt;{esc(o[4])}&gt;</div>'
                + table(["Product", "SKU", "Price", "Qty"], [[esc(a), esc(b), price(c), f"{float(d):g}"]
                                                             for a, b, c, d in items])
                + f'<div class="order-totals">Grand Total {price(o[5])}</div>')
        return render(f"# {o[0]}", body)

    @app.post("/admin/sales/order/cancel/order_id/<int:order_id>/")
    def admin_order_cancel(order_id: int) -> Any:
        db.run("UPDATE sales_order SET state = 'canceled', status = 'canceled' WHERE entity_id = %s"
               " AND status IN ('pending', 'processing')", (order_id,))
        return redirect(u(f"/admin/sales/order/view/order_id/{order_id}/"))

    @app.route("/admin/catalog/product/", methods=["GET", "POST"])
    def admin_products() -> Any:
        rows = db.all("SELECT entity_id, name, sku, price, qty, status FROM catalog_product_entity ORDER BY entity_id")
        cells = [[str(r[0]), esc(r[1]), esc(r[2]), price(r[3]), str(r[4]), "Enabled" if r[5] == 1 else "Disabled",
                  f'<a href="{u(f"/admin/catalog/product/edit/id/{r[0]}/")}">Edit</a>'] for r in rows]
        body = (f'<div class="admin__data-grid-header"><span>{len(rows)} records found</span></div>'
                + table(["ID", "Name", "SKU", "Price", "Quantity", "Status", "Action"], cells))
        return render("Products", body)

    @app.route("/admin/catalog/product/edit/id/<int:product_id>/", methods=["GET", "POST"])
    def admin_product_edit(product_id: int) -> Any:
        p = db.one("SELECT name, sku, price, qty, status FROM catalog_product_entity WHERE entity_id = %s",
                   (product_id,))
        if not p:
            abort(404)
        status = "".join(f'<option value="{v}"{" selected" if p[4] == v else ""}>{label}</option>'
                         for v, label in ((1, "Enabled"), (2, "Disabled")))
        body = (f'<form method="post" action="{u(f"/admin/catalog/product/save/id/{product_id}/")}" id="product_form">'
                f'{hidden_key()}<label for="product_status">Enable Product</label>'
                f'<select id="product_status" name="product[status]">{status}</select>'
                f'<label for="product_name">Product Name</label><input id="product_name" name="product[name]" '
                f'value="{esc(p[0])}"><label for="product_sku">SKU</label><input id="product_sku" '
                f'name="product[sku]" value="{esc(p[1])}" readonly><label for="product_price">Price</label>'
                f'<input id="product_price" name="product[price]" value="{float(p[2]):.2f}">'
                f'<label for="product_qty">Quantity</label><input id="product_qty" name="product[qty]" value="{p[3]}">'
                '<button type="submit" id="save-button" class="action-primary">Save</button></form>')
        return render(p[0], body)

    @app.post("/admin/catalog/product/save/id/<int:product_id>/")
    def admin_product_save(product_id: int) -> Any:
        f = request.form
        try:
            name = f["product[name]"].strip()
            price_value = round(float(f["product[price]"]), 2)
            qty = int(float(f.get("product[qty]", "0")))
            status = 2 if f.get("product[status]") == "2" else 1
        except (KeyError, ValueError):
            abort(400)
        if not name or price_value < 0:
            abort(400)
        db.run("UPDATE catalog_product_entity SET name = %s, price = %s, qty = %s, status = %s WHERE entity_id = %s",
               (name, price_value, qty, status, product_id))
        site.page_cache.clean()  # Magento cleans the product's cache tags: its pages are not served stale
        return redirect(u(f"/admin/catalog/product/edit/id/{product_id}/"))

    @app.route("/admin/cms/page/", methods=["GET", "POST"])
    def admin_cms_pages() -> Any:
        rows = db.all("SELECT page_id, title, identifier, is_active, update_time FROM cms_page ORDER BY page_id")
        cells = [[str(r[0]), esc(r[1]), esc(r[2]), "Enabled" if r[3] == 1 else "Disabled", str(r[4]),
                  f'<a href="{u(f"/admin/cms/page/edit/page_id/{r[0]}/")}">Edit</a>'] for r in rows]
        body = (f'<div class="admin__data-grid-header"><span>{len(rows)} records found</span></div>'
                + table(["ID", "Title", "URL Key", "Status", "Modified", "Action"], cells))
        return render("Pages", body)

    @app.route("/admin/cms/page/edit/page_id/<int:page_id>/", methods=["GET", "POST"])
    def admin_cms_page_edit(page_id: int) -> Any:
        p = db.one("SELECT title, identifier, content_heading, content, is_active FROM cms_page WHERE page_id = %s",
                   (page_id,))
        if not p:
            abort(404)
        status = "".join(f'<option value="{v}"{" selected" if p[4] == v else ""}>{label}</option>'
                         for v, label in ((1, "Enabled"), (0, "Disabled")))
        body = (f'<form method="post" action="{u(f"/admin/cms/page/save/page_id/{page_id}/")}" id="cms_page_form">'
                f'{hidden_key()}<label for="page_is_active">Enable Page</label>'
                f'<select id="page_is_active" name="is_active">{status}</select>'
                f'<label for="page_title">Page Title</label><input id="page_title" name="title" value="{esc(p[0])}">'
                f'<label for="page_identifier">URL Key</label><input id="page_identifier" name="identifier" '
                f'value="{esc(p[1])}"><label for="page_content_heading">Content Heading</label>'
                f'<input id="page_content_heading" name="content_heading" value="{esc(p[2] or "")}">'
                f'<label for="page_content">Content</label><textarea id="page_content" name="content">'
                f'{esc(p[3] or "")}</textarea>'
                '<button type="submit" id="save-button" class="action-primary">Save Page</button></form>')
        return render(p[0], body)

    @app.post("/admin/cms/page/save/page_id/<int:page_id>/")
    def admin_cms_page_save(page_id: int) -> Any:
        f = request.form
        title, identifier = f.get("title", "").strip(), f.get("identifier", "").strip()
        if not title or not identifier:
            abort(400)
        db.run("UPDATE cms_page SET title = %s, identifier = %s, content_heading = %s, content = %s, is_active = %s,"
               " update_time = NOW() WHERE page_id = %s",
               (title, identifier, f.get("content_heading", "").strip(), f.get("content", ""),
                0 if f.get("is_active") == "0" else 1, page_id))
        site.page_cache.clean()
        return redirect(u(f"/admin/cms/page/edit/page_id/{page_id}/"))

    @app.route("/admin/customer/index/", methods=["GET", "POST"])
    def admin_customers() -> Any:
        rows = db.all("SELECT entity_id, firstname, lastname, email, created_at FROM customer_entity ORDER BY entity_id")
        cells = [[str(r[0]), f"{esc(r[1])} {esc(r[2])}", esc(r[3]), str(r[4])] for r in rows]
        return render("Customers", table(["ID", "Name", "Email", "Customer Since"], cells))

    @app.route("/admin/review/product/", methods=["GET", "POST"])
    def admin_reviews() -> Any:
        rows = db.all("SELECT r.review_id, r.created_at, r.status_id, r.title, r.nickname, r.detail, p.name, p.sku"
                      " FROM review r JOIN catalog_product_entity p ON p.entity_id = r.product_id ORDER BY r.review_id")
        cells = [[str(r[0]), str(r[1]), STATUS_LABELS.get(r[2], "?"), esc(r[3]), esc(r[4]), esc(r[5]), esc(r[6]),
                  esc(r[7])] for r in rows]
        body = (f'<div class="admin__data-grid-header"><span>{len(rows)} records found</span></div>'
                + table(["ID", "Created", "Status", "Title", "Nickname", "Review", "Product", "SKU"], cells))
        return render("Reviews", body)
