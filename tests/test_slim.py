"""The slim flavor (webarena-verified's images, issue 24): catalog entries, the flavor contract, and
``envctl images get --flavor slim --dry-run`` (references, sizes, digests or the lock, nothing fetched).
Facts behind the entries: docs/flavors/slim.md."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from envctl.catalog import BUILTIN, load_catalog
from envctl.errors import CatalogError
from envctl.images.lock import LockFile, Pin

SLIM_SITES = ("shopping", "shopping_admin", "reddit", "gitlab", "wikipedia")
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def test_slim_runs_webarena_verified_images_under_the_sites_contract(cat):
    assert "slim" in cat.flavors()
    for name in SLIM_SITES:
        site = cat.site(name)
        (image,) = cat.images_of(name, "slim")
        assert image == f"am1n3e/webarena-verified-{name}:latest"
        (art, *rest) = site.flavors["slim"].artifacts
        assert (art.image, art.kind, [s.kind for s in art.sources]) == (image, "image", ["registry"])
        assert art.loaded_size and "@" not in art.sources[0].url  # upstream names no digest
        assert set(site.contract_services()) <= set(site.services_for("slim"))
        assert site.steps("slim") == site.steps("full") and site.fingerprint_queries("slim") == site.fingerprint
    # the ZIM is the full flavor's own artifact: one download in the shared data directory
    assert cat.site("wikipedia").flavors["slim"].artifacts[1] == cat.site("wikipedia").flavors["full"].artifacts[1]
    # classifieds and the homepage keep their images under slim; the map has no slim flavor (docs/flavors/slim.md)
    assert cat.images_of("classifieds", "slim") == cat.images_of("classifieds", "full")
    assert cat.images_of("homepage", "slim") == cat.images_of("homepage", "full")
    assert "slim" not in cat.site("map").flavors


def test_the_slim_images_own_configurator_is_off_and_gitlab_listens_on_the_public_port(cat):
    """The configure steps are the one configurator: env-ctrl's boot-time init is switched off (env the
    other flavors' images ignore), and GitLab's nginx port follows the public port (the slim gitlab.rb pins it)."""
    for name in ("shopping", "shopping_admin", "reddit", "gitlab"):
        assert cat.site(name).entry_service.env["WA_ENV_CTRL_ENABLE"] == "false"
    assert cat.site("wikipedia").entry_service.env == {"WA_ENV_CTRL_KIWIX_PORT": "80"}  # the site's container port
    from envctl.catalog import Deployment, Renderer

    r = Renderer(cat, "gitlab", Deployment(port_offset=100))
    steps = [r.argv(s.run) for s in cat.site("gitlab").steps("slim")]
    assert ["sed", "-i", "s|^nginx\\['listen_port'\\].*|nginx['listen_port'] = 8123|", "/etc/gitlab/gitlab.rb"] in steps
    assert steps.index(steps[-1]) > steps.index(next(s for s in steps if "listen_port" in s[2]))  # before reconfigure


def _write(tmp_path: Path, raw) -> Path:
    f = tmp_path / "sites.yaml"
    f.write_text(yaml.safe_dump(raw))
    return f


@pytest.mark.parametrize("url", ["am1n3e/webarena-verified-reddit@sha256:abc",
                                 "am1n3e/webarena-verified-reddit:latest@sha256:" + "AB" * 32,
                                 "am1n3e/webarena-verified-reddit@"])
def test_a_broken_digest_is_one_line_naming_the_path_and_the_fix(tmp_path: Path, url):
    raw = yaml.safe_load(BUILTIN.read_text())
    raw["sites"]["reddit"]["flavors"]["slim"]["artifacts"][0]["sources"][0]["url"] = url
    with pytest.raises(CatalogError) as exc:
        load_catalog(_write(tmp_path, raw))
    msg = str(exc.value)
    assert "\n" not in msg
    assert f"sites.reddit.flavors.slim.artifacts[0].sources[0]: registry reference {url!r} is not " \
           "repo[:tag]@sha256:<64 hex digits>; give the whole digest, or drop '@...' to pin it in images.lock on " \
           "the first pull" in msg


def test_a_slim_flavor_the_site_lacks_is_refused(tmp_path: Path):
    raw = yaml.safe_load(BUILTIN.read_text())
    raw["sites"]["map"]["services"]["web"]["flavors"]["slim"] = {"image": "am1n3e/webarena-verified-map:latest"}
    with pytest.raises(CatalogError) as exc:
        load_catalog(_write(tmp_path, raw))
    assert "sites.map: services.web.flavors.slim: the site has no flavor 'slim' (it has full, mini)" in str(exc.value)


def _dry_run(tmp_path: Path, *args: str, catalog: Path | None = None) -> tuple[int, dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("ENVCTL_CATALOG", "ENVCTL_INSTANCE",
                                                           "ENVCTL_REGISTRY_MIRROR", "ENVCTL_DISK_BUDGET_BYTES")}
    env["ENVCTL_DATA_DIR"] = str(tmp_path / "root")
    if catalog:
        env["ENVCTL_CATALOG"] = str(catalog)
    p = subprocess.run([sys.executable, "-m", "envctl", "images", "get", "--flavor", "slim", "--dry-run", "--json",
                        *args], capture_output=True, text=True, env=env, timeout=120)
    assert p.stdout.strip(), p.stderr
    return p.returncode, json.loads(p.stdout)


@pytest.mark.docker
def test_dry_run_lists_references_sizes_and_pins_and_fetches_nothing(tmp_path: Path):
    rc, plan = _dry_run(tmp_path, "shopping", "wikipedia", "classifieds")
    rows = {a["name"]: a for a in plan["artifacts"]}
    assert plan["flavor"] == "slim" and rc == (0 if all(d["ok"] for d in plan["disk"]) else 1)
    shop = rows["webarena-verified-shopping"]
    assert (shop["site"], shop["action"], shop["reference"], shop["loaded_size"], shop["digest"], shop["pinned_in"]) == \
        ("shopping", "pull", "am1n3e/webarena-verified-shopping:latest", 13_300_000_000, None, None)
    assert "pinned in images.lock by the first pull" in shop["note"]  # a slim site without a digest or a pin
    zim = rows["wikipedia_en_all_maxi_2022-05.zim"]
    assert (zim["action"], zim["size"]) == ("download", 95199730590)
    assert zim["reference"].endswith("/wikipedia_en_all_maxi_2022-05.zim")
    cls = rows["jykoh-classifieds"]  # the full flavor's image, pinned by the catalog's digest
    assert cls["digest"] == "jykoh/classifieds@sha256:a2a794da92f62a8d7ffd02314e4fab40ba6c7fc08f568371608f88f0ef605e43"
    assert cls["pinned_in"] == "catalog" and cls["note"] is None
    needed = {w for d in plan["disk"] for w in d["what"]}
    assert "download wikipedia_en_all_maxi_2022-05.zim" in needed
    assert not (tmp_path / "root" / "data" / "wikipedia").exists()  # nothing fetched, nothing made
    assert not (tmp_path / "root" / "images.lock").exists()


@pytest.mark.docker
def test_dry_run_shows_the_pin_of_the_first_pull_and_the_registry_mirror(tmp_path: Path):
    lock = LockFile(tmp_path / "root" / "images.lock")
    lock.record(Pin("webarena-verified-reddit", digest=f"am1n3e/webarena-verified-reddit@{DIGEST}", mirror="dockerhub"))
    rc, plan = _dry_run(tmp_path, "reddit", "--registry-mirror", "registry.lab:5000")
    (row,) = [a for a in plan["artifacts"] if a["site"] == "reddit"]
    assert row["digest"] == f"am1n3e/webarena-verified-reddit@{DIGEST}"
    assert row["pinned_in"] == str(tmp_path / "root" / "images.lock") and row["note"] is None
    assert row["reference"] == "registry.lab:5000/am1n3e/webarena-verified-reddit:latest"  # pulled through the mirror
    assert plan["disk"][0]["need"] == 8_410_000_000 and "pull webarena-verified-reddit" in plan["disk"][0]["what"]


@pytest.mark.docker
def test_dry_run_of_an_unknown_flavor_is_one_line(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k != "ENVCTL_CATALOG"}
    env["ENVCTL_DATA_DIR"] = str(tmp_path)
    p = subprocess.run([sys.executable, "-m", "envctl", "images", "get", "--flavor", "slimm", "--dry-run"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and p.stderr.count("\n") <= 2 and "slimm" in p.stderr, p.stderr
