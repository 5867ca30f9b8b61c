"""The package ships ``py.typed``: its annotations must hold (mypy, configured in pyproject.toml)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_is_clean() -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_benches_and_scripts_use_envctl_as_it_is() -> None:
    """bench/ and scripts/ call envctl's internals (a bench that crashes on a renamed function is found here, not by
    the user who runs it): mypy over them, with bench/'s own imports (common, fetch_server) on its path."""
    files = sorted(str(p.relative_to(ROOT)) for p in [*ROOT.glob("bench/*.py"), *ROOT.glob("scripts/*.py")])
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", *files], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "MYPYPATH": "bench"})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
