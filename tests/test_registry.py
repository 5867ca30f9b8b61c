"""Registry images through a mirror: reference rewriting, and pulls from a real local registry.

The docker tests start Debian's ``docker-registry`` (the CNCF distribution registry) on
127.0.0.1:<free port> (Docker talks plain HTTP to 127.0.0.0/8), push a small image built here
under the paths a mirror of Docker Hub and ghcr.io would use, and get it through the mirror.
"""
from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from conftest import free_port
from envctl.catalog import Artifact, Source
from envctl.errors import UsageError
from envctl.images import fetch
from envctl.images.get import Options, get_artifacts
from envctl.images.lock import LockFile
from envctl.images.registry import MIRROR_ENV, mirror_ref, mirror_setting

@pytest.mark.parametrize("ref, want", [
    ("mysql:8.1", "m:5000/library/mysql:8.1"),
    ("overv/openstreetmap-tile-server@sha256:" + "b" * 64, "m:5000/overv/openstreetmap-tile-server@sha256:" + "b" * 64),
    ("ghcr.io/project-osrm/osrm-backend:v5.27.1", "m:5000/project-osrm/osrm-backend:v5.27.1"),
    ("ghcr.io/kiwix/kiwix-serve:3.3.0", "m:5000/kiwix/kiwix-serve:3.3.0"),
    ("localhost:5000/a/b", "m:5000/a/b"),
])
def test_mirror_rewrites_upstream_references(ref: str, want: str) -> None:
    assert mirror_ref(ref, "m:5000") == want


def test_mirror_setting_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MIRROR_ENV, raising=False)
    assert mirror_setting() is None
    monkeypatch.setenv(MIRROR_ENV, "https://registry.lab:5000/")
    assert mirror_setting() == "registry.lab:5000" and mirror_setting("other:1") == "other:1"
    with pytest.raises(UsageError, match=MIRROR_ENV):
        mirror_setting("bad mirror")


@pytest.fixture(scope="module")
def pushed(local_registry: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A small locally built image pushed as a Docker Hub official image and as a ghcr.io image."""
    ctx = tmp_path_factory.mktemp("img")
    (ctx / "blob").write_bytes(os.urandom(256 * 1024))
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY blob /blob\nLABEL envctl.test=1\n")
    tag = uuid.uuid4().hex[:8]
    local = f"envctl-test/registry:{tag}"
    subprocess.run(["docker", "build", "-q", "-t", local, str(ctx)], check=True, capture_output=True)
    refs = {"hub": f"envctl-regtest-{tag}:1.0", "ghcr": f"ghcr.io/envctl-test/osrm-{tag}:v1"}
    mirror_refs = [mirror_ref(r, local_registry) for r in refs.values()]
    for m in mirror_refs:
        subprocess.run(["docker", "tag", local, m], check=True)
        subprocess.run(["docker", "push", m], check=True, capture_output=True)
    subprocess.run(["docker", "image", "rm", local, *mirror_refs], check=True, capture_output=True)
    yield refs
    # a re-pull of a pinned reference is by digest: the mirror's repository keeps only a digest reference
    by_digest = subprocess.run(["docker", "images", "--digests", "--format", "{{.Repository}}@{{.Digest}}"],
                               capture_output=True, text=True).stdout.split()
    subprocess.run(["docker", "image", "rm", "-f", *refs.values(), *mirror_refs,
                    *(r for r in by_digest if r.startswith(f"{local_registry}/"))], capture_output=True)


def image_id_of(ref: str) -> str | None:
    p = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else None


@pytest.mark.docker
def test_pull_through_mirror_tags_the_upstream_reference(local_registry: str, pushed: dict[str, str], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MIRROR_ENV, local_registry)
    opts = Options(data_root=tmp_path / "data", downloads=tmp_path / "dl", lock=LockFile(tmp_path / "images.lock"),
                   timeouts=fetch.Timeouts(connect=5, read=10)).resolved()
    arts = [("s", Artifact(name=k, image=ref, sources=(Source(kind="registry", mirror="upstream", url=ref),)))
            for k, ref in pushed.items()]
    assert all(image_id_of(ref) is None for ref in pushed.values())
    results = get_artifacts(arts, options=opts)
    assert [r.action for r in results] == ["pulled", "pulled"], [r.error for r in results]
    for r, ref in zip(results, pushed.values()):
        assert image_id_of(ref) == r.image_id  # the upstream tag exists, as the catalog and 'docker run' use it
        pin = opts.lock.get(r.name)
        assert pin and pin.digest and "@sha256:" in pin.digest and pin.mirror == f"upstream via {local_registry}"
    # the pin holds on a re-pull through the mirror: only the digest is compared, not the mirror's repo name
    subprocess.run(["docker", "image", "rm", "-f", *pushed.values(), *(mirror_ref(r, local_registry) for r in pushed.values())],
                   capture_output=True)
    assert [r.action for r in get_artifacts(arts, options=opts)] == ["pulled", "pulled"]


@pytest.mark.docker
def test_unreachable_mirror_fails_fast_with_its_name(docker_engine: None, tmp_path: Path) -> None:
    port = free_port()
    opts = Options(data_root=tmp_path / "data", downloads=tmp_path / "dl", lock=LockFile(tmp_path / "images.lock"),
                   registry_mirror=f"127.0.0.1:{port}").resolved()
    ref = f"envctl-regtest-absent-{uuid.uuid4().hex[:8]}:1"
    art = Artifact(name="x", image=ref, sources=(Source(kind="registry", mirror="dockerhub", url=ref),))
    began = time.monotonic()
    [res] = get_artifacts([("s", art)], options=opts)
    assert res.action == "failed" and f"127.0.0.1:{port} is unreachable" in (res.error or "")
    assert time.monotonic() - began < 10
