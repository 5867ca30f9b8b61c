"""Moving images between hosts (images export / import) and re-verifying what is present (images verify)."""
from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest
from click.testing import CliRunner

from envctl.cli import cli

pytestmark = pytest.mark.docker


@pytest.fixture
def small_image(docker_engine, tmp_path):
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "blob").write_bytes(os.urandom(512 * 1024))
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY blob /blob\n")
    tag = f"envctl-test/move:{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "build", "-q", "-t", tag, str(ctx)], check=True, capture_output=True)
    image_id = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", tag], capture_output=True,
                              text=True, check=True).stdout.strip()
    yield tag, image_id
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)


def test_export_then_import_restores_the_same_image(small_image, tmp_path):
    tag, image_id = small_image
    from envctl.images.get import export_image

    out = export_image(tag, tmp_path / "img.tar")
    assert out.size > 512 * 1024 and (tmp_path / "img.tar.sha256").read_text().split()[0] == out.sha256
    subprocess.run(["docker", "rmi", "-f", tag], check=True, capture_output=True)
    r = CliRunner().invoke(cli, ["images", "import", str(tmp_path / "img.tar"), "--json"])
    assert r.exit_code == 0, r.output
    loaded = json.loads(r.output)
    assert loaded["image_id"] == image_id and tag in loaded["tags"]


def test_import_refuses_a_file_that_does_not_match_its_checksum(small_image, tmp_path):
    tag, _ = small_image
    from envctl.images.get import export_image

    export_image(tag, tmp_path / "img.tar")
    (tmp_path / "img.tar.sha256").write_text("0" * 64 + "  img.tar\n")
    subprocess.run(["docker", "rmi", "-f", tag], check=True, capture_output=True)
    r = CliRunner().invoke(cli, ["images", "import", str(tmp_path / "img.tar")])
    assert r.exit_code == 1 and r.output.startswith("error: ") and "SHA-256" in r.output and "copy it again" in r.output, r.output
    assert subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode != 0


def test_verify_pins_present_images_then_detects_a_swap(docker_engine, tmp_path, monkeypatch):
    monkeypatch.setenv("ENVCTL_DATA_DIR", str(tmp_path / "data"))
    cat = tmp_path / "cat.yaml"
    import yaml

    from envctl.catalog import BUILTIN

    raw = yaml.safe_load(BUILTIN.read_text())
    raw["sites"] = {"homepage": raw["sites"]["homepage"]}
    raw["sites"]["homepage"]["services"]["web"]["env"] = {}  # its links name the sites dropped here
    raw["sites"]["homepage"]["flavors"]["full"]["artifacts"] = [
        {"name": "homepage-image", "image": "envctl-test/verify:1", "sources": [{"kind": "registry", "mirror": "x",
                                                                                  "url": "envctl-test/verify:1"}]}]
    cat.write_text(yaml.safe_dump(raw))
    subprocess.run(["docker", "tag", "debian:bookworm-slim", "envctl-test/verify:1"], check=True)
    try:
        first = CliRunner().invoke(cli, ["--catalog", str(cat), "images", "verify", "--json"])
        assert first.exit_code == 0 and "pinned now" in json.loads(first.output)[0]["detail"]
        ctx = tmp_path / "ctx"
        ctx.mkdir()
        (ctx / "Dockerfile").write_text("FROM debian:bookworm-slim\nLABEL swapped=1\n")
        subprocess.run(["docker", "build", "-q", "-t", "envctl-test/verify:1", str(ctx)], check=True, capture_output=True)
        second = CliRunner().invoke(cli, ["--catalog", str(cat), "images", "verify", "--json"])
        res = json.loads(second.output)[0]
        assert second.exit_code == 1 and not res["ok"] and "pins" in res["detail"]
    finally:
        subprocess.run(["docker", "rmi", "-f", "envctl-test/verify:1"], capture_output=True)
