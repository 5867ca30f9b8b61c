"""The package ships ``py.typed``: its annotations must hold (mypy, configured in pyproject.toml)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_is_clean() -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
