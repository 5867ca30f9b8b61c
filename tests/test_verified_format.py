"""webarena-verified's formats without an instance: the environment config envctl writes (loaded by the package's
own model), task sets of its tasks (merged with its installed dataset, refused when they differ), and the
reference agent's answer in its shape (checked by its own ``FinalAgentResponse``)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from envctl.catalog import load_catalog
from envctl.smoke import TaskConfigError, load_task_set
from envctl.smoke.agent import Trajectory
from envctl.smoke.verified import config
from envctl.smoke.verified_run import negative_control, response

ENV = {"SHOPPING": "http://127.0.0.1:7770", "SHOPPING_ADMIN": "http://127.0.0.1:7780/admin",
       "REDDIT": "http://localhost:9999", "GITLAB": "http://lab.example:8023", "MAP": "http://127.0.0.1:3000",
       "WIKIPEDIA": "http://127.0.0.1:8888/wikipedia_en_all_maxi_2022-05/A/User:The_other_Kiwix_guy/Landing",
       "HOMEPAGE": "http://127.0.0.1:4399", "CLASSIFIEDS": "http://127.0.0.1:9980"}


def test_the_config_has_its_seven_sites_with_aliases_header_flags_and_accounts(tmp_path: Path) -> None:
    cfg = config(load_catalog(), ENV, "mini")
    envs = cfg["environments"]
    assert set(envs) == {"__SHOPPING__", "__SHOPPING_ADMIN__", "__REDDIT__", "__GITLAB__", "__MAP__", "__WIKIPEDIA__",
                         "__HOMEPAGE__"}  # classifieds is not one of webarena-verified's
    assert envs["__SHOPPING_ADMIN__"]["urls"] == ["http://127.0.0.1:7780/admin", "http://localhost:7780/admin"]
    assert envs["__REDDIT__"]["urls"] == ["http://localhost:9999", "http://127.0.0.1:9999"]
    assert envs["__GITLAB__"]["urls"] == ["http://lab.example:8023"]  # no alias for a real host name
    assert envs["__WIKIPEDIA__"]["urls"][0] == ENV["WIKIPEDIA"] and "http://127.0.0.1:8888" in envs["__WIKIPEDIA__"]["urls"]
    assert {s for s, e in envs.items() if e["use_header_login"]} == {"__SHOPPING_ADMIN__", "__SHOPPING__", "__REDDIT__"}
    assert envs["__GITLAB__"]["credentials"] == {"username": "byteblaze", "password": "hello1234"}
    assert "credentials" not in envs["__MAP__"]
    assert not any(e["use_header_login"] for e in config(load_catalog(), ENV, "full")["environments"].values())
    assert not any("credentials" in e for e in config(load_catalog(), ENV, "mini", credentials=False)["environments"].values())
    # the package's own model loads it
    wav = pytest.importorskip("webarena_verified.types.config")
    f = tmp_path / "c.json"
    f.write_text(json.dumps(cfg))
    loaded = wav.WebArenaVerifiedConfig.from_file(f)
    assert loaded.environments is not None and len(loaded.environments) == 7


def test_the_bundled_set_is_its_tasks_by_id_with_recipes_or_gaps() -> None:
    pytest.importorskip("webarena_verified")
    tasks = load_task_set("webarena-verified", ENV)
    assert all(t.format == "webarena-verified" for t in tasks)
    runnable = [t for t in tasks if t.recipe is not None]
    gaps = [t for t in tasks if t.recipe is None]
    assert len(runnable) == 14 and len(gaps) == 11
    assert all(t.config["envctl_gaps"]["mini"] for t in gaps)
    t44 = next(t for t in tasks if t.task_id == "44")
    assert t44.intent == "Open my todos page" and t44.start_urls == ("http://lab.example:8023",)
    assert t44.recipe[0]["url"] == "http://lab.example:8023/dashboard/todos"  # envctl's recipe filled
    assert "__GITLAB__/dashboard/todos" in json.dumps(t44.config["eval"])  # its evaluators' expectations as they are
    control = negative_control(tasks, "mini")
    assert control is not None and control.expect_fail and control.task_id.endswith(":negative-control")
    assert {t.task_id for t in load_task_set("webarena-verified", ENV, sites=["map"])} == {"70", "369", "370", "371"}


@pytest.mark.parametrize("entry,expect", [
    ({"task_id": 99999}, "task 99999 is not in webarena-verified"),
    ({"task_id": "44"}, "a webarena-verified task_id is a whole number"),
    ({"task_id": 44, "intent": "Open my todos page, please"}, "'intent' differs from webarena-verified"),
    ({"task_id": 44, "notes": "x"}, "unknown key 'notes'"),
])
def test_a_bad_entry_is_refused_in_one_line(tmp_path: Path, entry, expect) -> None:
    pytest.importorskip("webarena_verified")
    f = tmp_path / "set.json"
    f.write_text(json.dumps({"format": "webarena-verified", "tasks": [entry]}))
    with pytest.raises(TaskConfigError) as exc:
        load_task_set(str(f), ENV)
    assert expect in str(exc.value) and "\n" not in str(exc.value) and str(f) in str(exc.value)


def test_an_unknown_format_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "set.json"
    f.write_text(json.dumps({"format": "webarena-unverified", "tasks": [{"task_id": 1}]}))
    with pytest.raises(TaskConfigError, match="task set format 'webarena-unverified' is unknown"):
        load_task_set(str(f), ENV)


def test_a_whole_task_as_the_package_has_it_is_accepted(tmp_path: Path) -> None:
    pytest.importorskip("webarena_verified")
    from envctl.smoke.verified import dataset

    f = tmp_path / "set.json"
    f.write_text(json.dumps([dataset()[44], dataset()[70]]))  # no 'format': its tasks' shape says so
    assert [t.task_id for t in load_task_set(str(f), ENV)] == ["44", "70"]


def test_the_reference_answer_has_its_shape() -> None:
    wav = pytest.importorskip("webarena_verified.types.agent_response")
    tasks = {t.task_id: t for t in load_task_set("webarena-verified", ENV)}
    retrieve = response(tasks["70"], Trajectory("70", answer=" 15213 "))
    assert retrieve == {"task_type": "RETRIEVE", "status": "SUCCESS", "retrieved_data": ["15213"], "error_details": None}
    failed = response(tasks["44"], Trajectory("44", error="step 1 failed"))
    assert failed["task_type"] == "NAVIGATE" and failed["status"] == "UNKNOWN_ERROR" and failed["retrieved_data"] is None
    for answer in (retrieve, failed):
        wav.FinalAgentResponse.model_validate(answer)
