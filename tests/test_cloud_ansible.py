"""Ansible side of `envctl cloud`, for real: the playbooks run through ansible-runner over SSH
against two local test hosts (tests/hosts: sshd + Python + docker CLI, with this machine's Docker
socket mounted), published on 127.0.0.1 ports."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from importlib import metadata
from pathlib import Path

import pytest
import requests

from conftest import SshHost, free_port  # the fixtures ssh_hosts, package, data_dir: conftest.py
from envctl.cloud import hosts as lab
from envctl.cloud.ansible import InventoryHost, PlayEvent

pytestmark = [pytest.mark.ansible, pytest.mark.docker, pytest.mark.slow]


def _inventory(hosts: list[SshHost]) -> list[InventoryHost]:
    return [InventoryHost(name=f"host{i}", address="127.0.0.1", port=h.port, user="root", key_file=str(h.key),
                          vars={"envctl_instance": f"lab{i}", "envctl_port_offset": 100 * (i + 1),
                                "envctl_public_host": "127.0.0.1", "envctl_bind": "127.0.0.1"})
            for i, h in enumerate(hosts)]


def test_playbook_prepares_hosts_idempotently_and_isolates_a_failing_host(ssh_hosts, data_dir, package):
    events: list[PlayEvent] = []
    inv = _inventory(ssh_hosts)
    ghost = InventoryHost(name="ghost", address="127.0.0.1", port=free_port(), user="root", key_file=str(ssh_hosts[0].key))
    started = time.monotonic()
    m, first = lab.up_inventory("ssh-lab", [*inv, ghost], lifecycle=False, wheelhouse=True, package=package,
                                progress=lambda _: None, playbook_progress=events.append)
    took = time.monotonic() - started
    print(f"\n2-host prepare: {took:.1f}s, play {first.seconds:.1f}s")

    # the unreachable host is reported (host, task, output); the others were configured
    assert [f.host for f in first.failures] == ["ghost"]
    assert "unreachable" in {e.kind for e in events} and "ghost" in (m.hosts[-1].error or "")
    assert sorted(first.ok_hosts) == ["host0", "host1"]
    assert {e.kind for e in events} >= {"task", "ok", "changed"}
    version = metadata.version("envctl")
    for i, h in enumerate(ssh_hosts):
        assert first.collected[f"host{i}"]["version"] == version
        out = h.ssh("/opt/envctl/venv/bin/python", "-c",
                    "import importlib.metadata as m, envctl.cloud.hosts; print(m.version('envctl'))")
        assert out.returncode == 0 and out.stdout.strip() == version, out.stderr
        link = h.ssh("readlink", "/usr/local/bin/envctl")
        assert link.stdout.strip() == "/opt/envctl/venv/bin/envctl"
        assert h.ssh("docker", "info", "--format", "{{.ServerVersion}}").returncode == 0
    saved = json.loads((data_dir / "labs" / "ssh-lab.json").read_text())
    assert [h["name"] for h in saved["hosts"]] == ["host0", "host1", "ghost"]

    # a second run on the configured hosts changes nothing
    m2, second = lab.up_inventory("ssh-lab", inv, lifecycle=False, wheelhouse=True, package=package, progress=lambda _: None)
    assert second.failures == [] and sorted(second.hosts) == ["host0", "host1"]
    assert second.changed == {}, f"second run changed: {second.changed}"
    print(f"second run (no changes): play {second.seconds:.1f}s")


# A two-host mini lab with its reset servers (URLs, the lab's token, an idempotent re-run) is checked in
# tests/test_cloud_pool.py on the lab that test brings up anyway (issue 22: one lab up, not two).


def test_inventory_file_with_unsafe_host_settings_is_refused_on_the_host(ssh_hosts, data_dir, package, tmp_path):
    h = ssh_hosts[0]
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[envctl]\nbad ansible_host=127.0.0.1 ansible_port={h.port} ansible_user=root "
                   f"ansible_ssh_private_key_file={h.key} "
                   "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null' "
                   f"envctl_instance=../../etc/x envctl_public_host=127.0.0.1\n")
    m, res = lab.up_inventory("bad-lab", inventory_file=inv, lifecycle=False, package=package, progress=lambda _: None)
    assert [f.host for f in res.failures] == ["bad"]
    assert res.failures[0].task == "check the host's envctl settings" and "envctl_instance" in res.failures[0].output


# -- issue #14: inventory-lab status, --images-url, cloud up from a wheel install; issue #16: a lab is one pool --


def _cli(*argv: str) -> tuple[int, str]:
    from click.testing import CliRunner

    from envctl.cli import cli

    res = CliRunner(env={"COLUMNS": "200"}).invoke(cli, list(argv))
    return res.exit_code, res.output


@pytest.mark.mini
def test_instances_per_host_each_get_their_own_ports_and_status_and_agentlab_list_them_all(
        ssh_hosts, data_dir, package, monkeypatch):
    # nothing answers at this AWS endpoint: an inventory lab's status must not need AWS
    monkeypatch.setenv("ENVCTL_AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    inv = [InventoryHost(name=f"host{i}", address="127.0.0.1", port=h.port, user="root", key_file=str(h.key),
                         vars={"envctl_instance": f"cl{i}", "envctl_port_offset": 17000 + 100 * i,
                               "envctl_public_host": "127.0.0.1", "envctl_bind": "127.0.0.1"})
             for i, h in enumerate(ssh_hosts)]
    ghost = InventoryHost(name="ghost", address="127.0.0.1", port=free_port(), user="root", key_file=str(ssh_hosts[0].key))
    started = time.monotonic()
    try:
        m, res = lab.up_inventory("cl-pool", [*inv, ghost], flavor="mini", sites="homepage", instances_per_host=2,
                                  wheelhouse=True, package=package, progress=lambda _: None)
        print(f"\n2 hosts x 2 instances (homepage) up: {time.monotonic() - started:.1f}s")
        assert [f.host for f in res.failures] == ["ghost"], [f.line() for f in res.failures]
        assert m.instance_offsets[0] == 0 and len(set(m.instance_offsets)) == 2

        # one AgentLab entry per instance, across both hosts; no two share a URL, every URL answers
        code, out = _cli("cloud", "env", "--lab", "cl-pool", "--format", "agentlab", "--json")
        assert code == 0, out
        entries = json.loads(out)
        assert sorted((e["host"], e["instance"]) for e in entries) == [
            ("host0", "cl0-1"), ("host0", "cl0-2"), ("host1", "cl1-1"), ("host1", "cl1-2")]
        homepages = [e["homepage"] for e in entries]
        assert len(set(homepages)) == 4, homepages
        for e in entries:
            assert e["base_url"] == "http://127.0.0.1" and {"shopping", "reddit", "gitlab", "full_reset"} <= set(e)
            assert requests.get(e["homepage"], timeout=30).status_code == 200, e
            assert requests.get(f"{e['full_reset']}/status", timeout=10).text == "Ready for duty!"
        # the instances' public ports follow their offsets (host base + the lab's instance offsets)
        for e in entries:
            i = int(e["instance"][2])
            k = int(e["instance"][-1]) - 1
            assert e["homepage"] == f"http://127.0.0.1:{4399 + 17000 + 100 * i + m.instance_offsets[k]}"

        # status asks each host over SSH: reachable, which sites each instance has up, ready; the ghost is not
        # reachable (so the command exits 1)
        code, out = _cli("cloud", "status", "--lab", "cl-pool", "--json")
        st = json.loads(out)
        assert code == 1 and st["kind"] == "inventory", out
        by = {h["name"]: h for h in st["hosts"]}
        assert by["ghost"]["reachable"] is False and by["ghost"]["state"] == "unreachable" and by["ghost"]["instances"] == []
        for name in ("host0", "host1"):
            h = by[name]
            assert h["reachable"] and h["ready"], h
            assert [(i["instance"], i["running"], i["sites_up"], i["sites_down"], i["ready"]) for i in h["instances"]] == [
                (f"cl{name[-1]}-1", True, ["homepage"], [], True), (f"cl{name[-1]}-2", True, ["homepage"], [], True)]

        # a stopped instance shows as not running, the rest stay up (the table: one row per instance)
        assert ssh_hosts[1].ssh("envctl", "down", "--instance", "cl1-2").returncode == 0
        code, out = _cli("cloud", "status", "--lab", "cl-pool")
        rows = {line.split("│")[4].strip(): line for line in out.splitlines() if line.count("│") > 5}
        assert code == 1 and "ghost" in out, out
        assert "homepage" in rows["cl1-1"] and "homepage" not in rows["cl1-2"], out
    finally:
        for i, h in enumerate(ssh_hosts):
            for k in (1, 2):
                h.ssh("envctl", "down", "--instance", f"cl{i}-{k}")


def _saved_image(tmp: Path, tag: str) -> tuple[Path, str]:
    ctx = tmp / "img"
    ctx.mkdir()
    (ctx / "blob").write_bytes(uuid.uuid4().bytes * 4096)
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY blob /blob\n")
    subprocess.run(["docker", "build", "-q", "-t", tag, str(ctx)], check=True, capture_output=True)
    image_id = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", tag], capture_output=True, text=True,
                              check=True).stdout.strip()
    archive = tmp / "image.tar"
    subprocess.run(["docker", "save", "-o", str(archive), tag], check=True, capture_output=True)
    subprocess.run(["docker", "rmi", tag], check=True, capture_output=True)
    return archive, image_id


def test_images_url_hosts_fetch_the_artifacts_from_the_labs_copy(ssh_hosts, data_dir, package, tmp_path, monkeypatch):
    """--images-url: the hosts' 'images get' fetches <url>/<artifact name> (the lab's copy) first."""
    import yaml

    from envctl.catalog import BUILTIN
    from fetch_server import FaultServer

    tag = f"envctl-test/cl-labimg:{uuid.uuid4().hex[:8]}"
    name = f"cl-labimg-{uuid.uuid4().hex[:8]}.tar"
    archive, image_id = _saved_image(tmp_path, tag)
    # the controller's catalog (ENVCTL_CATALOG): homepage's full flavor is this image, from an upstream that is down
    raw = yaml.safe_load(BUILTIN.read_text())
    home = raw["sites"]["homepage"]
    home["services"]["web"]["flavors"]["full"] = {"image": tag}
    home["flavors"]["full"]["artifacts"] = [{"name": name, "kind": "image", "image": tag, "sources": [
        {"kind": "http", "mirror": "upstream", "url": "http://127.0.0.1:9/nowhere.tar"}]}]
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("ENVCTL_CATALOG", str(catalog))
    inv = _inventory(ssh_hosts[:1])
    try:
        with FaultServer() as server:  # on 127.0.0.1: the test hosts share this machine's network
            server.paths[name] = str(archive)
            m, res = lab.up_inventory("cl-images", inv, flavor="full", sites="homepage", lifecycle=False,
                                      images_url=f"{server.base}/ok/", wheelhouse=True, package=package,
                                      progress=lambda _: None)
            assert res.failures == [], [f.line() for f in res.failures]
            assert "get the images" in res.changed["host0"]
            fetched = [p for p, _ in server.log if p.endswith("/" + name)]
            assert fetched, server.log
            loaded = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", tag], capture_output=True, text=True)
            assert loaded.returncode == 0 and loaded.stdout.strip() == image_id
            # the host pinned what it fetched, from the lab's mirror
            pins = ssh_hosts[0].ssh("sh", "-c", "cat ~/.local/share/envctl/images.lock")
            assert name in pins.stdout and '"lab"' in pins.stdout, pins.stdout + pins.stderr

            # a re-run finds the image present: nothing fetched, nothing changed
            _, again = lab.up_inventory("cl-images", inv, flavor="full", sites="homepage", lifecycle=False,
                                        images_url=f"{server.base}/ok/", wheelhouse=True, package=package,
                                        progress=lambda _: None)
            assert again.failures == [] and again.changed == {}, again.changed
            assert len([p for p, _ in server.log if p.endswith("/" + name)]) == len(fetched)
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)


def test_cloud_up_from_a_wheel_install_packages_the_installed_envctl(ssh_hosts, data_dir, package, tmp_path):
    """A regular install (a built wheel pip-installed into a venv, no source tree) can configure a lab:
    it re-packs itself from its RECORD, and the host runs that wheel."""
    import site
    import zipfile

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # the dependencies come from this interpreter's site-packages (a path line, so no editable hook of envctl
    # is run); envctl itself only from the wheel
    Path(purelib, "cl-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(package.wheel)], check=True,
                   capture_output=True)
    h = ssh_hosts[0]
    script = f"""
import json, sys
from dataclasses import replace
from pathlib import Path
import envctl
from envctl.cloud import hosts as lab, package as pk
from envctl.cloud.ansible import InventoryHost
assert pk.source_root() is None, envctl.__file__
one = pk.controller_wheel(Path(sys.argv[1]) / "a")
two = pk.controller_wheel(Path(sys.argv[1]) / "b")
pkg = replace(one, wheelhouse=Path({str(package.wheelhouse)!r}))
host = InventoryHost(name="host0", address="127.0.0.1", port={h.port}, user="root", key_file={str(h.key)!r},
                     vars={{"envctl_instance": "clwheel", "envctl_port_offset": 17700,
                            "envctl_public_host": "127.0.0.1", "envctl_bind": "127.0.0.1"}})
m, res = lab.up_inventory("cl-wheel", [host], sites="homepage", lifecycle=False, wheelhouse=True, package=pkg,
                          progress=lambda _: None)
print(json.dumps({{"file": envctl.__file__, "wheel": str(one.wheel), "sha": one.sha256, "again": two.sha256,
                  "failures": [f.line() for f in res.failures], "version": res.collected["host0"]["version"]}}))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ENVCTL_WHEEL", "ENVCTL_CATALOG")}
    # ansible-playbook comes with the dependencies too (a real install puts it in the venv's bin/)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    out = subprocess.run([str(py), "-c", script, str(tmp_path)], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["file"].startswith(purelib), got  # the venv's installed copy ran, not this tree
    assert got["failures"] == [] and got["version"] == metadata.version("envctl")
    assert got["sha"] == got["again"]  # reproducible: a re-run copies nothing
    # the re-packed wheel holds exactly the built wheel's files (RECORD rewritten for the same list)
    built, repacked = zipfile.ZipFile(package.wheel), zipfile.ZipFile(got["wheel"])
    assert sorted(built.namelist()) == sorted(repacked.namelist())
    assert [n for n in built.namelist() if built.read(n) != repacked.read(n)] == [
        n for n in built.namelist() if n.endswith(".dist-info/RECORD")]
    # and the host runs it: its installed build is the re-packed wheel
    assert h.ssh("cat", "/opt/envctl/installed.sha256").stdout.strip() == got["sha"]
    assert h.ssh("envctl", "sites", "list", "--json").returncode == 0
