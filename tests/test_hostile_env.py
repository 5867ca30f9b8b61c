"""Hostile environment, round two (issue 25): state/data/auth/output paths that are files or under
one, unreadable task files, absurd --memory, a browser path that is no program, snapshot names,
AWS regions with shell metacharacters, ENVCTL_* variables, unbounded timeouts, requests' errors in
the Python API, and booleans where numbers belong.

Every refusal through the real CLI (click's CliRunner on ``envctl.cli.cli``) must give a non-zero
exit code, exactly one line on stderr that names the path or variable, no traceback, and nothing
created. No test here needs Docker or a browser: each refusal comes before either is asked.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envctl.catalog import BUILTIN, load_catalog
from envctl.cli import cli
from envctl.errors import CatalogError, EnvctlError, UsageError
from envctl.validate import ENV_VARS, env_value, validate_memory_size, validate_region

INSTANCE = "fthostileenv"  # never exists: a check that did not fire fails on the engine, not here
EXAMPLES = {"env_value": 0, "cli": 0}
SECRETS = {v.name for v in ENV_VARS if v.secret}


# -- helpers -------------------------------------------------------------------------------------------

@pytest.fixture()
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private world: state, data and home directories, cwd, and no inherited ENVCTL_* variable."""
    for d in ("state", "data", "home", "work"):
        (tmp_path / d).mkdir()
    for var in ENV_VARS:
        if var.name.startswith("ENVCTL_") or var.name == "AWS_REGION":
            monkeypatch.delenv(var.name, raising=False)
    monkeypatch.setenv("ENVCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("ENVCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ENVCTL_INSTANCE", INSTANCE)
    monkeypatch.chdir(tmp_path / "work")
    (tmp_path / "afile").write_text("I am a regular file\n")
    return tmp_path


def tree(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*")}


def refused(root: Path, argv: list[str], *needles: str, env: dict[str, str | None] | None = None,
            codes: tuple[int, ...] = (1, 2)) -> str:
    """Run the CLI; assert a one-line refusal naming every needle, no traceback, nothing created."""
    before = tree(root)
    res = CliRunner().invoke(cli, argv, env=env or {}, catch_exceptions=True)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    lines = res.stderr.strip().splitlines()
    assert res.exit_code in codes, (res.exit_code, res.output)
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.output and lines[0].startswith("error: "), res.output
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert tree(root) == before, sorted(tree(root) - before)
    return lines[0]


# -- 1. state, data, auth and output paths ---------------------------------------------------------------

@pytest.mark.parametrize("var", ["ENVCTL_STATE_DIR", "ENVCTL_DATA_DIR"])
@pytest.mark.parametrize("where", ["afile", "afile/sub", "afile/sub/deeper"])
def test_state_and_data_dir_that_is_a_file_or_under_one(root, var, where):
    path = root / where
    line = refused(root, ["sites", "list"], var, str(path), "regular file", env={var: str(path)})
    assert str(root / "afile") in line


def test_state_dir_checked_by_lock_dir_too(root, monkeypatch):
    from envctl.locks import state_dir
    from envctl.paths import data_root

    monkeypatch.setenv("ENVCTL_STATE_DIR", str(root / "afile" / "x"))
    with pytest.raises(UsageError, match="ENVCTL_STATE_DIR") as exc:
        state_dir()
    assert "\n" not in str(exc.value)
    monkeypatch.setenv("ENVCTL_DATA_DIR", str(root / "afile"))
    with pytest.raises(UsageError, match="ENVCTL_DATA_DIR"):
        data_root()
    assert not (root / "afile").is_dir()


def _read_only_dir() -> Path | None:
    for cand in ("/sys/fs", "/proc/sys"):
        p = Path(cand)
        if p.is_dir() and not os.access(p, os.W_OK):
            return p
    return None


def test_state_dir_not_writable(root):
    ro = _read_only_dir() if os.getuid() == 0 else None
    if ro is None and os.getuid() != 0:
        ro = root / "ro"
        ro.mkdir(mode=0o500)
    if ro is None:
        pytest.skip("no read-only directory to try as root")
    refused(root, ["sites", "list"], "ENVCTL_STATE_DIR", "not writable", env={"ENVCTL_STATE_DIR": str(ro / "envctl")})


@pytest.mark.parametrize("argv,needle", [
    (["login", "--out", "{f}/sub"], "--out"),
    (["lease", "acquire", "--out", "{f}/sub"], "--out"),
    (["smoke", "--report", "{f}/sub"], "report folder"),
    (["snapshot", "rm", "gold", "--auth-dir", "{f}"], "auth directory"),
    (["snapshot", "restore", "homepage", "gold", "--auth-dir", "{f}/x"], "auth directory"),
    (["reset", "homepage", "--auth-dir", "{f}"], "auth directory"),
    (["up", "homepage", "--auth-dir", "{f}/x"], "auth directory"),
    (["images", "export", "homepage", "{f}/x.tar"], "FILE"),
])
def test_output_paths_under_a_regular_file(root, argv, needle):
    f = str(root / "afile")
    line = refused(root, [a.replace("{f}", f) for a in argv], needle, f)
    assert "regular file" in line


def test_export_to_a_fifo_or_directory(root):
    os.mkfifo(root / "fifo")
    refused(root, ["images", "export", "homepage", str(root / "fifo")], "FILE", "FIFO")
    refused(root, ["images", "export", "homepage", str(root / "state")], "state", "directory")


def test_lab_api_refuses_an_auth_dir_that_is_a_file(root):
    from envctl.lab import Lab

    with pytest.raises(UsageError, match="auth directory") as exc:
        Lab(instance=INSTANCE, auth_dir=root / "afile")
    assert str(root / "afile") in str(exc.value)


# -- 2. task files -------------------------------------------------------------------------------------

def _task_files(root: Path) -> dict[str, Path]:
    (root / "tasks.d").mkdir()
    (root / "dir.json").mkdir()
    os.mkfifo(root / "tasks.fifo")
    files = {"directory": root / "tasks.d", "directory .json": root / "dir.json", "FIFO": root / "tasks.fifo"}
    for name, body in {
        "not UTF-8": b"\xff\xfe[{}]", "not JSON": b"[{", "NaN": b"[NaN]", "Infinity": b'{"tasks": [Infinity]}',
        "too deep": b"[" * 100_000, "not a list": b'"tasks"',
        "boolean task_id": b'[{"task_id": true, "sites": ["reddit"], "start_url": "x", "eval": {}}]',
        "sites not a list": b'[{"task_id": 1, "sites": "reddit", "start_url": "x", "eval": {}}]',
        "start_url a number": b'[{"task_id": 1, "sites": [], "start_url": 5, "eval": {}}]',
        "eval_types a string": b'[{"task_id": 1, "sites": [], "start_url": "x", "eval": {"eval_types": "url"}}]',
    }.items():
        f = root / f"{name.replace(' ', '_')}.json"
        f.write_bytes(body)
        files[name] = f
    return files


def test_unreadable_task_files(root):
    files = _task_files(root)
    for kind, f in files.items():
        line = refused(root, ["smoke", "--tasks", str(f)], f.name)
        assert "task" in line, (kind, line)


def test_missing_task_file_or_set(root):
    refused(root, ["smoke", "--tasks", "nosuch"], "nosuch", "bundled")
    refused(root, ["smoke", "--tasks", str(root / "nosuch.json")], "nosuch.json", "does not exist")


# -- 3. plan --memory ----------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0g", "0k", "1k", "-1g", "-0g", "garbage", "inf", "nan", "Infinity", "1.5g",
                                   "1e3g", "99999999g", "true", "", " ", "64 g", "0x40g", "١٢g"])
def test_plan_memory_refused(root, value):
    refused(root, ["plan", "--memory", value], "--memory", codes=(2,))


def test_plan_memory_accepted(root):
    res = CliRunner().invoke(cli, ["plan", "--memory", "64g", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["host_bytes"] == 64 << 30
    assert validate_memory_size("512M") == 512 << 20 and validate_memory_size("1t") == 1 << 40


# -- 4. the browser ------------------------------------------------------------------------------------

@pytest.fixture()
def not_programs(root) -> dict[str, Path]:
    plain = root / "chromium-not-executable"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    return {"directory": root / "state", "not executable": plain, "missing": root / "nope" / "chromium"}


def test_doctor_reports_a_bad_browser_as_failing(not_programs):
    from envctl.doctor import browser_check

    for kind, path in not_programs.items():
        row = browser_check({"ENVCTL_CHROMIUM": str(path)})
        assert row["status"] == "fail", (kind, row)
        assert "ENVCTL_CHROMIUM" in row["detail"] and str(path) in row["detail"], row
    exe = Path("/bin/sh")
    assert browser_check({"ENVCTL_CHROMIUM": str(exe)})["status"] == "ok"


def test_login_refuses_a_bad_browser_in_one_line(root, not_programs):
    for kind, path in not_programs.items():
        refused(root, ["login", "homepage"], "ENVCTL_CHROMIUM", str(path), env={"ENVCTL_CHROMIUM": str(path)})


# -- 5. snapshot rm validates NAME like create and restore ------------------------------------------------

@pytest.mark.parametrize("name", ["../x", "a/b", "A B", "x;rm -rf /", "$(id)", ".hidden", "-rf", "x" * 80, "ä"])
def test_snapshot_rm_validates_the_name(root, name):
    for argv in (["snapshot", "rm", name], ["snapshot", "restore", "homepage", name],
                 ["snapshot", "create", "homepage", name]):
        if name.startswith("-"):
            argv = [*argv[:-1], "--", name] if argv[1] != "create" else [*argv[:-1], "--name", name]
        refused(root, argv, "snapshot name")


# -- 6. AWS region ---------------------------------------------------------------------------------------

REGIONS = ["us-east-1; rm -rf /", "$(id)", "`id`", "us-east-1\nx", "../../etc", "US-EAST-1", "us-east-1 ", "x" * 100, ""]


@pytest.mark.parametrize("region", REGIONS)
def test_region_refused_before_any_aws_call(root, region):
    aws = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}
    if region:  # an empty --region means "none given" (its own one-line refusal)
        refused(root, ["cloud", "down", "--lab", "ftlab", "--region", region], "--region", env=aws)
        refused(root, ["cloud", "up", "--lab", "ftlab", "--allow-cidr", "203.0.113.7/32", "--region", region],
                "--region", env=aws)
    if region.strip() and "\n" not in region:  # a variable with a newline or only blanks is what the shell made it
        refused(root, ["cloud", "down", "--lab", "ftlab"], "AWS_REGION", env={**aws, "AWS_REGION": region})
        refused(root, ["cloud", "up", "--lab", "ftlab", "--allow-cidr", "203.0.113.7/32"], "AWS_REGION",
                env={**aws, "AWS_REGION": region})


def test_region_in_the_library_too():
    from envctl.cloud.aws import ec2_client

    for bad in ("us-east-1; rm -rf /", "$(id)"):
        with pytest.raises(UsageError, match="region"):
            ec2_client(bad)
    assert validate_region("us-gov-west-1") == "us-gov-west-1" and validate_region("ap-southeast-2")


# -- 7. every ENVCTL_* variable -----------------------------------------------------------------------------

NUMERIC = {"ENVCTL_MIN_RATE": ["inf", "nan", "-1", "true", "false", "1e5", "fast", "0x10", "٥", "1_000"],
           "ENVCTL_DISK_BUDGET_BYTES": ["-1", "true", "1.5", "inf", "10GB", "1_000", " ", "1e9"]}
OTHERS = {"ENVCTL_INSTANCE": ["../x", "a/b", "x;id"], "ENVCTL_POOL": ["../x", "$(id)"],
          "ENVCTL_REGISTRY_MIRROR": ["http://a b", "a;b"], "ENVCTL_LEASE_SERVER": ["localhost:7565", "javascript:x"],
          "ENVCTL_SERVE_TOKEN": ["short", "has space in it and is long"], "ENVCTL_AGENT_BASE_URL": ["localhost:8000"],
          "ENVCTL_JUDGE_BASE_URL": ["ftp://x"], "ENVCTL_AWS_ENDPOINT_URL": ["127.0.0.1:5000"],
          "ENVCTL_AGENT_MODEL": ["a\nb"], "ENVCTL_DATA_DIR": ["/tmp/a\nb"], "ENVCTL_CATALOG": ["/tmp/\x01"]}


@pytest.mark.parametrize("name,value", [(n, v) for d in (NUMERIC, OTHERS) for n, vs in d.items() for v in vs])
def test_variable_refused_in_one_line_naming_it(root, name, value):
    line = refused(root, ["sites", "list"], name, env={name: value}, codes=(2,))
    if name in SECRETS:
        assert value not in line


def test_every_variable_has_a_meaning_and_a_check():
    for var in ENV_VARS:
        assert var.meaning and var.check is not None, var.name
    assert {"HOME", "ENVCTL_CHROMIUM", "ENVCTL_POOL", "AWS_REGION"} <= {v.name for v in ENV_VARS}


def test_doctor_is_not_blocked_by_a_bad_variable():
    from envctl.cli import cli as group

    assert "doctor" in group.commands  # it reports every variable (fail rows) instead of refusing


# hostile text: what people and scripts put in variables, and anything else printable
HOSTILE = st.one_of(
    st.sampled_from(["inf", "-inf", "nan", "NaN", "-1", "0", "1", "true", "false", "1e308", "1e999", " 7 ", "0x10",
                     "١٢", "$(id)", "; rm -rf /", "../..", "/", "~", "http://", "https://h/x", "a" * 300, "\t",
                     "C:\\x", "%00", "'", '"', "\\", "\x1b[31m", "\u202e", "s3://b/k", "127.0.0.1:5000",
                     "us-east-1", "ftp://x", "\n"]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=60),
)
ONE_VAR = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.mark.parametrize("name", [v.name for v in ENV_VARS])
def test_property_env_value_accepts_or_refuses_in_one_line(name):
    @ONE_VAR
    @given(value=HOSTILE)
    def check(value: str) -> None:
        EXAMPLES["env_value"] += 1
        try:
            env_value(name, {name: value})
        except UsageError as exc:
            msg = str(exc)
            assert name in msg and "\n" not in msg and "\r" not in msg, msg
            if name in SECRETS and len(value) >= 8:
                assert value not in msg
        # nothing else may escape: any other exception fails the test

    check()


CLI_VARS = [v.name for v in ENV_VARS if v.name.startswith("ENVCTL_")]
CLI_PROPERTY = settings(max_examples=12, deadline=None, derandomize=True, database=None,
                        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.mark.parametrize("name", CLI_VARS)
def test_property_cli_accepts_or_refuses_each_variable_in_one_line(root, name):
    runner = CliRunner()

    @CLI_PROPERTY
    @given(value=HOSTILE)
    def check(value: str) -> None:
        EXAMPLES["cli"] += 1
        before = tree(root)
        res = runner.invoke(cli, ["sites", "show", "homepage", "--json"], env={name: value})
        assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
        assert "Traceback" not in res.output
        if res.exit_code != 0:
            lines = res.stderr.strip().splitlines()
            assert res.exit_code in (1, 2) and len(lines) == 1, res.stderr
            assert name in lines[0] or name == "ENVCTL_CATALOG", lines[0]
            if name in SECRETS and len(value) >= 8:
                assert value not in res.stderr
        assert tree(root) == before

    check()


# -- 8. timeouts are bounded -----------------------------------------------------------------------------

@pytest.mark.parametrize("timeout", [math.inf, math.nan, -1, True, 1e12, "10"])
def test_waits_and_probes_refuse_unbounded_timeouts(timeout):
    from envctl.catalog import Probe
    from envctl.healthchecks.probes import run_probe
    from envctl.healthchecks.wait import wait_for

    calls = []
    with pytest.raises(UsageError, match="timeout"):
        wait_for(lambda: (calls.append(1) or False, None), timeout=timeout)
    assert not calls
    with pytest.raises(UsageError, match="probe timeout"):
        run_probe(Probe(name="p"), "http://127.0.0.1:9", timeout=timeout)


def _catalog_with(root: Path, path: str, value: Any) -> Path:
    raw = yaml.safe_load(BUILTIN.read_text())
    node = raw
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    f = root / "sites.yaml"
    f.write_text(yaml.safe_dump(raw))
    return f


@pytest.mark.parametrize("value", [".inf", "1e9", "0", "-5", "true", "'600'"])
def test_catalog_health_timeout_bounded(root, value):
    raw = yaml.safe_load(BUILTIN.read_text())
    site = next(n for n, s in raw["sites"].items() if "health" in s)
    f = _catalog_with(root, f"sites.{site}.health.timeout", 1)
    f.write_text(f.read_text().replace("timeout: 1\n", f"timeout: {value}\n", 1))
    refused(root, ["--catalog", str(f), "sites", "list"], str(f), "timeout", codes=(2,))


# -- 9. the Python API raises envctl's errors, never requests' ---------------------------------------------

@pytest.mark.parametrize("base", ["localhost:1", "http://[::1", "http://127.0.0.1:9", "http://a b", "ftp://x", ""])
def test_probe_turns_requests_errors_into_a_failed_result(base):
    from envctl.catalog import Probe
    from envctl.healthchecks.probes import run_probe

    res = run_probe(Probe(name="p"), base, timeout=2)
    assert not res.ok and res.detail


@pytest.mark.parametrize("base", ["localhost:1/v1", "http://[::1/v1", "http://127.0.0.1:9/v1", "ftp://x/v1"])
def test_chat_completion_raises_envctl_errors(base):
    from envctl.smoke.judge import JudgeError, chat_completion

    with pytest.raises(JudgeError) as exc:
        chat_completion(base, None, "m", [{"role": "user", "content": "hi"}], timeout=2)
    assert exc.value.hint and "\n" not in exc.value.message.split(": ", 1)[0]


def test_judge_and_agent_from_env_name_a_bad_variable():
    from envctl.smoke.judge import Judge
    from envctl.smoke.llm_agent import LLMAgent

    with pytest.raises(UsageError, match="ENVCTL_JUDGE_BASE_URL"):
        Judge.from_env({"ENVCTL_JUDGE_BASE_URL": "localhost:8000", "ENVCTL_JUDGE_MODEL": "m"})
    with pytest.raises(UsageError, match="ENVCTL_AGENT_BASE_URL"):
        LLMAgent.from_env({"ENVCTL_AGENT_BASE_URL": "localhost:8000", "ENVCTL_AGENT_MODEL": "m"})


def test_lab_constructor_and_lease_lookup_raise_envctl_errors(root, monkeypatch):
    from envctl.lab import Lab
    from envctl.leases import lease

    with pytest.raises(UsageError):
        Lab(instance="../x")
    monkeypatch.setenv("ENVCTL_POOL", "../x")
    with pytest.raises(EnvctlError, match="ENVCTL_POOL"):
        lease(sites=["homepage"])
    monkeypatch.delenv("ENVCTL_POOL")
    monkeypatch.setenv("ENVCTL_LEASE_SERVER", "localhost:7565")
    with pytest.raises(EnvctlError, match="ENVCTL_LEASE_SERVER"):
        lease(sites=["homepage"])


# -- 10. booleans where numbers belong ----------------------------------------------------------------------

NUMBER_FIELDS = ["reset_server.port", "sites.{site}.health.timeout", "sites.{site}.reset.spares",
                 "sites.{site}.services.{svc}.stop_timeout"]


@pytest.mark.parametrize("field", NUMBER_FIELDS)
@pytest.mark.parametrize("value", [True, False])
def test_catalog_numbers_refuse_booleans(root, field, value):
    raw = yaml.safe_load(BUILTIN.read_text())
    site = next(n for n, s in raw["sites"].items() if "health" in s)
    svc = next(iter(raw["sites"][site]["services"]))
    path = field.format(site=site, svc=svc)
    f = _catalog_with(root, path, value)
    with pytest.raises(CatalogError) as exc:
        load_catalog(f)
    assert path.split(".")[-1] in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("memory", ["0m", "1k", "5m", "99999g"])
def test_catalog_memory_limits_bounded(root, memory):
    raw = yaml.safe_load(BUILTIN.read_text())
    site = next(n for n, s in raw["sites"].items() if any("memory" in sv for sv in s["services"].values()))
    svc = next(n for n, sv in raw["sites"][site]["services"].items() if "memory" in sv)
    f = _catalog_with(root, f"sites.{site}.services.{svc}.memory", memory)
    refused(root, ["--catalog", str(f), "sites", "list"], "memory", codes=(2,))


@pytest.mark.parametrize("entry", [{"size": True}, {"size": -1}, {"size": 1.5}, {"size": "5"}, {"sha256": 5},
                                   {"mirror": False}])
def test_pin_file_refuses_wrong_types(tmp_path, entry):
    from envctl.errors import FetchError
    from envctl.images.lock import LockFile

    f = tmp_path / "images.lock"
    f.write_text(json.dumps({"artifacts": {"a.tar": entry}}))
    with pytest.raises(FetchError) as exc:
        LockFile(f).pins()
    assert str(f) in str(exc.value) and "\n" not in str(exc.value)
    f.write_text(json.dumps(["not", "an", "object"]))
    with pytest.raises(FetchError):
        LockFile(f).pins()


def test_zz_report_examples(capsys):
    with capsys.disabled():
        print(f"\n[hostile env] property examples run: env_value {EXAMPLES['env_value']}, "
              f"CLI {EXAMPLES['cli']}, total {EXAMPLES['env_value'] + EXAMPLES['cli']}")
    if EXAMPLES["env_value"]:
        assert EXAMPLES["env_value"] >= 20 * len(ENV_VARS)
