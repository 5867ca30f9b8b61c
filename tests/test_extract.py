"""Unpacking data archives (the catalog's ``extract``): layouts like upstream's, atomic, resumable, safe.

Archives are generated here with the upstream layouts (the map tars' ``projects/.../_data``
prefixes, the classifieds zip's ``classifieds_docker_compose/`` root); docker tests unpack into
real instance-scoped volumes through the helper container.
"""
from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
import uuid
import zipfile
from pathlib import Path
from typing import Iterator

import pytest

from envctl.catalog import Artifact, CatalogError, Extract, Source, load_catalog
from envctl.images import extract as ex
from envctl.images import fetch
from envctl.images.get import Options, get_artifacts
from envctl.images.lock import LockFile
from fetch_server import FaultServer

TILE = "projects/ogma3/docker/volumes/osm-data/_data"
NOM = "projects/metis2/docker/docker/volumes"


def make_tar(files: dict[str, bytes], *, gz: bool = False, dirs: tuple[str, ...] = (), uid: int = 0,
             links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w") as tar:
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o700
            tar.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(data), 0o600, uid, uid
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buf.getvalue()


def write(path: Path, data: bytes) -> tuple[Path, str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def test_one_tar_feeds_several_targets_by_prefix(tmp_path: Path) -> None:
    data = make_tar({f"{NOM}/nominatim-data/_data/PG_VERSION": b"14\n", f"{NOM}/nominatim-data/_data/base/1/2": b"x" * 5000,
                     f"{NOM}/nominatim-flatnode/_data/flatnode.file": b"f", "projects/other/ignored": b"i"},
                    dirs=(f"{NOM}/nominatim-data/_data",))
    archive, sha = write(tmp_path / "map/nominatim_volumes.tar", data)
    spec = Extract(format="tar", destination={f"{NOM}/nominatim-data/_data": "{data_dir}/nd",
                                              f"{NOM}/nominatim-flatnode/_data": "{data_dir}/nf"})
    seen: list[tuple[int, int | None]] = []
    res = ex.extract(archive, spec, sha256=sha, data_root=tmp_path, progress=lambda d, t: seen.append((d, t)))
    assert res.action == "extracted" and res.entries == 4 and not res.unmatched  # 3 files + the _data dir
    assert (tmp_path / "nd/PG_VERSION").read_bytes() == b"14\n" and (tmp_path / "nd/base/1/2").stat().st_size == 5000
    assert (tmp_path / "nf/flatnode.file").read_bytes() == b"f"
    assert (tmp_path / "nd").stat().st_mode & 0o777 == 0o700  # the _data dir's own mode is kept
    assert not list(tmp_path.glob("*.extracting")) and not (tmp_path / "ignored").exists()
    assert seen[-1] == (len(data), len(data))
    assert ex.extract(archive, spec, sha256=sha, data_root=tmp_path).action == "present"


def test_strip_components_and_prefix(tmp_path: Path) -> None:
    data = make_tar({"openstreetmap-website/Gemfile": b"gem", "openstreetmap-website/config/settings.yml": b"s"}, gz=True)
    archive, sha = write(tmp_path / "src.tar.gz", data)
    ex.extract(archive, Extract(format="tar.gz", strip=1, destination="{data_dir}/web"), sha256=sha, data_root=tmp_path)
    assert (tmp_path / "web/config/settings.yml").read_bytes() == b"s"
    ex.extract(archive, Extract(format="tar.gz", strip="openstreetmap-website/config", destination="{data_dir}/cfg"),
               sha256=sha, data_root=tmp_path)
    assert [p.name for p in (tmp_path / "cfg").iterdir() if p.name != ex.MARKER] == ["settings.yml"]


def test_classifieds_zip_puts_the_mysql_init_files_in_place(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("classifieds_docker_compose/docker-compose.yml", "services: {}\n")
        zf.writestr("classifieds_docker_compose/mysql/", "")
        zf.writestr("classifieds_docker_compose/mysql/osclass_craigslist.sql", "CREATE TABLE t (i int);\n")
    archive, sha = write(tmp_path / "classifieds/classifieds_docker_compose.zip", buf.getvalue())
    [art] = [a for a in load_catalog().site("classifieds").flavors["full"].artifacts if a.extract]
    res = ex.extract(archive, art.extract, sha256=sha, data_root=tmp_path)  # type: ignore[arg-type]
    assert (tmp_path / "classifieds/mysql/osclass_craigslist.sql").read_text().startswith("CREATE TABLE")
    assert sorted(p.name for p in (tmp_path / "classifieds").iterdir()) == ["classifieds_docker_compose.zip", "mysql"]
    assert res.targets == (str(tmp_path / "classifieds/mysql"),)


@pytest.mark.parametrize("bad", ["../evil", "/etc/evil", "ok/../../evil"])
def test_path_traversal_is_refused(tmp_path: Path, bad: str) -> None:
    archive, sha = write(tmp_path / "a.tar", make_tar({"good/file": b"g", bad: b"evil"}))
    with pytest.raises(ex.ExtractError, match="refused, nothing was put in place"):
        ex.extract(archive, Extract(format="tar", destination="{data_dir}/out"), sha256=sha, data_root=tmp_path / "d")
    assert not (tmp_path / "d/out").exists() and not (tmp_path / "evil").exists() and not Path("/etc/evil").exists()


def test_writing_through_a_symlink_is_refused(tmp_path: Path) -> None:
    data = make_tar({"x/link/escaped": b"e"}, links={"x/link": "../.."})
    archive, sha = write(tmp_path / "a.tar", data)
    with pytest.raises(ex.ExtractError, match="points outside|through a symlink"):
        ex.extract(archive, Extract(format="tar", destination="{data_dir}/out"), sha256=sha, data_root=tmp_path / "d")
    assert not (tmp_path / "d/out").exists()


def test_interrupted_extract_never_looks_complete_and_is_redone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = {f"d/{i}": bytes([i]) * 100 for i in range(20)}
    archive, sha = write(tmp_path / "a.tar", make_tar(files))
    spec = Extract(format="tar", strip=1, destination="{data_dir}/out")
    real = ex._DirWriter.add
    calls = [0]

    def add_then_die(self: ex._DirWriter, rel: tuple[str, ...], e: ex._Entry) -> None:
        calls[0] += 1
        if calls[0] == 10:
            raise KeyboardInterrupt
        real(self, rel, e)

    monkeypatch.setattr(ex._DirWriter, "add", add_then_die)
    with pytest.raises(KeyboardInterrupt):
        ex.extract(archive, spec, sha256=sha, data_root=tmp_path)
    # nothing half-unpacked is kept (it is never resumed from, and on a full disk it holds the missing space)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.extracting").exists()
    assert not ex.done(ex.resolve(spec, tmp_path, "default"), sha)
    monkeypatch.setattr(ex._DirWriter, "add", real)
    res = ex.extract(archive, spec, sha256=sha, data_root=tmp_path)
    assert res.action == "extracted" and len([p for p in (tmp_path / "out").iterdir() if p.name != ex.MARKER]) == 20
    assert not (tmp_path / "out.extracting").exists()
    # a different archive (new sha256) replaces the old extract as a whole
    archive2, sha2 = write(tmp_path / "a.tar", make_tar({"d/new": b"n"}))
    assert ex.extract(archive2, spec, sha256=sha2, data_root=tmp_path).action == "extracted"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [ex.MARKER, "new"]


def test_extract_validation_in_the_catalog() -> None:
    for bad in ({"format": "tar", "destination": "osm-data"},  # a volume shared by every instance
                {"format": "tar", "destination": "{data_dir}/../etc"},
                {"format": "rar", "destination": "{data_dir}/x"},
                {"format": "tar", "destination": {"/abs": "{data_dir}/x"}},
                {"format": "tar", "strip": -1, "destination": "{data_dir}/x"}):
        with pytest.raises(Exception):
            Extract(**bad)
    with pytest.raises(Exception, match="for data artifacts"):
        Artifact(name="x", image="x:1", extract=Extract(format="tar", destination="{data_dir}/x"))
    assert Extract(format="tar", destination="{instance}-osm-data").targets() == {"": "{instance}-osm-data"}
    assert CatalogError  # the catalog loader wraps these into one CatalogError (tests/test_catalog.py)


def test_get_downloads_verifies_then_extracts_once(tmp_path: Path) -> None:
    data = make_tar({"car/us.osrm": b"c" * 1000, "bike/us.osrm": b"b", "foot/us.osrm": b"f"})
    opts = Options(data_root=tmp_path / "data", downloads=tmp_path / "dl", lock=LockFile(tmp_path / "images.lock"),
                   timeouts=fetch.Timeouts(connect=5, read=10)).resolved()
    with FaultServer() as srv:
        srv.files["osrm_routing.tar"] = data
        art = Artifact(name="osrm_routing.tar", kind="data", dest="map/osrm_routing.tar", size=1000,
                       extract=Extract(format="tar", destination="{data_dir}/map/osrm"),
                       sources=(Source(kind="http", mirror="cmu", url=srv.url("ok", "osrm_routing.tar")),))
        events: list = []
        [res] = get_artifacts([("map", art)], options=opts, progress=events.append)
        assert res.action == "downloaded" and res.extracted == (str(tmp_path / "data/map/osrm"),), res
        assert (tmp_path / "data/map/osrm/car/us.osrm").stat().st_size == 1000
        assert any(e.mirror == "extract" and e.type == "progress" for e in events)
        [again] = get_artifacts([("map", art)], options=opts)
        assert again.action == "present" and again.extracted
        (tmp_path / "data/map/osrm" / ex.MARKER).unlink()  # as if the last run died before completing
        [redo] = get_artifacts([("map", art)], options=opts)
        assert redo.action == "extracted" and (tmp_path / "data/map/osrm" / ex.MARKER).is_file()


# ---------------------------------------------------------------- docker volumes


@pytest.fixture
def instance(docker_engine: None) -> Iterator[str]:
    name = f"envctl-test-{uuid.uuid4().hex[:6]}"
    yield name
    vols = subprocess.run(["docker", "volume", "ls", "-q", "--filter", f"label=envctl.instance={name}"],
                          capture_output=True, text=True).stdout.split()
    if vols:
        subprocess.run(["docker", "volume", "rm", "-f", *vols], capture_output=True)


def in_volume(volume: str, *cmd: str) -> str:
    return subprocess.run(["docker", "run", "--rm", "-v", f"{volume}:/v", "debian:bookworm-slim", *cmd],
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.docker
def test_map_tar_into_instance_scoped_volumes(tmp_path: Path, instance: str) -> None:
    data = make_tar({f"{TILE}/postgres/PG_VERSION": b"15\n", f"{NOM}/nominatim-data/_data/PG_VERSION": b"14\n",
                     f"{NOM}/nominatim-flatnode/_data/flatnode.file": b"flat"}, uid=101)
    archive, sha = write(tmp_path / "map.tar", data)
    spec = Extract(format="tar", destination={TILE: "{instance}-osm-data", f"{NOM}/nominatim-data/_data": "{instance}-nominatim-data",
                                              f"{NOM}/nominatim-flatnode/_data": "{instance}-nominatim-flatnode"})
    res = ex.extract(archive, spec, sha256=sha, data_root=tmp_path, instance=instance)
    assert res.action == "extracted" and f"volume {instance}-osm-data" in res.targets
    assert in_volume(f"{instance}-osm-data", "stat", "-c", "%u %n", "/v/postgres/PG_VERSION").split() == ["101", "/v/postgres/PG_VERSION"]
    assert in_volume(f"{instance}-nominatim-flatnode", "cat", "/v/flatnode.file") == "flat"
    listing = in_volume(f"{instance}-nominatim-data", "ls", "-A", "/v").split()
    assert sorted(listing) == sorted([ex.MARKER, "PG_VERSION"])  # no .envctl-partial left behind
    assert ex.extract(archive, spec, sha256=sha, data_root=tmp_path, instance=instance).action == "present"


@pytest.mark.docker
def test_volume_extract_cut_short_is_not_marked_complete(tmp_path: Path, instance: str) -> None:
    archive, sha = write(tmp_path / "a.tar", make_tar({"a": b"1", "b": b"2", "../c": b"3"}))
    spec = Extract(format="tar", destination="{instance}-cut")
    with pytest.raises(ex.ExtractError):
        ex.extract(archive, spec, sha256=sha, data_root=tmp_path, instance=instance)
    assert in_volume(f"{instance}-cut", "ls", "-A", "/v").split() in ([], [ex.PARTIAL_DIR])
    assert not ex.done(ex.resolve(spec, tmp_path, instance), sha)
