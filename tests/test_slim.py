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


# -- bad input on the slim path: one line naming the fix, nothing made or half-done -----------------------
# Instance "slbad", port offset 55000: no other module uses them (tests/conftest.py, lanes); nothing binds them.

BAD_INSTANCE, BAD_OFFSET = "slbad", 55000
REDDIT = "am1n3e/webarena-verified-reddit:latest"


def _cli(tmp_path: Path, *args: str, mirror: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("ENVCTL_CATALOG", "ENVCTL_INSTANCE", "ENVCTL_REGISTRY_MIRROR",
                                                           "ENVCTL_DISK_BUDGET_BYTES")}
    env |= {"ENVCTL_DATA_DIR": str(tmp_path / "root"), "ENVCTL_STATE_DIR": str(tmp_path / "state")}
    if mirror:
        env["ENVCTL_REGISTRY_MIRROR"] = mirror
    return subprocess.run([sys.executable, "-m", "envctl", *args], capture_output=True, text=True, env=env, timeout=600)


def _docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True)


def _image_id(ref: str) -> str | None:
    p = _docker("image", "inspect", "-f", "{{.Id}}", ref)
    return p.stdout.strip() if p.returncode == 0 else None


def _made_for(instance: str) -> list[str]:
    """Every container, network and volume envctl labels with ``instance``."""
    label = f"label=envctl.instance={instance}"
    out = []
    for kind in (["ps", "-a"], ["network", "ls"], ["volume", "ls"]):
        out += _docker(*kind, "-q", "--filter", label).stdout.split()
    return out + [n for n in _docker("network", "ls", "--format", "{{.Name}}").stdout.split() if n == f"envctl-{instance}"]


def _one_error_line(p: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    return lines[0]


@pytest.fixture
def no_slim_reddit(docker_engine: None) -> None:
    if _image_id(REDDIT):
        pytest.skip(f"{REDDIT} is on this engine (a slim run left it?): this test needs it absent")


@pytest.mark.docker
def test_up_slim_without_the_image_names_the_get_and_makes_nothing(tmp_path: Path, no_slim_reddit: None):
    """Neither present nor pinned: 'up' refuses before it makes a network, proxy, container or volume."""
    p = _cli(tmp_path, "up", "reddit", "--flavor", "slim", "-i", BAD_INSTANCE, "--port-offset", str(BAD_OFFSET), "--no-login")
    line = _one_error_line(p)
    assert p.returncode == 1
    assert f"missing images: {REDDIT} (reddit)" in line and "'envctl images get --flavor slim reddit'" in line, line
    assert _made_for(BAD_INSTANCE) == []
    assert not (tmp_path / "root" / "images.lock").exists()  # nothing was pinned either


@pytest.mark.docker
@pytest.mark.parametrize("verb", ["up", "images get"])
def test_a_named_site_without_the_flavor_is_one_line_naming_its_flavors(tmp_path: Path, docker_engine: None, verb: str):
    """'up map --flavor slim' used to bring up nothing and say so nowhere: the map has no slim flavor."""
    extra = ["-i", BAD_INSTANCE, "--port-offset", str(BAD_OFFSET), "--no-login"] if verb == "up" else []
    p = _cli(tmp_path, *verb.split(), "map", "--flavor", "slim", *extra)
    line = _one_error_line(p)
    assert p.returncode == 2
    assert "site 'map' has no flavor 'slim' (it has full, mini)" in line, line
    assert _made_for(BAD_INSTANCE) == []
    # a site that has it, named beside one that lacks it: refused too, before anything is fetched or made
    p = _cli(tmp_path, *verb.split(), "homepage", "map", "--flavor", "slim", *extra)
    assert p.returncode == 2 and "site 'map' has no flavor 'slim'" in _one_error_line(p)
    assert _made_for(BAD_INSTANCE) == []


def _tiny_image(tmp_path: Path, tag: str) -> str:
    """A small image of random bytes, built here (its digest is new every time); returns its id."""
    ctx = tmp_path / f"img-{tag.replace('/', '_').replace(':', '_')}"
    ctx.mkdir()
    (ctx / "blob").write_bytes(os.urandom(64 * 1024))
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY blob /blob\nLABEL envctl.test=slim-bad-input\n")
    subprocess.run(["docker", "build", "-q", "-t", tag, str(ctx)], check=True, capture_output=True,
                   env={**os.environ, "DOCKER_BUILDKIT": "0"})
    return _image_id(tag) or ""


def _push(local: str, target: str) -> str:
    subprocess.run(["docker", "tag", local, target], check=True)
    out = subprocess.run(["docker", "push", target], check=True, capture_output=True, text=True).stdout
    _docker("image", "rm", target)
    return next(w for w in out.split() if w.startswith("sha256:"))


@pytest.mark.docker
def test_a_mirror_serving_another_digest_than_the_pin_is_refused_and_nothing_is_tagged(
        tmp_path: Path, local_registry: str, no_slim_reddit: None):
    """'latest' moved on the mirror: the pin of the first pull is asked for by digest, the mirror has it not,
    the get is refused in one line, and no tag (upstream's or the mirror's) points at the other image."""
    from envctl.images.registry import mirror_ref

    import requests

    target = mirror_ref(REDDIT, local_registry)
    first, second = (f"envctl-test/slim-bad-{n}:{os.getpid()}" for n in ("first", "second"))
    lock = tmp_path / "root" / "images.lock"
    try:
        first_id = _tiny_image(tmp_path, first)
        pinned = _push(first, target)
        p = _cli(tmp_path, "images", "get", "reddit", "--flavor", "slim", "--json", mirror=local_registry)
        (got,) = [r for r in json.loads(p.stdout) if r["name"] == "webarena-verified-reddit"]
        assert p.returncode == 0 and got["action"] == "pulled", p.stdout + p.stderr
        assert _image_id(REDDIT) == first_id
        pin = LockFile(lock).get("webarena-verified-reddit")
        assert pin and pin.digest and pin.digest.endswith(f"/am1n3e/webarena-verified-reddit@{pinned}"), pin
        # upstream moves 'latest': the first image's manifest is gone from the mirror, another one has the tag
        _docker("image", "rm", "-f", first_id)
        r = requests.delete(f"http://{local_registry}/v2/am1n3e/webarena-verified-reddit/manifests/{pinned}", timeout=10)
        assert r.status_code == 202, r.text
        second_id = _tiny_image(tmp_path, second)
        moved = _push(second, target)
        assert moved != pinned
        _docker("image", "rm", "-f", second_id)  # from here, any reference to the mirror's repository is the get's
        assert _image_id(second_id) is None
        before = lock.read_text()

        p = _cli(tmp_path, "images", "get", "reddit", "--flavor", "slim", "--json", mirror=local_registry)
        assert p.returncode == 1
        (got,) = [r for r in json.loads(p.stdout) if r["name"] == "webarena-verified-reddit"]
        err = got["error"] or ""
        assert got["action"] == "failed" and "\n" not in err, got
        assert f"mirror {local_registry} has no am1n3e/webarena-verified-reddit@{pinned}, the digest images.lock pins" \
               in err and "refused" in err and f"(pin in {lock})" in err and "remove its entry from images.lock" in err, err
        assert moved not in err  # the mirror's other image was never pulled
        # nothing half-done: no tag at the moved image, nothing pulled under the mirror's name, the pin kept
        assert _image_id(REDDIT) is None
        assert not [ln for ln in _docker("images", "--digests", "--format", "{{.Repository}}@{{.Digest}} {{.ID}}").stdout.splitlines()
                    if ln.startswith(f"{local_registry}/am1n3e/webarena-verified-reddit")]
        assert lock.read_text() == before
        # and 'up' still says what to do
        p = _cli(tmp_path, "up", "reddit", "--flavor", "slim", "-i", BAD_INSTANCE, "--port-offset", str(BAD_OFFSET), "--no-login")
        assert p.returncode == 1 and "'envctl images get --flavor slim reddit'" in _one_error_line(p)
        assert _made_for(BAD_INSTANCE) == []
    finally:
        _docker("image", "rm", "-f", REDDIT, first, second, target)
