"""The local lifecycle end to end (issue 4): ``envctl up / down / status / health / env / logs / exec``.

Real engine, mini flavor, the CLI run as a subprocess; sites are reached only through the front
proxy's ports on 127.0.0.1. The checks on an ``up --all`` use the session's shared mini instance
(``mini_all`` in tests/conftest.py, offset 24000, here ``LC1``): this module runs last of its
users and only its repair tests write to it. ``lc2`` (offset 25000) is a second instance beside
it; ``lc3`` is used for refusals that must create nothing and ``lc4`` for a site whose probe never
passes.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

import pytest
import requests
import yaml

from childproc import signals_default
from conftest import MINI_ALL, MINI_ALL_OFFSET, MiniAll, busy_ports_after
from envctl.catalog import BUILTIN, Catalog, load_catalog

pytestmark = [pytest.mark.docker, pytest.mark.mini, pytest.mark.slow, pytest.mark.timeout(1500)]

LC1, LC1_OFFSET = MINI_ALL, MINI_ALL_OFFSET  # the shared instance: conftest.py brings it up and down
LC2, LC2_OFFSET = "lc2", 25000
LC3 = "lc3"  # refusals: nothing may ever exist for it
LC4 = "lc4"  # offset chosen at run time: other instances come and go on this engine
OURS = (LC2, LC3, LC4)  # ours alone (LC1 is the session's)
PHASES = ("create", "boot", "configure", "healthy")


# -- helpers ---------------------------------------------------------------------------------------

def envctl(*args: str, catalog: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "envctl.cli"]
    if catalog is not None:
        argv += ["--catalog", str(catalog)]
    return subprocess.run(argv + list(args), capture_output=True, text=True, timeout=timeout, env=_env())


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("ENVCTL_CATALOG", "ENVCTL_INSTANCE")}


def up_json(*args: str, catalog: Path | None = None) -> tuple[subprocess.CompletedProcess, dict[str, Any]]:
    # spares are not what these tests are about ('test_plan.py' covers the default): no copies appear later
    p = envctl("up", *args, "--json", "--no-login", "--spares", "0", catalog=catalog)
    try:
        data = json.loads(p.stdout)
    except ValueError:
        pytest.fail(f"'envctl up {' '.join(args)}' printed no JSON (exit {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return p, data


def docker_json(*argv: str) -> Any:
    out = subprocess.run(["docker", *argv], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def settled(instance: str, timeout: float = 300) -> None:
    """Wait until no background replenisher of ``instance`` runs: one started by an earlier test's reset
    on the shared instance removes the dirty copy it left, at its own (lower) priority, and would change
    the containers between a test's two readings."""
    from envctl.state.ready import worker_pids

    deadline = time.monotonic() + timeout
    while worker_pids(instance):
        assert time.monotonic() < deadline, f"replenishers of {instance} still running after {timeout:.0f}s"
        time.sleep(0.2)


def container_ids(instance: str) -> dict[str, str]:
    """name -> id of every container (running or not) labelled for ``instance``."""
    out = subprocess.run(["docker", "ps", "-a", "--no-trunc", "--filter", f"label=envctl.instance={instance}",
                          "--format", "{{.Names}} {{.ID}}"], capture_output=True, text=True, check=True).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def networks_of(instance: str) -> list[str]:
    by_label = subprocess.run(["docker", "network", "ls", "-q", "--filter", f"label=envctl.instance={instance}"],
                              capture_output=True, text=True, check=True).stdout.split()
    by_name = subprocess.run(["docker", "network", "ls", "--format", "{{.Name}}"],
                             capture_output=True, text=True, check=True).stdout.split()
    return by_label + [n for n in by_name if n == f"envctl-{instance}"]


def assert_nothing_left(instance: str) -> None:
    assert container_ids(instance) == {}, f"containers of {instance} survived: {container_ids(instance)}"
    assert networks_of(instance) == [], f"networks of {instance} survived: {networks_of(instance)}"


def teardown_instance(instance: str) -> None:
    from envctl.lab import Lab

    if container_ids(instance) or networks_of(instance):
        Lab(instance=instance).down()
    assert_nothing_left(instance)


def public_port(catalog: Catalog, site: str, service: str | None, offset: int) -> int:
    s = catalog.site(site)
    ports = s.services[service or s.entry].ports
    assert ports is not None
    return ports.public + offset


def check_probes(catalog: Catalog, site: str, offset: int) -> list[str]:
    """Run the catalog's HTTP probes for ``site`` ourselves (plain requests on 127.0.0.1); returns failures."""
    bad = []
    for p in catalog.site(site).health.probes:
        base = f"http://127.0.0.1:{public_port(catalog, site, p.service, offset)}"
        try:
            r = requests.request(p.method, base + p.path, json=p.json_body, timeout=20)
        except requests.RequestException as exc:
            bad.append(f"{site}/{p.name}: {exc}")
            continue
        if r.status_code not in p.expect_status:
            bad.append(f"{site}/{p.name}: HTTP {r.status_code}")
        if p.expect_text and p.expect_text not in r.text:
            bad.append(f"{site}/{p.name}: {p.expect_text!r} missing")
        if p.same_host and urlparse(r.url).netloc != urlparse(base).netloc:
            bad.append(f"{site}/{p.name}: ended on {r.url}")
    return bad


def wait_port_free(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return
        if time.monotonic() > deadline:
            pytest.fail(f"port {port} still answers after down")
        time.sleep(0.2)


def free_offset(bases: list[int], start: int = 26000) -> int:
    """The first offset from ``start`` (steps of 211) at which every ``base + offset`` is free on 127.0.0.1."""
    for offset in range(start, 65535 - max(bases), 211):
        free = True
        for base in bases:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", base + offset))
                except OSError:
                    free = False
                    break
        if free:
            return offset
    pytest.fail(f"no free port offset for {bases}")


def wait_ports_bindable(catalog: Catalog, offset: int, timeout: float = 90) -> None:
    """Wait until every public port of the instance can be bound on 127.0.0.1.

    The fixed offsets put some ports inside Linux's ephemeral range (32768-60999), where a client
    socket of some other process can hold one for a while; envctl rightly refuses such a port, so
    the fixture waits it out (with a deadline) instead of reporting a false failure.
    """
    busy = busy_ports_after([p + offset for p in ports_of(catalog)], timeout)
    if busy:
        held = subprocess.run(["ss", "-tanp"], capture_output=True, text=True).stdout
        pytest.fail(f"ports {busy} stayed busy for {timeout}s:\n"
                    + "\n".join(line for line in held.splitlines() if any(f":{b} " in line for b in busy)))


def ports_of(catalog: Catalog) -> list[int]:
    return [p.public for n in catalog.sites for svc in catalog.site(n).services_for("mini")
            if (p := catalog.site(n).services[svc].ports) is not None]


def catalog_copy(tmp: Path, edit: Any) -> Path:
    raw = yaml.safe_load(BUILTIN.read_text())
    edit(raw["sites"])
    path = tmp / "sites.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    load_catalog(path)  # still a valid catalog
    return path


# -- fixtures --------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def mini_images(docker_engine: None) -> Catalog:
    """Every mini image and the proxy image, built once (Docker's cache makes a warm build quick)."""
    from envctl.images.build import build_for_sites

    cat = load_catalog()
    build_for_sites(cat, cat.resolve(None), "mini")
    return cat


@pytest.fixture(scope="module")
def instances_cleanup(mini_images: Catalog) -> Iterator[None]:
    for inst in OURS:  # strays from an interrupted earlier run
        teardown_instance(inst)
    yield
    for inst in OURS:
        teardown_instance(inst)


@pytest.fixture(scope="module")
def lc1(mini_all: MiniAll, mini_images: Catalog, instances_cleanup: None) -> dict[str, Any]:
    """``envctl up --all --flavor mini --json`` for the shared instance: its JSON result, and the
    containers it has when this module starts."""
    assert mini_all.instance == LC1 and mini_all.offset == LC1_OFFSET
    data = dict(mini_all.up)
    settled(LC1)
    data["_ids"] = container_ids(LC1)
    return data


# -- up --all --------------------------------------------------------------------------------------

def test_up_all_every_site_healthy_through_the_proxy(lc1: dict[str, Any], mini_images: Catalog) -> None:
    cat = mini_images
    assert lc1["ok"] is True and lc1["instance"] == LC1 and lc1["flavor"] == "mini"
    sites = {s["site"]: s for s in lc1["sites"]}
    assert set(sites) == set(cat.sites)
    for name, s in sites.items():
        assert s["ok"] and s["action"] == "created", (name, s["action"], s["error"])
        assert set(PHASES) <= set(s["timings"]), (name, s["timings"])
        assert all(isinstance(v, float) and 0 <= v < 600 for v in s["timings"].values()), s["timings"]
        site = cat.site(name)
        assert s["url"] == f"http://127.0.0.1:{public_port(cat, name, None, LC1_OFFSET)}{site.url_path}"
        assert s["probes"] and all(p["ok"] for p in s["probes"]), s["probes"]
    # Each site answers its catalog probes when asked directly, through the proxy's 127.0.0.1 ports.
    bad = [b for name in cat.sites for b in check_probes(cat, name, LC1_OFFSET)]
    assert bad == []
    for name, s in sites.items():
        r = requests.get(s["url"], timeout=20)
        assert r.status_code == 200, (name, r.status_code)


def test_only_the_proxy_publishes_ports_on_loopback(lc1: dict[str, Any], mini_images: Catalog) -> None:
    cat = mini_images
    expected = {public_port(cat, n, svc, LC1_OFFSET) for n in cat.sites
                for svc in cat.site(n).services_for("mini") if cat.site(n).services[svc].ports}
    details = docker_json("inspect", *lc1["_ids"].values())
    proxies = [d for d in details if d["Config"]["Labels"].get("envctl.role") == "proxy"]
    assert [d["Name"].lstrip("/") for d in proxies] == [f"envctl-{LC1}-proxy"]
    for d in details:
        bindings = {k: v for k, v in (d["HostConfig"]["PortBindings"] or {}).items() if v}
        live = {k: v for k, v in (d["NetworkSettings"]["Ports"] or {}).items() if v}
        if d in proxies:
            published = {int(b["HostPort"]) for v in bindings.values() for b in v}
            assert published == expected
            assert {b["HostIp"] for v in bindings.values() for b in v} == {"127.0.0.1"}
            assert {b["HostIp"] for v in live.values() for b in v} == {"127.0.0.1"}
        else:
            assert bindings == {} and live == {}, f"backend {d['Name']} publishes {bindings or live}"
            assert list(d["NetworkSettings"]["Networks"]) == [f"envctl-{LC1}"]


# -- configure steps -------------------------------------------------------------------------------

def test_magento_base_url_is_the_public_url(lc1: dict[str, Any], mini_images: Catalog) -> None:
    for site in ("shopping", "shopping_admin"):
        public = f"http://127.0.0.1:{public_port(mini_images, site, None, LC1_OFFSET)}"
        p = envctl("exec", "--instance", LC1, site, "--", "mysql", "-u", "magentouser", "-pMyPassword", "magentodb",
                   "-N", "-e", "SELECT path, value FROM core_config_data WHERE path LIKE 'web/%/base_url'")
        assert p.returncode == 0, p.stderr
        rows = dict(line.split("\t") for line in p.stdout.strip().splitlines())
        assert rows == {"web/unsecure/base_url": public + "/", "web/secure/base_url": public + "/"}, (site, rows)
        path = "/admin" if site == "shopping_admin" else "/"
        r = requests.get(public + path, timeout=20)
        assert r.status_code == 200 and urlparse(r.url).netloc == urlparse(public).netloc, (site, r.url)
        assert all(urlparse(h.headers.get("Location", public)).netloc in ("", urlparse(public).netloc)
                   for h in r.history), [h.headers.get("Location") for h in r.history]
    # The same store under another host name is sent to the configured base URL: the check above means something.
    r = requests.get(f"http://127.0.0.1:{public_port(mini_images, 'shopping', None, LC1_OFFSET)}/",
                     headers={"Host": "stale.example:7770"}, allow_redirects=False, timeout=20)
    assert r.status_code in (301, 302) and r.headers["Location"].startswith(
        f"http://127.0.0.1:{public_port(mini_images, 'shopping', None, LC1_OFFSET)}/")


def test_gitlab_external_url_is_the_public_url(lc1: dict[str, Any], mini_images: Catalog) -> None:
    public = f"http://127.0.0.1:{public_port(mini_images, 'gitlab', None, LC1_OFFSET)}"
    p = envctl("exec", "--instance", LC1, "gitlab", "--", "grep", "^external_url", "/etc/gitlab/gitlab.rb")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines() == [f"external_url '{public}'"]
    r = requests.get(public + "/users/sign_in", timeout=20)
    assert r.status_code == 200 and "Sign in" in r.text and urlparse(r.url).netloc == urlparse(public).netloc


# -- idempotency -----------------------------------------------------------------------------------

def test_second_up_keeps_everything_and_creates_nothing(lc1: dict[str, Any]) -> None:
    p, data = up_json("--all", "--instance", LC1)
    assert p.returncode == 0, p.stderr[-3000:]
    assert {s["site"]: s["action"] for s in data["sites"]} == {s["site"]: "kept" for s in lc1["sites"]}
    assert container_ids(LC1) == lc1["_ids"]
    # Asking again with the same settings is fine; with other settings it is refused, not half-applied.
    p = envctl("up", "homepage", "--instance", LC1, "--port-offset", str(LC1_OFFSET + 1), "--no-login")
    assert p.returncode == 2 and f"port_offset={LC1_OFFSET}" in p.stderr, p.stderr
    assert container_ids(LC1) == lc1["_ids"]


# -- env -------------------------------------------------------------------------------------------

def _dotenv(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line.strip())


def _sourced(text: str, tmp_path: Path, names: list[str]) -> dict[str, str]:
    script = tmp_path / "env.sh"
    script.write_text(text)
    dump = "; ".join(f'printf "%s\\0%s\\0" {n} "${n}"' for n in names)
    out = subprocess.run(["bash", "-c", f'set -eu; . "$1"; {dump}', "bash", str(script)],
                         capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]}).stdout
    parts = out.split("\0")[:-1]
    return dict(zip(parts[::2], parts[1::2]))


def test_env_formats_round_trip(lc1: dict[str, Any], mini_images: Catalog, tmp_path: Path) -> None:
    from envctl.lab import Lab

    lab = Lab(instance=LC1)
    wa, vwa = lab.env("webarena"), lab.env("visualwebarena")
    port = lambda site: public_port(mini_images, site, None, LC1_OFFSET)  # noqa: E731
    assert wa == {
        "SHOPPING": f"http://127.0.0.1:{port('shopping')}",
        "SHOPPING_ADMIN": f"http://127.0.0.1:{port('shopping_admin')}/admin",
        "REDDIT": f"http://127.0.0.1:{port('reddit')}",
        "GITLAB": f"http://127.0.0.1:{port('gitlab')}",
        "WIKIPEDIA": f"http://127.0.0.1:{port('wikipedia')}/wikipedia_en_all_maxi_2022-05/A/User:The_other_Kiwix_guy/Landing",
        "MAP": f"http://127.0.0.1:{port('map')}",
        "HOMEPAGE": f"http://127.0.0.1:{port('homepage')}",
    }
    assert vwa["DATASET"] == "visualwebarena" and vwa["CLASSIFIEDS"] == f"http://127.0.0.1:{port('classifieds')}"
    assert vwa["CLASSIFIEDS_RESET_TOKEN"] == mini_images.site("classifieds").settings["reset_token"]
    assert vwa["WIKIPEDIA"] == f"http://127.0.0.1:{port('wikipedia')}"
    for values in (wa, vwa):
        assert not any(v.endswith("/") for v in values.values()), values
    r = requests.get(wa["WIKIPEDIA"], timeout=20)
    assert r.status_code == 200 and urlparse(r.url).netloc == f"127.0.0.1:{port('wikipedia')}"

    for bench, want in (("webarena", wa), ("visualwebarena", vwa)):
        shell = envctl("env", "--instance", LC1, "--format", "shell", "--benchmark", bench)
        assert shell.returncode == 0, shell.stderr
        assert _sourced(shell.stdout, tmp_path, list(want)) == want
        dot = envctl("env", "--instance", LC1, "--format", "dotenv", "--benchmark", bench)
        assert _dotenv(dot.stdout) == want

    js = json.loads(envctl("env", "--instance", LC1, "--format", "json").stdout)
    assert js["instance"] == LC1 and js["running"] is True
    assert js["webarena"] == wa and js["visualwebarena"] == vwa
    assert set(js["sites_up"]) == set(mini_images.sites)

    bg = _dotenv(envctl("env", "--instance", LC1, "--format", "browsergym").stdout.replace("export ", ""))
    bg = {k: v.strip("'") for k, v in bg.items()}
    assert {k: v for k, v in bg.items() if k.startswith("WA_") and k != "WA_FULL_RESET"} == {f"WA_{k}": v for k, v in wa.items()}
    assert {k: v for k, v in bg.items() if k.startswith("VWA_") and k != "VWA_FULL_RESET"} == {
        f"VWA_{k}": v for k, v in vwa.items() if k != "DATASET"}
    assert _sourced(envctl("env", "--instance", LC1, "--format", "browsergym").stdout, tmp_path, list(bg)) == bg

    al = json.loads(envctl("env", "--instance", LC1, "--format", "agentlab").stdout)
    assert isinstance(al, list)
    mine = [e for e in al if e["instance"] == LC1]
    assert len(mine) == 1
    assert {k: mine[0][k] for k in ("shopping", "shopping_admin", "reddit", "gitlab", "wikipedia", "map", "homepage")} == {
        "shopping": wa["SHOPPING"], "shopping_admin": wa["SHOPPING_ADMIN"], "reddit": wa["REDDIT"],
        "gitlab": wa["GITLAB"], "wikipedia": wa["WIKIPEDIA"], "map": wa["MAP"], "homepage": wa["HOMEPAGE"]}


# -- status, health, logs, exec ----------------------------------------------------------------------

def test_status_json(lc1: dict[str, Any], mini_images: Catalog) -> None:
    p = envctl("status", "--instance", LC1, "--json")
    assert p.returncode == 0, p.stderr
    st = json.loads(p.stdout)
    assert st["running"] is True and st["flavor"] == "mini" and st["port_offset"] == LC1_OFFSET
    assert st["bind"] == "127.0.0.1" and st["public_host"] == "127.0.0.1"
    rows = {r["site"]: r for r in st["sites"]}
    assert set(rows) == set(mini_images.sites)
    urls = {s["site"]: s["url"] for s in lc1["sites"]}
    for name, row in rows.items():
        site = mini_images.site(name)
        assert row["url"] == urls[name] and row["flavor"] == "mini" and row["healthy"] is True, row
        assert [p["name"] for p in row["probes"]] == [p.name for p in site.health.probes]
        assert all(p["ok"] and 0 < p["latency_ms"] < 20000 for p in row["probes"]), row["probes"]
        active = [c for c in row["containers"] if c["role"] == "active"]
        assert {c["service"] for c in active} == set(site.services_for("mini"))
        for c in active:
            assert c["image"] == site.services[c["service"]].flavors["mini"].image
            assert c["state"] == "running" and 0 < c["uptime_s"] < 3600
            assert c["name"] in container_ids(LC1)


def test_health_json(lc1: dict[str, Any], mini_images: Catalog) -> None:
    p = envctl("health", "--instance", LC1, "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(p.stdout)
    assert res["ok"] is True and set(res["sites"]) == set(mini_images.sites)


def test_logs_and_exec(lc1: dict[str, Any]) -> None:
    p = envctl("logs", "--instance", LC1, "homepage", "--tail", "50")
    assert p.returncode == 0 and "listening on :4399" in p.stdout, p.stdout + p.stderr
    p = envctl("exec", "--instance", LC1, "reddit", "--", "cat", "/etc/hostname")
    assert p.returncode == 0
    reddit = next(n for n in container_ids(LC1) if n.startswith(f"envctl-{LC1}-reddit-web-"))
    assert p.stdout.strip() == docker_json("inspect", reddit)[0]["Config"]["Hostname"]
    p = envctl("exec", "--instance", LC1, "map", "--service", "tile", "--", "sh", "-c", "echo on-$0; exit 3", "tile")
    assert p.returncode == 3 and "on-tile" in p.stdout
    p = envctl("exec", "--instance", LC1, "nosuchsite", "--", "true")
    assert p.returncode == 2 and "unknown site 'nosuchsite'" in p.stderr


def test_five_in_place_restores_in_a_row_on_a_whole_instance(lc1: dict[str, Any]) -> None:
    """Issue 38: on an instance of every site, every other in-place restore waited 10 s for the control service
    (a whole instance's 'show stat' is about HAProxy's 16 kB buffer, and an answer ending at its edge never saw
    the CLI close). The proxy now answers only what a hold asks for and says when HAProxy's CLI stops answering
    (an error, never half an answer), so five restores in a row each succeed without such a wait."""
    snap = envctl("snapshot", "create", "reddit", "lcfive", "--instance", LC1, "--json")
    assert snap.returncode == 0, snap.stderr[-2000:]
    try:
        for i in range(5):
            p = envctl("snapshot", "restore", "reddit", "lcfive", "--instance", LC1, "--json")
            assert p.returncode == 0, (i, p.stderr[-2000:])
            res = json.loads(p.stdout)
            assert res["method"] == "in place" and res["fingerprint"] == json.loads(snap.stdout)["fingerprint"], res
    finally:
        envctl("snapshot", "rm", "lcfive", "--instance", LC1)


# -- repair ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def repaired(lc1: dict[str, Any]) -> dict[str, Any]:
    """``docker rm -f`` reddit's active container, then ``up`` again (``--spares 0``: a spare a replenisher
    booted after an earlier test's reset on this shared instance is removed too, and not counted)."""
    from envctl.instance import Instance

    settled(LC1)
    before = container_ids(LC1)
    table = Instance.get(load_catalog(), LC1).routing.table()
    victim = f"envctl-{LC1}-reddit-web-{table.routes.active['reddit']}"
    assert victim in before, (victim, sorted(before))
    subprocess.run(["docker", "rm", "-f", victim], check=True, capture_output=True)
    p, data = up_json("--instance", LC1)
    return {"proc": p, "data": data, "before": before, "victim": victim, "after": container_ids(LC1)}


def test_up_repairs_a_removed_backend(repaired: dict[str, Any], mini_images: Catalog) -> None:
    p, data = repaired["proc"], repaired["data"]
    assert p.returncode == 0, p.stderr[-3000:]
    actions = {s["site"]: s["action"] for s in data["sites"]}
    assert {k: v for k, v in actions.items() if k != "reddit"} == {k: "kept" for k in actions if k != "reddit"}
    assert actions["reddit"] in ("repaired", "created")  # the exact word is checked below
    before, after = repaired["before"], repaired["after"]
    new = [n for n in after if n not in before]
    assert len(new) == 1 and new[0].startswith(f"envctl-{LC1}-reddit-web-") and repaired["victim"] not in after
    reddit = f"envctl-{LC1}-reddit-"
    assert {n: i for n, i in after.items() if not n.startswith(reddit)} == \
        {n: i for n, i in before.items() if not n.startswith(reddit)}
    assert check_probes(mini_images, "reddit", LC1_OFFSET) == []


def test_repair_is_reported_as_repaired(repaired: dict[str, Any]) -> None:
    actions = {s["site"]: s["action"] for s in repaired["data"]["sites"]}
    assert actions["reddit"] == "repaired"


# -- a second instance -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lc2(lc1: dict[str, Any], mini_images: Catalog) -> dict[str, Any]:
    wait_ports_bindable(mini_images, LC2_OFFSET)
    p, data = up_json("--all", "--flavor", "mini", "--instance", LC2, "--port-offset", str(LC2_OFFSET))
    assert p.returncode == 0, p.stderr[-4000:]
    return data


def test_second_instance_coexists(lc1: dict[str, Any], lc2: dict[str, Any], mini_images: Catalog) -> None:
    assert lc2["ok"] and all(s["action"] == "created" for s in lc2["sites"])
    for inst, offset in ((LC1, LC1_OFFSET), (LC2, LC2_OFFSET)):
        p = envctl("health", "--instance", inst, "--json")
        assert p.returncode == 0 and json.loads(p.stdout)["ok"] is True, (inst, p.stdout[-2000:])
        assert [b for n in mini_images.sites for b in check_probes(mini_images, n, offset)] == []
    # Each instance's homepage links to its own sites.
    for offset in (LC1_OFFSET, LC2_OFFSET):
        page = requests.get(f"http://127.0.0.1:{4399 + offset}/", timeout=20).text
        assert f"127.0.0.1:{9999 + offset}" in page
    listed = {i["instance"]: i for i in json.loads(envctl("instances", "--json").stdout)}
    for inst, offset in ((LC1, LC1_OFFSET), (LC2, LC2_OFFSET)):
        assert listed[inst]["port_offset"] == offset and listed[inst]["flavor"] == "mini"
        assert listed[inst]["state"] == "running" and set(listed[inst]["sites"]) == set(mini_images.sites)
        assert listed[inst]["webarena"]["HOMEPAGE"] == f"http://127.0.0.1:{4399 + offset}"
    assert not set(container_ids(LC1)) & set(container_ids(LC2))


def test_down_removes_only_that_instance(lc1: dict[str, Any], lc2: dict[str, Any], mini_images: Catalog) -> None:
    bystander = f"lc-bystander-{os.getpid()}"
    subprocess.run(["docker", "run", "-d", "--name", bystander, "debian:bookworm-slim", "sleep", "600"],
                   check=True, capture_output=True)
    try:
        lc1_before = container_ids(LC1)
        p = envctl("down", "--instance", LC2, "--json")
        assert p.returncode == 0, p.stderr
        removed = json.loads(p.stdout)["removed"]
        assert f"envctl-{LC2}-proxy" in removed and all(n.startswith(f"envctl-{LC2}-") for n in removed)
        assert_nothing_left(LC2)
        for port in (4399 + LC2_OFFSET, 9999 + LC2_OFFSET):
            wait_port_free(port)
        assert container_ids(LC1) == lc1_before
        state = docker_json("inspect", bystander)[0]["State"]
        assert state["Running"] is True
        assert [b for n in mini_images.sites for b in check_probes(mini_images, n, LC1_OFFSET)] == []
        assert LC2 not in {i["instance"] for i in json.loads(envctl("instances", "--json").stdout)}
        # down again is a no-op, not an error
        p = envctl("down", "--instance", LC2, "--json")
        assert p.returncode == 0 and json.loads(p.stdout)["removed"] in ([], [f"envctl-{LC2}-proxy"])
    finally:
        subprocess.run(["docker", "rm", "-f", bystander], capture_output=True)


def test_instances_lists_on_while_an_instance_is_downed_under_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in CI (lanes side by side): 'envctl instances' crashed with NoSuchContainer when another
    process downed an instance between the listing and the read of its proxy's status. Here a real
    proxy-labelled container is removed at exactly that moment (while its routing table is read)."""
    from envctl.lab import Lab

    name = f"lcgone{os.getpid()}"
    cid = subprocess.run(["docker", "run", "-d", "--name", f"envctl-{name}-proxy", "--label", f"envctl.instance={name}",
                          "--label", "envctl.role=proxy", "--label", "envctl.flavor=mini",
                          "debian:bookworm-slim", "sleep", "600"], check=True, capture_output=True, text=True).stdout.strip()
    real = Lab.sites_up
    removed: list[str] = []

    def downed_meanwhile(self: Lab) -> list[str]:
        if self.instance == name and not removed:
            subprocess.run(["docker", "rm", "-f", cid], check=True, capture_output=True)
            removed.append(cid)
            time.sleep(0.3)  # past python-on-whales' inspect cache: a late status read would inspect again
        return real(self)

    monkeypatch.setattr(Lab, "sites_up", downed_meanwhile)
    try:
        listed = {i.instance: i for i in Lab.instances(load_catalog(BUILTIN))}
        assert removed == [cid]
        # listed as it was when found (its status read with its labels), with no sites: never a crash
        assert listed[name].state in ("running", "unreadable") and listed[name].sites == []
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)


def test_a_copy_whose_container_was_removed_still_names_it_and_port_holder_skips_it() -> None:
    """Found in CI: a replenisher removing a copy that another process removed meanwhile crashed on
    NoSuchContainer (python-on-whales inspected again when its 0.2 s cache was stale), and so did 'up' naming
    a port's holder while another lane removed a container. A copy's members are now read once, with the
    listing: a removal afterwards changes nothing in hand."""
    from envctl.backends.docker import ENGINE as dk
    from envctl.backends.local import local_backend, port_holder

    name = f"lcgone-copy-{os.getpid()}"
    cid = subprocess.run(["docker", "run", "-d", "--name", name, "--label", "envctl.instance=lcgone",
                          "--label", "envctl.site=homepage", "--label", "envctl.slot=a", "--label", "envctl.service=web",
                          "--label", "envctl.ports=1", "debian:bookworm-slim", "sleep", "600"],
                         check=True, capture_output=True, text=True).stdout.strip()
    try:
        [copy] = local_backend().copies.of("lcgone").values()
        subprocess.run(["docker", "rm", "-f", cid], check=True, capture_output=True)
        time.sleep(0.3)  # past any inspect cache
        assert copy.names == [name] and copy.members["web"].id == cid  # as listed: no crash
        dk.remove(copy.names)  # already gone: a no-op
        assert dk.containers(instance="lcgone") == [] and dk.container(name) is None
        assert "lcgone" not in port_holder(dk, 1)
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)


def test_snapshot_list_goes_on_while_an_image_is_removed_under_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in CI: 'snapshot remove' (which lists first) crashed with NoSuchImage when another lane
    removed a labelled image between the listing and the read of its labels. Here a real labelled image
    is removed at exactly that moment."""
    from envctl.backends.base import InstanceSettings
    from envctl.backends.docker import ENGINE as dk
    from envctl.instance import Instance
    from envctl.state import snapshots

    inst = f"lcimg{os.getpid()}"
    tags = [f"envctl-test/lcimg:{inst}-{k}" for k in ("kept", "gone")]
    for tag in tags:
        subprocess.run(["docker", "build", "-q", "-t", tag, "--label", f"envctl.snapshot=s-{tag[-4:]}",
                        "--label", f"envctl.instance={inst}", "--label", "envctl.site=homepage", "-"],
                       input="FROM debian:bookworm-slim\n", check=True, capture_output=True, text=True)
    real = dk.docker.image.list
    removed: list[str] = []

    def removed_meanwhile(*args: object, **kwargs: object) -> list:
        found = real(*args, **kwargs)  # type: ignore[arg-type]
        if not removed and ("label", "envctl.snapshot") in list(kwargs.get("filters") or []):  # type: ignore[call-overload]
            subprocess.run(["docker", "image", "rm", "-f", tags[1]], check=True, capture_output=True)
            removed.append(tags[1])
        return found

    monkeypatch.setattr(dk.docker.image, "list", removed_meanwhile)
    try:
        listed = [s for s in snapshots.list_snapshots(Instance(load_catalog(), InstanceSettings(inst)))
                  if s.kind == "snapshot"]
        assert removed == [tags[1]]
        assert [s.image for s in listed] == [tags[0]] and listed[0].name == "s-kept"
    finally:
        subprocess.run(["docker", "image", "rm", "-f", *tags], capture_output=True)


# -- refusals: nothing created ---------------------------------------------------------------------

def test_port_conflict_is_refused_before_anything_is_created(instances_cleanup: None) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        offset = busy - 4399
        p = envctl("up", "homepage", "--flavor", "mini", "--instance", LC3, "--port-offset", str(offset), "--no-login")
    assert p.returncode == 1, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("error: ") and f"port {busy}" in line
    comm = Path(f"/proc/{os.getpid()}/comm").read_text().strip()  # "python" or "pytest", by how pytest was started
    assert f"pid {os.getpid()}" in line and f"'{comm}'" in line, line
    assert "--port-offset" in line
    assert_nothing_left(LC3)


def test_a_site_without_the_flavor_is_refused_before_anything_is_created(instances_cleanup: None) -> None:
    """The map has no slim flavor (webarena-verified's map is another topology): naming it with
    --flavor slim is refused in one line that names its flavors; nothing is created, not even the proxy."""
    p = envctl("up", "map", "--flavor", "slim", "--instance", LC3, "--no-login")
    assert p.returncode != 0, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "site 'map' has no flavor 'slim'" in lines[0] and "full, mini" in lines[0], lines[0]
    assert_nothing_left(LC3)
    shown = json.loads(envctl("sites", "show", "map", "--json").stdout)
    assert any("No slim flavor" in n for n in shown["notes"])


def test_port_held_by_a_client_socket_names_the_holder(instances_cleanup: None) -> None:
    with socket.socket() as server, socket.socket() as client:
        server.bind(("127.0.0.1", 0))
        server.listen()
        client.bind(("127.0.0.1", 0))  # the busy port is the client's own end, as with an ephemeral port
        client.connect(server.getsockname())
        busy = client.getsockname()[1]
        p = envctl("up", "homepage", "--flavor", "mini", "--instance", LC3, "--port-offset", str(busy - 4399),
                   "--no-login")
    assert p.returncode == 1 and f"port {busy}" in p.stderr, p.stderr
    assert_nothing_left(LC3)
    assert f"pid {os.getpid()}" in p.stderr, p.stderr


def test_missing_image_is_refused_before_anything_is_created(instances_cleanup: None, tmp_path: Path) -> None:
    def edit(sites: dict[str, Any]) -> None:
        sites["homepage"]["services"]["web"]["flavors"]["mini"]["image"] = "envctl-mini/nope:1"

    cat = catalog_copy(tmp_path, edit)
    offset = free_offset([4399, 9999])
    p = envctl("up", "homepage", "reddit", "--flavor", "mini", "--instance", LC3, "--port-offset", str(offset),
               "--no-login", catalog=cat)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "envctl-mini/nope:1" in p.stderr and "envctl images build --flavor mini" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert_nothing_left(LC3)


# -- a site that never becomes healthy -------------------------------------------------------------

def test_failing_probe_is_reported_with_probe_and_logs(mini_images: Catalog, instances_cleanup: None,
                                                       tmp_path: Path) -> None:
    marker = "envctl-text-that-never-appears"

    def edit(sites: dict[str, Any]) -> None:
        sites["homepage"]["health"] = {"timeout": 8, "probes": [{"name": "never", "path": "/", "expect_text": marker}]}

    cat = catalog_copy(tmp_path, edit)
    offset = free_offset([4399, 8888, 9999])
    t = time.monotonic()
    p = envctl("up", "homepage", "wikipedia", "reddit", "--flavor", "mini", "--instance", LC4,
               "--port-offset", str(offset), "--no-login", catalog=cat)
    took = time.monotonic() - t
    try:
        assert p.returncode == 1, p.stdout + p.stderr
        err = p.stderr
        assert "probe 'never'" in err and f"{marker!r} not found" in err and "after 8s" in err, err
        assert "body: " in err, err  # the last response itself, not just the verdict
        # the container's own last log lines are shown
        home = next(n for n in container_ids(LC4) if n.startswith(f"envctl-{LC4}-homepage-web-"))
        logs = subprocess.run(["docker", "logs", "--tail", "15", home], capture_output=True, text=True)
        last = [line for line in (logs.stdout + logs.stderr).splitlines() if line.strip()][-1]
        assert "last log lines" in err and last in err, err
        assert took < 180, f"up waited {took:.0f}s for an 8 s deadline"
        # the others in the same up are healthy and stay up
        assert check_probes(mini_images, "wikipedia", offset) == []
        assert check_probes(mini_images, "reddit", offset) == []
        st = json.loads(envctl("status", "--instance", LC4, "--json", catalog=cat).stdout)
        health = {r["site"]: r["healthy"] for r in st["sites"]}
        assert health == {"homepage": False, "wikipedia": True, "reddit": True}
        # with --json the failure is in the machine-readable result too
        p2, data = up_json("homepage", "--instance", LC4, catalog=cat)
        assert p2.returncode == 1 and data["ok"] is False
        bad = {s["site"]: s for s in data["sites"]}["homepage"]
        assert bad["action"] in ("failed", "repaired") and not bad["ok"] and "probe 'never'" in bad["error"]
    finally:
        teardown_instance(LC4)


# -- Ctrl-C ----------------------------------------------------------------------------------------

def test_ctrl_c_during_up_stops_cleanly_and_the_next_up_finishes(mini_images: Catalog, instances_cleanup: None) -> None:
    sites = ["homepage", "wikipedia", "reddit"]
    offset = free_offset([4399, 8888, 9999])
    proc = subprocess.Popen([sys.executable, "-m", "envctl.cli", "up", *sites, "--flavor", "mini", "--instance", LC4,
                             "--port-offset", str(offset), "--json", "--no-login", "--spares", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                            preexec_fn=signals_default)  # a backgrounded 'make test' hands down SIGINT ignored
    try:
        seen = []
        assert proc.stderr is not None
        for line in proc.stderr:  # progress events, one JSON object a line
            seen.append(line)
            if '"phase": "create"' in line:
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 130, "".join(seen) + err
        assert "interrupted" in err and "Traceback" not in err, err
        p, data = up_json(*sites, "--instance", LC4)
        assert p.returncode == 0 and data["ok"], p.stderr[-3000:]
        names = list(container_ids(LC4))
        for site in sites:  # exactly one copy of each site: nothing duplicated by the interrupted run
            assert len([n for n in names if n.startswith(f"envctl-{LC4}-{site}-web-")]) == 1, names
        assert [b for site in sites for b in check_probes(mini_images, site, offset)] == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        teardown_instance(LC4)


# -- last on lc1: it may leave lc1 without a proxy ---------------------------------------------------

def test_up_repairs_a_removed_proxy(lc1: dict[str, Any], mini_images: Catalog) -> None:
    subprocess.run(["docker", "rm", "-f", f"envctl-{LC1}-proxy"], check=True, capture_output=True)
    p, data = up_json("--instance", LC1)
    assert p.returncode == 0 and data["ok"] and data["flavor"] == "mini", p.stderr[-2000:]
    assert [b for n in mini_images.sites for b in check_probes(mini_images, n, LC1_OFFSET)] == []
