"""Mini map: tile/Nominatim/OSRM stand-ins and the openstreetmap-website stand-in on a test network.

The frontend reaches Nominatim through the URL the catalog's configure step writes (the ``nominatim``
alias); the browser reaches OSRM on the public URL and per-profile ports the configure steps write, as
upstream's does. The routers run upstream's command (``osrm-routed ... /data/<profile>/...``) on the
datasets the image seeds. The tests reach every container only through ports published on 127.0.0.1.
"""
from __future__ import annotations

import math
import re
import struct
import subprocess
import time
import zlib
from dataclasses import dataclass

import pytest
import requests

from conftest import Containers, free_port, wait_http

pytestmark = [pytest.mark.docker, pytest.mark.mini]

TILE, NOMINATIM = 18160, 18161
# The routers sit on the ports the catalog's configure steps give the browser for the offset _configure uses
# (TILE - 8080): 5000/5001/5002 + 10080.
OSRM = {"car": 15080, "bike": 15081, "foot": 15082}
WEB, WEB_CONFIGURED, WEB_FALLBACK, WEB_FALLBACK_DEFAULTS = 18165, 18166, 18167, 18175
CMU = (40.4441897, -79.9427192)
MUSIC_HALL = (40.4437480, -79.9504070)


@dataclass
class MapStack:
    containers: Containers
    network: str
    web: str  # container name of the frontend with the geocoding URL set
    configured: str  # a second frontend, configured with the upstream sed steps
    web_image: str

    @staticmethod
    def url(port: int, path: str = "") -> str:
        return f"http://127.0.0.1:{port}{path}"


def _run_web(c: Containers, image: str, network: str, port: int, internal: bool) -> str:
    name = c.run(image, ports={3000: port}, network=network)
    if internal:  # the geocoding URL as the catalog's configure step writes it (server-side call)
        c.exec(name, "sed", "-i", 's#^nominatim_url:.*#nominatim_url: "http://nominatim:8080/"#', "/app/config/settings.yml")
    wait_http(MapStack.url(port, "/"), timeout=30, ok=lambda r: r.status_code == 200, logs=lambda: c.logs(name))
    return name


@pytest.fixture(scope="module")
def stack(mini_image, module_containers: Containers) -> MapStack:
    c = module_containers
    backend, web_image = mini_image("map-backend"), mini_image("map-web")
    net = c.network()
    start = time.monotonic()
    names = {
        "tile": c.run(backend, ports={80: TILE}, network=net, aliases=["tile"], command=["tile"]),
        "nominatim": c.run(backend, ports={8080: NOMINATIM}, network=net, aliases=["nominatim"], command=["nominatim"]),
    }
    for v, port in OSRM.items():  # upstream's command; the image seeds its datasets into /data
        names[v] = c.run(backend, ports={5000: port}, network=net, aliases=[f"osrm-{v}"],
                         command=["osrm-routed", "--algorithm", "mld", f"/data/{v}/us-northeast-latest.osrm"])
    probes = [(TILE, "/tile/0/0/0.png"), (NOMINATIM, "/search?q=test&format=json&limit=1")]
    probes += [(p, f"/route/v1/{v}/-79.9959,40.4406;-79.9,40.45?overview=false") for v, p in OSRM.items()]
    for port, path in probes:
        wait_http(MapStack.url(port, path), timeout=30, ok=lambda r: r.status_code == 200)
    web = _run_web(c, web_image, net, WEB, internal=True)
    print(f"map stack (5 backends + frontend) ready in {time.monotonic() - start:.2f}s")
    configured = _run_web(c, web_image, net, WEB_CONFIGURED, internal=True)
    return MapStack(c, net, web, configured, web_image)


def _labels(image: str) -> str:
    return subprocess.run(["docker", "image", "inspect", "-f", "{{json .Config.Labels}}", image],
                          capture_output=True, text=True, check=True).stdout


def test_image_labels(stack: MapStack, mini_image) -> None:
    for image in (mini_image("map-backend"), mini_image("map-web")):
        labels = _labels(image)
        for label in ('"org.envctl.flavor":"mini"', '"org.envctl.site":"map"', '"org.envctl.data-version":"1"'):
            assert label in labels, (image, labels)


# ---------------------------------------------------------------- tile server

def _png_size_and_pixels(data: bytes) -> tuple[int, int, bytes]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, size = 8, b"", (0, 0)
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        assert struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0] == zlib.crc32(kind + body)
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return size[0], size[1], zlib.decompress(idat)


def test_tile_is_a_valid_png(stack: MapStack) -> None:
    r = requests.get(stack.url(TILE, "/tile/0/0/0.png"), timeout=10)
    assert r.status_code == 200 and r.headers["Content-Type"] == "image/png"
    width, height, raw = _png_size_and_pixels(r.content)
    assert (width, height) == (256, 256)
    assert len(raw) == 256 * (1 + 256 * 3)
    other = requests.get(stack.url(TILE, "/tile/12/1137/1544.png"), timeout=10)
    assert other.status_code == 200 and other.content != r.content  # each tile is drawn for its z/x/y
    assert requests.get(stack.url(TILE, "/tile/1/5/0.png"), timeout=10).status_code == 404


# ---------------------------------------------------------------- nominatim

def test_nominatim_search(stack: MapStack) -> None:
    r = requests.get(stack.url(NOMINATIM, "/search"),
                     params={"q": "Carnegie Mellon University", "format": "json", "limit": 1}, timeout=10)
    assert r.status_code == 200
    places = r.json()
    assert len(places) == 1
    p = places[0]
    for key in ("display_name", "lat", "lon", "osm_type", "osm_id", "boundingbox", "class", "type"):
        assert key in p
    assert (p["osm_type"], p["osm_id"], p["class"], p["type"]) == ("relation", 2279034, "amenity", "university")
    assert p["display_name"].startswith("Carnegie Mellon University, ") and "15213" in p["display_name"]
    assert abs(float(p["lat"]) - CMU[0]) < 1e-6 and len(p["boundingbox"]) == 4
    nyc = requests.get(stack.url(NOMINATIM, "/search"), params={"q": "New York City", "format": "json"}, timeout=10).json()
    assert nyc[0]["osm_id"] == 175905 and len(nyc) > 1
    near = requests.get(stack.url(NOMINATIM, "/search"),
                        params={"q": "hotels near carnegie mellon university", "format": "json"}, timeout=10).json()
    assert near and all(h["class"] == "tourism" and h["type"] == "hotel" for h in near)
    assert requests.get(stack.url(NOMINATIM, "/search"), params={"q": "zzyzx", "format": "json"}, timeout=10).json() == []


def test_nominatim_reverse_lookup_and_status(stack: MapStack) -> None:
    r = requests.get(stack.url(NOMINATIM, "/reverse"),
                     params={"lat": MUSIC_HALL[0], "lon": MUSIC_HALL[1], "format": "json"}, timeout=10)
    assert r.status_code == 200
    assert (r.json()["osm_type"], r.json()["osm_id"]) == ("way", 154257484)
    assert r.json()["address"]["postcode"] == "15213"
    bad = requests.get(stack.url(NOMINATIM, "/reverse"), params={"lat": "x", "format": "json"}, timeout=10)
    assert bad.status_code == 400 and "error" in bad.json()
    found = requests.get(stack.url(NOMINATIM, "/lookup"), params={"osm_ids": "R2279034,W154257484", "format": "json"},
                         timeout=10).json()
    assert [f["osm_id"] for f in found] == [2279034, 154257484]
    assert requests.get(stack.url(NOMINATIM, "/status"), timeout=10).text == "OK"
    assert requests.get(stack.url(NOMINATIM, "/status"), params={"format": "json"}, timeout=10).json()["status"] == 0


# ---------------------------------------------------------------- osrm

def _great_circle(a: tuple[float, float], b: tuple[float, float]) -> float:
    p1, p2 = math.radians(a[0]), math.radians(b[0])
    h = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(b[1] - a[1]) / 2) ** 2
    return 2 * 6_371_000 * math.asin(math.sqrt(h))


def test_osrm_routes_per_profile(stack: MapStack) -> None:
    coords = f"{CMU[1]},{CMU[0]};{MUSIC_HALL[1]},{MUSIC_HALL[0]}"
    gc = _great_circle(CMU, MUSIC_HALL)
    results = {}
    for v, port in OSRM.items():
        r = requests.get(stack.url(port, f"/route/v1/driving/{coords}"), params={"overview": "false"}, timeout=10)
        assert r.status_code == 200
        body = r.json()
        assert body["code"] == "Ok"
        route = body["routes"][0]
        assert gc <= route["distance"] <= 1.5 * gc
        assert route["legs"][0]["distance"] == route["distance"] and "geometry" not in route
        snapped = [[round(lon, 6), round(lat, 6)] for lat, lon in (CMU, MUSIC_HALL)]  # OSRM gives 6 decimals
        assert [w["location"] for w in body["waypoints"]] == snapped
        results[v] = route
    # walking is slower than cycling, which is slower than driving
    speeds = {v: r["distance"] / r["duration"] for v, r in results.items()}
    assert speeds["foot"] < speeds["bike"] < speeds["car"]
    again = requests.get(stack.url(OSRM["car"], f"/route/v1/driving/{coords}?overview=false"), timeout=10).json()
    assert again["routes"][0] == results["car"]  # deterministic
    full = requests.get(stack.url(OSRM["car"], f"/route/v1/car/{coords}"), params={"geometries": "geojson"}, timeout=10)
    assert full.json()["routes"][0]["geometry"]["type"] == "LineString"
    assert full.headers["Access-Control-Allow-Origin"] == "*"  # as osrm-routed: the map page's browser calls it
    assert [results[v]["weight_name"] for v in OSRM] == ["routability", "cyclability", "duration"]  # from the datasets


@pytest.mark.parametrize("coords,code", [
    ("abc;def", "InvalidQuery"),
    ("-79.99,40.44;-79.9", "InvalidQuery"),
    ("-79.99,140.44;-79.9,40.45", "InvalidValue"),
    ("-79.99,40.44", "InvalidOptions"),
])
def test_osrm_rejects_bad_coordinates(stack: MapStack, coords: str, code: str) -> None:
    r = requests.get(stack.url(OSRM["car"], f"/route/v1/driving/{coords}?overview=false"), timeout=10)
    assert r.status_code == 400
    assert r.json()["code"] == code and r.json()["message"]


# ---------------------------------------------------------------- frontend

def _osm_js(port: int) -> str:
    r = requests.get(MapStack.url(port, "/assets/osm.js"), timeout=10)
    assert r.status_code == 200
    return r.text


def test_frontend_defaults_are_upstreams(stack: MapStack, mini_image) -> None:
    _run_web(stack.containers, mini_image("map-web"), stack.network, WEB_FALLBACK_DEFAULTS, internal=False)
    js = _osm_js(WEB_FALLBACK_DEFAULTS)
    assert '"NOMINATIM_URL": "http://metis.lti.cs.cmu.edu:8085/"' in js
    assert '"FOSSGIS_OSRM_URL": "http://metis.lti.cs.cmu.edu:"' in js
    home = requests.get(stack.url(WEB, "/"), timeout=10).text
    assert 'name="query"' in home and 'action="/search"' in home
    assert re.search(r'<img class="leaflet-tile" src="http://ogma\.lti\.cs\.cmu\.edu:8080/tile/13/\d+/\d+\.png"', home)


def test_frontend_search_lists_nominatim_results(stack: MapStack) -> None:
    r = requests.get(stack.url(WEB, "/search"), params={"query": "Carnegie Mellon University"}, timeout=10)
    assert r.status_code == 200
    assert 'href="/relation/2279034"' in r.text
    assert "Carnegie Mellon University, 5000, Forbes Avenue" in r.text
    near = requests.get(stack.url(WEB, "/search"), params={"query": "restaurants near CMU ArtPark Lab"}, timeout=10)
    assert "search_results_entry" in near.text and "Spoon" in near.text
    none = requests.get(stack.url(WEB, "/search"), params={"query": "zzyzx"}, timeout=10)
    assert "No results found" in none.text


def _js_round(x: float) -> int:
    return math.floor(x + 0.5)  # Math.round


def test_frontend_directions_hand_the_route_to_the_browser(stack: MapStack) -> None:
    """The server geocodes the end points; the OSRM call is the browser's (fossgis_osrm.js), as upstream's."""
    _configure(stack, stack.configured, "127.0.0.1")
    route = f"{CMU[0]},{CMU[1]};{MUSIC_HALL[0]},{MUSIC_HALL[1]}"
    page = requests.get(stack.url(WEB_CONFIGURED, "/directions"), params={"engine": "fossgis_osrm_foot", "route": route},
                        timeout=10).text
    assert f'fossgisOsrmRoute("foot", ...[[{CMU[0]}, {CMU[1]}], [{MUSIC_HALL[0]}, {MUSIC_HALL[1]}]]);' in page
    assert '<div id="routing_summary" hidden></div>' in page  # filled in by the browser
    named = requests.get(stack.url(WEB_CONFIGURED, "/directions"),
                         params={"engine": "fossgis_osrm_car", "from": "New York City", "to": "Pittsburgh"}, timeout=10).text
    assert re.search(r'fossgisOsrmRoute\("car", \.\.\.\[\[40\.7\d*, -74\.0\d*\], \[40\.4\d*, -79\.9\d*\]\]\);', named)
    js = requests.get(stack.url(WEB_CONFIGURED, "/assets/index/directions/fossgis_osrm.js"), timeout=10).text
    ports = ", ".join(f'"{v}": "{p}"' for v, p in OSRM.items())
    assert f"var vehicleTypePortMapping = {{{ports}}};" in js  # the configure steps' ports (offset 10080)
    missing = requests.get(stack.url(WEB_CONFIGURED, "/directions"), params={"from": "zzyzx", "to": "Pittsburgh"},
                           timeout=10).text
    assert "Could not find “zzyzx”" in missing and "fossgisOsrmRoute(" not in missing


@pytest.mark.browser
def test_browser_gets_directions_from_the_public_osrm(stack: MapStack, browser) -> None:
    _configure(stack, stack.configured, "127.0.0.1")
    osrm = requests.get(stack.url(OSRM["foot"], f"/route/v1/driving/{CMU[1]},{CMU[0]};{MUSIC_HALL[1]},{MUSIC_HALL[0]}"),
                        params={"overview": "false"}, timeout=10).json()["routes"][0]
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    calls: list[str] = []
    page.on("request", lambda req: calls.append(req.url) if "/route/v1/" in req.url else None)
    try:
        route = f"{CMU[0]},{CMU[1]};{MUSIC_HALL[0]},{MUSIC_HALL[1]}"
        page.goto(stack.url(WEB_CONFIGURED, f"/directions?engine=fossgis_osrm_foot&route={route}"), wait_until="load")
        summary = page.locator("#routing_summary")
        summary.wait_for(state="visible", timeout=10_000)
        m = re.fullmatch(r"Distance: (\d+)m\. Time: (\d+):(\d\d)\.", summary.inner_text())
        assert m, summary.inner_text()
        assert int(m.group(1)) == _js_round(osrm["distance"])
        assert int(m.group(2)) * 60 + int(m.group(3)) == _js_round(osrm["duration"] / 60)
        assert calls and all(c.startswith(f"http://127.0.0.1:{OSRM['foot']}/route/v1/driving/") for c in calls), calls
        page.goto(stack.url(WEB_CONFIGURED, "/directions?engine=fossgis_osrm_car&from=New+York+City&to=Pittsburgh"),
                  wait_until="load")
        summary.wait_for(state="visible", timeout=10_000)
        assert re.fullmatch(r"Distance: \d{3}km\. Time: \d+:\d\d\.", summary.inner_text()), summary.inner_text()
        # a router that does not answer: the browser's error names the public URL it called
        nowhere = free_port()
        _sed(stack, stack.web, 's#^fossgis_osrm_url:.*#fossgis_osrm_url: "http://127.0.0.1:"#', "/app/config/settings.yml")
        _sed(stack, stack.web, f's#"bike": *"[0-9]*"#"bike": "{nowhere}"#',
             "/app/app/assets/javascripts/index/directions/fossgis_osrm.js")
        page.goto(stack.url(WEB, f"/directions?engine=fossgis_osrm_bike&route={route}"), wait_until="load")
        error = page.locator("#routing_error")
        error.wait_for(state="visible", timeout=15_000)
        assert error.inner_text() == f"An error occurred while communicating with http://127.0.0.1:{nowhere}/"
        assert page.locator("#routing_summary").is_hidden()
    finally:
        page.close()


def test_frontend_element_pages(stack: MapStack) -> None:
    r = requests.get(stack.url(WEB, "/way/154257484/"), timeout=10)
    assert r.status_code == 200
    sidebar = r.text.split('id="sidebar_content">', 1)[1].split('<div id="map"', 1)[0]
    assert "Way: Carnegie Music Hall (154257484)" in sidebar
    rel = requests.get(stack.url(WEB, "/relation/2279034"), timeout=10).text
    assert '<th class="browse-tag-k">addr:postcode</th><td class="browse-tag-v">15213</td>' in rel
    assert requests.get(stack.url(WEB, "/node/1"), timeout=10).status_code == 404


def _sed(stack: MapStack, name: str, expr: str, path: str) -> None:
    stack.containers.exec(name, "sed", "-i", expr, path)


def _configure(stack: MapStack, name: str, host: str) -> None:
    """Run the catalog's map configure steps in ``name`` as 'envctl up' would for ``host`` (tile on TILE)."""
    from envctl.catalog import Deployment, Renderer, load_catalog

    cat = load_catalog()
    r = Renderer(cat, "map", Deployment(host, port_offset=TILE - 8080))
    for step in cat.site("map").steps("mini"):
        stack.containers.exec(name, *r.argv(step.run))  # check=True: a failing step (a check) fails


def test_catalog_configure_steps_reconfigure_without_restart(stack: MapStack) -> None:
    name = stack.configured
    _configure(stack, name, "other.example")  # a first configure for another public host ...
    _configure(stack, name, "127.0.0.1")  # ... is rewritten by the next one (the steps match any host)
    js = _osm_js(WEB_CONFIGURED)
    assert '"NOMINATIM_URL": "http://nominatim:8080/"' in js  # server-side: the private alias
    assert '"FOSSGIS_OSRM_URL": "http://127.0.0.1:"' in js
    assert f'"TILE_URL": "http://127.0.0.1:{TILE}/tile/{{z}}/{{x}}/{{y}}.png"' in js
    assert "other.example" not in js
    home = requests.get(stack.url(WEB_CONFIGURED, "/"), timeout=10).text
    srcs = re.findall(r'<img class="leaflet-tile" src="([^"]+)"', home)
    assert len(srcs) == 9 and all(s.startswith(f"http://127.0.0.1:{TILE}/tile/13/") for s in srcs)
    for src in srcs[:2]:  # the public tile URLs the page hands the browser really work
        assert requests.get(src, timeout=10).content[:8] == b"\x89PNG\r\n\x1a\n"
    # geocoding is a server-side call through the written URL (127.0.0.1 in the container is not the host)
    assert 'href="/relation/2279034"' in requests.get(
        stack.url(WEB_CONFIGURED, "/search"), params={"query": "CMU"}, timeout=10).text
    # the leaflet.osm.js the browser loads is the edited file
    assert f"http://127.0.0.1:{TILE}/tile/" in requests.get(stack.url(WEB_CONFIGURED, "/assets/leaflet.osm.js"), timeout=10).text


def test_configure_check_fails_when_a_sed_matched_nothing(stack: MapStack) -> None:
    """sed exits 0 when nothing matches: the step after it fails instead of leaving a stale URL."""
    name = stack.containers.run(stack.web_image, network=stack.network)
    stack.containers.exec(name, "sed", "-i", "/^nominatim_url:/d", "/app/config/settings.yml")
    with pytest.raises(subprocess.CalledProcessError) as err:
        _configure(stack, name, "127.0.0.1")
    assert err.value.cmd[3:5] == ["grep", "-qxF"] and "nominatim_url" in err.value.cmd[5]


def test_settings_urls_are_used_by_the_server_for_geocoding(stack: MapStack, mini_image) -> None:
    """The frontend geocodes through settings.yml's nominatim_url, re-read on every request."""
    c = stack.containers
    nominatim = c.run(mini_image("map-backend"), network=stack.network, aliases=["nominatim-public"],
                      env={"MINIWEB_PORT": "8085"}, command=["nominatim"])
    web = _run_web(c, mini_image("map-web"), stack.network, WEB_FALLBACK, internal=False)
    before = requests.get(stack.url(WEB_FALLBACK, "/search"), params={"query": "CMU"}, timeout=30).text
    assert "An error occurred while communicating with http://metis.lti.cs.cmu.edu:8085/" in before
    _sed(stack, web, "s|metis.lti.cs.cmu.edu:8085|nominatim-public:8085|g", "/app/config/settings.yml")
    deadline = time.monotonic() + 30
    while True:  # the extra Nominatim container may still be starting
        after = requests.get(stack.url(WEB_FALLBACK, "/search"), params={"query": "CMU"}, timeout=10).text
        if 'href="/relation/2279034"' in after or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert 'href="/relation/2279034"' in after, c.logs(nominatim)


@pytest.mark.browser
def test_browser_searches_and_sees_tiles(stack: MapStack, browser) -> None:
    _configure(stack, stack.configured, "127.0.0.1")  # idempotent: point tiles at the published port
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        page.goto(stack.url(WEB_CONFIGURED, "/"), wait_until="load")
        page.get_by_role("textbox", name="Search").fill("New York City")
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r"/search\?query=New\+York\+City"))
        link = page.locator("#sidebar_content a.set_position").first
        assert link.inner_text().startswith("City of New York")
        link.click()
        page.wait_for_url(re.compile(r"/relation/175905$"))
        assert "Relation: City of New York (175905)" in page.locator("#sidebar_content").inner_text()
        page.wait_for_function(
            "() => [...document.querySelectorAll('img.leaflet-tile')].every(i => i.complete && i.naturalWidth === 256)")
    finally:
        page.close()


def test_backend_and_frontend_stop_cleanly(mini_image, containers: Containers) -> None:
    """PID-1 Python handles SIGTERM, so ``docker stop`` does not hit its 10 s kill timeout."""
    for image, command, cport, path in (("map-backend", ["osrm", "bike"], 5000, "/route/v1/x/0,0;1,1"),
                                        ("map-web", None, 3000, "/")):
        name = containers.run(mini_image(image), ports={cport: 18168}, command=command)
        wait_http(MapStack.url(18168, path), timeout=30, ok=lambda r: r.status_code == 200)
        start = time.monotonic()
        subprocess.run(["docker", "stop", "-t", "10", name], check=True, capture_output=True)
        took = time.monotonic() - start
        code = subprocess.run(["docker", "inspect", "-f", "{{.State.ExitCode}}", name],
                              capture_output=True, text=True, check=True).stdout.strip()
        assert code == "0" and took < 5, (image, code, took)
        subprocess.run(["docker", "rm", name], check=True, capture_output=True)
        containers.names.remove(name)


def test_images_answer_the_upstream_commands(mini_image, containers: Containers) -> None:
    """The catalog runs the upstream commands on every flavor: the tile server's ``run``, Nominatim's
    ``/app/start.sh``, the frontend's ``bundle exec rails s -p 3000 -b 0.0.0.0`` and ``bin/rails db:migrate``."""
    for image, command, cport, path in (
            ("map-backend", ["run"], 80, "/tile/0/0/0.png"),
            ("map-backend", ["/app/start.sh"], 8080, "/search?q=Pittsburgh&format=json&limit=1"),
            ("map-web", ["bundle", "exec", "rails", "s", "-p", "3000", "-b", "0.0.0.0"], 3000, "/")):
        name = containers.run(mini_image(image), ports={cport: 18169}, command=command)
        wait_http(MapStack.url(18169, path), timeout=30, ok=lambda r: r.status_code == 200)
        if image == "map-web":
            migrate = containers.exec(name, "bin/rails", "db:migrate", "RAILS_ENV=development")
            assert migrate.returncode == 0
        subprocess.run(["docker", "rm", "-f", name], check=True, capture_output=True)
        containers.names.remove(name)
