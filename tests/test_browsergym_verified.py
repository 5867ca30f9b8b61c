"""BrowserGym's webarena-verified environment (``browsergym-webarena-verified`` 0.14.3 from PyPI, unmodified)
against a mini instance (issue 31), driven with the variables ``envctl env --format browsergym`` prints.

It needs Python >= 3.12, which Debian bookworm lacks: the test takes ``$ENVCTL_PYTHON312`` or the machine
image's pyenv CPython (``/root/.pyenv/versions/3.12*/bin/python3``) and skips when there is none. A fresh venv
gets ``browsergym-webarena-verified`` and ``browsergym-webarena`` (which it imports without declaring it); it is
kept in ``~/.cache/envctl-tests`` for the next run (a few minutes of pip on a new machine).
Two things it would download at run time are given through its own environment variables, no code changed:
``NLTK_DATA`` with an empty ``tokenizers/punkt_tab`` (it downloads NLTK's punkt_tab at import; its
webarena_verified environment never tokenizes: the evaluation is webarena-verified's), and
``PLAYWRIGHT_BROWSERS_PATH`` whose ``chromium-1117`` is Debian's Chromium (Playwright 1.44's own build;
BrowserGym's chat window launches it without the executable_path the environment takes).

What it shows: a navigate task scores 1.0 with envctl's ``PW_EXTRA_HEADERS`` set (GitLab has no header login,
BrowserGym's own form login works on the mini GitLab); on a site that logs in by header, BrowserGym's
``ui_login`` still runs after the headers are set and looks for a "Log in" link the logged-in page no longer
has, so ``reset`` times out (upstream); without ``PW_EXTRA_HEADERS`` its form login works and the mutation is
made, but 0.14.3 judges a Playwright trace, whose form bodies are kept as resources (``postData.text`` is
empty) and webarena-verified 1.2.3 reads ``postData.text`` only, so a task that checks a POST body scores 0.5
(upstream; envctl's smoke records a HAR with the bodies embedded and scores 1.0 on the same task).

Instance ``wav3`` at port offset 52200.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import _wait_ports_bindable, envctl_cli as envctl, remove_instance_images

pytestmark = [pytest.mark.docker, pytest.mark.browser, pytest.mark.mini, pytest.mark.slow]

INSTANCE, OFFSET = "wav3", 52200
RUNNER = Path(__file__).with_name("browsergym_run.py")
DONE = json.dumps({"task_type": "{kind}", "status": "SUCCESS", "retrieved_data": None})


def _python312() -> str | None:
    found = [os.environ.get("ENVCTL_PYTHON312", "")] + sorted(glob.glob("/root/.pyenv/versions/3.1[2-9]*/bin/python3"))
    return next((p for p in found if p and os.access(p, os.X_OK)), None)


PACKAGES = ("browsergym-webarena-verified==0.14.3", "browsergym-webarena==0.14.3")


def _venv(python: str) -> Path:
    """A venv with PACKAGES (a few minutes of pip): kept between runs in ``~/.cache/envctl-tests`` (a new machine
    makes it once), keyed by the packages and the Python, and used only when it holds them at their versions."""
    key = hashlib.sha256(json.dumps([PACKAGES, os.path.realpath(python)]).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envctl-tests"
    venv = cache / f"browsergym-{key}"
    check = [str(venv / "bin" / "python"), "-c",  # the installed versions (importing it would fetch NLTK data)
             "import importlib.metadata as m, sys; "
             f"sys.exit(any(m.version(n) != v for n, v in {[p.split('==') for p in PACKAGES]!r}))"]
    if venv.is_dir() and subprocess.run(check, capture_output=True, timeout=300).returncode == 0:
        return venv
    shutil.rmtree(venv, ignore_errors=True)  # what a killed run left
    cache.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run([python, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
        p = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *PACKAGES], capture_output=True, text=True,
                           timeout=3000)
        assert p.returncode == 0, p.stderr[-3000:]
        assert subprocess.run(check, capture_output=True, timeout=300).returncode == 0, "the venv lacks " + str(PACKAGES)
    except BaseException:
        shutil.rmtree(venv, ignore_errors=True)  # half a venv is never taken for a whole one
        raise
    return venv


@pytest.fixture(scope="module")
def browsergym(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A Python >= 3.12 venv with BrowserGym's webarena-verified environment, and the run environment it needs."""
    python = _python312()
    if python is None:
        pytest.skip("BrowserGym's webarena-verified environment needs Python >= 3.12 (none here: set ENVCTL_PYTHON312)")
    root = tmp_path_factory.mktemp("browsergym")
    venv = _venv(python)
    (root / "nltk" / "tokenizers" / "punkt_tab").mkdir(parents=True)
    chrome = root / "pw" / "chromium-1117" / "chrome-linux"
    chrome.mkdir(parents=True)
    (chrome / "chrome").symlink_to("/usr/bin/chromium")
    return {"python": str(venv / "bin" / "python"), "NLTK_DATA": str(root / "nltk"),
            "PLAYWRIGHT_BROWSERS_PATH": str(root / "pw")}


@pytest.fixture(scope="module")
def lab(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    built = envctl("images", "build", "--flavor", "mini", "--json")
    assert built.returncode == 0, built.stderr[-2000:]
    auth = tmp_path_factory.mktemp("wav3-auth")
    envctl("down", "-i", INSTANCE, "--volumes")
    _wait_ports_bindable(OFFSET)  # the offset reaches into the ephemeral range: a client socket may hold a port
    try:
        up = envctl("up", "gitlab", "reddit", "--flavor", "mini", "-i", INSTANCE, "--port-offset", str(OFFSET),
                    "--auth-dir", str(auth), "--spares", "0", "--json")
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
        yield auth
    finally:
        envctl("down", "-i", INSTANCE, "--volumes")
        remove_instance_images(INSTANCE)  # the golden images its resets made


def _run(bg: dict[str, str], auth: Path, task_id: int, actions: list[str], *, headers: bool) -> tuple[dict, dict]:
    out = envctl("env", "--format", "browsergym", *(["--header-login"] if headers else []), "-i", INSTANCE,
                 "--auth-dir", str(auth), "--json")
    assert out.returncode == 0, out.stderr
    values = json.loads(out.stdout)
    assert values.get("PW_EXTRA_HEADERS") == (str((auth / "extra_headers.json").resolve()) if headers else None)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WA_", "VWA_", "PW_EXTRA"))}
    env.update(values)
    env.update({k: v for k, v in bg.items() if k != "python"})
    p = subprocess.run([bg["python"], str(RUNNER), str(task_id), json.dumps(actions)], capture_output=True, text=True,
                       env=env, timeout=900)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line, p.stdout[-2000:] + p.stderr[-3000:]
    return json.loads(line[len("RESULT "):]), values


def test_a_navigate_task_scores_1_with_envctls_variables_and_headers(browsergym: dict[str, str], lab: Path) -> None:
    values = json.loads(envctl("env", "--format", "browsergym", "-i", INSTANCE, "--auth-dir", str(lab), "--json").stdout)
    result, _ = _run(browsergym, lab, 44, [f'goto("{values["WA_GITLAB"]}/dashboard/todos")',
                                           f"send_msg_to_user({json.dumps(DONE.replace('{kind}', 'NAVIGATE'))})"],
                     headers=True)
    assert result == {"reward": 1.0}, result


def test_header_login_meets_browsergyms_ui_login_and_its_trace_misses_form_bodies(browsergym: dict[str, str],
                                                                                  lab: Path) -> None:
    values = json.loads(envctl("env", "--format", "browsergym", "-i", INSTANCE, "--auth-dir", str(lab), "--json").stdout)
    actions = [f'goto("{values["WA_REDDIT"]}/user/MarvelsGrantMan136/edit_biography")', "fill@Biography@I am a robot",
               "click@Save", f"send_msg_to_user({json.dumps(DONE.replace('{kind}', 'MUTATE'))})"]
    # upstream: ui_login runs after the headers logged the page in, and waits for a 'Log in' link
    with_headers, _ = _run(browsergym, lab, 399, actions, headers=True)
    assert "error" in with_headers and "Timeout" in with_headers["error"], with_headers
    # without the headers, BrowserGym logs in with the mini forum's form and makes the change ...
    without, _ = _run(browsergym, lab, 399, actions, headers=False)
    bio = envctl("exec", "reddit", "-i", INSTANCE, "--", "env", "PGPASSWORD=postmill", "psql", "-h", "localhost", "-U",
                 "postmill", "-d", "postmill", "-Atc", "SELECT biography FROM users WHERE username = 'MarvelsGrantMan136'")
    assert bio.stdout.strip() == "I am a robot", bio.stdout + bio.stderr
    # ... and scores 0.5: the agent's answer passes, the POST body is not in its trace (upstream; 1.0 once fixed)
    assert without == {"reward": 0.5}, without
