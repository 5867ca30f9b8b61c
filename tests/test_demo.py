"""End to end, as `make demo` runs it: up --all on the mini flavor, then `envctl smoke --tasks mini`."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.browser, pytest.mark.mini, pytest.mark.slow]
INSTANCE, OFFSET = "demo-test", 23000


def envctl(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envctl", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def instance(docker_engine, tmp_path_factory):
    build = envctl("images", "build", "--flavor", "mini", "--json")
    assert build.returncode == 0, build.stderr
    auth = tmp_path_factory.mktemp("auth")
    envctl("down", "--instance", INSTANCE)
    up = envctl("up", "--all", "--flavor", "mini", "--instance", INSTANCE, "--port-offset", str(OFFSET),
                "--auth-dir", str(auth), "--json")
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    yield json.loads(up.stdout), auth
    envctl("down", "--instance", INSTANCE)


def test_up_all_then_smoke_mini_passes(instance, tmp_path):
    result, auth = instance
    assert {s["site"] for s in result["sites"]} == {"shopping", "shopping_admin", "reddit", "gitlab", "wikipedia",
                                                   "map", "classifieds", "homepage"}
    assert all(s["ok"] for s in result["sites"])
    assert "gitlab.reddit_state.json" in result["login_files"]
    report = tmp_path / "report"
    r = envctl("smoke", "--tasks", "mini", "--instance", INSTANCE, "--report", str(report), "--json")
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
    assert (report / "report.html").is_file() and (report / "report.json").is_file()
