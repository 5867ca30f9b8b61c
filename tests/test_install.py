"""A regular install without extras (``pip install .`` into a fresh venv, no source tree on the path): the core
commands work, and the parts that need an extra say which one in one line."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    build = tmp_path_factory.mktemp("build")  # setuptools writes build/ and *.egg-info: not into the tree
    got = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(ROOT)], capture_output=True, text=True,
                         cwd=build, timeout=600)
    assert got.returncode == 0, got.stderr[-2000:]
    return venv / "bin"


def _run(bin_dir: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bin_dir / "envctl"), *argv], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(cwd), "ENVCTL_STATE_DIR": str(cwd / "s"),
                               "ENVCTL_DATA_DIR": str(cwd / "d")})


def test_no_extras_core_commands_work_and_extras_are_named(bare: Path, tmp_path: Path) -> None:
    # none of the extras' modules is importable in that venv
    probe = subprocess.run([str(bare / "python"), "-c", "import importlib.util as u; print([m for m in "
                            "('boto3', 'ansible_runner', 'playwright', 'moto') if u.find_spec(m)])"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert probe.stdout.strip() == "[]", probe.stdout + probe.stderr
    for argv in (["--help"], ["up", "--help"], ["sites", "list"], ["sites", "list", "--json"], ["reset", "--help"]):
        got = _run(bare, *argv, cwd=tmp_path)
        assert got.returncode == 0, (argv, got.stderr[-1000:])
        assert got.stdout.strip()
    for argv, extra in ((["cloud", "up", "--lab", "x", "--region", "us-east-2", "--allow-cidr", "203.0.113.7/32"],
                         "cloud"),
                        (["cloud", "env", "--lab", "x"], "cloud"),
                        (["smoke", "--tasks", "mini"], "browser")):
        got = _run(bare, *argv, cwd=tmp_path)
        lines = got.stderr.strip().splitlines()
        assert got.returncode == 2 and len(lines) == 1, (argv, got.stderr)
        assert f"pip install 'envctl[{extra}]'" in lines[0] and "Traceback" not in got.stderr
    # nothing was written for the refused commands
    assert not (tmp_path / "d" / "labs").exists()
