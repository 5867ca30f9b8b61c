"""Benchmark: envctl's download + verify + load against a plain ``curl URL | docker load``.

Serves the ``docker save`` tarball of a locally built image (FROM scratch + N MB of random data)
from a local HTTP server on 127.0.0.1 and, in the same run, loads it three ways:

  curl | docker load         the baseline users run today
  envctl stream              envctl's default: streamed into docker load, hashed, verified, tagged
  envctl keep-archive        parallel-segment download to disk (resumable), then loaded

For each: seconds, MB/s, ratio to the baseline, the peak bytes envctl staged on disk (partial +
archive files; sampled every 20 ms) and the peak growth of the filesystem's used space (includes
the engine's own unpacking; noisy when other work shares the disk).

Usage: .venv/bin/python bench/fetch.py [--mb 256] [--repeat 2]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fetch_server import FaultServer  # noqa: E402

from envctl.catalog import Artifact, Source  # noqa: E402
from envctl.images.get import ArtifactLike, Options, get_artifacts  # noqa: E402
from envctl.images.lock import LockFile  # noqa: E402


class DiskWatch:
    """Peak bytes under ``staging`` and peak growth of used space on the filesystem holding ``fs``."""

    def __init__(self, staging: Path, fs: Path) -> None:
        self.staging, self.fs = staging, fs
        self.base = shutil.disk_usage(fs).used
        self.peak_staged = self.peak_fs = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            staged = sum(p.stat().st_size for p in self.staging.rglob("*") if p.is_file()) if self.staging.exists() else 0
            self.peak_staged = max(self.peak_staged, staged)
            self.peak_fs = max(self.peak_fs, shutil.disk_usage(self.fs).used - self.base)

    def __enter__(self) -> "DiskWatch":
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def image_id(ref: str) -> str | None:
    p = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else None


def remove(ref: str) -> None:
    subprocess.run(["docker", "image", "rm", "-f", ref], capture_output=True)


def curl_load(url: str) -> None:
    curl = subprocess.Popen(["curl", "-sSf", url], stdout=subprocess.PIPE)
    load = subprocess.run(["docker", "load"], stdin=curl.stdout, capture_output=True)
    curl.stdout.close()  # type: ignore[union-attr]
    if curl.wait() != 0 or load.returncode != 0:
        raise RuntimeError(f"curl | docker load failed: {load.stderr.decode()[-300:]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256, help="random payload in the image (MB)")
    ap.add_argument("--repeat", type=int, default=2, help="runs per method; the best is reported")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="envctl-bench-"))
    tag = f"envctl-bench/fetch:{uuid.uuid4().hex[:8]}"
    try:
        (work / "ctx").mkdir()
        with open(work / "ctx" / "blob", "wb") as fh:
            for _ in range(args.mb):
                fh.write(os.urandom(1 << 20))
        (work / "ctx" / "Dockerfile").write_text("FROM scratch\nCOPY blob /blob\n")
        subprocess.run(["docker", "build", "-q", "-t", tag, str(work / "ctx")], check=True, capture_output=True)
        shutil.rmtree(work / "ctx")
        want = image_id(tag)
        tar = work / "image.tar"
        with open(tar, "wb") as fh:
            subprocess.run(["docker", "save", tag], stdout=fh, check=True)
        remove(tag)
        size = tar.stat().st_size

        rows = []
        with FaultServer() as srv:
            srv.paths["image.tar"] = str(tar)
            url = srv.url("ok", "image.tar")

            def envctl(keep: bool) -> None:
                state = work / "state"
                shutil.rmtree(state, ignore_errors=True)
                opts = Options(data_root=state / "data", downloads=state / "downloads", lock=LockFile(state / "images.lock"))
                art = Artifact(name="image.tar", kind="image", image=tag, sources=(Source(kind="http", mirror="local", url=url),))
                items: list[tuple[str | None, ArtifactLike]] = [("bench", art)]  # type: ignore[list-item]
                [res] = get_artifacts(items, keep_archive=keep, options=opts)
                if res.action != "loaded" or res.image_id != want:
                    raise RuntimeError(f"envctl load failed: {res}")

            methods = [("curl | docker load", lambda: curl_load(url)),
                       ("envctl stream (verify+tag)", lambda: envctl(False)),
                       ("envctl keep-archive (4 segments)", lambda: envctl(True))]
            for name, run in methods:
                best = None
                for _ in range(args.repeat):
                    remove(tag)
                    remove(want or "")
                    with DiskWatch(work / "state", work) as watch:
                        t0 = time.monotonic()
                        run()
                        took = time.monotonic() - t0
                    if image_id(want or tag) != want:
                        raise RuntimeError(f"{name}: loaded image id differs")
                    if best is None or took < best[0]:
                        best = (took, watch.peak_staged, watch.peak_fs)
                rows.append((name, *best))  # type: ignore[misc]
        base = rows[0][1]
        print(f"\nimage archive: {size / 1e6:.0f} MB (docker save of FROM scratch + {args.mb} MiB random), "
              f"best of {args.repeat}, local HTTP on 127.0.0.1\n")
        print(f"{'method':34} {'seconds':>8} {'MB/s':>8} {'vs curl':>8} {'staged peak MB':>15} {'fs growth peak MB':>18}")
        for name, took, staged, fs in rows:
            print(f"{name:34} {took:8.2f} {size / 1e6 / took:8.1f} {base / took:8.2f} {staged / 1e6:15.1f} {fs / 1e6:18.1f}")
    finally:
        remove(tag)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
