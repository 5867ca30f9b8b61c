"""The CLI skeleton: sites list/show, errors, doctor, the engine script."""
from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from envctl.cli import cli

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def test_version_and_help():
    assert run("--version").output.startswith("envctl, version ")
    out = run("--help").output
    for cmd in ("up", "down", "status", "env", "sites", "doctor", "images", "logs", "exec", "instances"):
        assert f"  {cmd}" in out


def test_sites_list_json():
    r = run("sites", "list", "--json")
    assert r.exit_code == 0
    rows = {row["site"]: row for row in json.loads(r.output)}
    assert set(rows) == {"shopping", "shopping_admin", "reddit", "gitlab", "wikipedia", "map", "classifieds", "homepage"}
    assert rows["gitlab"]["ports"] == {"web": 8023}
    assert rows["classifieds"]["reset"] == "endpoint"


def test_sites_show_masks_secrets():
    r = run("sites", "show", "classifieds", "--json")
    assert r.exit_code == 0
    assert "Password.123" not in r.output
    assert "4b61655535e7ed388f0d40a93600254c" not in r.output
    assert "***" in r.output
    shown = json.loads(r.output)
    assert shown["services"]["web"]["ports"]["public"] == 9980
    r = run("sites", "show", "shopping")
    assert "MyPassword" not in r.output and "admin1234" not in r.output


def test_unknown_site_is_a_usage_error():
    r = CliRunner().invoke(cli, ["sites", "show", "shoping"])
    assert r.exit_code == 2
    assert r.output.strip().splitlines()[0].startswith("error: unknown site 'shoping'; did you mean 'shopping'?")
    r = CliRunner().invoke(cli, ["up", "gitlub", "--flavor", "mini"])
    assert r.exit_code == 2 and "did you mean 'gitlab'" in r.output


def test_bad_catalog_one_line_error(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("version: 1\nsites: {}\n")
    r = CliRunner().invoke(cli, ["--catalog", str(f), "sites", "list"])
    assert r.exit_code == 2
    assert r.output.count("\n") == 1 and f"invalid catalog {f}: sites:" in r.output


@pytest.mark.docker
def test_engine_script_then_base_image_runs():
    subprocess.run(["bash", str(ROOT / "scripts" / "docker-engine.sh")], check=True, capture_output=True)
    assert subprocess.run(["docker", "run", "--rm", "debian:bookworm-slim", "true"]).returncode == 0


@pytest.mark.docker
def test_doctor_on_this_machine():
    r = run("doctor", "--flavor", "mini", "--json", "--port-offset", "31000")
    report = json.loads(r.output)
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["docker engine"]["status"] == "ok"
    assert checks["storage driver"]["detail"] == "overlay2"
    assert checks["browser"]["status"] == "ok"
    assert set(checks) >= {"disk", "memory", "ports", "images"}
    assert (r.exit_code == 0) == report["ok"]


@pytest.mark.docker
def test_doctor_names_busy_port_and_fails():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        offset = port - 4399  # put the homepage on the busy port
        r = run("doctor", "homepage", "--flavor", "mini", "--port-offset", str(offset), "--json")
    report = json.loads(r.output)
    ports = next(c for c in report["checks"] if c["check"] == "ports")
    assert ports["status"] == "fail" and f"{port} (homepage)" in ports["detail"]
    assert "--port-offset" in ports["fix"]
    assert r.exit_code == 1


@pytest.mark.docker
def test_doctor_full_flavor_reports_missing_images_and_disk():
    r = run("doctor", "shopping", "--flavor", "full", "--json", "--port-offset", "31000")
    checks = {c["check"]: c for c in json.loads(r.output)["checks"]}
    assert checks["images"]["status"] == "fail"
    assert "shopping_final_0712:latest" in checks["images"]["detail"]
    assert checks["images"]["fix"] == "envctl images get shopping"
    assert "117.0 GB" in checks["disk"]["detail"]
    assert r.exit_code == 1
