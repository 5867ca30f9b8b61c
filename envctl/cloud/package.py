"""Package the controller's own envctl for remote hosts, so every host runs the same code.

``controller_wheel`` makes ``envctl-<version>-py3-none-any.whl`` from whatever this envctl is:

* ``$ENVCTL_WHEEL``, when set: that wheel as is;
* a source tree (a checkout, or an editable install of one): built with pip from a clean copy;
* an installed distribution (``pip install envctl-….whl``, no source tree): re-packed from the files
  its ``RECORD`` lists (the package and its ``.dist-info``; install-time files such as ``INSTALLER``,
  ``direct_url.json``, scripts and byte code left out), with a new ``RECORD``.

Both builds are reproducible (a fixed SOURCE_DATE_EPOCH; fixed order, times and modes in the
re-pack), so an unchanged envctl gives byte-identical wheels and a re-run of the playbook copies
nothing. ``wheelhouse`` adds the dependencies, for hosts that cannot or should not reach PyPI
(``pip install --no-index``).
"""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath

from envctl.errors import EnvctlError
from envctl.validate import env_value

REPRODUCIBLE_EPOCH = "315532800"  # 1980-01-01, the earliest time a zip can hold
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
# written by the installer, not part of the wheel (PEP 376 / 610 / 627)
INSTALL_TIME_FILES = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json", "RECORD.jws", "RECORD.p7s"}


@dataclass(frozen=True)
class ControllerPackage:
    version: str
    wheel: Path
    sha256: str
    wheelhouse: Path | None = None  # a directory holding the wheel and all its dependencies


def source_root() -> Path | None:
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "envctl").is_dir() else None


def installed_distribution() -> metadata.Distribution | None:
    """The installed distribution whose files are the envctl package running now (None for a
    source checkout or an editable install, whose RECORD lists no package files)."""
    package_dir = Path(__file__).resolve().parents[1]
    try:
        dists = [metadata.distribution("envctl")]
    except metadata.PackageNotFoundError:
        dists = []
    dists += [d for d in metadata.distributions() if (d.metadata["Name"] or "").lower() == "envctl"]
    for dist in dists:
        for f in dist.files or ():
            if PurePosixPath(str(f)) == PurePosixPath("envctl/__init__.py"):
                if Path(str(dist.locate_file(f))).resolve().parent == package_dir:
                    return dist
    return None


def _pip(*args: str, cwd: Path | None = None) -> None:
    env = {**os.environ, "SOURCE_DATE_EPOCH": REPRODUCIBLE_EPOCH, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    p = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, env=env, cwd=cwd)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
        raise EnvctlError(f"pip {args[0]} failed: {' | '.join(tail)}", "check that pip can reach the package index")


def _wheel_from_source(root: Path, out_dir: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="envctl-src-") as tmp:
        # Build from a clean copy: nothing is written into the (shared) source tree, and
        # caches or stray files never end up in the wheel.
        src = Path(tmp) / "src"
        shutil.copytree(root / "envctl", src / "envctl", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (root / name).is_file():
                shutil.copy2(root / name, src / name)
        _pip("wheel", "--no-deps", "-w", str(out_dir), str(src))
    return next(out_dir.glob("envctl-*.whl"))


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel_tag(wheel_file: str) -> str:
    tags = [line.split(":", 1)[1].strip() for line in wheel_file.splitlines() if line.startswith("Tag:")]
    return tags[0] if len(tags) == 1 else "py3-none-any"


def wheel_from_installed(dist: metadata.Distribution, out_dir: Path) -> Path:
    """Re-pack an installed (non-editable) distribution into a wheel in ``out_dir``."""
    entries: dict[str, bytes] = {}
    info_dir = ""
    for f in dist.files or ():
        parts = PurePosixPath(str(f)).parts
        if not parts or ".." in parts or "__pycache__" in parts or parts[-1].endswith((".pyc", ".pyo")):
            continue  # scripts (../../bin/envctl) are made by the installer; byte code by Python
        if parts[0].endswith(".dist-info"):
            info_dir = parts[0]
            if len(parts) == 2 and parts[1] in INSTALL_TIME_FILES:
                continue
        path = Path(str(dist.locate_file(f)))
        try:
            entries["/".join(parts)] = path.read_bytes()
        except OSError as exc:
            raise EnvctlError(f"cannot package the installed envctl: {path} is unreadable ({exc.strerror})",
                              "reinstall envctl (pip install --force-reinstall envctl-….whl)") from None
    wheel_meta = entries.get(f"{info_dir}/WHEEL", b"").decode()
    if not info_dir or not wheel_meta or "envctl/__init__.py" not in entries:
        raise EnvctlError("cannot package the installed envctl: its RECORD lists no wheel metadata or no package",
                          "reinstall envctl from a wheel, or set ENVCTL_WHEEL to the wheel you installed from")
    name, version = info_dir[: -len(".dist-info")].split("-", 1)
    rows = [[p, _record_hash(data), str(len(data))] for p, data in sorted(entries.items())]
    rows.append([f"{info_dir}/RECORD", "", ""])
    record = io.StringIO()
    csv.writer(record, lineterminator="\n").writerows(rows)
    entries[f"{info_dir}/RECORD"] = record.getvalue().encode()
    wheel = out_dir / f"{name}-{version}-{_wheel_tag(wheel_meta)}.whl"
    part = wheel.with_name(wheel.name + ".partial")
    with zipfile.ZipFile(part, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        # the .dist-info last, RECORD at the very end, as wheel builders write them
        for p in sorted(entries, key=lambda p: (p.startswith(info_dir + "/"), p.endswith("/RECORD"), p)):
            info = zipfile.ZipInfo(p, date_time=ZIP_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, entries[p])
    os.replace(part, wheel)
    return wheel


def controller_wheel(out_dir: Path, *, with_dependencies: bool = False) -> ControllerPackage:
    """Build ``envctl-<version>-py3-none-any.whl`` into ``out_dir`` (and optionally a wheelhouse)."""
    version = metadata.version("envctl")
    env_wheel = env_value("ENVCTL_WHEEL")
    out_dir.mkdir(parents=True, exist_ok=True)
    if env_wheel:
        wheel = Path(env_wheel)
        if not wheel.is_file():
            raise EnvctlError(f"ENVCTL_WHEEL names {wheel}, which does not exist", "unset it or point it at an envctl wheel")
    else:
        for old in out_dir.glob("envctl-*.whl"):
            old.unlink()
        root = source_root()
        dist = None if root else installed_distribution()
        if root is not None:
            wheel = _wheel_from_source(root, out_dir)
        elif dist is not None:
            version = dist.version
            wheel = wheel_from_installed(dist, out_dir)
        else:
            raise EnvctlError(
                "cannot package this envctl for the hosts: it runs neither from a source tree nor from an installed "
                "distribution", "set ENVCTL_WHEEL to the envctl wheel you installed from")
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    house = None
    if with_dependencies:
        house = out_dir / "wheelhouse"
        house.mkdir(exist_ok=True)
        _pip("download", "-d", str(house), str(wheel))
    return ControllerPackage(version, wheel, sha, house)
