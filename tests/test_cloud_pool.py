"""A lab is one pool (issue #16): one lease server on the controller leases the instances of every host
of a cloud lab. Real parts: the sshd "host" containers and Ansible of tests/conftest.py (shared with
tests/test_cloud_ansible.py), a 2-host mini lab (reddit, one instance per host), the lease server in this process and
the unchanged 'envctl lease' client."""
from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from typing import Any, Iterator

import pytest
import requests

from envctl import cloud
from envctl.cloud import hosts as lab
from envctl.cloud.ansible import InventoryHost
from envctl.serve import serve_pool
from conftest import SshHost  # the fixtures ssh_hosts, package, data_dir: conftest.py (one set per session)
from test_leases import post_on_reddit

pytestmark = [pytest.mark.ansible, pytest.mark.docker, pytest.mark.mini, pytest.mark.slow]
LAB = "lp-pool"
OFFSET = 19000  # host i's instance: port offset 19000 + 100 i (reddit on 28999 / 29099)


def _cli(*argv: str) -> tuple[int, str]:
    from click.testing import CliRunner

    from envctl.cli import cli

    res = CliRunner().invoke(cli, list(argv))
    return res.exit_code, res.output


class LabServer:
    """``envctl cloud serve --lab`` in this process (so the test can stop and restart it)."""

    def __init__(self) -> None:
        self.logs: list[str] = []
        self.start()

    def start(self) -> None:
        self.pool = cloud.pool(LAB, log=self.logs.append)
        self.server = serve_pool(LAB, self.pool, "127.0.0.1", 0, say=lambda _m: None)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.pool.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.pool.stop()

    def listing(self) -> dict[str, Any]:
        return requests.get(f"{self.url}/leases", timeout=30).json()

    def wait(self, pred: Any, timeout: float = 120, what: str = "") -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = pred()
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {self.listing()} {self.logs[-8:]}"
            time.sleep(0.3)

    def states(self) -> dict[tuple[str, str], str]:
        return {(r["host"], r["instance"]): r["state"] for r in self.listing()["instances"]}

    def acquire(self, **body: Any) -> requests.Response:
        return requests.post(f"{self.url}/leases", json={"sites": ["reddit"], "ttl": 300, **body}, timeout=300)


def _pristine(h: SshHost, instance: str) -> bool:
    """The host's own verdict: the instance's reddit matches its pristine fingerprint."""
    out = h.ssh("envctl", "verify", "reddit", "--instance", instance, "--json")
    return out.returncode == 0 and json.loads(out.stdout).get("ok") is True


def _inventory(ssh_hosts: list[SshHost]) -> list[InventoryHost]:
    return [InventoryHost(name=f"host{i}", address="127.0.0.1", port=h.port, user="root", key_file=str(h.key),
                          vars={"envctl_instance": f"lp{i}", "envctl_port_offset": OFFSET + 100 * i,
                                "envctl_public_host": "127.0.0.1", "envctl_bind": "127.0.0.1"})
            for i, h in enumerate(ssh_hosts)]


@pytest.fixture(scope="module")
def lab_up(ssh_hosts: list[SshHost], package: Any, tmp_path_factory: Any) -> Iterator[lab.LabManifest]:  # noqa: F811
    mp = pytest.MonkeyPatch()
    mp.setenv("ENVCTL_DATA_DIR", str(tmp_path_factory.mktemp("data")))
    mp.setenv("ENVCTL_STATE_DIR", str(tmp_path_factory.mktemp("state")))  # the lease server's record
    inv = _inventory(ssh_hosts)
    started = time.monotonic()
    try:
        m, res = lab.up_inventory(LAB, inv, flavor="mini", sites="reddit", wheelhouse=True, package=package,
                                  progress=lambda _: None)
        print(f"\n2-host mini lab (reddit) up: {time.monotonic() - started:.1f}s")
        assert res.failures == [], [f.line() for f in res.failures]
        yield m
    finally:
        for i, h in enumerate(ssh_hosts):
            print(h.ssh("tail", "-n", "15", f"/var/log/envctl-serve-lp{i}.log").stdout)
            h.ssh("envctl", "down", "--instance", f"lp{i}")
        mp.undo()


def test_two_host_mini_lab_serves_working_urls_and_rerun_changes_nothing(
        lab_up: lab.LabManifest, ssh_hosts: list[SshHost], package: Any) -> None:  # noqa: F811
    """The lab as `cloud up` leaves it, before any lease: every host's URLs answer, no two hosts share one;
    the lab's token reached every host's reset server (and nothing works without it); a re-run of the
    playbook on the running lab changes nothing."""
    m = lab_up
    urls = lab.env(LAB, "json")
    assert len(urls) == 2
    seen: set[str] = set()
    for host in urls:
        value = host["env"]["WA_REDDIT"]
        assert value.startswith("http://") and value not in seen, f"two hosts share {value}"
        seen.add(value)
        try:
            answer = requests.get(value, timeout=30).status_code
        except requests.ConnectionError as exc:  # say what the engine and the hosts' envctl show
            ps = subprocess.run(["docker", "ps", "-a", "--filter", "label=envctl.instance", "--format",
                                 "{{.Names}} {{.Status}} {{.Ports}}"], capture_output=True, text=True).stdout
            logs = [h.ssh("sh", "-c", "tail -n 20 /var/log/envctl-serve-*.log; envctl status --instance "
                          f"lp{i}").stdout for i, h in enumerate(ssh_hosts)]
            raise AssertionError(f"{value}: {exc}\n{ps}\n" + "\n".join(logs)) from None
        assert answer < 400, value
    st = lab.status(LAB)
    assert all(h.ready for h in st.hosts), st

    token = m.serve_token
    assert len(token) >= 32
    for entry, bg in zip(urls, lab.env(LAB, "browsergym")):
        reset_url = bg["WA_FULL_RESET"]
        assert reset_url.endswith("/" + token) and entry["reset_token"] == token
        base = reset_url[: -len(token) - 1]
        assert requests.get(f"{base}/reset", timeout=10).status_code == 403
        assert requests.get(f"{base}/status.json", timeout=10).status_code == 403
        assert requests.get(f"{reset_url}/status", timeout=10).text == "Ready for duty!"
    for h in ssh_hosts:  # and it is not on any command line on the host
        ps = h.ssh("sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
        assert token not in ps.stdout

    _, again = lab.up_inventory(LAB, _inventory(ssh_hosts), flavor="mini", sites="reddit", wheelhouse=True,
                                package=package, progress=lambda _: None)
    assert again.failures == [] and again.changed == {}, again.changed


def test_a_lab_is_one_pool(lab_up: lab.LabManifest, ssh_hosts: list[SshHost]) -> None:  # noqa: F811
    m = lab_up
    t0 = time.monotonic()
    srv = LabServer()
    hosts = {f"host{i}": h for i, h in enumerate(ssh_hosts)}
    try:
        srv.wait(lambda: srv.states() == {("host0", "lp0"): "free", ("host1", "lp1"): "free"}, what="the pool")

        # two clients: two instances, on different hosts, each with its host's URLs and reset server
        a, b = srv.acquire(holder="a"), srv.acquire(holder="b")
        assert a.status_code == 201 and b.status_code == 201, (a.text, b.text)
        la, lb = a.json(), b.json()
        assert {la["host"], lb["host"]} == {"host0", "host1"} and la["instance"] != lb["instance"]
        for lease in (la, lb):
            i = int(lease["host"][-1])
            assert lease["instance"] == f"lp{i}" and lease["sites"] == ["reddit"]
            assert lease["env"]["WA_REDDIT"] == lease["env"]["REDDIT"] == f"http://127.0.0.1:{9999 + OFFSET + 100 * i}"
            assert lease["full_reset"] == lease["env"]["WA_FULL_RESET"] == f"http://127.0.0.1:{7565 + OFFSET + 100 * i}/{m.serve_token}"
            assert lease["env"]["ENVCTL_LEASE"] == lease["id"] and lease["env"]["ENVCTL_HOST"] == lease["host"]
            assert lease["auth"] == {} and "no browser" in lease["auth_note"]
            assert requests.get(f"{lease['full_reset']}/status", timeout=10).text == "Ready for duty!"

        # none left: 503 with Retry-After
        c = srv.acquire(holder="c")
        assert c.status_code == 503 and int(c.headers["Retry-After"]) > 0, c.text

        # lease state survives a restart of the lab's lease server (kept 0600 next to the manifest)
        state = lab.lab_file(LAB, ".leases.json")
        assert state.stat().st_mode & 0o777 == 0o600 and m.serve_token not in state.read_text()
        srv.stop()
        srv.start()
        srv.wait(lambda: sorted(srv.states().values()) == ["leased", "leased"], what="the leases back")
        assert {x["id"] for x in srv.listing()["leases"]} == {la["id"], lb["id"]}
        assert requests.post(f"{srv.url}/leases/{la['id']}/heartbeat", json={"ttl": 300}, timeout=30).status_code == 200
        assert srv.acquire().status_code == 503

        # a write on A's reddit, then release through the unchanged client: A is reset through its host's
        # reset server, verified pristine there, and only then leased again
        host_a = hosts[la["host"]]
        title = f"lab pool {uuid.uuid4().hex[:8]}"
        post_on_reddit(la["env"]["WA_REDDIT"], title)
        newest = f"{la['env']['WA_REDDIT']}/f/books/new"
        assert title in requests.get(newest, timeout=30).text and not _pristine(host_a, la["instance"])
        code, out = _cli("lease", "list", "--instance", LAB, "--json")
        assert code == 0 and {r["id"] for r in json.loads(out)["leases"]} == {la["id"], lb["id"]}, out
        code, out = _cli("lease", "release", la["id"], "--instance", LAB, "--json")
        assert code == 0 and json.loads(out)["instance"] == la["instance"], out
        srv.wait(lambda: srv.states()[(la["host"], la["instance"])] == "free", what="A reset and free")
        assert requests.get(f"{la['full_reset']}/status", timeout=10).text == "Ready for duty!"
        assert _pristine(host_a, la["instance"])
        assert title not in requests.get(newest, timeout=30).text
        reset_line = next(i for i, line in enumerate(srv.logs) if "reset and verified" in line and la["host"] in line)
        again = srv.acquire(holder="d")
        assert again.status_code == 201, again.text
        ld = again.json()
        assert (ld["host"], ld["instance"]) == (la["host"], la["instance"]) and ld["id"] != la["id"]
        lease_line = next(i for i, line in enumerate(srv.logs) if ld["id"] in line)
        assert reset_line < lease_line
        metrics = requests.get(f"{srv.url}/metrics", timeout=30).text
        assert f'envctl_leases_active{{pool="{LAB}"}} 2' in metrics and 'ok="true"' in metrics, metrics

        for lease in (lb, ld):
            assert requests.delete(f"{srv.url}/leases/{lease['id']}", timeout=30).status_code == 200
        srv.wait(lambda: sorted(srv.states().values()) == ["free", "free"], what="every instance free")
        print(f"lab pool test (after the lab was up): {time.monotonic() - t0:.1f}s")
    finally:
        srv.stop()
        print("\n".join(srv.logs[-30:]))


def test_cloud_serve_refuses_bad_input_in_one_line(data_dir: Any) -> None:  # noqa: F811
    code, out = _cli("cloud", "serve", "--lab", "lp-nosuch", "--port", "19999", "--json")
    assert code == 2 and out.count("\n") == 1 and "no lab named 'lp-nosuch'" in out, out
    code, out = _cli("cloud", "serve", "--lab", "lp/../x", "--json")
    assert code == 2 and out.count("\n") == 1 and "lab name" in out, out
    code, out = _cli("cloud", "serve", "--lab", "lp-x", "--token", "short", "--json")
    assert code == 2 and out.count("\n") == 1 and "--token" in out, out
