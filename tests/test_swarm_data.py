"""Data travels with placement (issue 37): the full flavor's data-bound sites (wikipedia, map, classifieds) on a real
swarm, from replicas of the upstream artifacts (scripts/rehearse.py's Replicas: the mini images under the upstream
names and shapes, the data archives with upstream's file names and entry prefixes, every file pinned in a test
images.lock).

The swarm is tests/swarmlab.py's, a lab of its own (``data``: a drained manager and two workers on 172.31.248.0/24),
so it never meets test_swarm.py's. The mirror serves on the lab network's gateway, where the nodes reach this
machine; the lab's registry holds the upstream-named replica images and is ``ENVCTL_REGISTRY_MIRROR``.

- ``images get --flavor full`` with ``ENVCTL_BACKEND=swarm`` gets the images onto the manager's engine and leaves the
  data to the nodes; ``up`` pushes the images to the lab's registry (``distribute``) and each node fetches the data
  its sites mount, from the mirror, verified by the pins, unpacked into its data directory and the instance's volumes;
- a second instance on the same node copies nothing again; a node that reaches no mirror gets this machine's
  verified copy streamed to it; a data set no node has the disk for is refused in one line, leaving nothing.

Instances swd1..swd4, port offset 0 on the nodes (the lab's own addresses: the one exception to '127.0.0.1 only').
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests
import yaml

from swarmlab import SwarmLab

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import rehearse  # noqa: E402  (the rehearsal's replicas of the upstream artifacts)
from fetch_server import FaultServer  # noqa: E402
from envctl.catalog import load_catalog  # noqa: E402
from envctl.images.build import NODEDATA_IMAGE, PROXY_IMAGE, build_for_sites, build_nodedata  # noqa: E402
from envctl.images.data import items as data_items  # noqa: E402

pytestmark = [pytest.mark.docker, pytest.mark.mini, pytest.mark.slow, pytest.mark.timeout(1800)]
SITES = ["wikipedia", "map", "classifieds"]
ZIM = "wikipedia_en_all_maxi_2022-05.zim"
LANDING = "/wikipedia_en_all_maxi_2022-05/A/User:The_other_Kiwix_guy/Landing"


class DataLab:
    def __init__(self, lab: SwarmLab, work: Path, server: FaultServer) -> None:
        self.lab, self.work, self.server = lab, work, server
        self.data = work / "data" / "data"  # the full flavor's data directory under the data root ENVCTL_DATA_DIR
        self.env = {**os.environ, "DOCKER_HOST": lab.manager_host, "ENVCTL_BACKEND": "swarm",
                    "ENVCTL_SWARM_REGISTRY": lab.registry, "ENVCTL_REGISTRY_MIRROR": lab.registry,
                    "ENVCTL_CATALOG": str(work / "sites.yaml"), "ENVCTL_DATA_DIR": str(work / "data"),
                    "ENVCTL_STATE_DIR": str(work / "state"), "ENVCTL_ENGINE_TIMEOUT": "60"}
        for k in ("ENVCTL_INSTANCE", "ENVCTL_DISK_BUDGET_BYTES"):
            self.env.pop(k, None)

    def envctl(self, *args: str, timeout: float = 900, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "envctl", *args], capture_output=True, text=True, timeout=timeout,
                              env={**self.env, **extra})

    def json(self, *args: str, **extra: str) -> Any:
        p = self.envctl(*args, "--json", **extra)
        assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-3000:])
        return json.loads(p.stdout)

    def node_of(self, addr: str) -> str:
        return next(h for h, ip in self.lab.node_ips.items() if ip == addr)

    def node_labels(self, node: str) -> dict[str, str]:
        return json.loads(self.lab.docker("node", "inspect", "--format", "{{json .Spec.Labels}}", node).stdout)

    def on_node(self, node: str, *argv: str) -> subprocess.CompletedProcess[str]:
        """A command in a throwaway container on ``node`` with its filesystem at /host (read-only)."""
        return self.lab.docker("run", "--rm", "-v", "/:/host:ro", "debian:bookworm-slim", *argv, node=node, check=False)

    def key(self, name: str) -> str:
        """The node label key that says a node holds data file ``name`` (of this lab's data directory)."""
        return next(i.key for s in SITES for i in data_items(load_catalog(self.work / "sites.yaml"), [s], "full",
                                                             str(self.data), "x") if i.name == name)

    def fetches(self, name: str) -> int:
        return sum(1 for path, _ in self.server.log if path.endswith("/" + name))


@pytest.fixture(scope="module")
def dl(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DataLab]:
    cat = load_catalog()
    build_for_sites(cat, SITES, "mini")
    build_nodedata()
    lab = SwarmLab(name="data", subnet="172.31.248.0/24", registry_port=54700, verbose=False)
    lab.up()
    work = tmp_path_factory.mktemp("swarm-data")
    (work / "data").mkdir()
    server = FaultServer(host=lab.gateway)
    server.__enter__()
    try:
        for host, ip in lab.node_ips.items():
            lab.docker("node", "update", "--label-add", f"envctl.engine=tcp://{ip}:2375", host)
        lab.docker("node", "update", "--availability", "drain", "node1")  # the manager only manages
        for img in (PROXY_IMAGE, NODEDATA_IMAGE, "debian:bookworm-slim"):  # envctl's own: built where 'up' runs them
            lab.push(img)
        lab.docker("pull", f"{lab.registry}/debian:bookworm-slim")  # the base image a manager pulls from Docker Hub
        lab.docker("tag", f"{lab.registry}/debian:bookworm-slim", "debian:bookworm-slim")
        t = time.monotonic()
        replicas = rehearse.Replicas(work, server, lab.registry_push)
        rehearse.rehearsal_catalog(replicas, SITES, work / "sites.yaml")
        print(f"\n[swarm data] replicas ready in {time.monotonic() - t:.0f}s", flush=True)
        yield DataLab(lab, work, server)
    finally:
        server.__exit__()
        lab.down()


def test_images_get_on_a_swarm_fills_the_managers_engine_and_leaves_the_data_to_the_nodes(dl: DataLab) -> None:
    got = dl.json("images", "get", "--flavor", "full", *SITES)
    actions = {r["name"]: r["action"] for r in got}
    data = [a.name for s in SITES for a in load_catalog(dl.work / "sites.yaml").site(s).flavors["full"].artifacts
            if a.kind == "data"]
    assert all(actions[n] == "on nodes" for n in data) and data, actions
    assert all(a in ("pulled", "loaded") for n, a in actions.items() if n not in data), actions
    assert not (dl.data / "wikipedia" / ZIM).exists()  # nothing of the data came to this machine
    images = dl.lab.docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
    assert "ghcr.io/kiwix/kiwix-serve:3.3.0" in images and "openstreetmap-website-web:latest" in images, images


def test_up_places_every_sites_data_on_its_node_from_the_mirror_and_the_sites_serve_it(dl: DataLab) -> None:
    t = time.monotonic()
    up = dl.json("up", *SITES, "--flavor", "full", "-i", "swd1", "--no-login", "--spares", "0")
    took = time.monotonic() - t
    assert up["ok"], up
    st = dl.json("status", "-i", "swd1")
    node = dl.node_of(st["public_host"])
    assert node in ("node2", "node3"), st
    print(f"\n[swarm data] up of {', '.join(SITES)} (full replicas) on {node}: {took:.1f}s", flush=True)
    host = st["public_host"]
    assert requests.get(f"http://{host}:8888{LANDING}", timeout=20).status_code == 200
    assert '"code":"Ok"' in requests.get(f"http://{host}:5000/route/v1/driving/-79.9959,40.4406;-79.9,40.45"
                                         "?overview=false", timeout=20).text
    assert requests.get(f"http://{host}:9980/index.php", timeout=20).status_code == 200
    # the node holds each file, verified (its sha256 beside it), and says so in its labels
    root = str(dl.data)
    pins = json.loads((dl.work / "data" / "images.lock").read_text())["artifacts"]
    zim = f"{root}/wikipedia/{ZIM}"
    held = dl.on_node(node, "cat", f"/host{zim}.sha256")
    assert held.returncode == 0 and held.stdout.strip() == pins[ZIM]["sha256"], held.stderr
    labels = dl.node_labels(node)
    assert labels.get(f"envctl.data.{dl.key(ZIM)}") == pins[ZIM]["sha256"][:16], labels
    osrm = dl.on_node(node, "ls", f"/host{root}/map/osrm/car")
    assert "us-northeast-latest.osrm" in osrm.stdout, osrm.stdout + osrm.stderr  # unpacked where the routers mount it
    assert dl.fetches(ZIM) >= 1 and not (dl.data / "wikipedia" / ZIM).exists()  # the node fetched it itself
    other = "node3" if node == "node2" else "node2"
    assert not dl.on_node(other, "test", "-e", f"/host{zim}").returncode == 0  # only where the site runs
    listed = dl.json("images", "list", "--flavor", "full", "wikipedia")
    assert next(r for r in listed if r["name"] == ZIM)["nodes"] == [node], listed


def test_a_second_instance_on_the_node_copies_no_data_again(dl: DataLab) -> None:
    node = dl.node_of(dl.json("status", "-i", "swd1")["public_host"])
    before = dl.fetches(ZIM)
    up = dl.json("up", "wikipedia", "--flavor", "full", "-i", "swd2", "--no-login", "--spares", "0", "--port-offset", "100",
                 ENVCTL_SWARM_CONSTRAINT=f"node.hostname=={node}")
    assert up["ok"], up
    assert dl.node_of(dl.json("status", "-i", "swd2")["public_host"]) == node
    assert dl.fetches(ZIM) == before  # the node's copy served the second instance: not fetched again
    assert requests.get(f"http://{dl.lab.node_ips[node]}:8988{LANDING}", timeout=20).status_code == 200
    for inst in ("swd1", "swd2"):
        assert dl.envctl("down", "-i", inst, "--volumes").returncode == 0


def test_a_node_that_reaches_no_mirror_gets_this_machines_verified_copy(dl: DataLab, tmp_path: Path) -> None:
    """The ZIM's only source is this machine's loopback (no node reaches it): the node is sent the copy this machine
    holds, verified against the same pin; the node not holding it yet (the other worker) is the one chosen."""
    raw = yaml.safe_load((dl.work / "sites.yaml").read_text())
    art = next(a for a in raw["sites"]["wikipedia"]["flavors"]["full"]["artifacts"] if a["name"] == ZIM)
    with FaultServer() as local:  # on 127.0.0.1: this machine only
        local.paths[ZIM] = dl.server.paths[ZIM]
        art["sources"] = [{"kind": "http", "mirror": "loopback", "url": local.url("ok", ZIM)}]
        cat = tmp_path / "sites.yaml"
        cat.write_text(yaml.safe_dump(raw, sort_keys=False))
        here = dl.data / "wikipedia" / ZIM  # what 'images get' on this machine would have put here
        here.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(dl.server.paths[ZIM], here)
        held = [n for n in ("node2", "node3") if dl.node_labels(n).get(f"envctl.data.{dl.key(ZIM)}")]
        fresh = next(n for n in ("node2", "node3") if n not in held)
        try:
            p = dl.envctl("up", "wikipedia", "--flavor", "full", "-i", "swd3", "--no-login", "--spares", "0",
                          ENVCTL_CATALOG=str(cat), ENVCTL_SWARM_CONSTRAINT=f"node.hostname=={fresh}")
            assert p.returncode == 0, p.stderr[-3000:]
            assert "sending this machine's copy" in p.stdout + p.stderr
            assert dl.node_labels(fresh).get(f"envctl.data.{dl.key(ZIM)}"), dl.node_labels(fresh)
            assert requests.get(f"http://{dl.lab.node_ips[fresh]}:8888{LANDING}", timeout=20).status_code == 200
        finally:
            dl.envctl("down", "-i", "swd3", "--volumes", ENVCTL_CATALOG=str(cat))
            here.unlink()


def test_data_no_node_has_the_disk_for_is_refused_in_one_line_and_leaves_nothing(dl: DataLab, tmp_path: Path) -> None:
    raw = yaml.safe_load((dl.work / "sites.yaml").read_text())
    art = next(a for a in raw["sites"]["wikipedia"]["flavors"]["full"]["artifacts"] if a["name"] == ZIM)
    art["size"] = 10 ** 16  # 10 PB, and no pin: what a first placement must find room for
    cat = tmp_path / "sites.yaml"
    cat.write_text(yaml.safe_dump(raw, sort_keys=False))
    data = tmp_path / "data"  # no images.lock: nothing pinned
    data.mkdir()
    p = dl.envctl("up", "wikipedia", "--flavor", "full", "-i", "swd4", "--no-login", ENVCTL_CATALOG=str(cat),
                  ENVCTL_DATA_DIR=str(data))
    lines = p.stderr.strip().splitlines()
    assert p.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert "disk" in lines[0] and "node2" in lines[0] and "node3" in lines[0] and "GiB" in lines[0], lines[0]
    services = dl.lab.docker("service", "ls", "--format", "{{.Name}}").stdout.split()
    networks = dl.lab.docker("network", "ls", "--format", "{{.Name}}").stdout.split()
    assert not [s for s in services if "swd4" in s] and "envctl-swd4" not in networks
