"""webarena-verified (ServiceNow, PyPI, unmodified) against mini instances on the real engine (issue 31).

- Header login: the mini Magento and Postmill images honour webarena-verified's headers as its images do
  (a request carrying the header is served logged in as that account, a wrong password is not: a guest
  on Magento, 401 on Postmill); ``envctl login`` writes ``extra_headers.json`` (0600) and checks it.
- ``envctl env --format browsergym`` names that file in ``PW_EXTRA_HEADERS``; ``--format
  webarena-verified`` writes the environment config its CLI and Python API read (checked by loading it
  with the package's own ``WebArenaVerifiedConfig`` and by ``webarena-verified agent-input-get``).
- ``envctl smoke --tasks webarena-verified``: its tasks set up, acted on in a real Chromium with the
  headers, judged by its evaluators; the files are judged again by its CLI (``eval-tasks``) and its
  Python API; the gaps (what mini data cannot answer) are reported, not skipped.
- A reset renews the headers file, and a header the site refuses is taken out and reported.
- ``envctl down --all``: dry run, a glob, and the refusals.

Instance ``wav2`` at port offset 52100; ``down --all`` removes only ``wav9`` (offset 52900).
"""
from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
import requests

from conftest import _wait_ports_bindable, busy_ports_after, envctl_cli as envctl, remove_instance_images

pytestmark = [pytest.mark.docker, pytest.mark.browser, pytest.mark.mini, pytest.mark.slow]

INSTANCE, OFFSET = "wav2", 52100
SITES = ["shopping", "shopping_admin", "reddit", "gitlab", "map", "wikipedia"]
WAV_CLI = str(Path(sys.executable).with_name("webarena-verified"))
CUSTOMER = ("X-M2-Customer-Auto-Login", "emma.lopez@gmail.com:Password.123")
ADMIN = ("X-M2-Admin-Auto-Login", "admin:admin1234")
POSTMILL = ("X-Postmill-Auto-Login", "MarvelsGrantMan136:test1234")


class Lab:
    def __init__(self, up: dict, auth: Path) -> None:
        self.up, self.auth = up, auth
        self.url = {s["site"]: s["url"].rstrip("/") for s in up["sites"]}

    def base(self, site: str) -> str:
        """The public origin of ``site`` (its entry's port at the instance's offset)."""
        from envctl.catalog import load_catalog

        return f"http://127.0.0.1:{load_catalog().site(site).entry_service.ports.public + OFFSET}"


@pytest.fixture(scope="module")
def lab(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    pytest.importorskip("webarena_verified")
    built = envctl("images", "build", "--flavor", "mini", "--json")
    assert built.returncode == 0, built.stderr[-2000:]
    auth = tmp_path_factory.mktemp("wav-auth")
    envctl("down", "-i", INSTANCE, "--volumes")  # strays of an interrupted run
    _wait_ports_bindable(OFFSET)  # the offset reaches into the ephemeral range: a client socket may hold a port
    try:
        up = envctl("up", *SITES, "--flavor", "mini", "-i", INSTANCE, "--port-offset", str(OFFSET),
                    "--auth-dir", str(auth), "--spares", "0", "--json")
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
        yield Lab(json.loads(up.stdout), auth)
    finally:
        envctl("down", "-i", INSTANCE, "--volumes")
        remove_instance_images(INSTANCE)  # the golden images its resets made


# -- header login on the mini images ------------------------------------------------------------------

def _get(url: str, header: tuple[str, str] | None = None) -> requests.Response:
    return requests.get(url, headers=dict([header]) if header else {}, timeout=30)


def test_a_request_carrying_the_header_is_served_logged_in_and_a_wrong_password_is_not(lab: Lab) -> None:
    shop, admin, forum = lab.base("shopping"), lab.base("shopping_admin"), lab.base("reddit")
    # storefront: the wish list (the catalog's expiry probe) is served only to a signed-in customer
    assert _get(f"{shop}/wishlist/").url.endswith("/customer/account/login/")
    signed = _get(f"{shop}/wishlist/", CUSTOMER)
    assert signed.status_code == 200 and signed.url == f"{shop}/wishlist/" and "PHPSESSID" in signed.cookies
    wrong = _get(f"{shop}/wishlist/", (CUSTOMER[0], "emma.lopez@gmail.com:Password.124"))
    assert wrong.url.endswith("/customer/account/login/")  # a guest, as upstream's plugin leaves it
    assert _get(f"{shop}/wishlist/", ADMIN).url.endswith("/customer/account/login/")  # the admin header is not a customer's
    # admin: the dashboard (with the header) or the sign-in form (without, or with a wrong password)
    dash = _get(f"{admin}/admin/admin/dashboard/", ADMIN)
    assert dash.status_code == 200 and "Dashboard" in dash.text and "Sign in" not in dash.text
    for header in (None, (ADMIN[0], "admin:admin1235"), CUSTOMER):
        page = _get(f"{admin}/admin/admin/dashboard/", header)
        assert "Sign in" in page.text and "Lifetime Sales" not in page.text, header
    # Postmill: every request carrying the header is authenticated by it; a wrong one gets 401 everywhere
    account = _get(f"{forum}/user/MarvelsGrantMan136/account", POSTMILL)
    assert account.status_code == 200 and "Delete" in account.text and "PHPSESSID" not in account.request.headers.get("Cookie", "")
    for value, why in (("MarvelsGrantMan136:test12345", "The presented password is invalid."),
                       ("nosuchuser:test1234", "Bad credentials."), ("no-colon", "Invalid format")):
        r = _get(f"{forum}/forums/all", (POSTMILL[0], value))
        assert r.status_code == 401 and r.text.startswith("Authentication failed:") and why in r.text, (value, r.text)
    assert _get(f"{forum}/user/MarvelsGrantMan136/account").url.endswith("/login")


def test_login_writes_the_headers_file_and_checks_it(lab: Lab) -> None:
    path = lab.auth / "extra_headers.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # written by 'up' (its login) next to the cookie files
    assert json.loads(path.read_text()) == dict([CUSTOMER, ADMIN, POSTMILL])  # no GitLab header: its images have none
    check = envctl("login", "--check", "-i", INSTANCE, "--out", str(lab.auth), "--json")
    report = json.loads(check.stdout)
    assert check.returncode == 0, report
    hdr = report["headers"]
    assert hdr["name"] == "extra_headers.json" and hdr["ok"] and hdr["action"] == "valid"
    assert set(hdr["sites"]) == {"shopping", "shopping_admin", "reddit"}
    assert "extra_headers.json" not in {f["name"] for f in report["files"]}  # the state files
    assert report["headers_file"] == str(path)
    assert "Password.123" not in check.stdout + check.stderr and "admin1234" not in check.stdout + check.stderr


# -- the harnesses' own forms --------------------------------------------------------------------------

def test_env_exports_the_headers_and_webarena_verifieds_config(lab: Lab, tmp_path: Path) -> None:
    from webarena_verified.types.config import WebArenaVerifiedConfig

    plain = envctl("env", "--format", "browsergym", "-i", INSTANCE, "--auth-dir", str(lab.auth), "--json")
    assert plain.returncode == 0 and "PW_EXTRA_HEADERS" not in json.loads(plain.stdout)  # asked for only
    bg = envctl("env", "--format", "browsergym", "--header-login", "-i", INSTANCE, "--auth-dir", str(lab.auth),
                "--json")
    assert bg.returncode == 0, bg.stderr
    values = json.loads(bg.stdout)
    assert values["PW_EXTRA_HEADERS"] == str((lab.auth / "extra_headers.json").resolve())
    assert values["WA_SHOPPING_ADMIN"] == lab.url["shopping_admin"]
    assert json.loads(Path(values["PW_EXTRA_HEADERS"]).read_text()) == dict([CUSTOMER, ADMIN, POSTMILL])
    # webarena-verified's config: written 0600, its path printed; its own model loads it
    out = tmp_path / "wav.json"
    r = envctl("env", "--format", "webarena-verified", "-i", INSTANCE, "--out", str(out))
    assert r.returncode == 0 and r.stdout.strip() == str(out), r.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and "Password.123" not in r.stdout
    cfg = WebArenaVerifiedConfig.from_file(out)
    envs = {str(k.value if hasattr(k, "value") else k): v for k, v in (cfg.environments or {}).items()}
    assert envs["shopping_admin"].urls[0] == lab.url["shopping_admin"] and envs["shopping_admin"].use_header_login
    assert envs["gitlab"].credentials == {"username": "byteblaze", "password": "hello1234"}
    assert not envs["gitlab"].use_header_login and envs["reddit"].use_header_login
    assert any(u.startswith("http://localhost:") for u in envs["shopping"].urls)  # the browser may use either name
    # its CLI renders start pages with it
    rendered = tmp_path / "inputs.json"
    p = subprocess.run([WAV_CLI, "agent-input-get", "--task-ids", "0,44,97", "--config", str(out), "--output",
                        str(rendered)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    starts = {int(t["task_id"]): t["start_urls"] for t in json.loads(rendered.read_text())}
    assert starts[0] == [lab.url["shopping_admin"]] and starts[44] == [lab.url["gitlab"].removesuffix("/explore")]
    assert starts[97] == [lab.url["map"], lab.url["wikipedia"]]
    # --out - prints it (asked for); --json shows it without the passwords
    printed = envctl("env", "--format", "webarena-verified", "-i", INSTANCE, "--auth-dir", str(lab.auth), "--out", "-")
    assert json.loads(printed.stdout)["environments"]["__REDDIT__"]["credentials"]["password"] == "test1234"
    masked = envctl("env", "--format", "webarena-verified", "-i", INSTANCE, "--auth-dir", str(lab.auth), "--json")
    assert "test1234" not in masked.stdout and json.loads(masked.stdout)["config_file"].endswith("webarena-verified.json")
    for argv, word in ((["--format", "shell", "--out", str(out)], "--out"), (["--header-login"], "--header-login")):
        bad = envctl("env", *argv, "-i", INSTANCE)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and word in bad.stderr, bad.stderr


# -- webarena-verified's tasks and evaluators -----------------------------------------------------------

def test_smoke_runs_webarena_verified_tasks_with_its_evaluators_cli_and_api(lab: Lab, tmp_path: Path) -> None:
    from webarena_verified.api import WebArenaVerified

    from envctl.smoke import load_task_set

    report = tmp_path / "report"
    r = envctl("smoke", "--tasks", "webarena-verified", "-i", INSTANCE, "--report", str(report), "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["ok"], [(t["task_id"], t["reason"]) for t in out["tasks"] if t["status"] == "fail"]
    task_set = load_task_set("webarena-verified")
    runnable = {t.task_id for t in task_set if t.recipe is not None}
    gaps = {t.task_id for t in task_set if t.recipe is None}
    by_id = {t["task_id"]: t for t in out["tasks"]}
    assert len(runnable) >= 14 and all(by_id[i]["status"] == "pass" for i in runnable)
    # what mini data cannot answer is said, with why, never skipped silently
    assert gaps and all(by_id[i]["status"] == "gap" and "mini data cannot answer" in by_id[i]["reason"] for i in gaps)
    assert out["counts"]["gap"] == len(gaps) and out["counts"]["skip"] == 0
    (negative,) = [t for t in out["tasks"] if t["negative_control"]]
    assert negative["status"] == "pass" and negative["score"] == 0.0
    # every type of task and every site with a runnable task: navigate, mutate (then reset), retrieve
    kinds = {t.eval["task_type"] for t in task_set if t.task_id in runnable}
    assert kinds == {"navigate", "mutate", "retrieve"}
    assert {s for t in task_set if t.task_id in runnable for s in t.sites} == set(SITES)
    assert all("then reset" in by_id[t.task_id]["reason"] for t in task_set if t.eval["task_type"] == "mutate"
               and t.task_id in runnable)
    folder = report / "webarena-verified"
    har = (folder / "399" / "network.har").read_text()
    assert "test1234" not in har and "Password.123" not in har  # the login headers' values are masked
    # its CLI judges the same files the same way (it exits 0 whatever the scores: read its summary)
    ids = ",".join(sorted(runnable, key=int))
    p = subprocess.run([WAV_CLI, "eval-tasks", "--config", str(folder / "config.json"), "--output-dir", str(folder),
                        "--task-ids", ids], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    summary = json.loads(p.stdout[p.stdout.index("{\n"):])["summary"]["overall"]
    assert summary["total"] == len(runnable) and summary["success_count"] == len(runnable), summary
    for i in runnable:
        assert json.loads((folder / i / "eval_result.json").read_text())["status"] == "success", i
    # its Python API, with the config 'envctl env' exports: success on a task's own files, failure on another's
    cfg = tmp_path / "wav.json"
    assert envctl("env", "--format", "webarena-verified", "-i", INSTANCE, "--out", str(cfg)).returncode == 0
    api = WebArenaVerified(config=cfg)
    ok = api.evaluate_task(task_id=448, agent_response=folder / "448" / "agent_response.json",
                           network_trace=folder / "448" / "network.har")
    assert str(ok.status) in ("success", "EvalStatus.SUCCESS") and ok.score == 1.0, ok
    other = api.evaluate_task(task_id=156, agent_response=folder / "44" / "agent_response.json",
                              network_trace=folder / "44" / "network.har")
    assert other.score == 0.0 and "success" not in str(other.status).lower()


# -- resets: the headers file renewed; a refused header taken out ----------------------------------------

def _sql(site: str, sql: str) -> None:
    r = envctl("exec", site, "-i", INSTANCE, "--", "env", "PGPASSWORD=postmill", "psql", "-h", "localhost", "-U",
               "postmill", "-d", "postmill", "-c", sql)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_reset_renews_the_headers_and_a_refused_header_is_taken_out(lab: Lab) -> None:
    path = lab.auth / "extra_headers.json"
    forum = lab.base("reddit")
    # the agent changes the account's password: the header no longer logs in, and 'login --check' says so
    _sql("reddit", "UPDATE users SET password = password || '0' WHERE username = 'MarvelsGrantMan136'")
    assert _get(f"{forum}/forums/all", POSTMILL).status_code == 401
    check = envctl("login", "--check", "-i", INSTANCE, "--out", str(lab.auth), "--json")
    assert check.returncode == 1
    hdr = json.loads(check.stdout)["headers"]
    assert hdr["action"] == "invalid" and "X-Postmill-Auto-Login" in hdr["error"] and "test1234" not in check.stdout
    # a new login cannot make it valid: the header is taken out of the file (never left looking valid)
    again = envctl("login", "reddit", "-i", INSTANCE, "--out", str(lab.auth), "--json")
    assert again.returncode == 1
    assert json.loads(path.read_text()) == dict([CUSTOMER, ADMIN])
    # the reset restores the pristine account and renews the login files: the header is back and logs in
    before = path.stat().st_mtime_ns
    reset = envctl("reset", "reddit", "-i", INSTANCE, "--auth-dir", str(lab.auth), "--json")
    assert reset.returncode == 0, reset.stdout[-2000:] + reset.stderr[-2000:]
    assert path.stat().st_mtime_ns > before and json.loads(path.read_text()) == dict([CUSTOMER, ADMIN, POSTMILL])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "Delete" in _get(f"{forum}/user/MarvelsGrantMan136/account", POSTMILL).text


# -- down --all -------------------------------------------------------------------------------------------

def test_down_all(lab: Lab) -> None:
    other, offset = "wav9", 52900
    envctl("down", "-i", other, "--volumes")
    busy_ports_after([4399 + offset], 60)
    try:
        up = envctl("up", "homepage", "--flavor", "mini", "-i", other, "--port-offset", str(offset), "--no-login",
                    "--json")
        assert up.returncode == 0, up.stderr[-2000:]
        dry = envctl("down", "--all", "--dry-run", "--json")
        listed = json.loads(dry.stdout)
        assert dry.returncode == 0 and {INSTANCE, other} <= set(listed["instances"]) and listed["removed"] == []
        assert other in [i["instance"] for i in json.loads(envctl("instances", "--json").stdout)]  # nothing removed
        gone = envctl("down", "--all", "--match", "wav9*", "--volumes", "--json")
        result = json.loads(gone.stdout)
        assert gone.returncode == 0 and result["instances"] == [other] and result["failed"] == {}
        assert result["removed"][0]["instance"] == other and result["removed"][0]["removed"]
        names = [i["instance"] for i in json.loads(envctl("instances", "--json").stdout)]
        assert other not in names and INSTANCE in names
        assert "no instance matching 'wav9*'" in envctl("down", "--all", "--match", "wav9*").stdout
        for argv, word in ((["--all", "reddit"], "SITE"), (["--all", "-i", INSTANCE], "--instance"),
                           (["--match", "wav*"], "--all"), (["--all", "--match", "a/b"], "--match")):
            r = envctl("down", *argv)
            assert r.returncode == 2 and word in r.stderr and len(r.stderr.strip().splitlines()) == 1, (argv, r.stderr)
    finally:
        envctl("down", "-i", other, "--volumes")
        remove_instance_images(other)
