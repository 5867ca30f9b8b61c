"""The reset server's HTTP face (issue #14): real HTTP against a real ``envctl serve`` server.

The server runs against a minimal stand-in for Lab whose reset only counts calls (the reset tiers
themselves are tested with real sites in test_reset.py); the HTTP handling, tokens, token files
and header checks are the real ones.
"""
from __future__ import annotations

import os
import stat
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

import pytest
import requests

from envctl import serve as serve_mod
from envctl.errors import UsageError
from envctl.serve import running_server_url, serve


@dataclass
class FakeResult:
    site: str
    ok: bool = True
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"site": self.site, "ok": self.ok, "tier": "fake"}


@dataclass
class FakeStatus:
    instance: str

    def to_dict(self) -> dict[str, Any]:
        return {"instance": self.instance}


class FakeLab:
    """What the reset server uses of Lab: instance, settings(), status(), reset(), env()."""

    def __init__(self) -> None:
        self.instance = f"st-{uuid.uuid4().hex[:8]}"
        self.full_resets = 0
        self.site_resets: list[str] = []

    def settings(self) -> None:
        return None

    def status(self) -> "FakeStatus":
        return FakeStatus(self.instance)

    def env(self, benchmark: str) -> dict[str, str]:
        return {"SHOPPING": "http://127.0.0.1:7770"}

    def reset(self, sites: list[str] | None = None, all_sites: bool = False) -> list[FakeResult]:
        if all_sites:
            self.full_resets += 1
            time.sleep(0.2)
            return [FakeResult("shopping")]
        self.site_resets.extend(sites or [])
        return [FakeResult(s) for s in sites or []]


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch) -> Iterator[Any]:
    d = tmp_path / "state"
    monkeypatch.setenv("ENVCTL_STATE_DIR", str(d))
    yield d


@pytest.fixture
def start():
    servers = []

    def run(host: str = "127.0.0.1", token: str | None = None, lab: FakeLab | None = None):
        lab = lab or FakeLab()
        server = serve(lab, host, 0, token, say=lambda _: None)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return lab, server, f"http://127.0.0.1:{server.server_address[1]}"

    yield run
    for s in servers:
        s.shutdown()
        s.server_close()


def wait_ready(url: str, **kw: Any) -> None:
    deadline = time.monotonic() + 10
    while True:
        r = requests.get(f"{url}/status", timeout=5, **kw)
        if r.text == "Ready for duty!":
            return
        assert r.status_code == 200 and r.text == "Reset ongoing", (r.status_code, r.text)
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_loopback_without_token_speaks_browsergym_protocol(start):
    lab, server, base = start()
    assert server.token is None and running_server_url(lab.instance) == base
    # BrowserGym's client: GET /reset (answered once the reset has ended), then GET /status at once
    assert requests.get(f"{base}/reset").status_code == 200
    assert lab.full_resets == 1
    assert requests.get(f"{base}/status").text == "Ready for duty!"
    # in the background (?wait=0): a second reset while one runs is a 418
    assert requests.get(f"{base}/reset?wait=0").status_code == 200
    assert requests.get(f"{base}/reset").status_code == 418
    wait_ready(base)
    assert lab.full_resets == 2
    r = requests.post(f"{base}/reset/shopping")
    assert r.status_code == 200 and lab.site_resets == ["shopping"]


@pytest.mark.parametrize("headers", [
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},  # a site on another port of the same host is the same *site*
    {"Origin": "http://127.0.0.1:7770"},
    {"Origin": "null"},
    {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"},
])
def test_cross_site_browser_requests_cannot_reset(start, headers):
    lab, _, base = start()
    r = requests.get(f"{base}/reset", headers=headers)
    assert r.status_code == 403 and "another origin" in r.text
    assert requests.post(f"{base}/reset/shopping", headers=headers).status_code == 403
    assert requests.get(f"{base}/status", headers=headers).status_code == 200  # read-only
    time.sleep(0.05)
    assert lab.full_resets == 0 and lab.site_resets == []


def test_same_origin_and_typed_urls_still_reset(start):
    lab, server, base = start()
    own = f"127.0.0.1:{server.server_address[1]}"
    assert requests.get(f"{base}/reset", headers={"Origin": f"http://{own}", "Sec-Fetch-Site": "same-origin"}).status_code == 200
    wait_ready(base)
    assert requests.get(f"{base}/reset", headers={"Sec-Fetch-Site": "none"}).status_code == 200  # the address bar
    wait_ready(base)
    assert lab.full_resets == 2


def test_dns_rebinding_host_is_refused_on_loopback(start):
    lab, _, base = start()
    r = requests.get(f"{base}/reset", headers={"Host": "rebind.evil.example"})
    assert r.status_code == 403 and "loopback" in r.text
    assert requests.get(f"{base}/status.json", headers={"Host": "rebind.evil.example:80"}).status_code == 403
    assert requests.get(f"{base}/status", headers={"Host": "localhost:7565"}).status_code == 200
    assert lab.full_resets == 0


def test_non_loopback_bind_generates_a_token_and_requires_it(start, state_dir):
    lab, server, base = start("0.0.0.0")
    token = server.token
    assert token and len(token) >= 32
    path = server.token_file
    assert path == state_dir / f"serve-{lab.instance}.token" and path.read_text().strip() == token
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(state_dir / f"serve-{lab.instance}.json").st_mode) == 0o600
    assert token not in (state_dir / f"serve-{lab.instance}.json").read_text()

    # without the token: 403 everywhere, status included (not a loopback bind)
    for p in ("/reset", "/status", "/status.json", f"/{token[:-1]}/reset", f"/x/{token}/reset", f"/reset?token={token}"):
        assert requests.get(f"{base}{p}").status_code == 403, p
    assert requests.post(f"{base}/reset/shopping").status_code == 403
    assert requests.get(f"{base}/reset", headers={"Authorization": f"Bearer {token}x"}).status_code == 403
    assert lab.full_resets == 0 and lab.site_resets == []

    # unmodified BrowserGym: WA_FULL_RESET + "/reset", then + "/status"
    wa_full_reset = running_server_url(lab.instance)
    assert wa_full_reset == f"http://127.0.0.1:{server.server_address[1]}/{token}" == server.url
    assert requests.get(f"{wa_full_reset}/reset").status_code == 200
    wait_ready(wa_full_reset)
    assert requests.get(f"{base}/status", headers={"Authorization": f"Bearer {token}"}).text == "Ready for duty!"
    assert requests.post(f"{base}/reset/shopping", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    assert lab.full_resets == 1 and lab.site_resets == ["shopping"]


def test_generated_token_is_reused_by_the_next_server(start):
    lab, first, _ = start("0.0.0.0")
    first.shutdown()
    first.server_close()
    _, second, base = start("0.0.0.0", lab=lab)
    assert second.token == first.token
    assert requests.get(f"{base}/{first.token}/status").status_code == 200


def test_token_on_loopback_guards_everything_but_status(start):
    token = "t0ken-for-the-tests-0123456789"
    lab, _, base = start("127.0.0.1", token)
    assert requests.get(f"{base}/status").text == "Ready for duty!"
    assert requests.get(f"{base}/status.json").status_code == 403
    assert requests.get(f"{base}/reset").status_code == 403
    assert requests.get(f"{base}/reset", headers={"X-Envctl-Token": "wrong-token-0123456789"}).status_code == 403
    assert requests.get(f"{base}/{token}/reset").status_code == 200
    wait_ready(f"{base}/{token}")
    # the token does not make a cross-site request acceptable
    assert requests.get(f"{base}/{token}/reset", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert lab.full_resets == 1


def test_tokens_are_compared_in_constant_time(start, monkeypatch):
    calls = []
    real = serve_mod.hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(serve_mod.hmac, "compare_digest", spy)
    token = "another-token-for-the-tests-42"
    _, _, base = start("127.0.0.1", token)
    assert requests.get(f"{base}/status.json", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    assert (token.encode(), token.encode()) in calls


@pytest.mark.parametrize("bad", ["short", "has space in it 0123456789", "slash/in/the/token/0123456", "ünïcode-token-0123456789"])
def test_unusable_tokens_are_refused(bad):
    with pytest.raises(UsageError):
        serve(FakeLab(), "127.0.0.1", 0, bad, say=lambda _: None)


def test_bad_bind_and_instance_names_are_refused(state_dir):
    with pytest.raises(UsageError):
        serve(FakeLab(), "http://0.0.0.0", 0, say=lambda _: None)
    lab = FakeLab()
    lab.instance = "../../escape"
    with pytest.raises(UsageError):
        serve(lab, "127.0.0.1", 0, say=lambda _: None)
    assert not (state_dir.parent / "escape.json").exists() and not any(state_dir.parent.glob("serve-*"))


def test_browsergym_env_carries_the_token(start):
    from envctl.envformat import browsergym

    lab, server, _ = start("0.0.0.0")
    env = browsergym(lab)  # type: ignore[arg-type]
    assert env["WA_FULL_RESET"] == env["VWA_FULL_RESET"] == server.url
    assert env["WA_FULL_RESET"].endswith("/" + server.token)
    assert requests.get(env["WA_FULL_RESET"] + "/reset").status_code == 200
