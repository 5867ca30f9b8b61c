"""The bundled ``mini`` task set against the real mini-flavor images, one site at a time.

Each site runs in throwaway containers published on 127.0.0.1; login state is recorded by the
reference agent itself (a login recipe, then Playwright's storage_state), and the reset callback
does what the site's reset tier does (recreate the container, or the classifieds token endpoint).
Every task of the site must pass, state-changing ones including the pristine check, the reset and
the re-check; the run's negative control must fail its wrong reference.
"""
from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
import requests

from conftest import CHROMIUM, CHROMIUM_ARGS, Containers, wait_http
from envctl.smoke import load_task_set, run_smoke
from envctl.smoke.agent import ReferenceAgent
from envctl.smoke.report import format_table

pytestmark = [pytest.mark.docker, pytest.mark.mini, pytest.mark.browser]


@dataclass
class MiniSite:
    env: dict[str, str]
    reset: Callable[[list[str]], None]
    logins: dict[str, tuple[str, list]] = field(default_factory=dict)  # state file -> (login URL, recipe)


def record_logins(site: MiniSite, auth_dir: Path) -> None:
    """Log in with the reference agent and save storage_state files, in a thread of its own.

    It is also called from the reset callback, i.e. from a runner thread that already drives its
    own Playwright; Playwright's sync API allows one instance per thread, hence the fresh thread.
    """
    errors: list[BaseException] = []

    def work() -> None:
        from playwright.sync_api import sync_playwright

        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
                for fname, (url, recipe) in site.logins.items():
                    ctx = browser.new_context()
                    agent = ReferenceAgent(screenshots=False)
                    traj, _ = agent.run("login", recipe, agent.open_tabs(ctx, [url]))
                    assert traj.ok, traj.error
                    ctx.storage_state(path=str(auth_dir / fname))
                    ctx.close()
                browser.close()
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    if errors:
        raise errors[0]


def run_site(site_name: str | list[str], site: MiniSite, tmp_path: Path) -> None:
    auth = tmp_path / ".auth"
    auth.mkdir()
    record_logins(site, auth)
    tasks = load_task_set("mini", sites=[site_name] if isinstance(site_name, str) else site_name)
    assert tasks, f"no mini tasks for {site_name}"
    resets: list[list[str]] = []

    def reset(sites: list[str]) -> None:
        resets.append(sites)
        site.reset(sites)
        record_logins(site, auth)  # a reset drops sessions; envctl re-seeds logins likewise

    t0 = time.monotonic()
    result = run_smoke(tasks, env=site.env, auth_dir=auth, reset=reset, browser_path=CHROMIUM,
                       report_dir=tmp_path / "report", task_set="mini")
    print(f"\n{site_name}: {time.monotonic() - t0:.1f}s\n{format_table(result)}")
    bad = [(t.task_id, t.status, t.reason) for t in result.tasks if t.status != "pass"]
    assert not bad, bad
    assert result.ok and any(t.negative_control for t in result.tasks)
    mutating = [t for t in tasks if t.recheck_after_reset]
    assert len(resets) == len(mutating) + sum(t.require_reset for t in tasks)
    for t in result.tasks:
        if t.task_id in {m.task_id for m in mutating}:
            assert [c["name"] for c in t.checks][0] == "before" and t.checks[-1]["name"] == "after_reset"
    assert json.loads((tmp_path / "report" / "report.json").read_text())["ok"] is True


def _recreate(c: Containers, name: str, argv: list[str], ready: Callable[[], None]) -> None:
    subprocess.run(["docker", "rm", "-f", "-v", name], check=True, capture_output=True)
    subprocess.run(argv, check=True, capture_output=True)
    ready()


def test_mini_reddit(mini_image, containers: Containers, tmp_path: Path) -> None:
    port, image = 18210, mini_image("postmill")
    name = f"envctl-test-{uuid.uuid4().hex[:8]}"
    base = f"http://127.0.0.1:{port}"
    argv = ["docker", "run", "-d", "--name", name, "--label", "envctl.test", "-p", f"127.0.0.1:{port}:80", image]
    ready = lambda: wait_http(base + "/forums", timeout=60, ok=lambda r: r.status_code == 200)  # noqa: E731
    subprocess.run(argv, check=True, capture_output=True)
    containers.names.append(name)
    ready()
    site = MiniSite(env={"REDDIT": base}, reset=lambda sites: _recreate(containers, name, argv, ready), logins={
        "reddit_state.json": (base + "/login", [{"do": "fill", "label": "Username", "value": "MarvelsGrantMan136"},
                                                {"do": "fill", "label": "Password", "value": "test1234"},
                                                {"do": "click", "role": "button", "name": "Log in"}, "stop []"])})
    run_site("reddit", site, tmp_path)


def test_mini_shopping_and_admin(mini_image, containers: Containers, tmp_path: Path) -> None:
    """One Magento container serves storefront and /admin in the mini flavor (as WA's two share a codebase)."""
    port, image = 18277, mini_image("magento")
    name = f"envctl-test-{uuid.uuid4().hex[:8]}"
    base = f"http://127.0.0.1:{port}"
    argv = ["docker", "run", "-d", "--name", name, "--label", "envctl.test", "-p", f"127.0.0.1:{port}:80", image]
    mysql = ["mysql", "-u", "magentouser", "-pMyPassword", "magentodb", "-e"]

    def ready() -> None:  # the catalog's configure steps: base URLs, cache flush
        deadline = time.monotonic() + 90
        while containers.exec(name, *mysql, "SELECT 1", check=False).returncode != 0:
            assert time.monotonic() < deadline, containers.logs(name)
            time.sleep(0.5)
        containers.exec(name, "/var/www/magento2/bin/magento", "setup:store-config:set", f"--base-url={base}")
        containers.exec(name, *mysql, f'UPDATE core_config_data SET value="{base}/" WHERE path = "web/secure/base_url";')
        containers.exec(name, "/var/www/magento2/bin/magento", "cache:flush")
        containers.exec(name, "php", "/var/www/magento2/bin/magento", "config:set", "admin/security/password_is_forced", "0")
        wait_http(base + "/", timeout=60, ok=lambda r: r.status_code == 200, logs=lambda: containers.logs(name))

    subprocess.run(argv, check=True, capture_output=True)
    containers.names.append(name)
    ready()
    site = MiniSite(env={"SHOPPING": base, "SHOPPING_ADMIN": base + "/admin"},
                    reset=lambda sites: _recreate(containers, name, argv, ready), logins={
        "shopping_state.json": (base + "/customer/account/login/", [
            {"do": "fill", "label": "Email", "value": "emma.lopez@gmail.com"},
            {"do": "fill", "label": "Password", "value": "Password.123", "exact": True},
            {"do": "click", "role": "button", "name": "Sign In"}, "stop []"]),
        "shopping_admin_state.json": (base + "/admin", [
            {"do": "fill", "placeholder": "user name", "value": "admin"},
            {"do": "fill", "placeholder": "password", "value": "admin1234"},
            {"do": "click", "role": "button", "name": "Sign in"}, "stop []"])})
    run_site(["shopping", "shopping_admin"], site, tmp_path)


def test_mini_gitlab(mini_image, containers: Containers, tmp_path: Path) -> None:
    port, image = 18223, mini_image("gitlab")
    name = f"envctl-test-{uuid.uuid4().hex[:8]}"
    base = f"http://127.0.0.1:{port}"
    argv = ["docker", "run", "-d", "--name", name, "--label", "envctl.test", "-p", f"127.0.0.1:{port}:{port}", image,
            "/opt/gitlab/embedded/bin/runsvdir-start"]

    def ready() -> None:  # the omnibus configure step: external_url, then reconfigure
        containers.exec(name, "sed", "-i", f"s|^external_url.*|external_url '{base}'|", "/etc/gitlab/gitlab.rb")
        assert "gitlab Reconfigured!" in containers.exec(name, "gitlab-ctl", "reconfigure").stdout
        wait_http(base + "/-/readiness", timeout=60, ok=lambda r: r.status_code == 200)

    subprocess.run(argv, check=True, capture_output=True)
    containers.names.append(name)
    ready()
    site = MiniSite(env={"GITLAB": base}, reset=lambda sites: _recreate(containers, name, argv, ready), logins={
        "gitlab_state.json": (base + "/users/sign_in", [{"do": "fill", "test_id": "username-field", "value": "byteblaze"},
                                                        {"do": "fill", "test_id": "password-field", "value": "hello1234"},
                                                        {"do": "click", "test_id": "sign-in-button"}, "stop []"])})
    run_site("gitlab", site, tmp_path)


def test_mini_classifieds(mini_image, containers: Containers, tmp_path: Path) -> None:
    port = 18280
    db_image, web_image = mini_image("classifieds-db"), mini_image("classifieds")
    net = containers.network()
    db = containers.run(db_image, network=net, name=f"envctl-test-clsdb-{uuid.uuid4().hex[:6]}")
    base = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 120
    while True:  # the web container needs the DB; poll it through the web app's own page
        web = None
        if containers.exec(db, "sh", "-c", "mysqladmin ping -uroot -ppassword --silent || mariadb-admin ping "
                           "-uroot -ppassword --silent", check=False).returncode == 0:
            break
        assert time.monotonic() < deadline, containers.logs(db)
        time.sleep(0.5)
    web = containers.run(web_image, network=net, ports={9980: port}, env={"CLASSIFIEDS": base, "DB_HOST": db})
    wait_http(base + "index.php", timeout=90, ok=lambda r: r.status_code == 200, logs=lambda: containers.logs(web))

    def reset(sites: list[str]) -> None:  # the app-endpoint tier, as VWA's harness calls it
        r = requests.post(base + "index.php?page=reset", data={"token": "4b61655535e7ed388f0d40a93600254c"}, timeout=60)
        assert r.status_code == 200, r.text[:300]

    site = MiniSite(env={"CLASSIFIEDS": base}, reset=reset, logins={
        "classifieds_state.json": (base + "index.php?page=login", [
            {"do": "fill", "label": "E-mail", "value": "blake.sullivan@gmail.com"},
            {"do": "fill", "label": "Password", "value": "Password.123", "exact": True},
            {"do": "click", "role": "button", "name": "Log in"}, "stop []"])})
    run_site("classifieds", site, tmp_path)


def test_mini_map(mini_image, containers: Containers, tmp_path: Path) -> None:
    backend, web_image = mini_image("map-backend"), mini_image("map-web")
    net = containers.network()
    containers.run(backend, network=net, aliases=["nominatim"], command=["nominatim"])
    containers.run(backend, network=net, aliases=["tile"], command=["tile"])
    env = {}
    for v in ("car", "bike", "foot"):
        containers.run(backend, network=net, aliases=[f"osrm-{v}"], command=["osrm", v])
        env[f"OSRM_{v.upper()}_INTERNAL_URL"] = f"http://osrm-{v}:5000"
    port = 18230
    web = containers.run(web_image, ports={3000: port}, env=env, network=net)
    # geocoding is server-side, through the URL the catalog's configure step writes
    containers.exec(web, "sed", "-i", 's#^nominatim_url:.*#nominatim_url: "http://nominatim:8080/"#',
                    "/app/config/settings.yml")
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/search?query=Pittsburgh", timeout=60, logs=lambda: containers.logs(web),
              ok=lambda r: r.status_code == 200 and "search_results_entry" in r.text)
    run_site("map", MiniSite(env={"MAP": base}, reset=lambda sites: None), tmp_path)


def test_mini_wikipedia(mini_image, containers: Containers, tmp_path: Path) -> None:
    port = 18288
    name = containers.run(mini_image("kiwix"), ports={80: port})
    landing = f"http://127.0.0.1:{port}/wikipedia_en_all_maxi_2022-05/A/User:The_other_Kiwix_guy/Landing"
    wait_http(landing, timeout=60, ok=lambda r: r.status_code == 200, logs=lambda: containers.logs(name))
    run_site("wikipedia", MiniSite(env={"WIKIPEDIA": landing}, reset=lambda sites: None), tmp_path)


def test_mini_homepage(mini_image, containers: Containers, tmp_path: Path) -> None:
    port = 18299
    name = containers.run(mini_image("homepage"), ports={4399: port})
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/", timeout=60, ok=lambda r: r.status_code == 200, logs=lambda: containers.logs(name))
    run_site("homepage", MiniSite(env={"HOMEPAGE": base}, reset=lambda sites: None), tmp_path)
