"""Package the controller's own envctl for remote hosts, so every host runs the same code.

``controller_wheel`` builds a wheel from the source tree this envctl was imported from
(reproducibly: a fixed SOURCE_DATE_EPOCH, so an unchanged tree gives byte-identical wheels and a
re-run of the playbook copies nothing). ``wheelhouse`` adds the dependencies, for hosts that
cannot or should not reach PyPI (``pip install --no-index``).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from envctl.errors import EnvctlError

REPRODUCIBLE_EPOCH = "315532800"  # 1980-01-01, the earliest time a zip can hold


@dataclass(frozen=True)
class ControllerPackage:
    version: str
    wheel: Path
    sha256: str
    wheelhouse: Path | None = None  # a directory holding the wheel and all its dependencies


def source_root() -> Path | None:
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "envctl").is_dir() else None


def _pip(*args: str, cwd: Path | None = None) -> None:
    env = {**os.environ, "SOURCE_DATE_EPOCH": REPRODUCIBLE_EPOCH, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    p = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, env=env, cwd=cwd)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
        raise EnvctlError(f"pip {args[0]} failed: {' | '.join(tail)}", "check that pip can reach the package index")


def controller_wheel(out_dir: Path, *, with_dependencies: bool = False) -> ControllerPackage:
    """Build ``envctl-<version>-py3-none-any.whl`` into ``out_dir`` (and optionally a wheelhouse)."""
    version = metadata.version("envctl")
    env_wheel = os.environ.get("ENVCTL_WHEEL")
    out_dir.mkdir(parents=True, exist_ok=True)
    if env_wheel:
        wheel = Path(env_wheel)
    else:
        root = source_root()
        if root is None:
            raise EnvctlError(
                "cannot package this envctl for the hosts: it is not running from a source tree",
                "set ENVCTL_WHEEL to the envctl wheel you installed from",
            )
        for old in out_dir.glob("envctl-*.whl"):
            old.unlink()
        with tempfile.TemporaryDirectory(prefix="envctl-src-") as tmp:
            # Build from a clean copy: nothing is written into the (shared) source tree, and
            # caches or stray files never end up in the wheel.
            src = Path(tmp) / "src"
            shutil.copytree(root / "envctl", src / "envctl", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
            for name in ("pyproject.toml", "README.md", "LICENSE"):
                if (root / name).is_file():
                    shutil.copy2(root / name, src / name)
            _pip("wheel", "--no-deps", "-w", str(out_dir), str(src))
        wheel = next(out_dir.glob("envctl-*.whl"))
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    house = None
    if with_dependencies:
        house = out_dir / "wheelhouse"
        house.mkdir(exist_ok=True)
        _pip("download", "-d", str(house), str(wheel))
    return ControllerPackage(version, wheel, sha, house)
