"""Stand-in of WebArena's openstreetmap-website frontend (port 3000): search, directions, element pages.

Backend configuration works like upstream's, read on every request so the upstream ``sed`` steps
apply without a restart:

- ``$MAP_APP_ROOT/config/settings.yml`` (default ``/app``): ``nominatim_url`` and ``fossgis_osrm_url``;
- ``$MAP_APP_ROOT/vendor/assets/leaflet/leaflet.osm.js``: the tile ``url`` template;
- ``$MAP_APP_ROOT/app/assets/javascripts/index/directions/fossgis_osrm.js``: ``vehicleTypePortMapping``
  (the port appended to ``fossgis_osrm_url`` per vehicle) and the browser's OSRM call.

As upstream's GeocoderController does, geocoding is a server-side call to ``nominatim_url`` (so the
configure step writes the backend's private address there). Tiles and OSRM are public URLs that the
browser calls, as upstream's does: the directions page hands the browser the two end points (names are
geocoded on the server) and fossgis_osrm.js asks OSRM for the route and writes the summary.
The element pages (/node, /way, /relation) read the shared gazetteer, as upstream reads its own DB.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import requests
import yaml
from flask import Flask, Response, request

from miniweb.core import esc, exit_on_sigterm, page, serve
from sites import map_data as geo

ENGINES = {f"fossgis_osrm_{v}": v for v in ("car", "bike", "foot")}
FOSSGIS_OSRM_JS = Path("app", "assets", "javascripts", "index", "directions", "fossgis_osrm.js")
DEFAULT_VIEW = (40.4417, -79.9901, 13)  # Pittsburgh
TIMEOUT = 10


@dataclass(frozen=True)
class Backends:
    nominatim_url: str  # called by the server, as configured
    osrm_url: str  # public prefix, e.g. "http://host:" (the browser appends the port per vehicle)
    tile_url: str  # public template with {z}/{x}/{y}

    def nominatim_internal(self) -> str:
        return self.nominatim_url.rstrip("/") + "/"


def app_root() -> Path:
    return Path(os.environ.get("MAP_APP_ROOT", "/app"))


def load_backends() -> Backends:
    settings = yaml.safe_load((app_root() / "config" / "settings.yml").read_text()) or {}
    leaflet = (app_root() / "vendor" / "assets" / "leaflet" / "leaflet.osm.js").read_text()
    m = re.search(r"""url:\s*['"]([^'"]+)['"]""", leaflet)
    return Backends(str(settings.get("nominatim_url", "")), str(settings.get("fossgis_osrm_url", "")),
                    m.group(1) if m else "")


# ---------------------------------------------------------------- rendering helpers

def tile_view(backends: Backends, lat: float, lon: float, zoom: int) -> str:
    tx, ty = geo.lonlat_to_tile(lat, lon, zoom)
    cx, cy, n = int(tx), int(ty), 2 ** zoom
    imgs = []
    for y in (cy - 1, cy, cy + 1):
        for x in (cx - 1, cx, cx + 1):
            if 0 <= y < n:
                src = (backends.tile_url.replace("{s}", "a").replace("{z}", str(zoom))
                       .replace("{x}", str(x % n)).replace("{y}", str(y)))
                imgs.append(f'<img class="leaflet-tile" src="{esc(src)}" width="256" height="256" alt="">')
            else:
                imgs.append('<span class="leaflet-tile"></span>')
    return (f'<div id="map" data-lat="{lat:.5f}" data-lon="{lon:.5f}" data-zoom="{zoom}" '
            'style="display:grid;grid-template-columns:repeat(3,256px);gap:0">' + "".join(imgs) + "</div>")


HEAD = ('<script src="/assets/osm.js"></script><style>body{font-family:sans-serif;margin:0}'
        'header{display:flex;gap:1em;align-items:center;padding:.5em;border-bottom:1px solid #ccc}'
        'main{display:flex}#sidebar{width:350px;padding:.5em}#map{flex:1}'
        '.browse-tag-list th{text-align:left;padding-right:1em}</style>')


def layout(title: str, sidebar: str, backends: Backends, view: tuple[float, float, int], query: str = "") -> str:
    nav = (
        '<h1><a href="/">OpenStreetMap</a></h1>'
        '<form action="/search" method="get" class="search_form" role="search">'
        f'<input type="text" name="query" id="query" placeholder="Search" aria-label="Search" value="{esc(query)}">'
        '<input type="submit" value="Go" name="commit"></form>'
        '<a href="/directions" class="directions">Directions</a>'
    )
    body = f'<div id="sidebar"><div id="sidebar_content">{sidebar}</div></div>{tile_view(backends, *view)}'
    return page(f"{title} | OpenStreetMap" if title else "OpenStreetMap", body, head=HEAD, nav=nav)


def element_href(osm_type: str, osm_id: int | str) -> str:
    return f"/{osm_type}/{osm_id}"


# ---------------------------------------------------------------- backend calls

class BackendError(Exception):
    pass


def nominatim_search(backends: Backends, query: str, limit: int = 10) -> list[dict]:
    url = backends.nominatim_internal() + "search"
    try:
        r = requests.get(url, params={"q": query, "format": "json", "limit": limit, "addressdetails": 1},
                         timeout=TIMEOUT)
        r.raise_for_status()
        return list(r.json())
    except (requests.RequestException, ValueError) as exc:
        raise BackendError(f"An error occurred while communicating with {backends.nominatim_url}") from exc


# ---------------------------------------------------------------- app

def _latlon(text: str) -> tuple[float, float] | None:
    m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*", text)
    if not m:
        return None
    lat, lon = float(m.group(1)), float(m.group(2))
    return (lat, lon) if -90 <= lat <= 90 and -180 <= lon <= 180 else None


def create_map_app() -> Flask:
    app = Flask("map")
    app.url_map.strict_slashes = False  # task URLs use e.g. /way/154257484/

    @app.get("/")
    def home() -> str:
        b = load_backends()
        try:
            view = (float(request.args["lat"]), float(request.args["lon"]), int(request.args.get("zoom", 15)))
        except (KeyError, ValueError):
            view = DEFAULT_VIEW
        sidebar = ("<h2>Welcome to OpenStreetMap!</h2><p>OpenStreetMap is a map of the world, created by people "
                   "like you and free to use under an open licence.</p>")
        return layout("", sidebar, b, view)

    @app.get("/search")
    @app.get("/geocoder/search_osm_nominatim")
    def search() -> str:
        b = load_backends()
        query = request.args.get("query", "").strip()
        view = DEFAULT_VIEW
        if not query:
            sidebar = "<h2>Search Results</h2><p>Enter something to search for.</p>"
            return layout("Search", sidebar, b, view, query)
        parts = [f"<h2>Search Results</h2><h4>Results from "
                 f'<a href="https://nominatim.openstreetmap.org/">OpenStreetMap Nominatim</a></h4>']
        try:
            results = nominatim_search(b, query)
        except BackendError as exc:
            parts.append(f'<p class="search_results_error">{esc(exc)}</p>')
            return layout("Search", "".join(parts), b, view, query)
        if not results:
            parts.append('<ul class="results-list"><li><p>No results found</p></li></ul>')
        else:
            items = []
            for r in results:
                kind = str(r.get("type", "")).replace("_", " ").capitalize()
                items.append(
                    f'<li class="search_results_entry">{esc(kind)} '
                    f'<a class="set_position" href="{esc(element_href(r["osm_type"], r["osm_id"]))}" '
                    f'data-lat="{esc(r["lat"])}" data-lon="{esc(r["lon"])}" data-name="{esc(r["display_name"])}">'
                    f'{esc(r["display_name"])}</a></li>'
                )
            parts.append('<ul class="results-list">' + "".join(items) + "</ul>")
            view = (float(results[0]["lat"]), float(results[0]["lon"]), 15)
        return layout("Search", "".join(parts), b, view, query)

    @app.get("/directions")
    def directions() -> str:
        b = load_backends()
        engine = request.args.get("engine", "fossgis_osrm_car")
        vehicle = ENGINES.get(engine, "car")
        route_param = request.args.get("route", "")
        texts = [request.args.get("from", "").strip(), request.args.get("to", "").strip()]
        points: list[tuple[float, float] | None] = [None, None]
        if route_param:
            ends = route_param.split(";")
            if len(ends) == 2:
                points = [_latlon(ends[0]), _latlon(ends[1])]
                texts = [t or (f"{p[0]}, {p[1]}" if p else "") for t, p in zip(texts, points)]
        message = ""
        try:
            for i, text in enumerate(texts):
                if points[i] is None and text:
                    points[i] = _latlon(text)
                    if points[i] is None:
                        found = nominatim_search(b, text, 1)
                        if found:
                            points[i] = (float(found[0]["lat"]), float(found[0]["lon"]))
                        else:
                            message = f"Could not find “{text}”"
        except BackendError as exc:
            message = str(exc)
        # The route itself is the browser's call to OSRM's public URL (fossgis_osrm.js), as upstream's.
        summary = '<div id="routing_summary" hidden></div>'
        if points[0] and points[1] and not message:
            ends = json.dumps([list(points[0]), list(points[1])])
            summary += ('<script src="/assets/osm.js"></script>'
                        '<script src="/assets/index/directions/fossgis_osrm.js"></script>'
                        f'<script>fossgisOsrmRoute({json.dumps(vehicle)}, ...{ends});</script>')
        options = "".join(
            f'<option value="{e}"{" selected" if e == engine else ""}>{v.capitalize()} (OSRM)</option>'
            for e, v in ENGINES.items()
        )
        form = (
            '<form action="/directions" method="get" class="directions_form">'
            f'<input type="text" name="from" placeholder="From" aria-label="From" value="{esc(texts[0])}">'
            f'<input type="text" name="to" placeholder="To" aria-label="To" value="{esc(texts[1])}">'
            f'<select name="engine" aria-label="Engine">{options}</select>'
            '<input type="submit" value="Go"></form>'
        )
        error = f'<p id="routing_error"{"" if message else " hidden"}>{esc(message)}</p>'
        if points[0] and points[1]:
            view = ((points[0][0] + points[1][0]) / 2, (points[0][1] + points[1][1]) / 2, 13)
        else:
            view = DEFAULT_VIEW
        return layout("Directions", f"<h2>Directions</h2>{form}{error}{summary}", b, view)

    def element(osm_type: str, osm_id: int) -> tuple[str, int]:
        b = load_backends()
        p = geo.lookup(osm_type, osm_id)
        if p is None:
            body = f"<h2>{osm_type.capitalize()} not found</h2><p>Sorry, {osm_type} #{osm_id} could not be found.</p>"
            return layout("", body, b, DEFAULT_VIEW), 404
        rows = "".join(f'<tr><th class="browse-tag-k">{esc(k)}</th><td class="browse-tag-v">{esc(v)}</td></tr>'
                       for k, v in p.all_tags.items())
        body = (f"<h2>{osm_type.capitalize()}: {esc(p.name)} ({osm_id})</h2>"
                f'<div class="browse-section"><h4>Version #1</h4><p>Location: '
                f'<span class="latitude">{p.lat:.7f}</span>, <span class="longitude">{p.lon:.7f}</span></p></div>'
                f'<h4>Tags</h4><table class="browse-tag-list">{rows}</table>')
        return layout(f"{osm_type.capitalize()}: {p.name} ({osm_id})", body, b, (p.lat, p.lon, 17)), 200

    @app.get("/node/<int:osm_id>")
    def node(osm_id: int) -> tuple[str, int]:
        return element("node", osm_id)

    @app.get("/way/<int:osm_id>")
    def way(osm_id: int) -> tuple[str, int]:
        return element("way", osm_id)

    @app.get("/relation/<int:osm_id>")
    def relation(osm_id: int) -> tuple[str, int]:
        return element("relation", osm_id)

    @app.get("/assets/osm.js")
    def osm_js() -> Response:
        b = load_backends()
        cfg = {"NOMINATIM_URL": b.nominatim_url, "FOSSGIS_OSRM_URL": b.osrm_url, "TILE_URL": b.tile_url}
        return Response(f"OSM = {json.dumps(cfg, indent=1)};\n", mimetype="application/javascript")

    @app.get("/assets/index/directions/fossgis_osrm.js")
    def fossgis_osrm_js() -> Response:
        return Response((app_root() / FOSSGIS_OSRM_JS).read_text(), mimetype="application/javascript")

    @app.get("/assets/leaflet.osm.js")
    def leaflet_js() -> Response:
        path = app_root() / "vendor" / "assets" / "leaflet" / "leaflet.osm.js"
        return Response(path.read_text(), mimetype="application/javascript")

    return app


if __name__ == "__main__":
    exit_on_sigterm()
    serve(create_map_app(), int(os.environ.get("MINIWEB_PORT", "3000")))
