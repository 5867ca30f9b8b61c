"""Ansible side of `envctl cloud`, for real: the playbooks run through ansible-runner over SSH
against two local test hosts (tests/hosts: sshd + Python + docker CLI, with this machine's Docker
socket mounted), published on 127.0.0.1 ports."""
from __future__ import annotations

import json
import shlex
import socket
import subprocess
import time
import uuid
from importlib import metadata
from pathlib import Path
from typing import Iterator

import pytest
import requests

from conftest import TEST_LABEL, free_port
from envctl.provision import lab
from envctl.provision.ansible import InventoryHost, PlayEvent
from envctl.provision.package import ControllerPackage, controller_wheel

HOSTS_DIR = Path(__file__).with_name("hosts")
HOST_IMAGE = "envctl-test/ssh-host:1"
pytestmark = [pytest.mark.ansible, pytest.mark.docker, pytest.mark.slow]


class SshHost:
    def __init__(self, name: str, port: int, key: Path) -> None:
        self.name, self.port, self.key = name, port, key

    def ssh(self, *argv: str) -> subprocess.CompletedProcess:
        """Run argv on the host (quoted for the remote shell) through the published SSH port."""
        return subprocess.run(
            ["ssh", "-i", str(self.key), "-p", str(self.port), "-o", "StrictHostKeyChecking=no",
             "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "root@127.0.0.1", shlex.join(argv)],
            capture_output=True, text=True, timeout=60)


def _wait_ssh(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                if s.recv(16).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(0.2)
    pytest.fail(f"sshd on 127.0.0.1:{port} did not answer within {timeout}s")


@pytest.fixture(scope="module")
def ssh_hosts(docker_engine, tmp_path_factory) -> Iterator[list[SshHost]]:
    subprocess.run(["docker", "build", "-q", "-t", HOST_IMAGE, str(HOSTS_DIR)], check=True, capture_output=True)
    keydir = tmp_path_factory.mktemp("ssh")
    key = keydir / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    pub = key.with_suffix(".pub").read_text().strip()
    hosts, names = [], []
    try:
        for i in range(2):
            name, port = f"envctl-test-host-{uuid.uuid4().hex[:6]}", free_port()
            # Host network: envctl inside publishes its proxy through the shared engine on 127.0.0.1 and
            # probes it there, as on a real lab host; sshd listens on its own port.
            subprocess.run(["docker", "run", "-d", "--name", name, "--label", TEST_LABEL, "--network", "host",
                            "-e", f"SSHD_PORT={port}",
                            "-v", "/var/run/docker.sock:/var/run/docker.sock", "-e", f"AUTHORIZED_KEY={pub}", HOST_IMAGE],
                           check=True, capture_output=True)
            names.append(name)
            hosts.append(SshHost(name, port, key))
        for h in hosts:
            _wait_ssh(h.port)
        yield hosts
    finally:
        if names:
            subprocess.run(["docker", "rm", "-f", "-v", *names], capture_output=True)


def _inventory(hosts: list[SshHost]) -> list[InventoryHost]:
    return [InventoryHost(name=f"host{i}", address="127.0.0.1", port=h.port, user="root", key_file=str(h.key),
                          vars={"envctl_instance": f"lab{i}", "envctl_port_offset": 100 * (i + 1),
                                "envctl_public_host": "127.0.0.1", "envctl_bind": "127.0.0.1"})
            for i, h in enumerate(hosts)]


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> ControllerPackage:
    """The controller's envctl built once (the shared tree may change between two builds)."""
    return controller_wheel(tmp_path_factory.mktemp("pkg"), with_dependencies=True)


@pytest.fixture
def data_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("ENVCTL_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


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
                    "import importlib.metadata as m, envctl.provision.lab; print(m.version('envctl'))")
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


@pytest.mark.mini
def test_two_host_mini_lab_serves_working_urls_and_rerun_changes_nothing(ssh_hosts, data_dir, package):
    inv = _inventory(ssh_hosts)
    started = time.monotonic()
    m, first = lab.up_inventory("mini-lab", inv, flavor="mini", sites="all", lifecycle=True, wheelhouse=True, package=package,
                                progress=lambda _: None)
    print(f"\n2-host mini lab up: {time.monotonic() - started:.1f}s")
    assert first.failures == [], [f.line() for f in first.failures]
    urls = lab.env("mini-lab", "json")
    assert len(urls) == 2
    seen: set[str] = set()
    for host in urls:
        for key, value in host["env"].items():
            if isinstance(value, str) and value.startswith("http://") and key in ("WA_SHOPPING", "WA_REDDIT", "WA_GITLAB", "WA_HOMEPAGE"):
                assert value not in seen, f"two hosts share {value}"
                seen.add(value)
                assert requests.get(value, timeout=30).status_code < 400, (key, value)
    assert seen
    st = lab.status("mini-lab")
    assert all(h.ready for h in st.hosts), st

    # the lab's token reached every host's reset server: WA_FULL_RESET carries it, nothing works without it
    token = m.serve_token
    assert len(token) >= 32
    for entry, bg in zip(urls, lab.env("mini-lab", "browsergym")):
        reset_url = bg["WA_FULL_RESET"]
        assert reset_url.endswith("/" + token) and entry["reset_token"] == token
        base = reset_url[: -len(token) - 1]
        assert requests.get(f"{base}/reset", timeout=10).status_code == 403
        assert requests.get(f"{base}/status.json", timeout=10).status_code == 403
        assert requests.get(f"{reset_url}/status", timeout=10).text == "Ready for duty!"
    for h in ssh_hosts:  # and it is not on any command line on the host
        ps = h.ssh("sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
        assert token not in ps.stdout
    try:
        _, second = lab.up_inventory("mini-lab", inv, flavor="mini", sites="all", lifecycle=True, wheelhouse=True, package=package,
                                     progress=lambda _: None)
        assert second.failures == [] and second.changed == {}, second.changed
    finally:
        for i, h in enumerate(ssh_hosts):
            h.ssh("envctl", "down", "--instance", f"lab{i}")


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
