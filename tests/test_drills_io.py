"""Reliability drills (issue #32) for disks, signals and input: each fault provoked for real, by the real CLI.

- **Disk full**: a size-limited tmpfs the test mounts (``mount -t tmpfs -o size=...``; the test is skipped, saying
  why, where this machine does not allow a mount) under the data directory, the state directory, an auth directory
  and TMPDIR. ``images get``, ``snapshot create``, login-file and record writes fail in one line naming the
  filesystem, what is free and what was needed; nothing half-made is left; the next command works once space is
  freed; ``doctor`` warns before.
- **Signals as a script sends them**: ``images get``, ``up`` and ``serve`` stop on SIGTERM as they do on Ctrl-C
  (children started with :func:`childproc.signals_default`: a backgrounded ``make test`` hands SIGINT down ignored).
- **The lease API's JSON** (hypothesis) against a real ``envctl serve`` pool of one mini homepage: garbage bodies,
  wrong types, huge values, unknown fields, bad ids always answer a 4xx JSON error of one line, never 500, never a
  hang, and the pool stays consistent.
- **Bind-mount sources confined at use**; the **serve port-range refusals**; README's table of environment variables.

Instances: drl1 (homepage, wikipedia, classifieds; port offset 53100), the pool drl2 (member drl2-1, offset 53200),
drl5 (refused before anything is made; offset 53500). Lane a.
"""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import socket
import string
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

import pytest
import requests
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from childproc import signals_default
from conftest import catalog_copy, free_port, remove_instance_images
from envctl.errors import DiskSpaceError
from envctl.leases.client import MAX_TTL, MAX_WAIT
from envctl.leases.http import LEASE_KEYS, MAX_BODY, MAX_DEPTH
from envctl.validate import ENV_TABLE_BEGIN, ENV_TABLE_END, ENV_VAR_NAMES, env_table
from fetch_server import FaultServer
from test_fetch import make_tar

ROOT = Path(__file__).resolve().parents[1]
DRL1, DRL1_OFFSET = "drl1", 53100
POOL, POOL_OFFSET, MEMBER = "drl2", 53200, "drl2-1"
DRL5, DRL5_OFFSET = "drl5", 53500
SITES = ["homepage", "wikipedia", "classifieds"]


# -- helpers ---------------------------------------------------------------------------------------------------

@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` for the block (a real filesystem that fills up)."""
    path.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs here ({p.stderr.strip()[:200]}): the disk-full drills need "
                    "root or CAP_SYS_ADMIN (make test runs as root in its container)")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(fs: Path) -> Path:
    """Write a filler file until the filesystem at ``fs`` is full (ENOSPC); returns it."""
    filler = fs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 16, 1 << 12, 1):  # big steps, then page and byte steps into the last gap
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    assert shutil.disk_usage(fs).free < 4096
    return filler


def resize(fs: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(fs)], check=True, capture_output=True)


def _cwd(env: dict[str, str]) -> str:
    """Commands run in the test's own directory: a default '.auth' (login files, a snapshot's stash) lands there."""
    return str(Path(env["ENVCTL_STATE_DIR"]).parent)


def envctl(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envctl", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=_cwd(env))


def spawn(*args: str, env: dict[str, str], **kw: Any) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "envctl", *args], env=env, cwd=_cwd(env), preexec_fn=signals_default,
                            **kw)


def error_line(p: subprocess.CompletedProcess | tuple[int, str], *needles: str) -> str:
    """The one 'error:' line of a failed command, naming every needle; no traceback."""
    rc, err = (p.returncode, p.stderr) if isinstance(p, subprocess.CompletedProcess) else p
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert rc != 0 and len(lines) == 1 and "Traceback" not in err, f"exit {rc}:\n{err[-3000:]}"
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


def base_env(tmp: Path) -> dict[str, str]:
    """A private state and data directory; no default catalog or instance from the caller."""
    env = {k: v for k, v in os.environ.items() if k not in ("ENVCTL_CATALOG", "ENVCTL_INSTANCE")}
    for d in ("state", "data"):
        (tmp / d).mkdir(parents=True, exist_ok=True, mode=0o700)
    env.update(ENVCTL_STATE_DIR=str(tmp / "state"), ENVCTL_DATA_DIR=str(tmp / "data"))
    return env


def containers(instance: str, *, all_: bool = True) -> dict[str, str]:
    """name -> status of the containers labelled for ``instance``."""
    out = subprocess.run(["docker", "ps", *(["-a"] if all_ else []), "--filter", f"label=envctl.instance={instance}",
                          "--format", "{{.Names}}\t{{.State}}"], capture_output=True, text=True, check=True).stdout
    return dict(line.split("\t") for line in out.splitlines() if line.strip())


def networks(instance: str) -> list[str]:
    return subprocess.run(["docker", "network", "ls", "-q", "--filter", f"label=envctl.instance={instance}"],
                          capture_output=True, text=True, check=True).stdout.split()


def snapshot_images(instance: str, name: str) -> list[str]:
    """Every image (tagged or not) labelled as snapshot ``name`` of ``instance``."""
    return subprocess.run(["docker", "images", "-a", "-q", "--filter", f"label=envctl.instance={instance}",
                           "--filter", f"label=envctl.snapshot={name}"], capture_output=True, text=True,
                          check=True).stdout.split()


def down(instance: str, env: dict[str, str]) -> None:
    envctl("down", "-i", instance, "--volumes", env=env)
    left = list(containers(instance))
    if left:
        subprocess.run(["docker", "rm", "-f", "-v", *left], capture_output=True)
    for net in networks(instance):
        subprocess.run(["docker", "network", "rm", net], capture_output=True)
    remove_instance_images(instance)


# -- README: every environment variable envctl reads ----------------------------------------------------------

def test_readme_lists_every_environment_variable() -> None:
    text = (ROOT / "README.md").read_text()
    assert ENV_TABLE_BEGIN in text and ENV_TABLE_END in text
    block = ENV_TABLE_BEGIN + text.split(ENV_TABLE_BEGIN, 1)[1].split(ENV_TABLE_END, 1)[0] + ENV_TABLE_END
    assert block == env_table(), "README's table differs from envctl.validate.ENV_VARS: run python scripts/readme_env.py"
    names = set(re.findall(r"^\| `([A-Z_][A-Z0-9_]*)` \|", block, re.M))
    assert names == ENV_VAR_NAMES
    p = subprocess.run([sys.executable, "scripts/readme_env.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


# -- disk full: the writes of the library, on a real full filesystem --------------------------------------------

def test_full_disk_writes_fail_in_one_line_leave_nothing_and_work_once_freed(tmp_path: Path) -> None:
    from envctl.auth.files import write_private as write_login
    from envctl.images.lock import LockFile, Pin
    from envctl.locks import write_private
    from envctl.state.logins import Logins, stashing

    with tmpfs(tmp_path / "fs", "1m") as fs:
        record, login, pins = fs / "serve-drl1.json", fs / "auth" / "classifieds_state.json", fs / "images.lock"
        record.write_text("old record")
        login.parent.mkdir()
        login.write_text('{"cookies": [], "origins": []}')
        (fs / "images.lock.flock").touch()  # the pin file's lock (an empty file: it fits on a full disk too)
        before = set(files(fs))
        filler = fill(fs)
        held: list[Any] = []
        attempts = {
            "state record": lambda: write_private(record, json.dumps({"pid": 1, "url": "http://127.0.0.1:1"})),
            "login file": lambda: write_login(login, {"cookies": [{"name": "sid", "value": "x" * 100}], "origins": []}),
            "pin file": lambda: LockFile(pins).record(Pin("blob.tar", size=3, sha256="0" * 64, mirror="m")),
            "snapshot's login stash": lambda: held.append(stashing(Logins(fs / "auth"), "classifieds", "s1"))
            or held[-1].__enter__(),  # held: a context left open (a capture running) keeps its staged copy
        }
        for what, attempt in attempts.items():
            with pytest.raises(DiskSpaceError) as err:
                attempt()
            msg = str(err.value)
            assert "\n" not in msg and f"the filesystem at {fs}" in msg and "free" in msg, (what, msg)
            assert re.search(r"it needs \d+ B", msg), (what, msg)
            assert set(files(fs)) == before | {"filler"}, (what, files(fs))  # no temporary or partial file
        assert record.read_text() == "old record" and json.loads(login.read_text()) == {"cookies": [], "origins": []}
        filler.unlink()
        for what, attempt in attempts.items():
            attempt()
        assert json.loads(record.read_text())["pid"] == 1 and LockFile(pins).get("blob.tar") is not None
        assert (fs / "auth" / ".snapshots" / ".classifieds-s1.new" / "classifieds_state.json").is_file()


# -- disk full: images get into a data directory that cannot hold the download ----------------------------------

@pytest.fixture
def blob_server() -> Iterator[tuple[FaultServer, bytes]]:
    blob = make_tar(3 * 1024 * 1024 + 12345)
    with FaultServer() as srv:
        srv.files["blob.tar"] = blob
        yield srv, blob


def blob_catalog(tmp: Path, srv: FaultServer, *modes: str) -> Path:
    """The built-in catalog with wikipedia's full flavor fetching one data file from the local fixture server (no
    size estimate: the disk pre-check cannot see it coming, the download has to)."""
    def edit(sites: dict[str, Any]) -> None:
        sites["wikipedia"]["flavors"]["full"]["artifacts"] = [{
            "name": "blob.tar", "kind": "data", "dest": "wikipedia/blob.tar",
            "sources": [{"kind": "http", "mirror": f"local-{m}", "url": srv.url(m, "blob.tar")} for m in modes]}]
    return catalog_copy(tmp, edit)


def test_images_get_on_a_full_data_dir_says_so_removes_the_partial_and_works_once_freed(
        tmp_path: Path, blob_server: tuple[FaultServer, bytes]) -> None:
    srv, blob = blob_server
    env = base_env(tmp_path)
    with tmpfs(tmp_path / "data", "2m") as data:
        # doctor warns before it happens
        cat = blob_catalog(tmp_path, srv, "ok")
        p = envctl("--catalog", str(cat), "doctor", "wikipedia", "--json", env=env, timeout=300)
        rows = {c["check"]: c for c in json.loads(p.stdout)["checks"]}
        assert rows["data dir space"]["status"] == "warn" and str(data) in rows["data dir space"]["detail"], rows
        assert "ENVCTL_DATA_DIR" in rows["data dir space"]["fix"]
        # a mirror that announces the length: refused before a byte is written
        p = envctl("--catalog", str(cat), "images", "get", "wikipedia", env=env)
        error_line(p, f"not enough space on the filesystem at {data}", "it needs 3.0 MiB", "the partial file was removed",
                   "ENVCTL_DATA_DIR")
        assert files(data) == [], files(data)
        # a mirror that announces none: found when the disk fills, the partial bytes removed
        cat = blob_catalog(tmp_path, srv, "chunked")
        p = envctl("--catalog", str(cat), "images", "get", "wikipedia", env=env)
        error_line(p, f"not enough space on the filesystem at {data}", "it needs more than",
                   "the mirror announced no length", "the partial file was removed")
        assert files(data) == [], files(data)
        # room again: the same command fetches it
        resize(data, "8m")
        p = envctl("--catalog", str(cat), "images", "get", "wikipedia", env=env)
        assert p.returncode == 0, p.stderr[-2000:]
        assert (data / "data" / "wikipedia" / "blob.tar").read_bytes() == blob
        assert not [f for f in files(data) if ".partial" in f or ".tmp" in f]


# -- SIGTERM, as a script's kill sends it ---------------------------------------------------------------------

def test_sigterm_stops_images_get_as_ctrl_c_does_and_the_next_get_resumes(
        tmp_path: Path, blob_server: tuple[FaultServer, bytes]) -> None:
    srv, blob = blob_server
    srv.slow_rate = 200_000  # ~16 s for the file: the signal lands mid-file even on a loaded machine
    env = base_env(tmp_path)
    cat = blob_catalog(tmp_path, srv, "slow")
    proc = spawn("--catalog", str(cat), "images", "get", "wikipedia", env=env, stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while srv.sent < 600_000 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err[-2000:]
    assert "terminated (SIGTERM)" in err and "Traceback" not in err, err[-2000:]
    dest = tmp_path / "data" / "data" / "wikipedia" / "blob.tar"
    assert not dest.exists()  # nothing half-made under the real name; the partial file resumes, as after Ctrl-C
    segments = json.loads((dest.parent / "blob.tar.partial.json").read_text())["segments"]
    resume_at = {f"bytes={a + d}-{b - 1}" for a, b, d in segments if 0 < d < b - a}
    assert resume_at, segments  # bytes were kept
    srv.slow_rate = 50_000_000
    srv.log.clear()
    p = envctl("--catalog", str(cat), "images", "get", "wikipedia", env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert dest.read_bytes() == blob
    assert resume_at & set(srv.ranges("blob.tar")), (resume_at, srv.log)  # went on from where it stopped


# -- serve: what it refuses for ports ------------------------------------------------------------------------

def test_serve_refuses_ports_and_offsets_past_the_range(tmp_path: Path) -> None:
    # DOCKER_HOST points nowhere: these refusals come before the engine is asked, and were one to regress, no
    # instance could be made outside this module's port offsets
    env = {**base_env(tmp_path), "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    cases = [
        (["--instances", "10", "--base-offset", "53000"], "10 instance(s) from --base-offset 53000 need ports up to"),
        (["--instances", "9", "--base-offset", "53000"], "need port offsets up to 61000, past 60000"),
        (["--port", "7565", "--port-offset", "60000"], "--port-offset 60000 moves port 7565 to 67565, above 65535"),
        (["--port", "70000"], "70000"),
        (["--base-offset", "60001", "--instances", "1"], "--base-offset"),
    ]
    for args, needle in cases:
        p = envctl("serve", "-i", POOL, "--sites", "homepage", "--flavor", "mini", *args, env=env, timeout=60)
        assert p.returncode == 2, (args, p.stderr)
        error_line(p, needle)
    assert not (tmp_path / "state" / f"serve-{POOL}.json").exists()


@pytest.mark.docker
def test_serve_refuses_a_port_in_use_before_anything_starts(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        p = envctl("serve", "-i", POOL, "--instances", "1", "--sites", "homepage", "--flavor", "mini",
                   "--base-offset", str(POOL_OFFSET), "--port", str(port), env=env, timeout=120)
    error_line(p, f"cannot listen on 127.0.0.1:{port}", "--port")
    assert p.returncode == 1 and containers(MEMBER) == {} and networks(MEMBER) == []
    assert not (tmp_path / "state" / f"serve-{POOL}.json").exists()


# -- an instance: SIGTERM during up, a snapshot on a full disk, a bind mount swapped for a link ----------------

@pytest.fixture(scope="module")
def drl1(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment of instance drl1 (its own state and data directories); down at the end."""
    from envctl.catalog import load_catalog
    from envctl.images.build import build_for_sites

    build_for_sites(load_catalog(), SITES, "mini")
    env = base_env(tmp_path_factory.mktemp("drl1"))
    down(DRL1, env)
    try:
        yield env
    finally:
        down(DRL1, env)
        down(DRL5, env)


def up_drl1(env: dict[str, str]) -> None:
    p = envctl("up", *SITES, "--flavor", "mini", "-i", DRL1, "--port-offset", str(DRL1_OFFSET), "--no-login",
               "--spares", "0", "--json", env=env)
    assert p.returncode == 0 and json.loads(p.stdout)["ok"], p.stderr[-3000:]


def public_url(site: str, offset: int = DRL1_OFFSET) -> str:
    from envctl.catalog import load_catalog

    return f"http://127.0.0.1:{load_catalog().site(site).entry_service.ports.public + offset}"  # type: ignore[union-attr]


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=10).status_code < 500
    except requests.RequestException:
        return False


@pytest.mark.docker
def test_sigterm_during_up_stops_cleanly_and_the_next_up_finishes(drl1: dict[str, str]) -> None:
    proc = spawn("up", *SITES, "--flavor", "mini", "-i", DRL1, "--port-offset", str(DRL1_OFFSET), "--no-login",
                 "--spares", "0", "--json", env=drl1, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # progress events, one JSON object a line
            seen.append(line)
            if '"phase": "create"' in line:
                break
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, "".join(seen) + err
    assert "terminated (SIGTERM)" in err and "Traceback" not in err, err[-3000:]
    # nothing half-made: a copy it was creating is gone, what is left runs
    assert all(state == "running" for state in containers(DRL1).values()), containers(DRL1)
    up_drl1(drl1)
    names = list(containers(DRL1))
    for site in SITES:  # exactly one copy (slot) of each site: nothing duplicated by the interrupted run
        assert len({n.rsplit("-", 1)[1] for n in names if n.startswith(f"envctl-{DRL1}-{site}-")}) == 1, names
        assert answers(public_url(site)), site


@pytest.mark.docker
def test_snapshot_create_on_a_full_disk_makes_nothing_and_works_once_freed(drl1: dict[str, str],
                                                                           tmp_path: Path) -> None:
    up_drl1(drl1)
    name = "drl-full"
    args = ("snapshot", "create", "classifieds", "--name", name, "-i", DRL1)
    try:
        # the volumes' copies (classifieds-db declares /var/lib/mysql) go to a TMPDIR too small for them
        with tmpfs(tmp_path / "tmp", "8m") as tmp:
            p = envctl("doctor", "classifieds", "--flavor", "mini", "--json", env={**drl1, "TMPDIR": str(tmp)})
            rows = {c["check"]: c for c in json.loads(p.stdout)["checks"]}
            assert rows["temp dir space"]["status"] == "warn" and "TMPDIR" in rows["temp dir space"]["fix"], rows
            p = envctl(*args, env={**drl1, "TMPDIR": str(tmp)})
            error_line(p, f"not enough space on the filesystem at {tmp}", "to copy the volumes of",
                       "nothing was committed", "TMPDIR")
            assert files(tmp) == [] and snapshot_images(DRL1, name) == []
        paused = [n for n, s in containers(DRL1).items() if s != "running"]
        assert not paused and answers(public_url("classifieds")), containers(DRL1)  # unfrozen, serving
        # the login files' stash, in a full auth directory: refused before anything is captured
        with tmpfs(tmp_path / "auth", "1m") as auth:
            (auth / "classifieds_state.json").write_text('{"cookies": [], "origins": []}')
            filler = fill(auth)
            p = envctl(*args, "--auth-dir", str(auth), env=drl1)
            error_line(p, f"not enough space on the filesystem at {auth}", "stashing the login files",
                       "nothing was captured")
            assert snapshot_images(DRL1, name) == []
            assert files(auth) == ["classifieds_state.json", "filler"], files(auth)
            # room again: the same command makes the snapshot, its stash beside it
            filler.unlink()
            p = envctl(*args, "--auth-dir", str(auth), env=drl1)
            assert p.returncode == 0, p.stderr[-3000:]
            assert len(snapshot_images(DRL1, name)) >= 2  # web and db, tagged (plus the db's volume layer's parent)
            assert (auth / ".snapshots" / f"classifieds-{name}" / "classifieds_state.json").is_file()
    finally:
        envctl("snapshot", "rm", name, "-i", DRL1, env=drl1)


@pytest.mark.docker
def test_sigterm_during_a_reset_keeps_the_routed_copy_and_the_next_reset_finishes(drl1: dict[str, str]) -> None:
    up_drl1(drl1)
    routed = {n for n in containers(DRL1) if n.startswith(f"envctl-{DRL1}-classifieds-")}
    proc = spawn("reset", "classifieds", "--tier", "recreate", "-i", DRL1, "--json", env=drl1, stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE, text=True)
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # progress events: the new copy is being booted
            seen.append(line)
            if '"phase": "create"' in line:
                break
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, "".join(seen) + err
    assert "terminated (SIGTERM)" in err and "Traceback" not in err, err[-3000:]
    now = {n: s for n, s in containers(DRL1).items() if n.startswith(f"envctl-{DRL1}-classifieds-")}
    assert set(now.values()) == {"running"} and answers(public_url("classifieds")), now
    if "pass its probes" not in err:  # the signal landed while the new copy booted: it is gone, the old one serves
        assert set(now) == routed, (routed, now)  # (later, the swap was done: the replaced copy goes as after a reset)
    p = envctl("reset", "classifieds", "--tier", "recreate", "-i", DRL1, "--json", env=drl1)
    assert p.returncode == 0 and json.loads(p.stdout)[0]["ok"], p.stdout[-2000:] + p.stderr[-2000:]
    deadline = time.monotonic() + 120  # the replaced copy is removed by the reset's detached worker
    while len({n.rsplit("-", 1)[1] for n in containers(DRL1) if n.startswith(f"envctl-{DRL1}-classifieds-")}) > 1:
        assert time.monotonic() < deadline, containers(DRL1)
        time.sleep(0.5)
    assert answers(public_url("classifieds"))


def dangling(instance: str, name: str) -> list[str]:
    return subprocess.run(["docker", "images", "-q", "--filter", "dangling=true", "--filter",
                           f"label=envctl.instance={instance}", "--filter", f"label=envctl.snapshot={name}"],
                          capture_output=True, text=True, check=True).stdout.split()


@pytest.mark.docker
@pytest.mark.parametrize("moment", ["freezing", "committing"])
def test_sigterm_while_a_site_is_frozen_for_a_snapshot_thaws_it_and_keeps_no_half_snapshot(
        drl1: dict[str, str], tmp_path: Path, moment: str) -> None:
    up_drl1(drl1)
    name = f"drl-term-{moment}"
    site = {n for n in containers(DRL1) if n.startswith(f"envctl-{DRL1}-classifieds-")}
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**drl1, "TMPDIR": str(tmp)}
    try:
        proc = spawn("snapshot", "create", "classifieds", "--name", name, "-i", DRL1, env=env, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            frozen = (lambda now: "paused" in now) if moment == "freezing" else (lambda now: set(now) == {"paused"})
            while not frozen([s for n, s in containers(DRL1).items() if n in site]):  # its web and db frozen
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                time.sleep(0.02)
            if moment == "committing":
                time.sleep(0.5)  # the commit (and the copy of the db's volume) under way
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 143, err[-3000:]
        assert "terminated (SIGTERM)" in err and "Traceback" not in err, err[-3000:]
        assert set(containers(DRL1).values()) == {"running"} and answers(public_url("classifieds"))  # thawed
        assert list(tmp.iterdir()) == []  # the volumes' copies removed
        tagged = subprocess.run(["docker", "images", "-q", "--filter", f"reference=envctl-snap/classifieds-*:{DRL1}-{name}"],
                                capture_output=True, text=True, check=True).stdout.split()
        assert tagged == [], tagged  # no snapshot under its name
        # the next command finishes the job: one whole snapshot, and no stray layer of the interrupted one
        p = envctl("snapshot", "create", "classifieds", "--name", name, "-i", DRL1, env=env)
        assert p.returncode == 0, p.stderr[-3000:]
        assert dangling(DRL1, name) == []
    finally:
        envctl("snapshot", "rm", name, "-i", DRL1, env=drl1)


@pytest.mark.docker
def test_a_bind_mount_source_swapped_for_a_link_out_of_the_data_dir_is_refused_at_use(
        drl1: dict[str, str], tmp_path: Path) -> None:
    up_drl1(drl1)
    source = Path(drl1["ENVCTL_DATA_DIR"]) / "data-mini" / "wikipedia"  # {data_dir}/wikipedia, mounted at /data
    assert source.is_dir()
    outside = tmp_path / "outside"
    outside.mkdir()
    before = containers(DRL1)
    kept = source.with_name("wikipedia.kept")
    source.rename(kept)
    source.symlink_to(outside)  # after the catalog was loaded and the instance made
    try:
        p = envctl("reset", "wikipedia", "--tier", "recreate", "-i", DRL1, "--json", env=drl1)
        assert p.returncode == 1, p.stderr[-2000:]
        [res] = json.loads(p.stdout)
        why = res["error"] or " ".join(res.get("escalations") or [])
        assert not res["ok"] and "the bind-mount source" in why and f"leads outside {source.parent}" in why, res
        assert "\n" not in why and str(outside) in why
        assert containers(DRL1) == before  # nothing started; the routed copy serves on
        assert answers(public_url("wikipedia"))
        # a new instance is refused before anything is made
        p = envctl("up", "wikipedia", "--flavor", "mini", "-i", DRL5, "--port-offset", str(DRL5_OFFSET), "--no-login",
                   "--spares", "0", env=drl1)
        error_line(p, "wikipedia: the bind-mount source", f"leads outside {source.parent}", "remove the symbolic link")
        assert containers(DRL5) == {} and networks(DRL5) == []
    finally:
        source.unlink()
        kept.rename(source)
    p = envctl("reset", "wikipedia", "--tier", "recreate", "-i", DRL1, "--json", env=drl1)
    assert p.returncode == 0 and json.loads(p.stdout)[0]["ok"], p.stdout[-2000:] + p.stderr[-2000:]


# -- a pool: a full state directory, the lease API's JSON, SIGTERM with a lease held ---------------------------

class Serve:
    """``envctl serve --instances 1`` of pool drl2 (mini homepage) as a subprocess."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log_path = env, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        return ["serve", "-i", POOL, "--instances", "1", "--sites", "homepage", "--flavor", "mini", "--spares", "0",
                "--base-offset", str(POOL_OFFSET), "--port", str(self.port)]

    def launch(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = spawn(*self.argv(), env=self.env, stdout=log, stderr=log, start_new_session=True)

    def start(self) -> None:
        self.launch()
        self.wait(lambda: self.states() == ["free"], "the pool to be free")

    def states(self) -> list[str]:
        return [r["state"] for r in self.rows()]

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            return None

    def logs(self) -> str:
        try:
            return self.log_path.read_text()[-4000:]
        except OSError:
            return ""

    def listing(self) -> dict[str, Any]:
        return requests.get(f"{self.url}/leases", timeout=30).json()

    def rows(self) -> list[dict[str, Any]]:
        try:
            return self.listing()["instances"]
        except requests.RequestException:
            assert self.proc is not None and self.proc.poll() is None, self.logs()
            return []

    def wait(self, pred: Any, what: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {self.logs()}"
            time.sleep(0.3)


@pytest.fixture(scope="module")
def pool_env(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Pool drl2's environment: its state directory on a 32 MiB tmpfs (the full-disk drill fills it)."""
    from envctl.catalog import load_catalog
    from envctl.images.build import build_for_sites

    build_for_sites(load_catalog(), ["homepage"], "mini")
    root = tmp_path_factory.mktemp("drl2")
    env = base_env(root)
    with tmpfs(root / "state", "32m"):
        down(MEMBER, env)
        try:
            yield env
        finally:
            down(MEMBER, env)


@pytest.fixture(scope="module")
def served(pool_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    srv = Serve(pool_env, tmp_path_factory.mktemp("drl2-log") / "serve.log")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.mark.docker
def test_serve_on_a_full_state_dir_refuses_in_one_line_and_doctor_warns_first(pool_env: dict[str, str]) -> None:
    state = Path(pool_env["ENVCTL_STATE_DIR"])
    p = envctl("doctor", "homepage", "--flavor", "mini", "--json", env=pool_env)
    rows = {c["check"]: c for c in json.loads(p.stdout)["checks"]}
    assert rows["state dir space"]["status"] == "warn" and "ENVCTL_STATE_DIR" in rows["state dir space"]["fix"], rows
    before = set(files(state))
    filler = fill(state)
    try:
        p = envctl("doctor", "homepage", "--flavor", "mini", "--json", env=pool_env)
        assert {c["check"]: c for c in json.loads(p.stdout)["checks"]}["state dir space"]["status"] == "fail"
        srv = Serve(pool_env, state.parent / "refused.log")
        p = envctl(*srv.argv(), env=pool_env, timeout=120)
        error_line(p, f"not enough space on the filesystem at {state}", f"serve-{POOL}.json", "it needs",
                   "ENVCTL_STATE_DIR")
        assert set(files(state)) == before | {"filler"}, files(state)  # no temporary record left
        assert containers(MEMBER) == {} and not answers(srv.url)  # nothing started, nothing listening
    finally:
        filler.unlink()


# Strategies: JSON values of every shape, and request bodies each of which is wrong in at least one way.
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
BAD_SECONDS = st.one_of(
    st.booleans(), st.lists(JSON_VALUES, max_size=2), st.dictionaries(st.text(max_size=4), JSON_VALUES, max_size=2),
    st.integers(max_value=0), st.integers(min_value=int(MAX_TTL) + 1), st.floats(max_value=0.999, allow_nan=False),
    st.sampled_from(["", "abc", "1e999", "nan", "-5", "0", "inf", "ten minutes", "0x10", 10 ** 400, -(10 ** 400),
                     float("nan"), float("inf"), float("-inf")]))
BAD_WAIT = st.one_of(st.booleans(), st.lists(JSON_VALUES, max_size=2), st.integers(max_value=-1),
                     st.integers(min_value=int(MAX_WAIT) + 1),
                     st.sampled_from(["", "soon", "nan", "-1", 10 ** 400, float("nan"), float("inf")]))
BAD_SITES = st.one_of(
    st.booleans(), st.integers(), st.floats(allow_nan=False), st.dictionaries(st.text(max_size=4), JSON_VALUES, max_size=2),
    st.lists(st.one_of(st.integers(), st.none(), st.booleans(), st.just("")), min_size=1, max_size=3),
    st.lists(st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=12)
             .filter(lambda s: s != "homepage"), min_size=1, max_size=3),  # unknown, or not the pool's
    st.just(["homepage"] * 65), st.just("nosuchsite,homepage"), st.just(["reddit"]))
BAD_HOLDER = st.one_of(st.booleans(), st.integers(), st.lists(JSON_VALUES, max_size=2),
                       st.dictionaries(st.text(max_size=4), JSON_VALUES, max_size=2))
UNKNOWN_KEY = st.text(min_size=1, max_size=20).filter(lambda k: k not in LEASE_KEYS)


def _nested(depth: int) -> Any:
    value: Any = "homepage"
    for _ in range(depth):
        value = [value]
    return value


def _parses(raw: bytes) -> bool:
    try:
        json.loads(raw)
        return True
    except (ValueError, RecursionError):
        return False


LEASE_BODIES = st.one_of(
    st.binary(min_size=1, max_size=300).filter(lambda b: b.strip() != b"" and not _parses(b)),  # not JSON
    JSON_VALUES.filter(lambda v: not isinstance(v, dict)).map(json.dumps).map(str.encode),  # JSON, not an object
    st.tuples(st.dictionaries(UNKNOWN_KEY, JSON_VALUES, min_size=1, max_size=3),
              st.fixed_dictionaries({}, optional={"ttl": st.just(60), "sites": st.just(["homepage"])}))
    .map(lambda t: json.dumps({**t[1], **t[0]}).encode()),  # unknown fields beside good ones
    st.one_of(st.fixed_dictionaries({"ttl": BAD_SECONDS}), st.fixed_dictionaries({"max_seconds": BAD_SECONDS}),
              st.fixed_dictionaries({"wait": BAD_WAIT}), st.fixed_dictionaries({"sites": BAD_SITES}),
              st.fixed_dictionaries({"holder": BAD_HOLDER}))
    .map(lambda d: json.dumps(d).encode()),  # a known field of the wrong type or out of range
    st.sampled_from([
        json.dumps({"holder": "x" * (MAX_BODY + 10)}).encode(),  # over the body limit
        ("[" * 5000 + "]" * 5000).encode(), json.dumps({"sites": _nested(MAX_DEPTH + 1)}).encode(),  # deeper than a lease request nests
        json.dumps({"holder": "h"}).encode()[:-1],  # cut short
        b'{"ttl": 1e999}', b'{"ttl": NaN}', b'{"wait": -Infinity}', b'{"ttl": 60,}',
    ]))
LEASE_IDS = st.one_of(
    st.text(alphabet=string.ascii_letters + string.digits + "-_~%!$&'()*+,;=:@.", min_size=1, max_size=120)
    .filter(lambda s: s not in (".", "..")),
    st.from_regex(r"[0-9a-f]{24}", fullmatch=True))
HEARTBEAT_BODIES = st.one_of(
    st.fixed_dictionaries({"ttl": BAD_SECONDS}).map(lambda d: json.dumps(d).encode()),
    st.dictionaries(UNKNOWN_KEY.filter(lambda k: k != "ttl"), JSON_VALUES, min_size=1, max_size=3)
    .map(lambda d: json.dumps(d).encode()),
    st.binary(min_size=1, max_size=200).filter(lambda b: b.strip() != b"" and not _parses(b)),
    JSON_VALUES.filter(lambda v: not isinstance(v, dict)).map(json.dumps).map(str.encode))
PROPERTY = settings(max_examples=250, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.filter_too_much])
# Values that broke number checks before (a JSON integer of 400 digits overflowed float(): a 500), run every time as
# explicit examples besides the generated ones, for each field that takes seconds.
NASTY_SECONDS = [10 ** 400, -(10 ** 400), float("nan"), float("inf"), float("-inf"), "1e999", "nan", "-1", "", True,
                 False, [], {}, [60], {"s": 60}, -1, 0.5, 10 ** 30]
NASTY_LEASE_BODIES = [json.dumps({field: v}).encode() for field in ("ttl", "max_seconds", "wait") for v in NASTY_SECONDS
                      if not (field == "wait" and v in (0.5, False))]  # 0.5 s and False (0) are waits
NASTY_HEARTBEATS = [json.dumps({"ttl": v}).encode() for v in NASTY_SECONDS]
EXAMPLES = {"bodies": 0, "ids": 0, "heartbeats": 0}


def with_examples(test: Any, name: str, values: list[bytes]) -> Any:
    for value in values:
        test = example(**{name: value})(test)
    return test


def refused_in_one_json_line(r: requests.Response, *codes: int) -> str:
    assert r.status_code in codes, (r.status_code, r.text[:300])
    assert r.headers.get("Content-Type", "").startswith("application/json"), (r.status_code, r.headers, r.text[:300])
    body = r.json()
    assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], body
    assert "\n" not in body["error"] and "Traceback" not in r.text, body
    return body["error"]


def consistent(srv: Serve, *, leased: str | None = None, acquired: int) -> None:
    """One member, free (or holding ``leased``), and no lease granted but the test's own."""
    data = srv.listing()
    [row] = data["instances"]
    assert row["instance"] == MEMBER, row
    assert (row["state"], row.get("id")) == (("leased", leased) if leased else ("free", None)), row
    assert data["summary"]["acquired"] == acquired, data["summary"]


@pytest.mark.docker
def test_property_lease_requests_that_are_wrong_get_one_line_400_json_and_change_nothing(served: Serve) -> None:
    before = served.listing()["summary"]["acquired"]

    @PROPERTY
    @given(body=LEASE_BODIES)
    def check(body: bytes) -> None:
        EXAMPLES["bodies"] += 1
        r = requests.post(f"{served.url}/leases", data=body, headers={"Content-Type": "application/json"}, timeout=30)
        refused_in_one_json_line(r, 400)

    with_examples(check, "body", NASTY_LEASE_BODIES)()
    assert EXAMPLES["bodies"] >= len(NASTY_LEASE_BODIES) + 200, EXAMPLES
    consistent(served, acquired=before)


@pytest.mark.docker
def test_property_bad_lease_ids_and_heartbeats_get_one_line_4xx_json_and_the_lease_holds(served: Serve) -> None:
    before = served.listing()["summary"]["acquired"]
    r = requests.post(f"{served.url}/leases", json={"sites": ["homepage"], "ttl": 600, "holder": "drills"}, timeout=300)
    assert r.status_code == 201, r.text
    lease = r.json()
    try:
        @PROPERTY
        @given(lease_id=LEASE_IDS, method=st.sampled_from(["GET", "DELETE", "HEARTBEAT", "STATUS"]))
        def bad_ids(lease_id: str, method: str) -> None:
            EXAMPLES["ids"] += 1
            if lease_id == lease["id"]:
                return
            path = f"{served.url}/leases/{quote(lease_id, safe=string.ascii_letters + string.digits + '-_~')}"
            if method == "HEARTBEAT":
                r = requests.post(f"{path}/heartbeat", json={}, timeout=30)
            elif method == "STATUS":
                r = requests.get(f"{path}/status", timeout=30)
            else:
                r = requests.request(method, path, timeout=30)
            refused_in_one_json_line(r, 404)

        @PROPERTY
        @given(body=HEARTBEAT_BODIES)
        def bad_heartbeats(body: bytes) -> None:
            EXAMPLES["heartbeats"] += 1
            r = requests.post(f"{served.url}/leases/{lease['id']}/heartbeat", data=body, timeout=30)
            refused_in_one_json_line(r, 400)

        expires = requests.get(f"{served.url}/leases/{lease['id']}", timeout=30).json()["expires"]
        bad_ids()
        with_examples(bad_heartbeats, "body", NASTY_HEARTBEATS)()
        assert EXAMPLES["ids"] >= 200 and EXAMPLES["heartbeats"] >= len(NASTY_HEARTBEATS) + 200, EXAMPLES
        row = requests.get(f"{served.url}/leases/{lease['id']}", timeout=30).json()
        assert row["expires"] == expires and row["holder"] == "drills", row  # no bad heartbeat changed it
        consistent(served, leased=lease["id"], acquired=before + 1)
    finally:
        requests.delete(f"{served.url}/leases/{lease['id']}", timeout=60)
    served.wait(lambda: served.states() == ["free"], "the released member to be free again")
    consistent(served, acquired=before + 1)


@pytest.mark.docker
def test_a_request_that_sends_less_than_its_content_length_is_answered_not_hung(served: Serve) -> None:
    acquired = served.listing()["summary"]["acquired"]
    with socket.create_connection(("127.0.0.1", served.port), timeout=120) as s:
        s.sendall(b"POST /leases HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 500\r\n\r\n{\"ttl\": 60")  # and then nothing more
        got = b""
        while chunk := s.recv(65536):  # the server answers, then closes
            got += chunk
        head = got.decode(errors="replace")
    assert head.startswith("HTTP/1.0 400") or head.startswith("HTTP/1.1 400"), head
    assert "stopped before its Content-Length" in head and "application/json" in head, head
    consistent(served, acquired=acquired)


@pytest.mark.docker
def test_sigterm_stops_serve_and_the_held_lease_is_kept_for_the_next_server(served: Serve) -> None:
    r = requests.post(f"{served.url}/leases", json={"sites": ["homepage"], "ttl": 600, "holder": "sigterm-drill"},
                      timeout=300)
    assert r.status_code == 201, r.text
    lease_id = r.json()["id"]
    assert served.stop(signal.SIGTERM) == 143, served.logs()
    log = served.logs()
    assert "terminated (SIGTERM)" in log and "Traceback" not in log, log
    assert re.search(rf"pool {POOL} stopped: lease {lease_id} on {MEMBER} \(holder sigterm-drill\) is kept until", log), log
    assert containers(MEMBER) and all(s == "running" for s in containers(MEMBER).values())
    served.launch()
    served.wait(lambda: served.states() == ["leased"], "the restarted server to adopt the leased member")
    row = requests.get(f"{served.url}/leases/{lease_id}", timeout=30)
    assert row.status_code == 200 and row.json()["holder"] == "sigterm-drill", row.text
    assert requests.post(f"{served.url}/leases/{lease_id}/heartbeat", json={}, timeout=30).status_code == 200
    assert requests.delete(f"{served.url}/leases/{lease_id}", timeout=60).status_code == 200
    served.wait(lambda: served.states() == ["free"], "the released member to be free again")
    gone = requests.get(f"{served.url}/leases/{lease_id}", timeout=30)
    assert gone.status_code == 409 and "released" in refused_in_one_json_line(gone, 409)
