"""The built-in catalog: every site, the right ports, env formats, configure steps as upstream writes them."""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from envctl.catalog import BUILTIN, Deployment, Renderer, load_catalog
from envctl.errors import CatalogError, UnknownSite
from envctl.lab import Lab
from envctl.backends.base import InstanceSettings

HOST = "ec2-1-2-3-4.compute.amazonaws.com"


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def test_every_site_with_its_upstream_ports(cat):
    ports = {name: site.public_ports() for name, site in cat.sites.items()}
    assert ports["shopping"] == {"web": 7770}
    assert ports["shopping_admin"] == {"web": 7780}
    assert ports["reddit"] == {"web": 9999}
    assert ports["gitlab"] == {"web": 8023}
    assert ports["wikipedia"] == {"web": 8888}
    assert ports["classifieds"] == {"web": 9980}
    assert ports["homepage"] == {"web": 4399}
    assert ports["map"] == {"web": 3000, "tile": 8080, "nominatim": 8085, "osrm_car": 5000, "osrm_bike": 5001,
                            "osrm_foot": 5002}
    assert set(cat.site("classifieds").services) == {"web", "db"}
    # GitLab's nginx listens on the port in external_url: the container port follows the public one.
    assert cat.site("gitlab").entry_service.ports.container_port(8123) == 8123
    assert cat.site("shopping").entry_service.ports.container_port(7870) == 80


def test_every_site_has_full_and_mini_flavors_and_full_sources(cat):
    for name, site in cat.sites.items():
        assert {"full", "mini"} <= set(site.flavors), name
        if name != "homepage":
            assert site.flavors["full"].artifacts, f"{name} has no full-flavor artifacts"
            for a in site.flavors["full"].artifacts:
                assert a.sources, f"{name}: {a.name} has no source"
    tar = cat.site("shopping").flavors["full"].artifacts[0]
    assert [s.mirror for s in tar.sources] == ["cmu", "archive.org", "gdrive"]


def env_for(cat, benchmark, host=HOST, offset=0):
    lab = Lab(cat, instance="catalogtest")
    return lab.env(benchmark, InstanceSettings("catalogtest", "full", host, "0.0.0.0", offset))


def test_webarena_env_names_and_formats(cat):
    env = env_for(cat, "webarena")
    assert env == {
        "SHOPPING": f"http://{HOST}:7770",
        "SHOPPING_ADMIN": f"http://{HOST}:7780/admin",
        "REDDIT": f"http://{HOST}:9999",
        "GITLAB": f"http://{HOST}:8023",
        "WIKIPEDIA": f"http://{HOST}:8888/wikipedia_en_all_maxi_2022-05/A/User:The_other_Kiwix_guy/Landing",
        "MAP": f"http://{HOST}:3000",
        "HOMEPAGE": f"http://{HOST}:4399",
    }


def test_visualwebarena_env_names_and_formats(cat):
    env = env_for(cat, "visualwebarena")
    assert env["WIKIPEDIA"] == f"http://{HOST}:8888"  # VWA appends the article path itself
    assert env["CLASSIFIEDS"] == f"http://{HOST}:9980"
    assert env["CLASSIFIEDS_RESET_TOKEN"] == "4b61655535e7ed388f0d40a93600254c"
    assert env["DATASET"] == "visualwebarena"
    assert {"SHOPPING", "REDDIT", "HOMEPAGE"} <= set(env)
    for value in env.values():
        assert not value.endswith("/")


def test_port_offset_moves_every_url(cat):
    env = env_for(cat, "webarena", "127.0.0.1", 100)
    assert env["SHOPPING"] == "http://127.0.0.1:7870"
    assert env["SHOPPING_ADMIN"] == "http://127.0.0.1:7880/admin"


def test_container_side_classifieds_keeps_trailing_slash(cat):
    r = Renderer(cat, "classifieds", Deployment(HOST), {"db": "db-ctr"})
    web = cat.site("classifieds").services["web"]
    assert r(web.env["CLASSIFIEDS"]) == f"http://{HOST}:9980/"
    assert r(web.env["RESET_TOKEN"]) == "4b61655535e7ed388f0d40a93600254c"
    assert "env" not in type(web.flavors["mini"]).model_fields  # a flavor has no env: the web's env is the site's


def rendered(cat, site, flavor="full", host=HOST):
    r = Renderer(cat, site, Deployment(host))
    return [r.argv(s.run) for s in cat.site(site).steps(flavor)]


def test_magento_steps_match_upstream_exactly(cat):
    steps = rendered(cat, "shopping")
    assert steps[0] == ["/var/www/magento2/bin/magento", "setup:store-config:set", f"--base-url=http://{HOST}:7770"]
    assert steps[1] == ["mysql", "-u", "magentouser", "-pMyPassword", "magentodb", "-e",
                        f'UPDATE core_config_data SET value="http://{HOST}:7770/" WHERE path = "web/secure/base_url";']
    assert steps[2] == ["/var/www/magento2/bin/magento", "cache:flush"]
    indexers = [s[-1] for s in steps if s[1] == "indexer:set-mode"]
    assert indexers == ["catalogrule_product", "catalogrule_rule", "catalogsearch_fulltext", "catalog_category_product",
                        "customer_grid", "design_config_grid", "inventory", "catalog_product_category",
                        "catalog_product_attribute", "catalog_product_price", "cataloginventory_stock"]
    admin = rendered(cat, "shopping_admin")
    assert admin[0][-1] == f"--base-url=http://{HOST}:7780"
    assert ["php", "/var/www/magento2/bin/magento", "config:set", "admin/security/password_is_forced", "0"] in admin
    assert ["php", "/var/www/magento2/bin/magento", "config:set", "admin/security/password_lifetime", "0"] in admin
    assert admin[-1] == ["/var/www/magento2/bin/magento", "cache:flush"]


def test_gitlab_steps_match_upstream_exactly(cat):
    steps = rendered(cat, "gitlab")
    assert steps[0] == ["sed", "-i", f"s|^external_url.*|external_url 'http://{HOST}:8023'|", "/etc/gitlab/gitlab.rb"]
    assert "puma[\"worker_processes\"] = 4" in steps[1][2]
    assert steps[-1] == ["gitlab-ctl", "reconfigure"]


def test_classifieds_and_map_steps(cat):
    assert rendered(cat, "classifieds") == [
        ["mysql", "-u", "root", "-ppassword", "osclass", "-e", "source docker-entrypoint-initdb.d/osclass_craigslist.sql"]]
    m = rendered(cat, "map", "mini")
    assert m[0] == ["sed", "-i", f"s#https\\?://[^/'\"]*/tile/#http://{HOST}:8080/tile/#g",
                    "/app/vendor/assets/leaflet/leaflet.osm.js"]
    assert m[1] == ["grep", "-qF", f"http://{HOST}:8080/tile/", "/app/vendor/assets/leaflet/leaflet.osm.js"]
    # Nominatim is called by the web server: its private alias, not the public host
    assert m[2][2] == 's#^nominatim_url:.*#nominatim_url: "http://nominatim:8080/"#'
    assert m[3][:3] == ["grep", "-qxF", 'nominatim_url: "http://nominatim:8080/"']
    assert m[4][2] == f"s|metis.lti.cs.cmu.edu:|{HOST}:|g"
    assert m[5][2] == f's#^fossgis_osrm_url:.*#fossgis_osrm_url: "http://{HOST}:"#'
    assert m[6][:3] == ["grep", "-qxF", f'fossgis_osrm_url: "http://{HOST}:"']
    assert cat.site("map").services["nominatim"].aliases == ("nominatim",)


def test_login_contracts(cat):
    assert cat.site("shopping").login.expiry.url == "{public_url}/wishlist/"
    assert cat.site("shopping_admin").login.expiry.keyword == "Dashboard"
    assert cat.site("reddit").login.expiry.keyword == "Delete"
    assert cat.site("classifieds").login.expiry.keyword == "My listings"
    assert cat.site("gitlab").login.username.test_id == "username-field"
    assert set(cat.site("reddit").login.no_pair_with) == {"shopping", "shopping_admin"}


def test_resolve_and_unknown_site_suggestion(cat):
    assert cat.resolve(["map"]) == ["map"]
    with pytest.raises(UnknownSite) as exc:
        cat.resolve(["shoping"])
    assert "unknown site 'shoping'; did you mean 'shopping'?" in str(exc.value)
    assert "known sites: classifieds, gitlab, homepage" in str(exc.value)


# -- malformed catalogs: each produces its specific error naming the path ---------------------------

def _mutate(path: str, value):
    raw = yaml.safe_load(BUILTIN.read_text())
    node = raw
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    if value is _DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return raw


_DELETE = object()

MALFORMED = [
    ("sites.gitlab.services.web.ports.public", "abc", "sites.gitlab.services.web.ports.public: input should be a valid integer"),
    ("sites.gitlab.services.web.ports.publik", 1, "sites.gitlab.services.web.ports.publik: unknown key"),
    ("sites.reddit.title", _DELETE, "sites.reddit.title: missing required field"),
    ("sites.reddit.services.web.ports.public", 7770, "ports.public: port 7770 is also used by "),
    ("sites.reddit.depends_on", ["shoping"], "sites.reddit.depends_on: unknown site 'shoping'"),
    ("sites.homepage.services.web.env.SHOPPING", "{sites.shoping.public_url}", "unknown site 'shoping' in template"),
    ("sites.reddit.reset.tier", "sometimes", "sites.reddit.reset.tier: input should be 'spare', 'inplace', 'endpoint', 'recreate' or 'none'"),
    ("sites.wikipedia.reset.tier", "inplace", "sites.wikipedia: reset tier 'inplace' needs reset.inplace (save and restore steps)"),
    ("sites.reddit.reset.inplace.restore", [], "sites.reddit.reset.inplace.restore: "),
    ("sites.reddit.reset.inplace.save.0.service", "db", "reset.inplace step names unknown service 'db'"),
    ("sites.reddit.login.account", "nobody", "sites.reddit: login.account 'nobody' is not in accounts"),
    ("sites.gitlab.services.web.ports.public", 70000, "sites.gitlab.services.web.ports.public: input should be less than or equal to 65535"),
    ("sites.map.services.web.depends_on", ["tiles"], "service 'web' depends on unknown service 'tiles'"),
    ("version", 2, "version: input should be 1"),
]


@pytest.mark.parametrize("path,value,expected", MALFORMED, ids=[m[0] + ("-del" if m[1] is _DELETE else "") for m in MALFORMED])
def test_malformed_catalog_errors(tmp_path: Path, path, value, expected):
    f = tmp_path / "sites.yaml"
    f.write_text(yaml.safe_dump(_mutate(path, value)))
    with pytest.raises(CatalogError) as exc:
        load_catalog(f)
    msg = str(exc.value)
    assert msg.startswith(f"invalid catalog {f}: ")
    assert expected in msg


def test_yaml_syntax_error_names_line(tmp_path: Path):
    f = tmp_path / "bad.yaml"
    f.write_text("version: 1\nsites:\n  shopping: [unclosed\n")
    with pytest.raises(CatalogError, match=r"line \d+, column \d+: not valid YAML"):
        load_catalog(f)


def test_missing_file_and_env_override(tmp_path: Path, monkeypatch):
    with pytest.raises(CatalogError, match="file not found"):
        load_catalog(tmp_path / "nope.yaml")
    own = tmp_path / "mine.yaml"
    raw = yaml.safe_load(BUILTIN.read_text())
    raw["sites"] = {"homepage": raw["sites"]["homepage"]}
    raw["sites"]["homepage"]["services"]["web"]["env"] = {}
    own.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("ENVCTL_CATALOG", str(own))
    assert list(load_catalog().sites) == ["homepage"]


# --- a flavor overrides only image, build, memory (services) and description, artifacts (sites) -----------

def test_mini_flavor_may_not_override_the_fingerprint(tmp_path: Path):
    raw = yaml.safe_load(BUILTIN.read_text())
    raw["sites"]["reddit"]["flavors"]["mini"]["fingerprint"] = [{"name": "tables", "run": ["envctl-fingerprint"]}]
    f = tmp_path / "sites.yaml"
    f.write_text(yaml.safe_dump(raw))
    with pytest.raises(CatalogError) as exc:
        load_catalog(f)
    assert "sites.reddit.flavors.mini.fingerprint: a site flavor may override only 'description' and 'artifacts'" \
        in str(exc.value)


def test_service_flavor_may_not_override_command_env_or_volumes(tmp_path: Path):
    raw = yaml.safe_load(BUILTIN.read_text())
    raw["sites"]["gitlab"]["services"]["web"]["flavors"]["mini"]["command"] = ["envctl-start"]
    raw["sites"]["shopping"]["services"]["web"]["flavors"]["mini"]["env"] = {"X": "1"}
    f = tmp_path / "sites.yaml"
    f.write_text(yaml.safe_dump(raw))
    with pytest.raises(CatalogError) as exc:
        load_catalog(f)
    msg = str(exc.value)
    assert "sites.gitlab.services.web.flavors.mini.command: a flavor may override only a service's 'image'" in msg
    assert "sites.shopping.services.web.flavors.mini.env: a flavor may override only" in msg


def test_builtin_catalog_has_one_fingerprint_per_site_for_every_flavor():
    catalog = load_catalog()
    for name in ("shopping", "shopping_admin", "reddit", "gitlab", "classifieds"):
        site = catalog.site(name)
        assert site.fingerprint and site.fingerprint_queries("mini") == site.fingerprint_queries("full") == \
            site.fingerprint


# --- the flavor model: one contract, flavors differ in images, builds, memory and artifacts only ------------

def test_the_builtin_catalog_has_no_flavor_override_and_no_allowlist():
    import envctl.catalog as catalog_module

    assert not hasattr(catalog_module, "FLAVOR_OVERRIDE_ALLOWLIST")
    raw = yaml.safe_load(BUILTIN.read_text())
    for sname, site in raw["sites"].items():
        for fname, f in site["flavors"].items():
            assert set(f) <= {"description", "artifacts"}, (sname, fname, set(f))
        for vname, svc in site["services"].items():
            for fname, f in svc["flavors"].items():
                assert set(f) <= {"image", "build", "memory"}, (sname, vname, fname, set(f))


def test_every_flavor_runs_the_sites_contract(cat):
    """Ports, commands, env, volumes, steps, probes, fingerprints and env-var names are read from the site
    whatever the flavor; every service the contract names exists on every flavor."""
    for name, site in cat.sites.items():
        for flavor in site.flavors:
            assert site.steps(flavor) == site.configure
            assert site.fingerprint_queries(flavor) == site.fingerprint
            assert set(site.contract_services()) <= set(site.services_for(flavor)), (name, flavor)
    m = cat.site("map")
    assert set(m.contract_services()) == {"web", "tile", "nominatim", "osrm_car", "osrm_bike", "osrm_foot"}
    assert cat.site("classifieds").contract_services()["db"] == "fingerprint query 'items-users'"
    # the data lives where the full flavor keeps it, on every flavor (the mini images seed an empty one)
    assert [v.source for v in cat.site("wikipedia").entry_service.volumes] == ["{data_dir}/wikipedia"]
    assert [v.source for v in cat.site("classifieds").services["db"].volumes] == ["{data_dir}/classifieds/mysql"]
    assert [v.source for v in m.services["web"].volumes] == ["{instance}-osm-website"]
    for profile in ("car", "bike", "foot"):
        osrm = m.services[f"osrm_{profile}"]
        assert osrm.command == ("osrm-routed", "--algorithm", "mld", f"/data/{profile}/us-northeast-latest.osrm")
        assert [(v.source, v.target) for v in osrm.volumes] == [("{data_dir}/map/osrm", "/data")]
    assert m.services["web"].env == {"PIDFILE": "/tmp/pids/server.pid"}  # no private OSRM URLs: the browser's call


def test_each_flavor_has_its_own_data_directory(tmp_path: Path, monkeypatch):
    from envctl.paths import data_dir

    monkeypatch.setenv("ENVCTL_DATA_DIR", str(tmp_path))
    assert data_dir() == data_dir("full") == tmp_path / "data"  # what 'images get' fills
    assert data_dir("mini") == tmp_path / "data-mini"  # what the mini images seed: never taken for a download
    assert data_dir("slim") == tmp_path / "data"  # upstream's data files, the same as full's: one download
    with pytest.raises(Exception, match="flavor"):
        data_dir("../x")


def _load_raw(tmp_path: Path, raw) -> str:
    f = tmp_path / "sites.yaml"
    f.write_text(yaml.safe_dump(raw))
    with pytest.raises(CatalogError) as exc:
        load_catalog(f)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


# Every override the former allowlist let through, and every other key a flavor may not hold.
OVERRIDES = [
    ("sites.wikipedia.services.web.flavors.full.volumes", [{"source": "{data_dir}/wikipedia", "target": "/data"}]),
    ("sites.map.services.osrm_car.flavors.mini.command", ["osrm", "car"]),
    ("sites.map.services.osrm_bike.flavors.full.command", ["osrm-routed", "/data/us-northeast-latest.osrm"]),
    ("sites.map.services.web.flavors.mini.env", {"OSRM_CAR_INTERNAL_URL": "http://x:5000"}),
    ("sites.classifieds.services.db.flavors.full.volumes", [{"source": "{data_dir}/c", "target": "/d"}]),
    ("sites.map.services.tile.flavors.full.ports", {"public": 8080}),
    ("sites.gitlab.services.web.flavors.mini.ready", ["true"]),
]


@pytest.mark.parametrize("path,value", OVERRIDES, ids=[o[0] for o in OVERRIDES])
def test_a_service_flavor_key_beyond_image_build_memory_is_refused(tmp_path: Path, path, value):
    msg = _load_raw(tmp_path, _mutate(path, value))
    assert f"{path}: a flavor may override only a service's 'image', 'build' and 'memory'; move it to the " \
           "service so it runs on every flavor" in msg


@pytest.mark.parametrize("key,value", [("configure", [{"run": ["true"]}]), ("fingerprint", []),
                                       ("health", {"probes": []}), ("env", {}), ("header_login", {"X-A": "b"})])
def test_a_site_flavor_key_beyond_description_artifacts_is_refused(tmp_path: Path, key, value):
    msg = _load_raw(tmp_path, _mutate(f"sites.map.flavors.mini.{key}", value))
    assert f"sites.map.flavors.mini.{key}: a site flavor may override only 'description' and 'artifacts'; " \
           "move it to the site so it runs on every flavor" in msg


def test_a_service_naming_a_flavor_the_site_lacks_is_refused(tmp_path: Path):
    raw = yaml.safe_load(BUILTIN.read_text())
    raw["sites"]["reddit"]["services"]["web"]["flavors"]["large"] = {"image": "postmill-large:latest"}
    msg = _load_raw(tmp_path, raw)
    assert "sites.reddit: services.web.flavors.large: the site has no flavor 'large' (it has full, mini, slim); add " \
           "'large' under the site's 'flavors' (description, artifacts) or remove this entry" in msg


@pytest.mark.parametrize("site,service,why", [
    ("map", "osrm_bike", "public port 5001"),
    ("classifieds", "db", "fingerprint query 'items-users'"),
    ("wikipedia", "web", "public port 8888"),
])
def test_a_flavor_without_a_service_of_the_contract_is_refused(tmp_path: Path, site, service, why):
    raw = yaml.safe_load(BUILTIN.read_text())
    del raw["sites"][site]["services"][service]["flavors"]["mini"]
    msg = _load_raw(tmp_path, raw)
    assert f"sites.{site}: services.{service}.flavors: no entry for flavor 'mini', but {why} is the site's contract " \
           f"on every flavor; give '{service}' an image for 'mini' (a flavor changes images, not the contract)" in msg


def test_a_fingerprint_or_probe_service_must_exist_on_every_flavor(tmp_path: Path):
    raw = yaml.safe_load(BUILTIN.read_text())
    c = raw["sites"]["classifieds"]
    c["configure"] = []
    del c["services"]["db"]["flavors"]["mini"]
    assert "fingerprint query 'items-users' is the site's contract" in _load_raw(tmp_path, raw)
    c["fingerprint"] = []
    c["changes"] = []  # a change signal says when to fingerprint: none without fingerprint queries
    c["health"]["probes"].append({"name": "db-port", "service": "db", "path": "/"})
    assert "health probe 'db-port' is the site's contract" in _load_raw(tmp_path, raw)


def test_a_service_outside_the_contract_may_be_absent_from_a_flavor(tmp_path: Path):
    """A flavor may run fewer services where no port, probe, fingerprint or step names the missing one."""
    raw = yaml.safe_load(BUILTIN.read_text())
    del raw["sites"]["map"]["services"]["db"]["flavors"]["mini"]
    f = tmp_path / "sites.yaml"
    f.write_text(yaml.safe_dump(raw))
    site = load_catalog(f).site("map")
    assert "db" not in site.services_for("mini") and "db" in site.services_for("full")


def test_slim_flavors_name_what_they_lack_and_sites_show_prints_it():
    """What a site does differently on a flavor is the site's data (``gaps``, keyed by flavor; no flavor
    key), shown by ``envctl sites show``: webarena-verified's admin refuses mass deletes, its forum counts
    votes otherwise; a flavor the site lacks is refused."""
    cat = load_catalog(BUILTIN)
    assert any("mass delete" in g for g in cat.site("shopping_admin").gaps["slim"])
    assert any("votes" in g for g in cat.site("reddit").gaps["slim"])
    assert all(set(s.gaps) <= {"slim"} for s in cat.sites.values())
    raw = yaml.safe_load(BUILTIN.read_text())
    raw["sites"]["map"]["gaps"] = {"slim": ["x"]}
    f = Path(tempfile.mkdtemp()) / "sites.yaml"
    f.write_text(yaml.safe_dump(raw))
    with pytest.raises(CatalogError) as exc:
        load_catalog(f)
    assert "gaps.slim: the site has no flavor 'slim'" in str(exc.value)
    shown = subprocess.run([sys.executable, "-m", "envctl.cli", "sites", "show", "shopping_admin"],
                           capture_output=True, text=True, check=True).stdout
    assert "gaps:" in shown and "mass delete" in shown


# -- header login (issue 31): the site's, naming the flavors whose images honour it ------------------
@pytest.mark.parametrize("value,expect", [
    ({"header": "X-A", "flavors": ["large"]}, "header_login.flavors: the site has no flavor 'large' (it has full, mini, slim)"),
    ({"header": "X A", "flavors": ["mini"]}, "header 'X A': expected an HTTP header name"),
    ({"header": "X-A", "flavors": ["mini"], "value": "{username}:{token}"}, "only {username} and {password} may be templated"),
    ({"header": "X-A", "flavors": ["mini"], "value": "a\nb"}, "no control characters"),
    ({"header": "X-A", "flavors": []}, "header_login.flavors"),
    ({"header": "X-A", "flavors": ["mini"], "wrong": "maybe"}, "header_login.wrong"),
])
def test_a_bad_header_login_is_refused_naming_it(tmp_path: Path, value, expect):
    assert expect in _load_raw(tmp_path, _mutate("sites.reddit.header_login", value))


def test_a_header_login_needs_a_login(tmp_path: Path):
    raw = _mutate("sites.wikipedia.header_login", {"header": "X-A", "flavors": ["mini"]})
    assert "header_login needs a login" in _load_raw(tmp_path, raw)


def test_header_login_is_the_sites_on_the_flavors_it_names():
    cat = load_catalog()
    assert cat.site("shopping").header_on("mini").header == "X-M2-Customer-Auto-Login"
    assert cat.site("shopping").header_on("full") is None and cat.site("gitlab").header_on("mini") is None
