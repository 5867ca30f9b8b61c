"""The benchmark homepage (port 4399), as upstream's ``environment_docker/webarena-homepage`` Flask app.

Routes ``/``, ``/calculator.html``, ``/scratchpad.html`` and ``/static/...`` (site logos and the
VisualWebArena task input images, generated at image build time by :mod:`homepage_assets`).
Upstream substitutes ``<your-server-hostname>`` into its template by hand; here each site card is
built from the harness's own env vars (``SHOPPING``, ``SHOPPING_ADMIN``, ``REDDIT``, ``GITLAB``,
``MAP``, ``WIKIPEDIA``, ``CLASSIFIEDS``) and only cards whose var is set are shown. Upstream's
``/password.html`` has no template (a 500 there); this app answers 404.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from flask import Flask, abort, render_template

ROOT = Path(os.environ.get("HOMEPAGE_ROOT", "/opt/homepage"))
WIKI_LANDING = "/wikipedia_en_all_maxi_2022-05/A/User:The_other_Kiwix_guy/Landing"

app = Flask("homepage", template_folder=str(ROOT / "templates"), static_folder=str(ROOT / "static"),
            static_url_path="/static")


@dataclass(frozen=True)
class Card:
    label: str  # aria-label of the card region, as upstream
    name: str
    href: str
    description: str
    figure: str


def _base(var: str) -> str | None:
    value = os.environ.get(var, "").strip()
    if not value:
        return None
    if "://" not in value:
        value = "http://" + value  # upstream's scheme-less hrefs are parsed as a URL scheme and break
    return value.rstrip("/")


def site_cards() -> list[Card]:
    """One card per configured site, in upstream's order (classifieds first, as on VisualWebArena's page)."""
    cards: list[Card] = []
    if (b := _base("CLASSIFIEDS")):
        cards.append(Card("Classifieds", "Classifieds", b, "Online classifieds for buying and selling", "classifieds.png"))
    if (b := _base("SHOPPING")):
        cards.append(Card("OneStopShop", "OneStopShop", b, "An online shopping site", "onestopshop.png"))
    if (b := _base("SHOPPING_ADMIN")):
        href = b if b.endswith("/admin") else b + "/admin"
        cards.append(Card("Merchant Admin Portal", "Merchant Admin Portal", href,
                          "An admin portal to manage E-commerce business (u: admin, p: admin1234)", "cms.png"))
    if (b := _base("REDDIT")):
        cards.append(Card("Reddit", "Reddit", b + "/forums/all", "A social news aggregation and discussion website", "reddit.png"))
    if (b := _base("GITLAB")):
        cards.append(Card("Gitlab", "Gitlab", b + "/explore", "a DevOps software", "gitlab.png"))
    if (b := _base("MAP")):
        cards.append(Card("Map", "OpenStreetMap", b, "North east US map", "map.png"))
    return cards


def tool_cards() -> list[Card]:
    cards = [Card("Calculator", "Calculator", "calculator.html", "A calculator", "calculator.png"),
             Card("Scratchpad", "Scratchpad", "scratchpad.html", "A scratchpad for taking notes", "scratchpad.png")]
    if (b := _base("WIKIPEDIA")):
        # WebArena passes the full landing URL, VisualWebArena only the server base.
        href = b if "/wikipedia_en_all_maxi_2022-05" in b else b + WIKI_LANDING
        cards.append(Card("Wikipedia", "Wikipedia", href, "An online encyclopedia", "wikipedia.png"))
    if _base("GITLAB"):
        cards.append(Card("Gitlab Manual", "Gitlab Documentation", "https://docs.gitlab.com/",
                          "Documentation for GitLab", "manual1.png"))
    if _base("SHOPPING_ADMIN"):
        cards.append(Card("Admin Manual", "Admin Portal Manual",
                          "https://experienceleague.adobe.com/docs/commerce-admin/user-guides/home.html?lang=en",
                          "Manual on using the admin portal", "manual2.png"))
    return cards


@app.route("/")
def index() -> str:
    return render_template("index.html", cards=site_cards() + tool_cards())


@app.route("/scratchpad.html")
def scratchpad() -> str:
    return render_template("scratchpad.html")


@app.route("/calculator.html")
def calculator() -> str:
    return render_template("calculator.html")


@app.route("/password.html")
def password() -> str:
    abort(404)


if __name__ == "__main__":
    from miniweb.core import serve

    serve(app, int(os.environ.get("MINIWEB_PORT", "4399")))
