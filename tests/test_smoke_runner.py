"""run_smoke end to end on a hand-made site: statuses, negative control, reset re-check, reports."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from envctl.smoke import load_task_set, run_smoke
from envctl.smoke.report import format_table
from envctl.smoke.runner import negative_control, site_groups
from envctl.smoke.tasks import task_from_config
from conftest import CHROMIUM
from smoke_site import DEFAULT_BIO, SmokeSite

BIO = "Pro Python Developer with 20 years of Experience"
TASKS = [
    {"task_id": "price", "sites": ["shopping"], "start_url": "__SHOPPING__/products", "intent": "Price of the Joust Bag?",
     "require_login": False, "storage_state": None, "require_reset": False,
     "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["34.00"]}},
     "envctl_recipe": ['page.get_by_role("link", name="Joust Bag").click()', {"do": "stop", "answer_from": {"css": ".price"}}]},
    {"task_id": "search", "sites": ["shopping"], "start_url": "__SHOPPING__", "intent": "Search for duffle",
     "eval": {"eval_types": ["url_match"], "reference_url": "__SHOPPING__/search?q=duffle", "url_note": "GOLD in PRED"},
     "envctl_recipe": [{"do": "fill", "placeholder": "Search entire store here...", "value": "duffle"},
                       {"do": "click", "role": "button", "name": "Search"}, "stop []"]},
    {"task_id": "bio", "sites": ["reddit"], "start_url": "__REDDIT__/account", "intent": f"Change my bio to {BIO}",
     "require_login": True, "storage_state": "./.auth/reddit_state.json",
     "eval": {"eval_types": ["program_html"], "reference_answers": None,
              "program_html": [{"url": "__REDDIT__/user/emma", "locator": "document.querySelector('.user-bio').outerText",
                                "required_contents": {"exact_match": BIO}},
                               # holds in the pristine state too: only the product decides "changed"
                               {"url": "__REDDIT__/user/emma", "locator": "", "required_contents": {"must_exclude": [DEFAULT_BIO]}}]},
     "envctl_recheck_after_reset": True,
     "envctl_recipe": [{"do": "fill", "label": "Biography", "value": BIO}, {"do": "click", "test_id": "save-bio"}, "stop []"]},
    {"task_id": "brand", "sites": ["shopping"], "start_url": "__SHOPPING__", "intent": "Best-selling brand?",
     "eval": {"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": ["Sprite"]}},
     "envctl_recipe": ["stop [Sprite]"]},
    {"task_id": "no-recipe", "sites": ["shopping"], "start_url": "__SHOPPING__", "intent": "x",
     "eval": {"eval_types": ["string_match"], "reference_answers": {"exact_match": "x"}}},
]


@pytest.fixture
def site() -> Iterator[SmokeSite]:
    with SmokeSite() as s:
        yield s


@pytest.fixture
def task_file(tmp_path: Path) -> Path:
    p = tmp_path / "set.json"
    p.write_text(json.dumps({"name": "handmade", "tasks": TASKS}))
    return p


@pytest.fixture
def auth_dir(tmp_path: Path, site: SmokeSite) -> Path:
    d = tmp_path / ".auth"
    d.mkdir()
    (d / "reddit_state.json").write_text(json.dumps(site.storage_state()))
    return d


def _env(site: SmokeSite) -> dict[str, str]:
    return {"SHOPPING": site.url, "REDDIT": site.url}


def test_site_groups_keep_shared_sites_together() -> None:
    mk = lambda i, sites: task_from_config({"task_id": i, "sites": sites, "start_url": "http://h", "eval": {}}, {})  # noqa: E731
    groups = site_groups([mk(1, ["gitlab"]), mk(2, ["map"]), mk(3, ["reddit"]), mk(4, ["gitlab", "reddit"]), mk(5, ["map"])])
    assert sorted([t.task_id for t in g] for g in groups) == [["1", "3", "4"], ["2", "5"]]
    # one Magento app may serve both storefront and admin: never run them side by side
    groups = site_groups([mk(1, ["shopping"]), mk(2, ["map"]), mk(3, ["shopping_admin"])])
    assert sorted([t.task_id for t in g] for g in groups) == [["1", "3"], ["2"]]


def test_negative_control_is_a_wrong_copy_of_a_read_only_task(task_file: Path) -> None:
    tasks = load_task_set(task_file, {"SHOPPING": "http://s", "REDDIT": "http://r"})
    nc = negative_control(tasks)
    assert nc is not None and nc.task_id == "price:negative-control" and nc.expect_fail
    assert nc.eval["reference_answers"] == {"exact_match": "envctl negative control: deliberately wrong answer"}
    assert nc.recipe == tasks[0].recipe


@pytest.mark.browser
def test_run_smoke_end_to_end_with_reset_recheck_and_reports(site: SmokeSite, task_file: Path, auth_dir: Path,
                                                             tmp_path: Path) -> None:
    resets: list[list[str]] = []
    seen: list[str] = []

    def reset(sites: list[str]) -> None:
        resets.append(sites)
        site.reset()

    tasks = load_task_set(task_file)  # unfilled; run_smoke fills from env
    result = run_smoke(tasks, env=_env(site), auth_dir=auth_dir, reset=reset, report_dir=tmp_path / "report",
                       browser_path=CHROMIUM, progress=lambda r: seen.append(r.task_id), task_set="handmade")
    by_id = {t.task_id: t for t in result.tasks}
    assert [t.task_id for t in result.tasks] == ["price:negative-control", "price", "search", "bio", "brand", "no-recipe"]
    assert sorted(seen) == sorted(by_id)
    assert by_id["price"].status == "pass" and by_id["price"].answer == "$34.00"
    assert by_id["search"].status == "pass" and by_id["search"].final_url == site.url + "/search?q=duffle"
    nc = by_id["price:negative-control"]
    assert nc.status == "pass" and nc.negative_control and nc.score == 0.0 and nc.answer == "$34.00"
    bio = by_id["bio"]
    assert bio.status == "pass", bio.reason
    assert [c["name"] for c in bio.checks] == ["before", "program_html[0]", "program_html[1]", "after_reset"]
    assert resets == [["reddit"]] and site.bio == DEFAULT_BIO
    assert by_id["brand"].status == "skip" and "needs judge" in by_id["brand"].reason
    assert by_id["no-recipe"].status == "skip"
    assert result.ok and result.counts == {"pass": 4, "fail": 0, "skip": 2, "gap": 0}
    assert {s.site: (s.passed, s.skipped) for s in result.per_site()} == {"reddit": (1, 0), "shopping": (3, 2)}

    data = json.loads((tmp_path / "report" / "report.json").read_text())
    assert data["ok"] is True and data["counts"]["pass"] == 4 and data == {**result.to_json(), **{"tasks": data["tasks"],
                                                                                                  "report_dir": data["report_dir"]}}
    shot = data["tasks"][1]["steps"][0]["screenshot"]
    assert (tmp_path / "report" / shot).read_bytes()[:2] == b"\xff\xd8"
    page = (tmp_path / "report" / "report.html").read_text()
    assert "data:image/jpeg;base64," in page and "price:negative-control" in page and "PASS" in page
    assert "smoke: PASS" in format_table(result)


@pytest.mark.browser
def test_a_broken_reset_and_a_wrong_answer_fail_the_run(site: SmokeSite, task_file: Path, auth_dir: Path) -> None:
    tasks = [t for t in load_task_set(task_file) if t.task_id in ("price", "bio")]
    result = run_smoke(tasks, env=_env(site), auth_dir=auth_dir, reset=lambda sites: None, browser_path=CHROMIUM)
    bio = {t.task_id: t for t in result.tasks}["bio"]
    assert bio.status == "fail" and "change survived the reset" in bio.reason and not result.ok
    # the next run finds the change still there and refuses to act on a dirty site
    result = run_smoke(tasks, env=_env(site), auth_dir=auth_dir, reset=lambda sites: site.reset(), browser_path=CHROMIUM)
    bio = {t.task_id: t for t in result.tasks}["bio"]
    assert bio.status == "fail" and "not pristine" in bio.reason
    site.reset()

    wrong = json.loads(json.dumps(TASKS[0]))
    wrong["eval"]["reference_answers"] = {"must_include": ["99.00"]}
    result = run_smoke([task_from_config(wrong, _env(site))], env=_env(site), browser_path=CHROMIUM)
    assert [t.status for t in result.tasks] == ["pass", "fail"] and not result.ok
    assert "lacks ['99.00']" in result.tasks[1].reason


@pytest.mark.browser
def test_missing_login_state_and_missing_reset_are_reported(site: SmokeSite, task_file: Path, tmp_path: Path) -> None:
    tasks = [t for t in load_task_set(task_file) if t.task_id in ("price", "bio")]
    result = run_smoke(tasks, env=_env(site), auth_dir=tmp_path, browser_path=CHROMIUM)
    bio = {t.task_id: t for t in result.tasks}["bio"]
    assert bio.status == "fail" and "reddit_state.json is missing" in bio.reason and "envctl login" in bio.reason
    (tmp_path / "reddit_state.json").write_text(json.dumps(site.storage_state()))
    result = run_smoke(tasks, env=_env(site), auth_dir=tmp_path, reset=None, browser_path=CHROMIUM)
    bio = {t.task_id: t for t in result.tasks}["bio"]
    assert bio.status == "skip" and "no reset is available" in bio.reason
    assert bio.checks[1]["score"] == 1.0 and bio.checks[2]["score"] == 1.0  # the change was made and verified
    site.reset()
