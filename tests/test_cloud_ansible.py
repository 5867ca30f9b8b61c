"""`envctl cloud up` on machines over SSH, for real: Ansible (ansible-runner, ``playbooks/swarm.yml``) is given six
machines, joins the three it should into one Docker Swarm, and envctl then runs on that swarm through what
``envctl cloud env`` prints.

The machines are tests/swarmlab.py's nodes with sshd (``SwarmLab(ssh_key=..., form_swarm=False)``): Docker engines
in containers on a test network, which Ansible reaches at their own addresses (the one exception to "127.0.0.1
only"). Their engines run the Debian way (Debian's /etc/init.d/docker under tini), so the play's
``service docker restart`` restarts them. Every branch of the play runs:

- node1 (the manager): an engine without /etc/docker/daemon.json; the play writes one trusting the lab's registry,
  restarts the engine, and runs the registry on it (Debian's docker-registry, its config written by the play, deletes
  on: envctl pushes images there and 'envctl snapshot rm' deletes a manifest through it).
- node2: an engine whose daemon.json has another setting and another registry: the play merges (both kept).
- node3: a machine without Docker: the play installs Debian's docker.io (from the network), starts it, joins it.
- node4: already in a swarm of its own (a machine a colleague uses): refused with the fix, its engine not touched.
- node5: its daemon.json is not JSON: refused with the file and the fix, nothing changed.
- a sixth inventory host is unreachable.

Instance: swc (homepage, offset 0 on whichever node placement picks). Lane b, after test_swarm (same SwarmLab names).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from conftest import free_port
from envctl.backends.registry import Registry
from envctl.catalog import load_catalog
from envctl.cloud.ansible import InventoryHost, PlayEvent
from envctl.images.build import PROXY_IMAGE, build_for_sites
from swarmlab import SwarmLab

pytestmark = [pytest.mark.ansible, pytest.mark.docker, pytest.mark.slow, pytest.mark.mini]
LAB = "sw-lab"
OTHER_SETTINGS = {"log-level": "warn", "insecure-registries": ["10.9.9.9:5000"]}  # node2's daemon.json before the play


@pytest.fixture(scope="module")
def machines(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SwarmLab, Path]]:
    keydir = tmp_path_factory.mktemp("ssh")
    key = keydir / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    lab = SwarmLab(nodes=5, ssh_key=key.with_suffix(".pub").read_text().strip(), form_swarm=False, verbose=False,
                   no_engine=["node3"], daemon_json={"node2": OTHER_SETTINGS})
    lab.up()
    try:
        # node4 belongs to a swarm of its own
        lab.docker("swarm", "init", "--advertise-addr", lab.node_ips["node4"], node="node4")
        # node5's daemon.json was broken after its engine started (the engine would not start again with it)
        _on(lab, "node5", "sh", "-c", "echo '{\"log-level\": ' > /etc/docker/daemon.json")
        yield lab, key
    finally:
        lab.down()


def _hosts(lab: SwarmLab, key: Path, names: list[str]) -> list[InventoryHost]:
    return [InventoryHost(name=n, address=lab.node_ips[n], user="root", key_file=str(key),
                          vars={"envctl_engine": lab.node_hosts[n]}) for n in names]


def _cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envctl", *argv], capture_output=True, text=True, timeout=900,
                          env={**os.environ, **(env or {})})


def _on(lab: SwarmLab, node: str, *command: str) -> subprocess.CompletedProcess[str]:
    """A command on the machine itself (its container), not through its engine."""
    return subprocess.run(["docker", "exec", lab.container_name(node), *command], capture_output=True, text=True,
                          timeout=60)


def _settings(lab: SwarmLab, node: str) -> Any:
    got = _on(lab, node, "cat", "/etc/docker/daemon.json")
    return json.loads(got.stdout) if got.returncode == 0 else None


def _insecure(lab: SwarmLab, node: str) -> set[str]:
    """The registries the node's running engine trusts over plain HTTP."""
    index = json.loads(lab.docker("info", "--format", "{{json .RegistryConfig.IndexConfigs}}", node=node).stdout)
    return {name for name, cfg in index.items() if not cfg.get("Secure", True)}


def _swarm_nodes(lab: SwarmLab, node: str = "node1") -> dict[str, dict[str, Any]]:
    ids = lab.docker("node", "ls", "-q", node=node).stdout.split()
    raw = json.loads(lab.docker("node", "inspect", *ids, node=node).stdout)
    return {n["Description"]["Hostname"]: n for n in raw}


def test_cloud_up_joins_machines_into_one_swarm_refuses_a_foreign_one_and_envctl_runs_on_it(
        machines: tuple[SwarmLab, Path], data_dir: Path, tmp_path: Path) -> None:
    from envctl import cloud

    lab, key = machines
    foreign_cluster = json.loads(lab.docker("info", "--format", "{{json .Swarm}}", node="node4").stdout)["Cluster"]["ID"]
    assert _on(lab, "node3", "sh", "-c", "command -v docker dockerd").returncode != 0  # no Docker there yet
    assert _settings(lab, "node1") is None and _settings(lab, "node2") == OTHER_SETTINGS
    ghost = InventoryHost(name="ghost", address="127.0.0.1", port=free_port(), user="root", key_file=str(key))
    events: list[PlayEvent] = []
    m, first = cloud.up_machines(LAB, [*_hosts(lab, key, ["node1", "node2", "node3", "node4", "node5"]), ghost],
                                 playbook_progress=events.append)
    print(f"\n5 machines (one without Docker) + 1 unreachable joined: play {first.seconds:.1f}s")

    # the unreachable machine, the one of another swarm and the one whose daemon.json is not JSON are named, with
    # why and the fix (one line each); the play went on for the others
    failures = {f.host: f for f in first.failures}
    assert sorted(failures) == ["ghost", "node4", "node5"], [f.line() for f in first.failures]
    assert all(len(f.line().splitlines()) == 1 for f in first.failures)
    assert failures["ghost"].unreachable and "unreachable" in {e.kind for e in events}
    assert "another swarm" in failures["node4"].output and "docker swarm leave --force" in failures["node4"].output
    assert failures["node5"].task == "refuse settings that are not JSON"
    assert "/etc/docker/daemon.json" in failures["node5"].output and "json.tool" in failures["node5"].output
    trusted = ["trust the lab's registry (plain HTTP on the lab's own network)",
               "restart the Docker engine for the registry setting"]
    assert first.changed["node1"][:3] == [*trusted, "start the swarm"], first.changed
    assert {"install the lab's registry (Debian's docker-registry)",
            "configure the lab's registry (deletes on, no auth, the lab's port)",
            "restart the lab's registry for its configuration"} <= set(first.changed["node1"]), first.changed
    assert first.changed["node2"][:3] == [*trusted, "join the swarm"], first.changed
    assert first.changed["node3"][:5] == ["install the Docker engine", "start the Docker engine", *trusted,
                                          "join the swarm"], first.changed
    assert "node4" not in first.changed and "node5" not in first.changed  # refused before anything was changed

    # one swarm: node1 manages, node2 and node3 work, each labelled with how envctl reaches its engine and the lab
    nodes = _swarm_nodes(lab)
    assert sorted(nodes) == ["node1", "node2", "node3"]  # not node4 (another swarm's), nor node5 (refused)
    for name, n in nodes.items():
        assert n["Status"]["State"] == "ready" and n["Spec"]["Role"] == ("manager" if name == "node1" else "worker")
        assert n["Spec"]["Labels"] == {"envctl.engine": lab.node_hosts[name], "envctl.lab": LAB}
    assert _on(lab, "node3", "dpkg-query", "--show", "--showformat", "${Status}", "docker.io").stdout == \
        "install ok installed"
    # node4 was left alone: still the manager of its own swarm, no daemon.json written
    own = json.loads(lab.docker("info", "--format", "{{json .Swarm}}", node="node4").stdout)
    assert own["Cluster"]["ID"] == foreign_cluster and own["ControlAvailable"] is True
    assert _settings(lab, "node4") is None
    assert _on(lab, "node5", "cat", "/etc/docker/daemon.json").stdout == '{"log-level": \n'  # left for its owner to fix

    # the lab's registry runs on the manager and every engine trusts it: daemon.json merged, never overwritten
    registry = f"{lab.node_ips['node1']}:5000"
    assert Registry(registry).alive()
    assert _settings(lab, "node1") == _settings(lab, "node3") == {"insecure-registries": [registry]}
    assert _settings(lab, "node2") == {"log-level": "warn", "insecure-registries": ["10.9.9.9:5000", registry]}
    assert {registry, "10.9.9.9:5000"} <= _insecure(lab, "node2")
    assert registry in _insecure(lab, "node1") and registry in _insecure(lab, "node3")

    # the join token never left the manager: not in the manifest, not in any progress event
    token = lab.docker("swarm", "join-token", "-q", "worker", node="node1").stdout.strip()
    manifest = data_dir / "labs" / f"{LAB}.json"
    assert token.startswith("SWMTKN-") and token not in manifest.read_text()
    assert not any(token in repr(e) for e in events) and not any(token in f.output for f in first.failures)
    assert manifest.stat().st_mode & 0o777 == 0o600 and manifest.parent.stat().st_mode & 0o777 == 0o700
    saved = json.loads(manifest.read_text())
    assert saved["manager"] == "node1" and saved["registry"] == registry
    assert [x["name"] for x in saved["machines"]] == ["node1", "node2", "node3", "node4", "node5", "ghost"]

    # a second run on the lab's machines changes nothing
    _, second = cloud.up_machines(LAB, _hosts(lab, key, ["node1", "node2", "node3"]))
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
    assert env == {"ENVCTL_BACKEND": "swarm", "DOCKER_HOST": lab.node_hosts["node1"], "ENVCTL_SWARM_REGISTRY": registry}
    shell = _cli("cloud", "env", "--lab", LAB).stdout
    assert f"export DOCKER_HOST={lab.node_hosts['node1']}" in shell.splitlines()
    # the images on the manager's engine (what 'envctl images build' leaves there); 'up' pushes them to the registry
    build_for_sites(load_catalog(), ["homepage"], "mini")
    images = [PROXY_IMAGE, "debian:bookworm-slim", "envctl-mini/homepage:1"]
    t = time.monotonic()
    save = subprocess.Popen(["docker", "save", *images], stdout=subprocess.PIPE)
    load = subprocess.run(["docker", "-H", lab.node_hosts["node1"], "load", "-q"], stdin=save.stdout,
                          capture_output=True, text=True, timeout=600)
    assert save.wait(timeout=60) == 0 and load.returncode == 0, load.stderr
    print(f"images loaded on the manager's engine: {time.monotonic() - t:.1f}s")
    reg = Registry(registry)
    assert reg.manifest("envctl-mini/homepage:1") is None
    run_env = {**env, "ENVCTL_STATE_DIR": str(tmp_path / "state"), "ENVCTL_ENGINE_TIMEOUT": "60"}
    try:
        t = time.monotonic()
        up = _cli("up", "homepage", "--flavor", "mini", "-i", "swc", "--no-login", "--json", env=run_env)
        assert up.returncode == 0, up.stderr[-3000:]
        print(f"envctl up (images pushed to the lab's registry, pulled by the node): {time.monotonic() - t:.1f}s")
        assert reg.manifest("envctl-mini/homepage:1") is not None  # pushed there by envctl, pulled by the node
        urls = _cli("env", "-i", "swc", "--json", env=run_env)
        assert urls.returncode == 0, urls.stderr
        home = json.loads(urls.stdout)["HOMEPAGE"]
        host = home.split("//", 1)[1].split(":", 1)[0]
        assert host in {lab.node_ips[n] for n in ("node1", "node2", "node3")}, home
        assert requests.get(home, timeout=30).status_code == 200
        # a snapshot is committed on its node and pushed to the registry; 'snapshot rm' deletes it through its API
        t = time.monotonic()
        snap = _cli("snapshot", "create", "homepage", "s1", "-i", "swc", "--json", env=run_env)
        assert snap.returncode == 0, snap.stderr[-3000:]
        tags = {f"{repo}:{tag}" for repo in reg.repositories() if repo.startswith("envctl-snap/homepage-")
                for tag in reg.tags(repo) if tag == "swc-s1"}
        assert tags, reg.repositories()
        rm = _cli("snapshot", "rm", "s1", "-i", "swc", "--json", env=run_env)
        assert rm.returncode == 0, rm.stderr[-3000:]
        assert all(reg.manifest(ref) is None for ref in tags), tags
        print(f"snapshot create + rm through the lab's registry: {time.monotonic() - t:.1f}s")
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
