"""Stand-ins for the map backends, one process per role: ``python3 -m sites.map_backend ROLE``.

Upstream commands work too: ``run`` (the tile server's), ``/app/start.sh`` (Nominatim's) and
``osrm-routed [--algorithm mld] [--port N] /data/NAME.osrm`` (OSRM's: as there, the profile comes from
the dataset, here from the weight name in ``NAME.osrm.properties``). Before ``osrm-routed`` starts, the
image's small datasets (``/usr/share/envctl/seed/data/{car,bike,foot}/``, the layout of upstream's
osrm_routing.tar) are copied to ``/data`` where missing, so an empty data directory mounted there works.

- ``tile``: like overv/openstreetmap-tile-server on port 80, ``GET /tile/{z}/{x}/{y}.png`` (a generated
  256x256 PNG: grid, the tile's z/x/y and a dot per gazetteer place).
- ``nominatim``: like mediagis/nominatim 4.2 on port 8080, ``/search``, ``/reverse``, ``/lookup``, ``/status``.
- ``osrm PROFILE`` (car|bike|foot): like osrm-routed on port 5000, ``/route/v1/{profile}/{coords}`` with
  great-circle distances times a per-profile detour factor and per-profile speeds.
Answers are deterministic and come from ``map_data``; ports can be overridden with ``MINIWEB_PORT``.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import struct
import sys
import zlib
from dataclasses import dataclass

from flask import Flask, Response, jsonify, request

from miniweb.core import exit_on_sigterm, serve
from sites import map_data as geo

LICENCE = "Data © OpenStreetMap contributors, ODbL 1.0. https://osm.org/copyright"

# ---------------------------------------------------------------- tiles

# 3x5 bitmap digits and "/" for the tile label, rows top to bottom, 3 bits each.
_GLYPHS = {
    "0": (7, 5, 5, 5, 7), "1": (2, 6, 2, 2, 7), "2": (7, 1, 7, 4, 7), "3": (7, 1, 7, 1, 7), "4": (5, 5, 7, 1, 1),
    "5": (7, 4, 7, 1, 7), "6": (7, 4, 7, 5, 7), "7": (7, 1, 1, 1, 1), "8": (7, 5, 7, 5, 7), "9": (7, 5, 7, 1, 7),
    "/": (1, 1, 2, 4, 4),
}
TILE = 256
BACKGROUND, GRID, INK, DOT = (242, 239, 233), (220, 214, 204), (90, 90, 90), (200, 40, 40)


def _png(width: int, rows: list[bytearray]) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + bytes(r) for r in rows)
    ihdr = struct.pack(">IIBBBBB", width, len(rows), 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


@functools.lru_cache(maxsize=512)
def render_tile(z: int, x: int, y: int) -> bytes:
    rows = [bytearray(bytes(BACKGROUND) * TILE) for _ in range(TILE)]

    def put(px: int, py: int, rgb: tuple[int, int, int]) -> None:
        if 0 <= px < TILE and 0 <= py < TILE:
            rows[py][px * 3:px * 3 + 3] = bytes(rgb)

    for i in range(0, TILE, 64):
        rows[i][:] = bytes(GRID) * TILE
        for row in rows:
            row[i * 3:i * 3 + 3] = bytes(GRID)
    cx = 4
    for ch in f"{z}/{x}/{y}":
        for r, bits in enumerate(_GLYPHS[ch]):
            for c in range(3):
                if bits & (4 >> c):
                    for dy in range(2):
                        for dx in range(2):
                            put(cx + c * 2 + dx, 4 + r * 2 + dy, INK)
        cx += 8
    for p in geo.PLACES:
        tx, ty = geo.lonlat_to_tile(p.lat, p.lon, z)
        if int(tx) == x and int(ty) == y:
            px, py = int((tx - x) * TILE), int((ty - y) * TILE)
            for dy in range(-3, 4):
                for dx in range(-3, 4):
                    if dx * dx + dy * dy <= 9:
                        put(px + dx, py + dy, DOT)
    return _png(TILE, rows)


def tile_app() -> Flask:
    app = Flask("map-tile")

    @app.get("/tile/<int:z>/<int:x>/<int:y>.png")
    def tile(z: int, x: int, y: int) -> Response:
        if not (0 <= z <= 20 and 0 <= x < 2 ** z and 0 <= y < 2 ** z):
            return Response("Tile out of range\n", status=404, mimetype="text/plain")
        return Response(render_tile(z, x, y), mimetype="image/png",
                        headers={"Cache-Control": "max-age=86400"})

    @app.get("/")
    def index() -> Response:
        return Response("<html><body><h1>Tile server</h1><p>/tile/{z}/{x}/{y}.png</p></body></html>",
                        mimetype="text/html")

    return app


# ---------------------------------------------------------------- nominatim

def place_json(p: geo.Place, fmt: str, *, addressdetails: bool, extratags: bool) -> dict:
    out: dict = {
        "place_id": p.place_id, "licence": LICENCE, "osm_type": p.osm_type, "osm_id": p.osm_id,
        "lat": f"{p.lat:.7f}", "lon": f"{p.lon:.7f}",
    }
    if fmt == "jsonv2":
        out.update({"category": p.cls, "type": p.type, "place_rank": 30, "importance": p.importance,
                    "addresstype": p.type, "name": p.name})
    else:
        out.update({"class": p.cls, "type": p.type, "importance": p.importance})
    out["display_name"] = p.display_name
    if addressdetails:
        out["address"] = {p.cls: p.name, **dict(p.address)}
    if extratags:
        out["extratags"] = {k: v for k, v in p.tags}
    out["boundingbox"] = p.boundingbox
    return out


def _flag(name: str) -> bool:
    return request.args.get(name, "0") not in ("0", "", "false")


def _nominatim_error(code: int, message: str) -> Response:
    resp = jsonify({"error": {"code": code, "message": message}})
    resp.status_code = code
    return resp


def _format() -> str | None:
    fmt = request.args.get("format", "jsonv2")
    return fmt if fmt in ("json", "jsonv2", "geojson") else None


def _render_places(places: list[geo.Place], fmt: str) -> Response:
    opts = {"addressdetails": _flag("addressdetails"), "extratags": _flag("extratags")}
    if fmt == "geojson":
        return jsonify({"type": "FeatureCollection", "licence": LICENCE, "features": [
            {"type": "Feature", "properties": {k: v for k, v in place_json(p, "jsonv2", **opts).items()
                                               if k not in ("lat", "lon", "boundingbox", "licence")},
             "bbox": [float(p.boundingbox[2]), float(p.boundingbox[0]), float(p.boundingbox[3]), float(p.boundingbox[1])],
             "geometry": {"type": "Point", "coordinates": [p.lon, p.lat]}} for p in places]})
    return jsonify([place_json(p, fmt, **opts) for p in places])


def nominatim_app() -> Flask:
    app = Flask("map-nominatim")
    app.json.sort_keys = False  # type: ignore[attr-defined]

    @app.get("/search")
    @app.get("/search.php")
    def search() -> Response:
        fmt = _format()
        if fmt is None:
            return _nominatim_error(400, "Parameter 'format' must be one of: json, jsonv2, geojson.")
        q = request.args.get("q", "")
        try:
            limit = max(1, min(int(request.args.get("limit", "10")), 40))
        except ValueError:
            return _nominatim_error(400, "Integer number expected for parameter 'limit'")
        return _render_places(geo.search(q, limit) if q.strip() else [], fmt)

    @app.get("/reverse")
    @app.get("/reverse.php")
    def reverse() -> Response:
        fmt = _format()
        if fmt is None:
            return _nominatim_error(400, "Parameter 'format' must be one of: json, jsonv2, geojson.")
        try:
            lat, lon = float(request.args["lat"]), float(request.args["lon"])
        except (KeyError, ValueError):
            return _nominatim_error(400, "Need coordinates or OSM object to lookup.")
        if not (-90 <= lat <= 90 and -180 <= lon <= 180):
            return _nominatim_error(400, "Invalid coordinates.")
        p = geo.nearest(lat, lon)
        if fmt == "geojson":
            return _render_places([p], fmt)
        return jsonify(place_json(p, fmt, addressdetails=request.args.get("addressdetails", "1") != "0",
                                  extratags=_flag("extratags")))

    @app.get("/lookup")
    @app.get("/lookup.php")
    def lookup() -> Response:
        fmt = _format() or "json"
        kinds = {"N": "node", "W": "way", "R": "relation"}
        found = []
        for ref in request.args.get("osm_ids", "").split(","):
            m = re.fullmatch(r"([NWR])(\d+)", ref.strip().upper())
            p = geo.lookup(kinds[m.group(1)], int(m.group(2))) if m else None
            if p:
                found.append(p)
        return _render_places(found, fmt)

    @app.get("/status")
    @app.get("/status.php")
    def status() -> Response:
        if request.args.get("format") == "json":
            return jsonify({"status": 0, "message": "OK", "data_updated": "2023-11-14T22:13:20+00:00",
                            "software_version": "4.2.3", "database_version": "4.2.3-0"})
        return Response("OK", mimetype="text/plain")

    return app


# ---------------------------------------------------------------- osrm

@dataclass(frozen=True)
class Profile:
    name: str
    speed_mps: float  # average speed along the route
    detour: float  # route length / great-circle length
    weight_name: str


PROFILES = {
    "car": Profile("car", 40 / 3.6, 1.30, "routability"),
    "bike": Profile("bike", 15 / 3.6, 1.25, "cyclability"),
    "foot": Profile("foot", 5 / 3.6, 1.20, "duration"),
}
_COORD = re.compile(r"^(-?\d+(?:\.\d+)?),(-?\d+(?:\.\d+)?)$")


def _osrm_error(code: str, message: str) -> Response:
    resp = jsonify({"code": code, "message": message})
    resp.status_code = 400
    return resp


def encode_polyline(points: list[tuple[float, float]], precision: int = 5) -> str:
    """Google polyline encoding of (lat, lon) points, as OSRM's default ``geometries=polyline``."""
    out, prev = [], (0, 0)
    factor = 10 ** precision
    for lat, lon in points:
        cur = (round(lat * factor), round(lon * factor))
        for delta in (cur[0] - prev[0], cur[1] - prev[1]):
            v = ~(delta << 1) if delta < 0 else delta << 1
            while v >= 0x20:
                out.append(chr((0x20 | (v & 0x1F)) + 63))
                v >>= 5
            out.append(chr(v + 63))
        prev = cur
    return "".join(out)


def route(profile: Profile, coords: list[tuple[float, float]], *, overview: str, geometries: str,
          steps: bool) -> dict:
    """``coords`` are (lon, lat) pairs as in OSRM URLs."""
    legs = []
    for (lon1, lat1), (lon2, lat2) in zip(coords, coords[1:]):
        dist = round(geo.haversine_m(lat1, lon1, lat2, lon2) * profile.detour, 1)
        dur = round(dist / profile.speed_mps, 1)
        leg_steps = []
        mode = {"car": "driving", "bike": "cycling", "foot": "walking"}[profile.name]
        if steps:
            leg_steps = [
                {"distance": dist, "duration": dur, "weight": dur, "name": "", "mode": mode,
                 "maneuver": {"type": "depart", "location": [lon1, lat1], "bearing_before": 0, "bearing_after": 0},
                 "geometry": encode_polyline([(lat1, lon1), (lat2, lon2)])},
                {"distance": 0, "duration": 0, "weight": 0, "name": "", "mode": mode,
                 "maneuver": {"type": "arrive", "location": [lon2, lat2], "bearing_before": 0, "bearing_after": 0},
                 "geometry": encode_polyline([(lat2, lon2), (lat2, lon2)])},
            ]
        legs.append({"steps": leg_steps, "summary": "", "weight": dur, "duration": dur, "distance": dist})
    total_d = round(sum(leg["distance"] for leg in legs), 1)
    total_t = round(sum(leg["duration"] for leg in legs), 1)
    r: dict = {}
    if overview != "false":
        pts = [(lat, lon) for lon, lat in coords]
        r["geometry"] = ({"type": "LineString", "coordinates": [list(c) for c in coords]} if geometries == "geojson"
                         else encode_polyline(pts, 6 if geometries == "polyline6" else 5))
    r.update({"legs": legs, "weight_name": profile.weight_name, "weight": total_t, "duration": total_t,
              "distance": total_d})
    waypoints = [{"hint": f"mini-{profile.name}-{i}", "distance": 0, "name": "", "location": [round(lon, 6), round(lat, 6)]}
                 for i, (lon, lat) in enumerate(coords)]
    return {"code": "Ok", "routes": [r], "waypoints": waypoints}


def osrm_app(profile: Profile) -> Flask:
    app = Flask(f"map-osrm-{profile.name}")
    app.json.sort_keys = False  # type: ignore[attr-defined]

    @app.after_request
    def cors(resp: Response) -> Response:  # osrm-routed answers any origin: browsers call it from the map page
        resp.headers["Access-Control-Allow-Origin"] = "*"
        return resp

    @app.get("/route/v1/<_profile>/<path:coords>")
    def route_view(_profile: str, coords: str) -> Response:
        # osrm-routed ignores the profile named in the URL: the loaded dataset decides (car/bike/foot).
        coords = coords.removesuffix(".json")
        parsed = []
        pos = len(f"/route/v1/{_profile}/")
        for part in coords.split(";"):
            m = _COORD.match(part)
            if not m:
                return _osrm_error("InvalidQuery", f"Query string malformed close to position {pos}")
            parsed.append((float(m.group(1)), float(m.group(2))))
            pos += len(part) + 1
        if any(not (-180 <= lon <= 180 and -90 <= lat <= 90) for lon, lat in parsed):
            return _osrm_error("InvalidValue", "Invalid coordinate value.")
        if len(parsed) < 2:
            return _osrm_error("InvalidOptions", "Number of coordinates needs to be at least two.")
        overview = request.args.get("overview", "simplified")
        geometries = request.args.get("geometries", "polyline")
        if overview not in ("simplified", "full", "false") or geometries not in ("polyline", "polyline6", "geojson"):
            return _osrm_error("InvalidQuery", "Query string malformed close to position 0")
        return jsonify(route(profile, parsed, overview=overview, geometries=geometries,
                             steps=request.args.get("steps") == "true"))

    @app.get("/")
    @app.get("/<path:_other>")
    def other(_other: str = "") -> Response:
        return _osrm_error("InvalidUrl", "URL string malformed close to position 1: \"/\"")

    return app


# ---------------------------------------------------------------- entry point

ROLES = {"tile": 80, "nominatim": 8080, "osrm": 5000}


# The upstream images' commands, as the catalog runs them on every flavor.
UPSTREAM_COMMANDS = {"run": ["tile"], "/app/start.sh": ["nominatim"]}


# osrm-routed's options that take a value; any other option is a switch.
_OSRMD_VALUE_OPTS = {"-a": "algorithm", "--algorithm": "algorithm", "-p": "port", "--port": "port",
                     "-i": "ip", "--ip": "ip", "-t": "threads", "--threads": "threads", "--dataset-name": "",
                     "--memory_file": "", "--max-viaroute-size": "", "--max-trip-size": "",
                     "--max-table-size": "", "--max-matching-size": "", "--max-nearest-size": "",
                     "--max-alternatives": "", "--max-matching-radius": "", "--keepalive-timeout": ""}
_WEIGHT_NAME = re.compile(rb'"weight_name"\s*:\s*"([A-Za-z_]+)"')


class OsrmdError(Exception):
    """A startup failure of ``osrm-routed``: one line on stderr, exit status 1."""


def profile_of_dataset(base: str) -> Profile:
    """The profile a dataset was extracted with, from the weight name in ``<base>.properties``
    (a JSON ``"weight_name"`` if present, else the first known weight name among the file's bytes)."""
    path = f"{base}.properties"
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        raise OsrmdError(f"[error] Missing/Broken File: {path}: required files are missing, cannot continue."
                         " Have all the pre-processing steps been run?") from None
    by_weight = {p.weight_name: p for p in PROFILES.values()}
    m = _WEIGHT_NAME.search(data)
    if m and m.group(1).decode() in by_weight:
        return by_weight[m.group(1).decode()]
    found = [(data.find(w.encode()), p) for w, p in by_weight.items() if w.encode() in data]
    if not found:
        raise OsrmdError(f"[error] Broken File: {path} names no known profile weight"
                         f" ({', '.join(by_weight)}), cannot continue.")
    return min(found, key=lambda t: t[0])[1]


def parse_osrm_routed(args: list[str]) -> tuple[Profile, int | None]:
    """``osrm-routed`` arguments (after the program name) -> (profile of the dataset, --port or None)."""
    opts: dict[str, str] = {}
    positional: list[str] = []
    it = iter(args)
    for a in it:
        if a.startswith("-") and a != "-":
            name, eq, value = a.partition("=")
            if name not in _OSRMD_VALUE_OPTS and name.startswith("-") and not name.startswith("--") and len(name) > 2:
                name, value, eq = name[:2], name[2:], "="  # -p5000
            if name in _OSRMD_VALUE_OPTS:
                if not eq:
                    value = next(it, None)
                    if value is None:
                        raise OsrmdError(f"[error] the required argument for option '{name}' is missing")
                opts[_OSRMD_VALUE_OPTS[name] or name] = value
        else:
            positional.append(a)
    if not positional:
        raise OsrmdError("[error] Required files are missing, cannot continue. Have all the pre-processing steps been run?")
    algorithm = opts.get("algorithm", "CH")
    if algorithm.upper() not in ("CH", "CORECH", "MLD"):
        raise OsrmdError(f"[error] Invalid algorithm name: {algorithm}")
    port = opts.get("port")
    if port is not None and not port.isdigit():
        raise OsrmdError(f"[error] the argument ('{port}') for option '--port' is invalid")
    return profile_of_dataset(positional[-1]), int(port) if port is not None else None


SEED = "/usr/share/envctl/seed"


def seed(root: str = SEED) -> None:
    """Copy each file of the seed tree ``root`` to the same path outside it (``root/data/car/x`` ->
    ``/data/car/x``) when nothing is there: under a temporary name, then renamed, so routers starting side by
    side on one data directory each see no file or a whole one. A path that cannot be written (a read-only
    mount) is left alone: the dataset check then names what is missing."""
    for dirpath, _, files in os.walk(root):
        for name in files:
            src = os.path.join(dirpath, name)
            dest = src[len(root):]
            if os.path.lexists(dest):
                continue
            tmp = os.path.join(os.path.dirname(dest), f".envctl-seed.{os.getpid()}.{name}")
            try:
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.copy2(src, tmp)
                os.replace(tmp, dest)
            except OSError:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass


def main(argv: list[str]) -> int:
    if argv and os.path.basename(argv[0]) == "osrm-routed":
        seed()
        try:
            profile, port = parse_osrm_routed(argv[1:])
        except OsrmdError as exc:
            print(exc, file=sys.stderr)
            return 1
        app = osrm_app(profile)
        exit_on_sigterm()
        serve(app, port or int(os.environ.get("MINIWEB_PORT", ROLES["osrm"])))
        return 0
    argv = UPSTREAM_COMMANDS.get(argv[0], argv) if argv else argv
    if not argv or argv[0] not in ROLES or (argv[0] == "osrm" and (len(argv) < 2 or argv[1] not in PROFILES)):
        print("usage: map_backend tile | nominatim | osrm car|bike|foot | osrm-routed [options] DATASET.osrm",
              file=sys.stderr)
        return 2
    role = argv[0]
    app = {"tile": tile_app, "nominatim": nominatim_app}.get(role, lambda: osrm_app(PROFILES[argv[1]]))()
    exit_on_sigterm()
    serve(app, int(os.environ.get("MINIWEB_PORT", ROLES[role])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
