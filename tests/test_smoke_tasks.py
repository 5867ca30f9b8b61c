"""The bundled task sets are well-formed upstream configs with parseable recipes and honest flags."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from envctl.smoke import TaskConfigError, bundled_sets, load_task_set
from envctl.smoke.agent import parse_recipe
from envctl.smoke.tasks import read_task_set

ENV = {"SHOPPING": "http://h:7770", "SHOPPING_ADMIN": "http://h:7780/admin", "REDDIT": "http://h:9999",
       "GITLAB": "http://h:8023", "MAP": "http://h:3000", "CLASSIFIEDS": "http://h:9980/", "HOMEPAGE": "http://h:4399",
       "WIKIPEDIA": "http://h:8888/wikipedia_en_all_maxi_2022-05/A/User:The_other_Kiwix_guy/Landing"}
# research/evaluation.md §6: hostname-bound, evaluator quirks, wrong ground truth, changed answers, N/A
KNOWN_BROKEN = {293, 294, 295, 296, 297, 66, 386, 144, 231, 232, 233, 407, 408, 584, 505, 107, 109, 110, 111, 186, 679,
                2, 6, 43, 63, 64, 65, 128, 129, 130, 131, 184, 185, 21, 25, 124, 125, 141, 142, 143, 145, 330, 331,
                333, 307, 786, 29, 265, 266, 240, 286, 45, 429}


def test_bundled_sets_are_listed() -> None:
    assert {"mini", "webarena-smoke"} <= set(bundled_sets())


@pytest.mark.parametrize("name", ["mini", "webarena-smoke"])
def test_every_task_fills_and_has_a_valid_recipe(name: str) -> None:
    tasks = load_task_set(name, ENV)
    assert len(tasks) >= 20
    for t in tasks:
        parse_recipe(t.recipe or [])
        assert not re.search(r"__[A-Z_]+__", json.dumps(t.config)), t.task_id  # every placeholder filled
        assert t.start_urls and all(u.startswith("http://h:") for u in t.start_urls)
        if t.storage_state:  # upstream: null for map/wikipedia even though require_login is always true
            assert t.storage_state.startswith("./.auth/") and t.storage_state.endswith("_state.json")
        assert "fuzzy_match" not in (t.eval.get("reference_answers") or {}), "judge-only tasks stay out of smoke sets"


def test_webarena_smoke_uses_real_ids_off_the_broken_list_and_says_unverified() -> None:
    tasks = load_task_set("webarena-smoke", ENV)
    ids = {int(t.task_id) for t in tasks}
    assert not ids & KNOWN_BROKEN and all(0 <= i <= 811 for i in ids)
    assert all(t.verified is False for t in tasks)
    assert {s for t in tasks for s in t.sites} == {"shopping", "shopping_admin", "gitlab", "reddit", "map", "wikipedia"}
    mutating = [t for t in tasks if t.recheck_after_reset]
    assert {t.task_id for t in mutating} == {"400", "418", "453"}


def test_mini_has_retrieval_navigation_and_reset_checked_mutation_per_writable_site() -> None:
    tasks = load_task_set("mini", ENV)
    by_site: dict[str, set[str]] = {}
    for t in tasks:
        kind = "mutate" if t.recheck_after_reset else ("navigate" if "url_match" in t.eval_types or
                                                        "program_html" in t.eval_types else "retrieve")
        for s in t.sites:
            by_site.setdefault(s, set()).add(kind)
        if t.recheck_after_reset:  # the re-check needs a fixed URL to look at
            assert all(p["url"] != "last" for p in t.eval["program_html"])
    for site in ("shopping", "shopping_admin", "reddit", "gitlab", "classifieds"):
        assert by_site[site] == {"retrieve", "navigate", "mutate"}, site
    for site in ("map", "wikipedia"):
        assert {"retrieve", "navigate"} <= by_site[site]


def test_site_filter_and_errors(tmp_path: Path) -> None:
    assert {t.sites for t in load_task_set("mini", ENV, sites=["reddit"])} == {("reddit",)}
    with pytest.raises(TaskConfigError, match="no bundled task set"):
        load_task_set("nope")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TaskConfigError, match="not valid JSON"):
        read_task_set(bad)
    bad.write_text(json.dumps([{"task_id": 1, "sites": ["x"], "start_url": "u", "eval": {"eval_types": ["magic"]}}]))
    with pytest.raises(TaskConfigError, match="unknown eval_types"):
        load_task_set(bad)
    bad.write_text(json.dumps([{"task_id": 1}, {"task_id": 1}]))
    with pytest.raises(TaskConfigError, match="duplicate"):
        load_task_set(bad)
