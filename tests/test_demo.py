"""End to end, as `make demo` runs it: up --all on the mini flavor, then `envctl smoke --tasks mini`.

The ``up --all`` is the session's shared mini instance (``mini_all`` in tests/conftest.py: the same
``envctl images build --flavor mini`` and ``envctl up --all --flavor mini --json``, logins recorded).
The smoke run writes, and resets every site it wrote through envctl (its tasks' own reset checks),
so the instance is pristine again afterwards.

This is the one run of the bundled ``mini`` task set in the suite (issue 22: it used to run a second
time site by site against bare containers in test_smoke_mini.py, which asserted the same per-task
things now asserted here: every task passes, each state-changing one was checked pristine before,
acted, reset and re-checked, the negative control was rejected, the report says ok).
"""
from __future__ import annotations

import json

import pytest

from conftest import MiniAll, envctl_cli as envctl
from envctl.smoke import load_task_set

pytestmark = [pytest.mark.docker, pytest.mark.browser, pytest.mark.mini, pytest.mark.slow]


def test_up_all_then_smoke_mini_passes(mini_all: MiniAll, tmp_path):
    result = mini_all.up
    assert {s["site"] for s in result["sites"]} == {"shopping", "shopping_admin", "reddit", "gitlab", "wikipedia",
                                                   "map", "classifieds", "homepage"}
    assert all(s["ok"] for s in result["sites"])
    assert "gitlab.reddit_state.json" in result["login_files"]
    report = tmp_path / "report"
    r = envctl("smoke", "--tasks", "mini", "--instance", mini_all.instance, "--report", str(report), "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 0, [t for t in out["tasks"] if t["status"] == "fail"]
    tasks = [t for t in out["tasks"] if not t["negative_control"]]
    assert len(tasks) >= 20 and all(t["status"] == "pass" for t in tasks), [(t["task_id"], t["reason"]) for t in tasks
                                                                              if t["status"] != "pass"]
    # the negative control's wrong answer was rejected by the evaluator ("pass" means it said no)
    negative = [t for t in out["tasks"] if t["negative_control"]]
    assert negative and all(t["status"] == "pass" for t in negative)
    # at least one state-changing task acted, was reset through envctl, and its change was gone
    recheck = [t for t in tasks if any(c["name"] == "after_reset" and c["score"] == 1.0 for c in t.get("checks", []))]
    assert recheck, "no state-changing task was re-checked after its reset"
    # every site's tasks ran, and every state-changing task went: pristine check -> act -> reset -> re-check
    task_set = load_task_set("mini")
    assert {s for t in task_set for s in t.sites} == {"shopping", "shopping_admin", "reddit", "gitlab", "wikipedia",
                                                      "map", "classifieds", "homepage"}
    by_id = {t["task_id"]: t for t in tasks}
    assert set(by_id) == {t.task_id for t in task_set}, set(by_id) ^ {t.task_id for t in task_set}
    mutating = [t.task_id for t in task_set if t.recheck_after_reset]
    assert mutating
    for task_id in mutating:
        names = [c["name"] for c in by_id[task_id]["checks"]]
        assert names[0] == "before" and names[-1] == "after_reset", (task_id, names)
    assert (report / "report.html").is_file() and json.loads((report / "report.json").read_text())["ok"] is True
