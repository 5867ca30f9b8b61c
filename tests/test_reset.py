"""Reset tiers, fingerprints, spares, snapshots and the reset server, on the mini flavor with a real engine."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
import requests

from envctl.catalog import load_catalog
from envctl.errors import EnvctlError
from envctl.images.build import build_for_sites
from envctl.lab import Lab
from envctl.backends.docker import ENGINE as dk
from envctl.backends.base import member_name
from envctl.routing import proxy
from envctl.routing.table import RoutingTable

pytestmark = [pytest.mark.docker, pytest.mark.mini, pytest.mark.slow]
INSTANCE, OFFSET = "rt", 12000  # every port below the ephemeral range (32768+)
SITES = ["reddit", "gitlab", "classifieds", "wikipedia"]
GITLAB_TOKEN = "glpat-envctlMiniByteblaze1"


@pytest.fixture(scope="module")
def lab(docker_engine, tmp_path_factory):
    cat = load_catalog()
    build_for_sites(cat, SITES, "mini")
    lab = Lab(cat, instance=INSTANCE, auth_dir=tmp_path_factory.mktemp("auth"))
    lab.down()
    res = lab.up(SITES, flavor="mini", port_offset=OFFSET, login=False, spares=0)  # tests ask for spares
    assert res.ok, [s.error for s in res.sites if not s.ok]
    yield lab
    lab.down()
    for c in dk.containers(instance=INSTANCE):  # nothing may survive
        dk.remove([c.name])


def url(lab: Lab, site: str) -> str:
    return lab.settings().deployment.url(lab.catalog.site(site))


def post_on_reddit(lab: Lab, title: str, headers: dict[str, str] | None = None) -> None:
    s = requests.Session()
    s.headers.update(headers or {})
    base = url(lab, "reddit")
    r = s.post(f"{base}/login_check", data={"_username": "MarvelsGrantMan136", "_password": "test1234"})
    assert r.ok
    r = s.post(f"{base}/submit", data={"submission[title]": title, "submission[forum]": "books", "submission[url]": "",
                                        "submission[body]": "written by a test"})
    assert r.ok and title in r.text


def open_gitlab_issue(lab: Lab, title: str) -> None:
    base = url(lab, "gitlab")
    projects = requests.get(f"{base}/api/v4/projects", headers={"PRIVATE-TOKEN": GITLAB_TOKEN}).json()
    pid = projects[0]["id"]
    r = requests.post(f"{base}/api/v4/projects/{pid}/issues", headers={"PRIVATE-TOKEN": GITLAB_TOKEN},
                      data={"title": title})
    assert r.status_code in (200, 201), r.text


def state(lab: Lab) -> RoutingTable:
    st = lab.running().front.read()
    assert st is not None
    return st


def assert_consistent(lab: Lab, site: str) -> None:
    """One active copy, routed; every listed spare running and pristine; nothing else running."""
    st = state(lab)
    copies = lab.running().copies.of(site)
    active = st.routes.active[site]
    assert (site, active) in copies and copies[(site, active)].running()
    for slot in st.ready.spares(site):
        assert (site, slot) in copies and copies[(site, slot)].running()
    assert lab.verify(site).ok


def test_verify_reports_drift_and_spare_swap_restores(lab):
    assert lab.verify("reddit").ok
    assert lab.replenish("reddit", 1) or state(lab).ready.spares("reddit")
    before_url = url(lab, "reddit")
    post_on_reddit(lab, f"drift {uuid.uuid4().hex[:6]}")
    v = lab.verify("reddit")
    assert not v.ok and any("submissions" in line for line in v.differences), v
    [r] = lab.reset(["reddit"], refill=False)
    assert r.ok and r.tier == "spare" and r.escalations == [], r
    assert set(r.phases) >= {"swap", "verify"}
    assert url(lab, "reddit") == before_url
    assert lab.verify("reddit").ok
    assert_consistent(lab, "reddit")


def test_tampered_spare_escalates_to_the_inplace_tier(lab):
    lab.replenish("reddit", 1)
    spare = state(lab).ready.spares("reddit")[0]
    name = member_name(INSTANCE, "reddit", "web", spare)
    # an agent that reached the spare: write to it through the proxy, addressing that copy
    post_on_reddit(lab, "tampered spare", headers={proxy.BACKEND_HEADER: f"{name}:80"})
    assert lab.verify("reddit").ok  # the active copy is untouched
    [r] = lab.reset(["reddit"], refill=False)
    # the tampered copy is routed, fails its fingerprint, and the next tier restores its database in place
    assert r.ok and r.tier == "inplace", r
    assert r.escalations and r.escalations[0].startswith("spare: fingerprint differs"), r.escalations
    assert lab.verify("reddit").ok
    assert_consistent(lab, "reddit")


def test_a_multi_site_reset_installs_the_spares_files_and_composes_their_pair_file(lab):
    """reddit and gitlab reset together, each by its spare: each spare's own login file (made when it was listed)
    moves into place, and the file pairing them is composed from those two, with no login in the reset; every
    file logs in to the copies routed now (the upstream expiry probe, over HTTP)."""
    from pathlib import Path

    from envctl.state import logins as login_state

    for site in ("reddit", "gitlab"):
        lab.replenish(site, 1)
    post_on_reddit(lab, f"pair {uuid.uuid4().hex[:6]}")
    open_gitlab_issue(lab, f"pair {uuid.uuid4().hex[:6]}")
    results = lab.reset(["reddit", "gitlab"], refill=False)
    assert [(r.site, r.ok, r.tier, r.login) for r in results] == [("reddit", True, "spare", "staged"),
                                                                   ("gitlab", True, "spare", "staged")], results
    inst = lab.running()
    for name in ("reddit_state.json", "gitlab_state.json", "gitlab.reddit_state.json"):
        path = Path(lab.auth_dir) / name
        assert path.is_file() and path.stat().st_mode & 0o777 == 0o600, name
        assert login_state.file_problem(inst, path) == "", name
    for site in ("reddit", "gitlab"):
        assert_consistent(lab, site)


def test_spares_queue_for_the_machines_boot_slots(lab):
    """Spares are background work: at most BOOT_SLOTS of them boot at once on the machine (every
    instance's), so many resets ending together do not starve the resets in progress. While every slot is
    held, a replenisher boots nothing and says it waits; once a slot frees it boots its spare."""
    from envctl.locks import locked
    from envctl.state.ready import BOOT_SLOTS

    lab.replenish("reddit", 0)
    before = {c.name for c in dk.containers(instance=INSTANCE, site="reddit")}
    notes: list[tuple[str, str]] = []
    booted: list[str] = []
    held = [locked(f"spare-boot.{i}") for i in range(BOOT_SLOTS)]
    for h in held:
        h.__enter__()
    t = threading.Thread(target=lambda: booted.extend(
        lab.replenish("reddit", 1, progress=lambda s, p, d: notes.append((p, d)))))
    try:
        t.start()
        deadline = time.monotonic() + 20
        while not any(p == "wait" and "boot slots" in d for p, d in notes) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert any(p == "wait" and f"{BOOT_SLOTS} boot slots" in d for p, d in notes), notes
        time.sleep(1.0)
        assert {c.name for c in dk.containers(instance=INSTANCE, site="reddit")} == before  # nothing booted
        assert not state(lab).ready.spares("reddit")
    finally:
        held[0].__exit__(None, None, None)  # one slot frees
        t.join(180)
        for h in held[1:]:
            h.__exit__(None, None, None)
    assert not t.is_alive() and len(booted) == 1 and state(lab).ready.spares("reddit") == booted, (booted, notes)
    lab.replenish("reddit", 0)


def test_spare_less_inplace_tier_restores_the_database_inside_the_running_copy(lab):
    """No spare ready (a host with no memory for one): reddit's database is copied back from the template
    saved while the copy was pristine, in the same copy; then verified like any tier."""
    lab.replenish("reddit", 0)
    with lab.running().routing._routing() as st:
        st.ready.slots.setdefault("reddit", {})["golden"] = []
    lab.replenish("reddit", 0)  # removes the spare no longer listed
    active = state(lab).routes.active["reddit"]
    for tier in (None, "inplace"):  # the default chain (spare -> inplace -> recreate), then asked for
        title = f"in place {uuid.uuid4().hex[:6]}"
        post_on_reddit(lab, title)
        assert not lab.verify("reddit").ok
        [r] = lab.reset(["reddit"], tier=tier, refill=False)
        assert r.ok and r.tier == "inplace", r
        assert r.escalations == ([] if tier else ["spare: no spare ready"]), r.escalations
        assert {"inplace", "verify", "login"} <= set(r.phases), r.phases
        assert state(lab).routes.active["reddit"] == active, "the in-place tier keeps the copy"
        assert lab.verify("reddit").ok
        assert title not in requests.get(f"{url(lab, 'reddit')}/f/books/new", timeout=20).text
    assert_consistent(lab, "reddit")


def test_endpoint_tier_for_classifieds(lab):
    rc, out = lab.exec("classifieds", ["mysql", "-uroot", "-ppassword", "osclass", "-e",
                                       "UPDATE oc_t_item_description SET s_title='tampered' WHERE fk_i_item_id=84144"],
                       service="db")
    assert rc == 0, out
    assert not lab.verify("classifieds").ok
    [r] = lab.reset(["classifieds"])
    assert r.ok and r.tier == "endpoint" and "endpoint" in r.phases, r
    assert lab.verify("classifieds").ok


def test_recreate_tier_and_golden_image(lab):
    open_gitlab_issue(lab, "an agent was here")
    assert not lab.verify("gitlab").ok
    [r] = lab.reset(["gitlab"], tier="recreate", refill=False)
    assert r.ok and r.tier == "recreate", r
    assert lab.verify("gitlab").ok
    from envctl.state.snapshots import golden_images

    images, key = golden_images(lab.running(), "gitlab")
    assert images and key  # the first recreate made the golden image
    [r] = lab.reset(["gitlab"], tier="recreate", refill=False)
    assert r.ok and lab.verify("gitlab").ok
    labels = dk.container(lab.container("gitlab")).labels
    assert labels["envctl.golden"] == key  # the next copy booted from it, already configured
    assert "configure" not in r.phases or r.phases.get("configure", 0) == 0


def test_none_tier_for_read_only_site(lab):
    [r] = lab.reset(["wikipedia"])
    assert r.ok and r.tier == "none" and "verify" in r.phases


def test_ten_write_then_reset_cycles_all_verify(lab):
    # back to back, faster than a spare boots: the cycles meet both the spare and the in-place tier while the
    # replenisher runs in the background (ten show it as twenty did, at half the engine time: issue 22)
    lab.replenish("reddit", 1)
    tiers = []
    for i in range(10):
        post_on_reddit(lab, f"cycle {i}")
        [r] = lab.reset(["reddit"])  # spares are replenished in the background, as in real use
        assert r.ok, r
        tiers.append(r.tier)
        assert lab.verify("reddit").ok
    assert tiers.count("spare") >= 1 and set(tiers) <= {"spare", "inplace"}, tiers
    # let the background replenisher finish, then the instance is consistent
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not state(lab).ready.spares("reddit"):
        time.sleep(1)
    assert_consistent(lab, "reddit")


def _envctl(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "envctl", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_sigkill_during_swap_and_spare_boot_then_reset_recovers(lab):
    lab.replenish("reddit", 1)
    # 1. kill a reset while it swaps (after the routing table is read, around the write)
    p = _envctl("reset", "reddit", "--instance", INSTANCE, "--auth-dir", str(lab.auth_dir))
    time.sleep(1.2)
    p.send_signal(signal.SIGKILL)
    p.wait()
    # 2. kill a replenisher while it boots a spare
    with lab.running().routing._routing() as st:
        st.ready.wanted.setdefault("reddit", {})["golden"] = 2
    q = _envctl("_ready", "reddit", "--instance", INSTANCE, "--auth-dir", str(lab.auth_dir))
    deadline = time.monotonic() + 60
    n0 = len(lab.running().copies.of("reddit"))
    while time.monotonic() < deadline and len(lab.running().copies.of("reddit")) <= n0:
        time.sleep(0.2)
    q.send_signal(signal.SIGKILL)
    q.wait()
    st = state(lab)
    booted_by_killed = [slot for (_, slot) in lab.running().copies.of("reddit")
                        if slot != st.routes.active["reddit"] and slot not in st.ready.spares("reddit")]
    # never marked ready unless verified, never two actives
    assert all(slot not in st.ready.spares("reddit") for slot in booted_by_killed)
    [r] = lab.reset(["reddit"], refill=False)
    assert r.ok, r
    with lab.running().routing._routing() as st:
        st.ready.wanted.setdefault("reddit", {})["golden"] = 1
    lab.replenish("reddit")
    st = state(lab)
    left = set(slot for (_, slot) in lab.running().copies.of("reddit"))
    assert left == {st.routes.active["reddit"], *st.ready.spares("reddit")}
    assert_consistent(lab, "reddit")


def test_two_concurrent_resets_of_one_site(lab):
    results, errors = [], []

    def one() -> None:
        try:
            results.extend(lab.reset(["classifieds"]))
        except EnvctlError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 2 and all(r.ok for r in results)
    # with --no-wait the second is refused while the first holds the site's lock
    from envctl.locks import locked

    with locked(f"reset.{INSTANCE}.classifieds"):
        r = subprocess.run([sys.executable, "-m", "envctl", "reset", "classifieds", "--instance", INSTANCE, "--no-wait"],
                           capture_output=True, text=True)
    assert r.returncode == 1 and "busy" in r.stderr


def test_reset_server_speaks_browsergym_protocol(lab):
    from envctl.serve import running_server_url, serve

    server = serve(lab, "127.0.0.1", 0)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        base = running_server_url(INSTANCE)
        assert base == f"http://127.0.0.1:{server.server_address[1]}"
        from envctl.envformat import browsergym

        assert browsergym(lab)["WA_FULL_RESET"] == base
        # BrowserGym's client: GET /reset (answered when the reset has ended), then /status at once
        assert requests.get(f"{base}/reset").status_code == 200
        st = requests.get(f"{base}/status")
        assert (st.status_code, st.text) == (200, "Ready for duty!")
        # in the background (?wait=0): a second reset while one runs is a 418; then poll /status
        assert requests.get(f"{base}/reset?wait=0").status_code == 200
        second = requests.get(f"{base}/reset")
        assert second.status_code == 418
        deadline = time.monotonic() + 600
        while True:
            s = requests.get(f"{base}/status")
            if s.status_code == 200 and s.text == "Ready for duty!":
                break
            assert s.status_code == 200 and s.text == "Reset ongoing", (s.status_code, s.text)
            assert time.monotonic() < deadline
            time.sleep(0.5)
        one = requests.post(f"{base}/reset/classifieds")
        assert one.status_code == 200 and json.loads(one.text)[0]["tier"] == "endpoint"
        st = requests.get(f"{base}/status.json").json()
        assert {r["site"] for r in st["last"]} == set(SITES)
    finally:
        server.shutdown()
        server.server_close()


def test_named_snapshot_create_and_restore(lab):
    post_on_reddit(lab, "kept in a snapshot")
    drifted = lab.verify("reddit").actual
    snap = lab.snapshot_create("reddit", "mid-episode")
    assert snap.fingerprint == drifted
    [r] = lab.reset(["reddit"], refill=False)
    assert r.ok and lab.verify("reddit").ok
    lab.snapshot_restore("reddit", "mid-episode")
    assert lab.verify("reddit").actual == drifted

    assert any(s.name == "mid-episode" for s in lab.snapshots("reddit"))
    lab.snapshot_remove("mid-episode", "reddit")
    [r] = lab.reset(["reddit"], refill=False)
    assert r.ok and lab.verify("reddit").ok


def test_volume_contents_are_captured_by_golden_and_snapshots(lab):
    """GitLab declares VOLUMEs (as gitlab/gitlab-ce does), which 'docker commit' leaves out: a write inside
    one is undone by a reset, and a snapshot taken with it brings it back."""
    image_volumes = dk.image_volumes

    assert "/var/opt/gitlab" in image_volumes("envctl-mini/gitlab:1")
    marker = "/var/opt/gitlab/envctl-test-marker"
    assert lab.exec("gitlab", ["sh", "-c", f"echo kept > {marker}"])[0] == 0
    lab.snapshot_create("gitlab", "with-marker")
    try:
        [r] = lab.reset(["gitlab"], tier="recreate", refill=False)
        assert r.ok, r
        assert lab.exec("gitlab", ["test", "-e", marker])[0] != 0, "a reset kept a write inside a volume"
        lab.snapshot_restore("gitlab", "with-marker")
        assert lab.exec("gitlab", ["cat", marker]) == (0, "kept")
        # The clean stop ('gitlab-ctl stop' before the commit) left no stale postmaster.pid behind.
        pidfile = "/var/opt/gitlab/postgresql/data/postmaster.pid"
        assert "lock file" not in lab.logs("gitlab", tail=50)
        assert lab.exec("gitlab", ["test", "-e", pidfile])[0] == 0  # the live server's own
    finally:
        lab.snapshot_remove("with-marker", "gitlab")
    [r] = lab.reset(["gitlab"], tier="recreate", refill=False)
    assert r.ok and lab.verify("gitlab").ok
