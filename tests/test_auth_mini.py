"""Login state against the real mini sites in a real headless Chromium.

The session's shared mini instance (``mini_all`` in tests/conftest.py: every site up, the five login
sites among them); every file upstream uses is made into this module's own auth directory, checked,
broken (container recreated, user signed out) and renewed. It breaks sessions of the shared instance,
so it runs last of that instance's users (conftest's SHARED_USERS).
"""
from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest

from envctl.auth import LoginFailed, check, login, login_sites
from envctl.auth.run import Target
from envctl.catalog import load_catalog
from envctl.lab import Lab
from conftest import MiniAll, browser_probe, catalog_copy

pytestmark = [pytest.mark.docker, pytest.mark.browser, pytest.mark.mini, pytest.mark.slow, pytest.mark.timeout(900)]

SITES = ["shopping", "shopping_admin", "reddit", "gitlab", "classifieds"]
FILES = {"shopping_state.json", "shopping_admin_state.json", "reddit_state.json", "gitlab_state.json",
         "classifieds_state.json", "gitlab.shopping_state.json", "gitlab.shopping_admin_state.json",
         "gitlab.reddit_state.json", "shopping.shopping_admin_state.json", "classifieds.shopping_state.json",
         "classifieds.reddit_state.json"}
PASSWORDS = ["Password.123", "admin1234", "test1234", "hello1234"]


@pytest.fixture(scope="module")
def lab(mini_all: MiniAll, tmp_path_factory):
    lab = Lab(instance=mini_all.instance, auth_dir=tmp_path_factory.mktemp("auth"))
    assert set(SITES) <= set(lab.sites_up())
    return lab


@pytest.fixture(scope="module")
def made(lab):
    """One full login run: every file touching the five sites."""
    report = login(Target.of_lab(lab))
    report.saved = {f.name: json.loads(Path(f.path).read_text()) for f in report.files if f.ok}  # type: ignore[attr-defined]
    return report


def test_every_upstream_file_is_written_valid_and_private(lab, made):
    assert made.ok, made.to_dict()
    assert {f.name for f in made.files} == FILES
    assert {f.action for f in made.files} == {"written"}
    auth = Path(lab.auth_dir)
    assert {p.name for p in auth.iterdir()} == FILES | {"extra_headers.json"}  # no temporary files left; the mini flavor logs in by header too
    for name in FILES:
        assert stat.S_IMODE((auth / name).stat().st_mode) == 0o600, name
        assert json.loads((auth / name).read_text())["cookies"], name
    out = json.dumps(made.to_dict())
    assert not any(pw in out for pw in PASSWORDS)


def test_each_file_passes_the_probe_and_no_state_is_sent_to_login(lab, made):
    target = Target.of_lab(lab)
    for f in made.files:
        assert browser_probe(target, f.sites, Path(f.path)) == [], f.name
    for site in SITES:
        problems = browser_probe(target, [site], None)
        assert len(problems) == 1 and ("login" in problems[0] or "sign_in" in problems[0]
                                       or "not on" in problems[0]), problems


def test_harness_with_only_files_and_env_is_logged_in(lab, made):
    """What a harness does: env vars for URLs, storage_state files for cookies (upstream's probe URLs)."""
    from playwright.sync_api import sync_playwright

    from envctl.auth.browser import launch_kwargs

    wa, vwa = lab.env("webarena"), lab.env("visualwebarena")
    pages = {
        "gitlab": (f"{wa['GITLAB']}/-/profile", "byteblaze"),
        "shopping": (f"{wa['SHOPPING']}/wishlist/", "Wish List"),
        "shopping_admin": (f"{wa['SHOPPING_ADMIN']}/dashboard", "Dashboard"),
        "reddit": (f"{wa['REDDIT']}/user/MarvelsGrantMan136/account", "Delete"),
        "classifieds": (f"{vwa['CLASSIFIEDS']}/index.php?page=user&action=items", "My listings"),
    }
    auth = Path(lab.auth_dir)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(**launch_kwargs())
        for name in sorted(FILES):
            ctx = browser.new_context(storage_state=str(auth / name))
            page = ctx.new_page()
            for site in name.rsplit("_", 1)[0].split("."):
                url, text = pages[site]
                page.goto(url)
                assert page.url == url, (name, site, page.url)
                assert text in page.content(), (name, site)
            ctx.close()
        browser.close()


def test_recreated_container_invalidates_then_login_renews(lab, made):
    target = Target.of_lab(lab)
    subprocess.run(["docker", "rm", "-f", lab.container("reddit")], check=True, capture_output=True)
    # down: say so, leave no file that looks valid
    down = login(target, ["reddit"])
    bad = {f.name: f for f in down.failures()}
    assert set(bad) == {"reddit_state.json", "gitlab.reddit_state.json", "classifieds.reddit_state.json"}
    assert all(f.kind == "down" and "reddit is down or unhealthy" in f.error for f in bad.values()), bad
    assert not any((Path(lab.auth_dir) / n).exists() for n in bad)
    # write the old (pre-recreate) states back, bring reddit back: the sessions are gone server-side
    for f in made.files:
        if "reddit" in f.sites:
            Path(f.path).write_text(json.dumps(made.saved[f.name]))
    assert lab.up(["reddit"]).ok
    report = check(target)
    invalid = {f.name for f in report.files if not f.ok}
    assert invalid == {"reddit_state.json", "gitlab.reddit_state.json", "classifieds.reddit_state.json"}
    assert all(f.action == "invalid" for f in report.files if not f.ok)
    paths = login_sites(lab, ["reddit"])
    assert set(paths) == invalid
    assert check(target).ok


def test_sign_out_invalidates_then_max_age_renews_only_broken(lab, made):
    from playwright.sync_api import sync_playwright

    from envctl.auth.browser import launch_kwargs

    target = Target.of_lab(lab)
    gitlab = lab.env("webarena")["GITLAB"]
    with sync_playwright() as pw:  # the agent clicks "Sign out" with the shared state
        browser = pw.chromium.launch(**launch_kwargs())
        page = browser.new_context(storage_state=str(Path(lab.auth_dir) / "gitlab_state.json")).new_page()
        page.goto(f"{gitlab}/users/sign_out")
        browser.close()
    report = check(target, ["gitlab"])
    assert {f.name for f in report.files if not f.ok} == {"gitlab_state.json"}
    renewed = login(target, ["gitlab"], max_age=3600)
    actions = {f.name: f.action for f in renewed.files}
    assert actions["gitlab_state.json"] == "written"
    assert {a for n, a in actions.items() if n != "gitlab_state.json"} == {"kept"}
    assert renewed.ok and check(target, ["gitlab"]).ok


def test_wrong_password_reports_the_sites_message(lab, tmp_path):
    def edit(sites):
        sites["classifieds"]["accounts"][0]["password"] = "Wrong.Pass.987"
        sites["reddit"]["accounts"][0]["password"] = "Wrong.Pass.987"

    bad = Lab(catalog=load_catalog(catalog_copy(tmp_path, edit)), instance=lab.instance, auth_dir=tmp_path / "auth")
    report = login(Target.of_lab(bad), ["classifieds", "reddit"])
    by = {f.name: f for f in report.files}
    assert by["classifieds_state.json"].kind == "credentials"
    assert "The password is incorrect" in by["classifieds_state.json"].error
    assert "Invalid credentials." in by["reddit_state.json"].error
    assert not any(Path(f.path).exists() for f in report.files)
    assert "Wrong.Pass.987" not in json.dumps(report.to_dict())
    with pytest.raises(LoginFailed, match="The password is incorrect") as exc:
        login_sites(bad, ["classifieds"])
    assert "Wrong.Pass.987" not in str(exc.value)


def test_changed_login_page_names_site_url_and_field(lab, tmp_path):
    def edit(sites):
        sites["gitlab"]["login"]["password"] = {"test_id": "password-input"}

    changed = Lab(catalog=load_catalog(catalog_copy(tmp_path, edit)), instance=lab.instance, auth_dir=tmp_path / "a")
    report = login(Target.of_lab(changed), ["gitlab"], pairs=False)
    (f,) = report.files
    assert f.kind == "page-changed"
    assert "gitlab" in f.error and "/users/sign_in" in f.error and "password field (test id 'password-input')" in f.error
    assert not Path(f.path).exists()


def test_site_not_listening_is_reported_down(lab, tmp_path):
    from dataclasses import replace

    target = Target.of_lab(lab, tmp_path)
    nowhere = replace(target, deployment=replace(target.deployment, port_offset=22900), partners=())
    report = login(nowhere, ["classifieds"])
    (f,) = report.files
    assert f.kind == "down" and "classifieds is down" in f.error and not Path(f.path).exists()
