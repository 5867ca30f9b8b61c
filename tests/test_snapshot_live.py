"""Snapshots of a live site (freeze, no downtime) and warm restores, on the mini reddit with a real engine.

Real parts only: the site is reached through the instance's front proxy on 127.0.0.1, writes are
made through its forms, login state comes from Chromium (Playwright) and is checked by HTTP requests
carrying its cookies and by envctl's expiry probes.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests

from conftest import tear_down, up_reddit
from envctl.instance.checks import Checks
from envctl.lab import Lab
from envctl.backends.docker import ENGINE as dk
from envctl.routing.table import RoutingTable, snapshot_source

pytestmark = [pytest.mark.docker, pytest.mark.mini, pytest.mark.slow]
INSTANCE, OFFSET = "snlive", 14100
USER, PASSWORD = "MarvelsGrantMan136", "test1234"


@pytest.fixture(scope="module")
def lab(docker_engine, tmp_path_factory):
    lab = up_reddit(INSTANCE, OFFSET, tmp_path_factory.mktemp("auth"))
    lab.login(["reddit"])  # Chromium logs in: reddit_state.json
    yield lab
    tear_down(lab)


def base(lab: Lab) -> str:
    return lab.settings().deployment.url(lab.catalog.site("reddit"))


def post(lab: Lab, title: str) -> None:
    s = requests.Session()
    r = s.post(f"{base(lab)}/login_check", data={"_username": USER, "_password": PASSWORD})
    assert r.ok
    r = s.post(f"{base(lab)}/submit", data={"submission[title]": title, "submission[forum]": "books",
                                            "submission[url]": "", "submission[body]": "written by a test"})
    assert r.ok and title in r.text


def listed(lab: Lab, title: str) -> bool:
    r = requests.get(f"{base(lab)}/f/books/new", timeout=30)
    assert r.status_code == 200
    return title in r.text


def table(lab: Lab) -> RoutingTable:
    st = lab.running().front.read()
    assert st is not None
    return st


def warm(st: RoutingTable, name: str) -> list[str]:
    """The ready (warm) copies of snapshot ``name`` of reddit."""
    return [r.slot for r in st.ready.of("reddit", snapshot_source(name))]


def wants_warm(st: RoutingTable, name: str) -> bool:
    return snapshot_source(name) in st.ready.sources("reddit")


def cookie_logged_in(lab: Lab, cookies: list[dict]) -> bool:
    """A real request for the account page with the given browser cookies: logged in?"""
    jar = "; ".join(f"{c['name']}={c['value']}" for c in cookies)
    r = requests.get(f"{base(lab)}/user/{USER}/account", headers={"Cookie": jar}, timeout=30)
    return r.status_code == 200 and "Delete" in r.text


def wait_warm(lab: Lab, name: str, timeout: float = 180) -> list[str]:
    """The background booter's work: a warm copy of ``name`` listed, and only listed copies left running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = table(lab)
        slots = warm(st, name)
        copies = {slot for (_, slot) in lab.running().copies.of("reddit")}
        if slots and copies == {st.routes.active["reddit"], *st.ready.all_slots("reddit")}:
            return slots
        time.sleep(0.3)
    pytest.fail(f"no warm copy of {name} within {timeout}s: {table(lab).ready}")


class Hammer:
    """Clients requesting the site through its public URL as fast as they can, recording every answer."""

    def __init__(self, url: str, clients: int = 3) -> None:
        self.url, self.stop = url, threading.Event()
        self.results: list[tuple[float, float, bool, str]] = []  # (start, seconds, ok, what)
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(clients)]

    def run(self) -> None:
        s = requests.Session()
        while not self.stop.is_set():
            t = time.monotonic()
            try:
                r = s.get(self.url, timeout=60)
                ok, what = r.status_code == 200 and "Log in" in r.text, f"HTTP {r.status_code}"
            except requests.RequestException as exc:
                ok, what = False, type(exc).__name__
            self.results.append((t, time.monotonic() - t, ok, what))

    def __enter__(self) -> "Hammer":
        for th in self.threads:
            th.start()
        time.sleep(0.3)
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for th in self.threads:
            th.join()


def test_site_serves_during_create_and_no_request_fails(lab):
    title = f"kept {uuid.uuid4().hex[:6]}"
    post(lab, title)
    marks: dict[str, float] = {}

    def progress(_site: str, _phase: str, detail: str) -> None:
        if detail.startswith("freeze"):
            marks.setdefault("freeze", time.monotonic())

    with Hammer(f"{base(lab)}/forums/all") as h:
        snap = lab.snapshot_create("reddit", "served", progress)
        marks["done"] = time.monotonic()
        time.sleep(0.3)
    assert snap.method == "freeze" and snap.attempts == 1, snap
    assert snap.timings["freeze"] > 0 and snap.fingerprint == lab.verify("reddit").actual
    during = [r for r in h.results if marks["freeze"] <= r[0] <= marks["done"]]
    assert during, "no request was made while the snapshot was taken"
    failed = [r for r in h.results if not r[2]]
    assert not failed, f"{len(failed)} of {len(h.results)} requests failed: {sorted({r[3] for r in failed})}"
    # the image holds the state as of the capture: a copy booted from it has the post and the fingerprint
    lab.snapshot_restore("reddit", "served", background=False)
    assert listed(lab, title) and lab.verify("reddit").actual == snap.fingerprint


def test_write_during_capture_is_caught_and_captured_again(lab, monkeypatch):
    """A write between the first fingerprint and the freeze: the label would lie, so it captures again."""
    title = f"slipped in {uuid.uuid4().hex[:6]}"
    real = Checks.fingerprint
    calls = []

    def fingerprint_then_write(self, copy):
        fp = real(self, copy)
        calls.append(fp.digest)
        if len(calls) == 1:
            post(lab, title)  # a real write through the public URL, after the first fingerprint
        return fp

    monkeypatch.setattr(Checks, "fingerprint", fingerprint_then_write)
    snap = lab.snapshot_create("reddit", "raced", warm=True)
    monkeypatch.undo()
    assert snap.method == "freeze" and snap.attempts == 2, snap
    assert snap.fingerprint == calls[1] != calls[0]
    # the warm copy was booted from the image and checked against its label; restoring shows the write
    lab.snapshot_restore("reddit", "raced", background=False)
    assert listed(lab, title) and lab.verify("reddit").actual == snap.fingerprint
    lab.snapshot_remove("raced", "reddit")


def test_warm_restore_swaps_and_state_matches_the_snapshot(lab):
    before, after = f"before {uuid.uuid4().hex[:6]}", f"after {uuid.uuid4().hex[:6]}"
    post(lab, before)
    cli = subprocess.run([sys.executable, "-m", "envctl", "snapshot", "create", "reddit", "episode", "--warm",
                          "--instance", INSTANCE, "--auth-dir", str(lab.auth_dir), "--json"],
                         capture_output=True, text=True, timeout=600)
    assert cli.returncode == 0, cli.stderr
    snap = json.loads(cli.stdout)
    assert snap["method"] == "freeze" and {"freeze", "capture", "warm"} <= set(snap["timings"]), snap
    [slot] = snap["warm"]
    assert warm(table(lab), "episode") == [slot]
    dirty = table(lab).routes.active["reddit"]
    post(lab, after)
    assert lab.verify("reddit").actual != snap["fingerprint"]

    res = lab.snapshot_restore("reddit", "episode")
    assert res.method == "warm" and res.warm == [slot] and set(res.timings) >= {"swap", "verify"}, res
    assert table(lab).routes.active["reddit"] == slot
    assert lab.verify("reddit").actual == snap["fingerprint"] == res.fingerprint
    assert listed(lab, before) and not listed(lab, after)
    assert res.login == "kept"  # the login file from before the snapshot logs in on the restored copy
    # in the background: the replaced copy is removed and the next warm copy booted
    [next_slot] = wait_warm(lab, "episode")
    assert next_slot != slot and (("reddit", dirty) not in lab.running().copies.of("reddit"))
    # and the next restore is a swap again
    post(lab, after)
    res2 = lab.snapshot_restore("reddit", "episode")
    assert res2.method == "warm" and res2.warm == [next_slot]
    assert not listed(lab, after) and lab.verify("reddit").actual == snap["fingerprint"]
    wait_warm(lab, "episode")


def test_session_from_before_the_snapshot_is_valid_after_restore(lab):
    lab.login(["reddit"])
    state_file = Path(lab.auth_dir) / "reddit_state.json"
    before = json.loads(state_file.read_text())["cookies"]
    assert cookie_logged_in(lab, before)
    lab.snapshot_create("reddit", "session", warm=True)
    # a reset boots a pristine copy (whose sessions table knows no such session) and renews the login file
    [r] = lab.reset(["reddit"], refill=False)
    assert r.ok, r
    assert not cookie_logged_in(lab, before)
    renewed = json.loads(state_file.read_text())["cookies"]
    assert cookie_logged_in(lab, renewed)

    res = lab.snapshot_restore("reddit", "session")
    assert res.method == "warm", res
    assert cookie_logged_in(lab, before)  # the browser's session from before the snapshot: logged in
    # the file made after the snapshot did not log in there: the one kept with the snapshot replaced it
    assert res.login == "stash", res
    assert cookie_logged_in(lab, json.loads(state_file.read_text())["cookies"])
    report = lab.login_report(["reddit"], check_only=True)  # envctl's expiry probe, in Chromium
    assert report.ok, report.to_dict()
    wait_warm(lab, "session")
    lab.snapshot_remove("session", "reddit")


def test_restore_without_a_warm_copy_is_in_place_when_the_copy_holds_the_snapshot(lab):
    """A tree-search agent backtracking: no warm copy, the routed copy is the one the snapshot was taken from (an
    in-place reset keeps it), so the snapshot's saved state is put back inside it, verified by its fingerprint."""
    title = f"branch {uuid.uuid4().hex[:6]}"
    post(lab, title)
    snap = lab.snapshot_create("reddit", "node1")
    assert "save" in snap.timings, snap.timings
    active = table(lab).routes.active["reddit"]
    for i in range(2):  # down a branch, then back, twice
        later = f"later {i} {uuid.uuid4().hex[:6]}"
        post(lab, later)
        res = lab.snapshot_restore("reddit", "node1", background=False)
        assert res.method == "in place" and "inplace" in res.timings and "boot" not in res.timings, res
        assert listed(lab, title) and not listed(lab, later)
        assert lab.verify("reddit").actual == snap.fingerprint
        assert table(lab).routes.active["reddit"] == active  # the same copy, no boot
    # the pristine state saved in that copy is still what a reset restores
    [r] = lab.reset(["reddit"], refill=False)
    assert r.ok and not listed(lab, title) and lab.verify("reddit").ok
    lab.snapshot_remove("node1", "reddit")


def test_cold_restore_without_a_warm_copy(lab):
    title = f"cold {uuid.uuid4().hex[:6]}"
    post(lab, title)
    snap = lab.snapshot_create("reddit", "cold")
    assert snap.warm == [] and not wants_warm(table(lab), "cold")
    # a recreate routes a copy booted from the golden: it does not hold the snapshot's saved state
    [r] = lab.reset(["reddit"], tier="recreate", refill=False)
    assert r.ok and not listed(lab, title)
    res = lab.snapshot_restore("reddit", "cold", background=False)
    assert res.method == "cold" and "boot" in res.timings, res
    assert listed(lab, title) and lab.verify("reddit").actual == snap.fingerprint
    # no warm copy was asked for: none is kept, and the replaced copy is gone
    st = table(lab)
    assert not wants_warm(st, "cold")
    assert {slot for (_, slot) in lab.running().copies.of("reddit")} == {st.routes.active["reddit"],
                                                                              *st.ready.all_slots("reddit")}
    lab.snapshot_remove("cold", "reddit")


def test_rm_and_down_remove_warm_copies(lab):
    lab.snapshot_create("reddit", "doomed", warm=True)
    [slot] = warm(table(lab), "doomed")
    assert ("reddit", slot) in lab.running().copies.of("reddit")
    # re-taking a snapshot replaces its warm copies (booted from the old images)
    again = lab.snapshot_create("reddit", "doomed", warm=True)
    assert again.warm and again.warm != [slot]
    assert ("reddit", slot) not in lab.running().copies.of("reddit")
    # rm: images, warm copies and the table entry go
    lab.snapshot_remove("doomed", "reddit")
    assert not wants_warm(table(lab), "doomed")
    assert ("reddit", again.warm[0]) not in lab.running().copies.of("reddit")
    assert not any(s.name == "doomed" for s in lab.snapshots("reddit"))
    # a stray cleanup (what every reset does) keeps warm copies
    lab.snapshot_create("reddit", "kept-warm", warm=True)
    [kept] = warm(table(lab), "kept-warm")
    [r] = lab.reset(["reddit"], refill=False)
    assert r.ok and ("reddit", kept) in lab.running().copies.of("reddit")
    # down of the site removes its warm copies and their table entry
    lab.down(["reddit"])
    assert not dk.containers(instance=INSTANCE, site="reddit")
    assert not table(lab).ready.sources("reddit")
