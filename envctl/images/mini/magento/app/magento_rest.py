"""REST API of the mini Magento, the part WebArena's evaluator helpers call.

- ``POST /rest[/<store>]/V1/integration/admin/token`` ``{"username", "password"}`` -> a JSON string token
  (stored in ``oauth_token``, like Magento).
- ``GET /rest[/<store>]/V1/orders`` with ``searchCriteria[...]`` query params (filter_groups,
  sortOrders, pageSize, currentPage; unknown fields are ignored) -> ``{"items", "search_criteria", "total_count"}``.
- ``GET /rest[/<store>]/V1/orders/<id>`` and ``GET /rest[/<store>]/V1/products/<sku>/reviews``.
Anything without a valid Bearer token answers 401 with Magento's JSON error.
"""
from __future__ import annotations

import re
import secrets
import time
from decimal import Decimal
from typing import Any

from flask import jsonify, request

from sites.magento_html import LOGIN_ERROR
from sites.magento_seed import check_password

ORDER_FIELDS = ["entity_id", "increment_id", "customer_id", "customer_email", "customer_firstname",
                "customer_lastname", "state", "status", "subtotal", "shipping_amount", "grand_total",
                "created_at", "updated_at"]
CONDITIONS = {"eq": "=", "neq": "<>", "gt": ">", "lt": "<", "gteq": ">=", "lteq": "<=", "like": "LIKE"}
PARAM = re.compile(r"searchCriteria\[filter_groups\]\[(\d+)\]\[filters\]\[(\d+)\]\[(\w+)\]")
SORT = re.compile(r"searchCriteria\[sortOrders\]\[(\d+)\]\[(\w+)\]")


def _json(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if hasattr(value, "strftime"):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return value


def _search_criteria(args: Any) -> tuple[str, list, str, int, int, dict]:
    """WHERE clause, args, ORDER BY, page size, page and the echoed criteria, built from whitelisted fields."""
    groups: dict[str, dict[str, dict[str, str]]] = {}
    sorts: dict[str, dict[str, str]] = {}
    for key, value in args.items():
        if m := PARAM.fullmatch(key):
            groups.setdefault(m[1], {}).setdefault(m[2], {})[m[3]] = value
        elif m := SORT.fullmatch(key):
            sorts.setdefault(m[1], {})[m[2]] = value
    where, params = [], []
    for _, filters in sorted(groups.items()):
        ors = []
        for _, f in sorted(filters.items()):
            field, cond = f.get("field"), f.get("condition_type", "eq")
            if field not in ORDER_FIELDS:
                continue
            if cond == "in":
                values = [v.strip() for v in f.get("value", "").split(",") if v.strip()]
                if values:
                    ors.append(f"{field} IN ({', '.join(['%s'] * len(values))})")
                    params.extend(values)
            elif cond in CONDITIONS:
                ors.append(f"{field} {CONDITIONS[cond]} %s")
                params.append(f.get("value", ""))
        if ors:
            where.append("(" + " OR ".join(ors) + ")")
    order = [f"{s['field']} {'DESC' if s.get('direction', 'ASC').upper() == 'DESC' else 'ASC'}"
             for _, s in sorted(sorts.items()) if s.get("field") in ORDER_FIELDS]
    size = max(0, args.get("searchCriteria[pageSize]", 0, type=int) or 0)
    page = max(1, args.get("searchCriteria[currentPage]", 1, type=int) or 1)
    echo: dict = {"filter_groups": [{"filters": list(f.values())} for _, f in sorted(groups.items())]}
    if sorts:
        echo["sort_orders"] = [s for _, s in sorted(sorts.items())]
    if size:
        echo.update(page_size=size, current_page=page)
    return (" AND ".join(where) or "1=1"), params, ", ".join(order + ["entity_id ASC"]), size, page, echo


def register(site: Any) -> None:  # site: sites.magento.Site
    app, db = site.app, site.db

    def unauthorized() -> Any:
        return jsonify({"message": "The consumer isn't authorized to access %resources.",
                        "parameters": {"resources": "Magento_Sales::actions_view"}}), 401

    def authorized() -> bool:
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            return False
        return db.one("SELECT 1 FROM oauth_token t JOIN admin_user a ON a.user_id = t.admin_id WHERE t.token = %s"
                      " AND a.is_active = 1", (auth[7:].strip(),)) is not None

    def order_json(row: tuple) -> dict:
        order = {k: _json(v) for k, v in zip(ORDER_FIELDS, row)}
        items = db.all("SELECT item_id, product_id, sku, name, qty_ordered, price, row_total FROM sales_order_item"
                       " WHERE order_id = %s ORDER BY item_id", (order["entity_id"],))
        order["items"] = [{k: _json(v) for k, v in zip(
            ["item_id", "product_id", "sku", "name", "qty_ordered", "price", "row_total"], i)} for i in items]
        order["base_grand_total"] = order["grand_total"]
        return order

    @app.post("/rest/V1/integration/admin/token")
    @app.post("/rest/<store>/V1/integration/admin/token")
    def admin_token(store: str = "default") -> Any:
        body = request.get_json(silent=True) or {}
        row = db.one("SELECT user_id, password FROM admin_user WHERE username = %s AND is_active = 1",
                     (str(body.get("username", "")),))
        if not row or not check_password(row[1], str(body.get("password", ""))):
            return jsonify({"message": LOGIN_ERROR}), 401
        token = secrets.token_hex(16)
        db.run("INSERT INTO oauth_token (admin_id, token, created_at) VALUES (%s, %s, %s)",
               (row[0], token, int(time.time())))
        return jsonify(token)

    @app.get("/rest/V1/orders")
    @app.get("/rest/<store>/V1/orders")
    def rest_orders(store: str = "default") -> Any:
        if not authorized():
            return unauthorized()
        where, params, order, size, page, echo = _search_criteria(request.args)
        total = db.one(f"SELECT COUNT(*) FROM sales_order WHERE {where}", tuple(params))[0]  # type: ignore[index]
        sql = f"SELECT {', '.join(ORDER_FIELDS)} FROM sales_order WHERE {where} ORDER BY {order}"
        if size:
            sql += f" LIMIT {int(size)} OFFSET {int(size) * (page - 1)}"
        rows = db.all(sql, tuple(params))
        return jsonify({"items": [order_json(r) for r in rows], "search_criteria": echo, "total_count": total})

    @app.get("/rest/V1/orders/<int:order_id>")
    @app.get("/rest/<store>/V1/orders/<int:order_id>")
    def rest_order(order_id: int, store: str = "default") -> Any:
        if not authorized():
            return unauthorized()
        row = db.one(f"SELECT {', '.join(ORDER_FIELDS)} FROM sales_order WHERE entity_id = %s", (order_id,))
        if not row:
            return jsonify({"message": "The entity that was requested doesn't exist. Verify the entity and try again."}), 404
        return jsonify(order_json(row))

    @app.get("/rest/V1/products/<sku>/reviews")
    @app.get("/rest/<store>/V1/products/<sku>/reviews")
    def rest_product_reviews(sku: str, store: str = "default") -> Any:
        if not authorized():
            return unauthorized()
        rows = db.all("SELECT r.review_id, r.title, r.detail, r.nickname, r.rating, r.status_id, r.created_at,"
                      " p.entity_id FROM review r JOIN catalog_product_entity p ON p.entity_id = r.product_id"
                      " WHERE p.sku = %s ORDER BY r.review_id", (sku,))
        return jsonify([{
            "id": r[0], "title": r[1], "detail": r[2], "nickname": r[3],
            "ratings": [{"vote_id": r[0], "rating_id": 1, "rating_name": "Rating", "percent": r[4] * 20, "value": r[4]}],
            "review_entity": "product", "review_type": 2, "review_status": r[5], "created_at": _json(r[6]),
            "entity_pk_value": r[7], "store_id": 1, "stores": [1],
        } for r in rows])
