"""Every bench script still imports and parses its arguments (a refactor that breaks one shows here, not in the
next 'make bench')."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if p.name != "common.py")


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_bench_script_starts(script: Path) -> None:
    got = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr[-1500:]
    assert "usage" in got.stdout.lower()


def test_make_bench_runs_every_bench_script() -> None:
    makefile = (BENCH.parent / "Makefile").read_text()
    missing = [p.name for p in SCRIPTS if f"bench/{p.name}" not in makefile]
    assert not missing, f"not in 'make bench': {missing}"
