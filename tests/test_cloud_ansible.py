"""`envctl cloud up` on machines over SSH, for real: Ansible (ansible-runner, ``playbooks/swarm.yml``) joins four
machines into one Docker Swarm and envctl then runs on that swarm through what ``envctl cloud env`` prints.

The machines are tests/swarmlab.py's nodes with sshd (``SwarmLab(ssh_key=..., form_swarm=False)``): Docker engines
in containers on a test network, which Ansible reaches at their own addresses (the one exception to "127.0.0.1
only"). node4 is already in a swarm of its own (a machine a colleague uses): the lab must refuse it with the fix, not
take it over. A fifth inventory host is unreachable. The lab's registry is the test registry the nodes trust already
(``registry_trusted``: these engines cannot be restarted for a daemon.json, they are their container's process).

Instance: swc (homepage, offset 0 on whichever node placement picks). Lane b, after test_swarm (same SwarmLab names).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from conftest import free_port
from envctl.catalog import load_catalog
from envctl.cloud.ansible import InventoryHost, PlayEvent
from envctl.images.build import PROXY_IMAGE, build_for_sites
from swarmlab import SwarmLab

pytestmark = [pytest.mark.ansible, pytest.mark.docker, pytest.mark.slow, pytest.mark.mini]
LAB = "sw-lab"


@pytest.fixture(scope="module")
def machines(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SwarmLab, Path]]:
    keydir = tmp_path_factory.mktemp("ssh")
    key = keydir / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    lab = SwarmLab(nodes=4, ssh_key=key.with_suffix(".pub").read_text().strip(), form_swarm=False, verbose=False)
    lab.up()
    try:
        # node4 belongs to a swarm of its own
        lab.docker("swarm", "init", "--advertise-addr", lab.node_ips["node4"], node="node4")
        yield lab, key
    finally:
        lab.down()


def _hosts(lab: SwarmLab, key: Path, names: list[str]) -> list[InventoryHost]:
    return [InventoryHost(name=n, address=lab.node_ips[n], user="root", key_file=str(key),
                          vars={"envctl_engine": lab.node_hosts[n]}) for n in names]


def _cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envctl", *argv], capture_output=True, text=True, timeout=900,
                          env={**os.environ, **(env or {})})


def _swarm_nodes(lab: SwarmLab, node: str = "node1") -> dict[str, dict[str, Any]]:
    ids = lab.docker("node", "ls", "-q", node=node).stdout.split()
    raw = json.loads(lab.docker("node", "inspect", *ids, node=node).stdout)
    return {n["Description"]["Hostname"]: n for n in raw}


def test_cloud_up_joins_machines_into_one_swarm_refuses_a_foreign_one_and_envctl_runs_on_it(
        machines: tuple[SwarmLab, Path], data_dir: Path, tmp_path: Path) -> None:
    from envctl import cloud

    lab, key = machines
    foreign_cluster = json.loads(lab.docker("info", "--format", "{{json .Swarm}}", node="node4").stdout)["Cluster"]["ID"]
    ghost = InventoryHost(name="ghost", address="127.0.0.1", port=free_port(), user="root", key_file=str(key))
    events: list[PlayEvent] = []
    m, first = cloud.up_machines(LAB, [*_hosts(lab, key, ["node1", "node2", "node3", "node4"]), ghost],
                                 registry=lab.registry, registry_trusted=True, playbook_progress=events.append)
    print(f"\n4 machines + 1 unreachable joined: play {first.seconds:.1f}s")

    # the unreachable machine and the one of another swarm are named, with why; the play went on for the others
    failures = {f.host: f for f in first.failures}
    assert sorted(failures) == ["ghost", "node4"], [f.line() for f in first.failures]
    assert failures["ghost"].unreachable and "unreachable" in {e.kind for e in events}
    assert "another swarm" in failures["node4"].output and "docker swarm leave --force" in failures["node4"].output
    assert "start the swarm" in first.changed["node1"]
    assert all("join the swarm" in first.changed.get(n, []) for n in ("node2", "node3")), first.changed

    # one swarm: node1 manages, node2 and node3 work, each labelled with how envctl reaches its engine and the lab
    nodes = _swarm_nodes(lab)
    assert sorted(nodes) == ["node1", "node2", "node3"]
    for name, n in nodes.items():
        assert n["Status"]["State"] == "ready" and n["Spec"]["Role"] == ("manager" if name == "node1" else "worker")
        assert n["Spec"]["Labels"] == {"envctl.engine": lab.node_hosts[name], "envctl.lab": LAB}
    # node4 was left alone: still the manager of its own swarm
    own = json.loads(lab.docker("info", "--format", "{{json .Swarm}}", node="node4").stdout)
    assert own["Cluster"]["ID"] == foreign_cluster and own["ControlAvailable"] is True

    # the join token never left the manager: not in the manifest, not in any progress event
    token = lab.docker("swarm", "join-token", "-q", "worker", node="node1").stdout.strip()
    manifest = data_dir / "labs" / f"{LAB}.json"
    assert token.startswith("SWMTKN-") and token not in manifest.read_text()
    assert not any(token in repr(e) for e in events) and not any(token in f.output for f in first.failures)
    assert manifest.stat().st_mode & 0o777 == 0o600 and manifest.parent.stat().st_mode & 0o777 == 0o700
    saved = json.loads(manifest.read_text())
    assert saved["manager"] == "node1" and saved["registry"] == lab.registry
    assert [x["name"] for x in saved["machines"]] == ["node1", "node2", "node3", "node4", "ghost"]

    # a second run on the lab's machines changes nothing
    _, second = cloud.up_machines(LAB, _hosts(lab, key, ["node1", "node2", "node3"]), registry=lab.registry,
                                  registry_trusted=True)
    assert second.failures == [] and second.changed == {}, (second.changed, [f.line() for f in second.failures])
    print(f"second run (no changes): play {second.seconds:.1f}s")

    # status: the machines (given), the swarm's nodes as the manager sees them (over SSH)
    st = _cli("cloud", "status", "--lab", LAB, "--json")
    assert st.returncode == 0, st.stderr
    status = json.loads(st.stdout)
    assert {n["hostname"]: (n["role"], n["state"], n["engine"]) for n in status["nodes"]} == {
        h: ("manager" if h == "node1" else "worker", "ready", lab.node_hosts[h]) for h in ("node1", "node2", "node3")}
    assert [x["state"] for x in status["machines"]] == ["given"] * 3

    # envctl on the lab: the variables 'cloud env' prints, then the same commands as on one machine
    got = _cli("cloud", "env", "--lab", LAB, "--json")
    assert got.returncode == 0, got.stderr
    env = json.loads(got.stdout)
    assert env == {"ENVCTL_BACKEND": "swarm", "DOCKER_HOST": lab.node_hosts["node1"], "ENVCTL_SWARM_REGISTRY": lab.registry}
    shell = _cli("cloud", "env", "--lab", LAB).stdout
    assert f"export DOCKER_HOST={lab.node_hosts['node1']}" in shell.splitlines()
    build_for_sites(load_catalog(), ["homepage"], "mini")
    for img in (PROXY_IMAGE, "debian:bookworm-slim", "envctl-mini/homepage:1"):
        lab.push(img)
    run_env = {**env, "ENVCTL_STATE_DIR": str(tmp_path / "state"), "ENVCTL_ENGINE_TIMEOUT": "60"}
    try:
        up = _cli("up", "homepage", "--flavor", "mini", "-i", "swc", "--no-login", "--json", env=run_env)
        assert up.returncode == 0, up.stderr[-3000:]
        urls = _cli("env", "-i", "swc", "--json", env=run_env)
        assert urls.returncode == 0, urls.stderr
        home = json.loads(urls.stdout)["HOMEPAGE"]
        host = home.split("//", 1)[1].split(":", 1)[0]
        assert host in {lab.node_ips[n] for n in ("node1", "node2", "node3")}, home
        assert requests.get(home, timeout=30).status_code == 200
    finally:
        down = _cli("down", "-i", "swc", "--volumes", env=run_env)
        assert down.returncode == 0, down.stderr[-2000:]

    # down forgets the lab; the machines were given, so they are left as they are (still one swarm)
    gone = _cli("cloud", "down", "--lab", LAB)
    assert gone.returncode == 0, gone.stderr
    assert not manifest.exists() and "nothing is removed" in gone.stderr
    assert sorted(_swarm_nodes(lab)) == ["node1", "node2", "node3"]
    again = _cli("cloud", "env", "--lab", LAB)
    assert again.returncode != 0 and len(again.stderr.strip().splitlines()) == 1 and "no lab named" in again.stderr


def test_an_inventory_file_without_the_envctl_group_or_with_a_bad_manager_is_one_line(
        machines: tuple[SwarmLab, Path], data_dir: Path, tmp_path: Path) -> None:
    lab, key = machines
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[web]\nnode2 ansible_host={lab.node_ips['node2']} ansible_user=root "
                   f"ansible_ssh_private_key_file={key}\n")
    got = _cli("cloud", "up", "--lab", "sw-bad", "--inventory", str(inv))
    assert got.returncode != 0
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and "envctl" in lines[0] and "group" in lines[0], got.stderr
