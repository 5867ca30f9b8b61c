"""What 'pristine' means stays what the user defined, and 'down --volumes' says what it could not remove.

On the mini flavor with a real engine: one mini reddit instance of its own (spares 0), so the in-place
tier and the golden image are the only ways back to pristine.
"""
from __future__ import annotations

import subprocess
import uuid

import pytest
import requests

from envctl.errors import EnvctlError
from envctl.lab import Lab
from envctl.backends.docker import ENGINE as dk
from envctl.backends.base import member_name
from envctl.routing.table import Route

from conftest import TEST_LABEL, tear_down, up_reddit

pytestmark = [pytest.mark.docker, pytest.mark.mini, pytest.mark.slow]
INSTANCE, OFFSET = "dfx", 47000  # an offset no other test uses


@pytest.fixture(scope="module")
def lab(docker_engine, tmp_path_factory):
    lab = up_reddit(INSTANCE, OFFSET, tmp_path_factory.mktemp("auth"))
    yield lab
    tear_down(lab)


def url(lab: Lab, site: str) -> str:
    return lab.settings().deployment.url(lab.catalog.site(site))


def post_on_reddit(lab: Lab, title: str) -> None:
    s = requests.Session()
    base = url(lab, "reddit")
    assert s.post(f"{base}/login_check", data={"_username": "MarvelsGrantMan136", "_password": "test1234"}).ok
    r = s.post(f"{base}/submit", data={"submission[title]": title, "submission[forum]": "books",
                                        "submission[url]": "", "submission[body]": "written by a test"})
    assert r.ok and title in r.text


def forum_page(lab: Lab) -> str:
    return requests.get(f"{url(lab, 'reddit')}/f/books/new", timeout=20).text


def pristine(lab: Lab) -> str:
    return lab.running().routing.table().pristine["reddit"]


def test_redefining_pristine_saves_the_in_place_state_again(lab):
    """'snapshot create reddit' (no name) makes the live state the new pristine: the in-place tier must
    restore that state, not the one saved when the copy was first configured."""
    assert lab.verify("reddit").ok
    kept = f"kept {uuid.uuid4().hex[:6]}"
    post_on_reddit(lab, kept)
    lab.snapshot_create("reddit")  # this state is pristine from now on
    assert lab.verify("reddit").ok
    gone = f"gone {uuid.uuid4().hex[:6]}"
    post_on_reddit(lab, gone)
    assert not lab.verify("reddit").ok
    [r] = lab.reset(["reddit"], tier="inplace", refill=False)
    assert r.ok and r.tier == "inplace" and r.escalations == [], r
    page = forum_page(lab)
    assert kept in page and gone not in page
    assert lab.verify("reddit").ok


def test_up_repairing_a_copy_booted_from_the_golden_keeps_the_golden_pristine(lab):
    """'up' repairs a running copy that fails its probes; that copy may have been written to, so its
    fingerprint is no definition of pristine: the golden image's label is."""
    lab.snapshot_create("reddit")
    [r] = lab.reset(["reddit"], tier="recreate", refill=False)
    assert r.ok and r.tier == "recreate", r
    inst = lab.running()
    assert inst.routing.active_copy("reddit", inst.routing.table()).golden, "the active copy must be booted from the golden"
    before = pristine(lab)
    dirty = f"dirty {uuid.uuid4().hex[:6]}"
    post_on_reddit(lab, dirty)
    assert not lab.verify("reddit").ok
    # the copy keeps running but fails its probes: its route points at a port nothing listens on
    with inst.routing._routing() as table:
        web = member_name(INSTANCE, "reddit", "web", table.routes.active["reddit"])
        for port, route in list(table.routes.by_port.items()):
            if route.backend == web:
                table.routes.by_port[port] = Route(web, 1, route.allow)
    assert not lab.health(["reddit"])["reddit"][0].ok
    res = lab.up(["reddit"], flavor="mini", port_offset=OFFSET, login=False, spares=0)
    [site] = res.sites
    assert site.ok and site.action == "repaired", site
    assert dirty in forum_page(lab), "the repair keeps the copy (and what was written to it)"
    assert pristine(lab) == before, "the repaired copy's own state was recorded as pristine"
    v = lab.verify("reddit")
    assert not v.ok and any("submissions" in line for line in v.differences), v


def test_down_volumes_reports_a_volume_it_could_not_remove(lab):
    """A volume of the instance that something else still uses is named, with the fix; never skipped silently."""
    vol = f"envctl-{INSTANCE}-held-{uuid.uuid4().hex[:6]}"
    holder = f"envctl-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "volume", "create", "--label", f"envctl.instance={INSTANCE}", "--label",
                    "envctl.site=reddit", vol], check=True, capture_output=True)
    try:
        subprocess.run(["docker", "run", "-d", "--name", holder, "--label", TEST_LABEL, "-v", f"{vol}:/data",
                        "debian:bookworm-slim", "sleep", "300"], check=True, capture_output=True)
        with pytest.raises(EnvctlError) as err:
            lab.down(volumes=True)
        assert vol in str(err.value) and err.value.hint and "down --volumes" in err.value.hint, err.value
        assert not dk.containers(instance=INSTANCE), "everything else is removed all the same"
    finally:
        subprocess.run(["docker", "rm", "-f", holder], capture_output=True)
    lab.down(volumes=True)  # nothing holds it now: removed, no error
    assert vol not in dk.volumes(instance=INSTANCE)
