"""The mini map's data: a small deterministic gazetteer around Pittsburgh and New York, plus geo maths.

Shared by the backends (Nominatim, OSRM and tile stand-ins) and the frontend's element pages (the
real frontend reads those from its own OSM database). Where WebArena task references name an OSM id
(relations 2279034, 188553, 65066, 5475586; ways 154257484, 168456128) the place keeps it; the other
ids are made up for the mini flavor. Coordinates are approximate real positions.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

EARTH_RADIUS_M = 6_371_000.0


@dataclass(frozen=True)
class Place:
    osm_type: str  # "node" | "way" | "relation"
    osm_id: int
    name: str
    cls: str  # OSM key, Nominatim "class"
    type: str  # OSM value, Nominatim "type"
    lat: float
    lon: float
    address: tuple[tuple[str, str], ...]  # Nominatim address parts, most specific first
    tags: tuple[tuple[str, str], ...] = ()
    half_size: float = 0.0005  # half the bounding box edge, degrees
    importance: float = 0.3
    aliases: tuple[str, ...] = field(default=())

    @property
    def place_id(self) -> int:
        return {"node": 100_000_000, "way": 200_000_000, "relation": 300_000_000}[self.osm_type] + self.osm_id % 100_000_000

    @property
    def display_name(self) -> str:
        parts = [self.name] + [v for k, v in self.address if v != self.name and k != "country_code"]
        return ", ".join(parts)

    @property
    def boundingbox(self) -> list[str]:
        h = self.half_size
        return [f"{self.lat - h:.7f}", f"{self.lat + h:.7f}", f"{self.lon - h:.7f}", f"{self.lon + h:.7f}"]

    @property
    def all_tags(self) -> dict[str, str]:
        tags = {self.cls: self.type, "name": self.name}
        addr = dict(self.address)
        if "house_number" in addr:
            tags["addr:housenumber"] = addr["house_number"]
        if "road" in addr:
            tags["addr:street"] = addr["road"]
        if "postcode" in addr:
            tags["addr:postcode"] = addr["postcode"]
        if "city" in addr:
            tags["addr:city"] = addr["city"]
        tags.update(dict(self.tags))
        return tags


def _pgh(road: str = "", number: str = "", suburb: str = "Oakland", postcode: str = "15213") -> tuple:
    parts = [("house_number", number), ("road", road), ("suburb", suburb), ("city", "Pittsburgh"),
             ("county", "Allegheny County"), ("state", "Pennsylvania"), ("postcode", postcode),
             ("country", "United States"), ("country_code", "us")]
    return tuple((k, v) for k, v in parts if v)


def _nyc(road: str = "", number: str = "", suburb: str = "Manhattan", postcode: str = "") -> tuple:
    parts = [("house_number", number), ("road", road), ("suburb", suburb), ("city", "City of New York"),
             ("state", "New York"), ("postcode", postcode), ("country", "United States"), ("country_code", "us")]
    return tuple((k, v) for k, v in parts if v)


PLACES: tuple[Place, ...] = (
    Place("relation", 188553, "Pittsburgh", "boundary", "administrative", 40.4416941, -79.9900861,
          (("county", "Allegheny County"), ("state", "Pennsylvania"), ("country", "United States"), ("country_code", "us")),
          (("admin_level", "8"), ("wikipedia", "en:Pittsburgh")), half_size=0.07, importance=0.8),
    Place("relation", 175905, "City of New York", "boundary", "administrative", 40.7127281, -74.0060152,
          (("state", "New York"), ("country", "United States"), ("country_code", "us")),
          (("admin_level", "5"), ("wikipedia", "en:New York City")), half_size=0.2, importance=0.95,
          aliases=("New York City", "NYC", "New York")),
    Place("relation", 2279034, "Carnegie Mellon University", "amenity", "university", 40.4441897, -79.9427192,
          _pgh("Forbes Avenue", "5000", "Squirrel Hill North"), (("website", "https://www.cmu.edu/"),),
          half_size=0.005, importance=0.6, aliases=("CMU",)),
    Place("way", 154257484, "Carnegie Music Hall", "amenity", "theatre", 40.4437480, -79.9504070,
          _pgh("Forbes Avenue", "4400")),
    Place("node", 3904981601, "Carnegie Museum of Art", "tourism", "museum", 40.4437000, -79.9491000,
          _pgh("Forbes Avenue", "4400"), (("website", "http://web.cmoa.org/"),), importance=0.4),
    Place("way", 9000000101, "Hunt Library", "amenity", "library", 40.4410680, -79.9437660,
          _pgh("Frew Street", "4909", "Squirrel Hill North"), (("operator", "Carnegie Mellon University"),),
          aliases=("CMU Hunt Library",)),
    Place("way", 9000000102, "Sorrells Library", "amenity", "library", 40.4435570, -79.9446340,
          _pgh("Forbes Avenue", "5000", "Squirrel Hill North"), (("operator", "Carnegie Mellon University"),),
          aliases=("CMU Sorrells Library",)),
    Place("way", 9000000103, "Cohon University Center", "building", "university", 40.4433200, -79.9418700,
          _pgh("Forbes Avenue", "5032", "Squirrel Hill North"), aliases=("CMU University Center",)),
    Place("node", 9000000201, "Carnegie Mellon Café", "amenity", "cafe", 40.4420400, -79.9390600,
          _pgh("Forbes Avenue", "", "Squirrel Hill North")),
    Place("node", 9000000202, "La Prima Espresso", "amenity", "cafe", 40.4428900, -79.9451000,
          _pgh("Forbes Avenue", "", "Squirrel Hill North")),
    Place("node", 9000000203, "De Fer Coffee & Tea", "amenity", "cafe", 40.4413300, -79.9430600,
          _pgh("Frew Street", "", "Squirrel Hill North")),
    Place("node", 9000000204, "The Exchange", "amenity", "restaurant", 40.4412800, -79.9425100,
          _pgh("Frew Street", "", "Squirrel Hill North"), (("cuisine", "sandwich"),)),
    Place("node", 9000000205, "El Gallo de Oro", "amenity", "restaurant", 40.4432800, -79.9420200,
          _pgh("Forbes Avenue", "5032", "Squirrel Hill North"), (("cuisine", "mexican"),)),
    Place("node", 9000000206, "Schatz Dining Room", "amenity", "restaurant", 40.4434000, -79.9416900,
          _pgh("Forbes Avenue", "5032", "Squirrel Hill North")),
    Place("node", 9000000207, "Union Grill", "amenity", "restaurant", 40.4448800, -79.9488400,
          _pgh("South Craig Street", "413"), (("cuisine", "american"),)),
    Place("node", 9000000208, "Hilton Garden Inn Pittsburgh University Place", "tourism", "hotel",
          40.4438900, -79.9572900, _pgh("University Place", "3454")),
    Place("node", 9000000209, "Residence Inn Pittsburgh Oakland", "tourism", "hotel", 40.4452400, -79.9536700,
          _pgh("Fifth Avenue", "3341")),
    Place("node", 9000000210, "CMU ArtPark Lab", "amenity", "arts_centre", 40.4576300, -79.9251100,
          _pgh("Penn Avenue", "5821", "East Liberty", "15206")),
    Place("node", 9000000211, "Spoon", "amenity", "restaurant", 40.4612900, -79.9248500,
          _pgh("Centre Avenue", "134", "East Liberty", "15206"), (("cuisine", "american"),)),
    Place("node", 9000000212, "Apple Shadyside", "shop", "electronics", 40.4510500, -79.9332800,
          _pgh("Walnut Street", "5508", "Shadyside", "15232"), aliases=("Apple Store",)),
    Place("node", 9000000213, "Tokyo Japanese Food Store", "shop", "convenience", 40.4570400, -79.9289500,
          _pgh("Penn Avenue", "5855", "East Liberty", "15206")),
    Place("way", 9000000301, "UPMC Shadyside", "amenity", "hospital", 40.4545500, -79.9401500,
          _pgh("Centre Avenue", "5230", "Shadyside", "15232"), half_size=0.002),
    Place("way", 9000000302, "Western Pennsylvania Hospital", "amenity", "hospital", 40.4604900, -79.9477300,
          _pgh("Liberty Avenue", "4800", "Bloomfield", "15224"), (("phone", "(412) 578-5000"),), half_size=0.002),
    Place("way", 9000000303, "Pittsburgh International Airport", "aeroway", "aerodrome", 40.4914700, -80.2328700,
          (("city", "Findlay Township"), ("county", "Allegheny County"), ("state", "Pennsylvania"),
           ("postcode", "15231"), ("country", "United States"), ("country_code", "us")),
          (("iata", "PIT"), ("operator", "Allegheny County Airport Authority")), half_size=0.02, importance=0.5,
          aliases=("PIT",)),
    Place("way", 168456128, "Costco", "shop", "wholesale", 40.4098500, -79.9148800,
          (("road", "Waterfront Drive West"), ("city", "Homestead"), ("county", "Allegheny County"),
           ("state", "Pennsylvania"), ("postcode", "15120"), ("country", "United States"), ("country_code", "us")),
          half_size=0.002),
    Place("relation", 9000000401, "Columbia University", "amenity", "university", 40.8075400, -73.9625700,
          _nyc("Broadway", "2960", "Manhattan", "10027"), half_size=0.004, importance=0.6),
    Place("way", 34633854, "Empire State Building", "tourism", "attraction", 40.7484400, -73.9856600,
          _nyc("5th Avenue", "350", "Manhattan", "10118"), importance=0.6),
    Place("node", 9000000402, "Times Square", "place", "square", 40.7579700, -73.9855200,
          _nyc("Broadway", "", "Manhattan", "10036"), importance=0.5),
    Place("relation", 65066, "Massachusetts Institute of Technology", "amenity", "university", 42.3600800, -71.0942000,
          (("road", "Massachusetts Avenue"), ("house_number", "77"), ("city", "Cambridge"), ("state", "Massachusetts"),
           ("postcode", "02139"), ("country", "United States"), ("country_code", "us")),
          half_size=0.006, importance=0.6, aliases=("MIT",)),
    Place("relation", 5475586, "Mackinac Bridge", "man_made", "bridge", 45.8174000, -84.7278000,
          (("county", "Mackinac County"), ("state", "Michigan"), ("country", "United States"), ("country_code", "us")),
          half_size=0.03, importance=0.5),
)

# Plural/synonym words of "<category> near <place>" queries -> (class, type)
CATEGORIES: dict[str, tuple[str, str]] = {
    "restaurant": ("amenity", "restaurant"), "restaurants": ("amenity", "restaurant"),
    "cafe": ("amenity", "cafe"), "cafes": ("amenity", "cafe"), "coffee": ("amenity", "cafe"),
    "hotel": ("tourism", "hotel"), "hotels": ("tourism", "hotel"),
    "hospital": ("amenity", "hospital"), "hospitals": ("amenity", "hospital"),
    "library": ("amenity", "library"), "libraries": ("amenity", "library"),
    "museum": ("tourism", "museum"), "museums": ("tourism", "museum"),
    "university": ("amenity", "university"), "universities": ("amenity", "university"),
}


def haversine_m(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_M * math.asin(math.sqrt(a))


def _words(text: str) -> list[str]:
    text = text.lower().replace("é", "e").replace("&", " and ")
    return re.findall(r"[a-z0-9]+", text)


def _haystack(p: Place) -> set[str]:
    words = set(_words(" ".join([p.name, *p.aliases, p.type.replace("_", " "), *dict(p.address).values()])))
    return words


def _name_score(p: Place, words: list[str]) -> float:
    names = [_words(n) for n in (p.name, *p.aliases)]
    if any(n == words for n in names):
        return 2.0
    if any(all(w in n for w in words) for n in names):
        return 1.0
    return 0.0


def search(query: str, limit: int = 10) -> list[Place]:
    """Free-text search: every query word must match; "<category> near <place>" finds POIs by distance."""
    q = query.strip()
    m = re.match(r"(?i)^\s*(.+?)\s+(?:near|around|close to)\s+(.+)$", q)
    if m and _words(m.group(1)) and all(w in CATEGORIES for w in _words(m.group(1))):
        cls_type = CATEGORIES[_words(m.group(1))[-1]]
        anchors = search(m.group(2), 1)
        if not anchors:
            return []
        a = anchors[0]
        pois = [p for p in PLACES if (p.cls, p.type) == cls_type and p != a
                and haversine_m(a.lat, a.lon, p.lat, p.lon) < 5000]
        return sorted(pois, key=lambda p: haversine_m(a.lat, a.lon, p.lat, p.lon))[:limit]
    words = _words(q)
    if not words:
        return []
    if all(w in CATEGORIES for w in words):
        cls_type = CATEGORIES[words[-1]]
        return [p for p in PLACES if (p.cls, p.type) == cls_type][:limit]
    hits = [p for p in PLACES if all(w in _haystack(p) for w in words)]
    hits.sort(key=lambda p: (-_name_score(p, words), -p.importance, p.name))
    return hits[:limit]


def nearest(lat: float, lon: float) -> Place:
    return min(PLACES, key=lambda p: (haversine_m(lat, lon, p.lat, p.lon), p.osm_id))


def lookup(osm_type: str, osm_id: int) -> Place | None:
    return next((p for p in PLACES if p.osm_type == osm_type and p.osm_id == osm_id), None)


def lonlat_to_tile(lat: float, lon: float, zoom: int) -> tuple[float, float]:
    """Web-Mercator tile coordinates (fractional) of a point, as slippy-map tiles number them."""
    n = 2 ** zoom
    lat_r = math.radians(max(min(lat, 85.0511), -85.0511))
    return (lon + 180.0) / 360.0 * n, (1.0 - math.asinh(math.tan(lat_r)) / math.pi) / 2.0 * n
