"""The pin file: what each artifact was the first time envctl verified it.

Upstream publishes no checksums, so envctl pins trust on first use: the size, SHA-256 and
(for registry pulls) the repo digest of every artifact are recorded in ``images.lock`` in the
user's data dir (``$ENVCTL_DATA_DIR``, else ``$XDG_DATA_HOME/envctl``, else
``~/.local/share/envctl``). Every later download must match the pin or it is refused. Writes are
atomic (temp file + rename) under an exclusive ``flock``, so parallel jobs cannot lose entries.
"""
from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterator

from envctl.errors import ChecksumMismatch, FetchError
from envctl.paths import data_root as data_dir, disk_full, is_disk_full

LOCK_VERSION = 1


def lock_path() -> Path:
    return data_dir() / "images.lock"


def downloads_dir() -> Path:
    """Where partial downloads and kept archives live."""
    return data_dir() / "downloads"


def _digest(value: object) -> object:
    return value.rpartition("@")[2] if isinstance(value, str) else value


@dataclass(frozen=True)
class Pin:
    name: str  # artifact name, e.g. "shopping_final_0712.tar"
    size: int | None = None  # exact bytes, as received and verified (the catalog's size is an estimate)
    sha256: str | None = None
    digest: str | None = None  # registry repo digest, e.g. "repo@sha256:..."
    image_id: str | None = None  # id of the image envctl loaded from it (for verify and prune)
    mirror: str | None = None  # where the pinned bytes came from
    verified_at: str | None = None


class LockFile:
    """Read and update the pin file at ``path`` (default: :func:`lock_path`)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path else lock_path()

    def pins(self) -> dict[str, Pin]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            raise FetchError(f"pin file {self.path} is not valid JSON ({exc})",
                             "restore it from a backup, or delete it to re-pin on the next download") from exc
        fields = set(Pin.__dataclass_fields__)
        artifacts = raw.get("artifacts", {}) if isinstance(raw, dict) else None
        fix = "restore it from a backup, or delete the entry to re-pin on the next download"
        if not isinstance(artifacts, dict) or not all(isinstance(e, dict) for e in artifacts.values()):
            raise FetchError(f"pin file {self.path} must be an object with an 'artifacts' mapping of objects", fix)
        for name, entry in artifacts.items():
            size = entry.get("size")
            if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
                raise FetchError(f"pin file {self.path}: artifacts.{name}.size must be a whole number of bytes "
                                 f"(got {size!r:.40})", fix)
            bad = [k for k in fields - {"name", "size"} if entry.get(k) is not None and not isinstance(entry[k], str)]
            if bad:
                raise FetchError(f"pin file {self.path}: artifacts.{name}.{sorted(bad)[0]} must be a string", fix)
        return {name: Pin(name=name, **{k: v for k, v in entry.items() if k in fields and k != "name"})
                for name, entry in artifacts.items()}

    def get(self, name: str) -> Pin | None:
        return self.pins().get(name)

    def check(self, name: str, *, size: int | None = None, sha256: str | None = None, digest: str | None = None,
              mirror: str | None = None) -> None:
        """Raise ChecksumMismatch when a recorded pin disagrees with what was just received."""
        pin = self.get(name)
        if pin is None:
            return
        where = f" from mirror {mirror}" if mirror else ""
        for what, got, want in (("size", size, pin.size), ("SHA-256", sha256, pin.sha256), ("digest", digest, pin.digest)):
            same = _digest(got) == _digest(want) if what == "digest" else got == want  # a mirror's repo differs
            if got is not None and want is not None and not same:
                raise ChecksumMismatch(
                    f"{name}{where} has {what} {got}, but {self.path} pins {want} (first verified {pin.verified_at or '?'} "
                    f"from {pin.mirror or '?'}); refused",
                    f"if upstream really changed the file, remove the '{name}' entry from {self.path} and retry",
                )

    def record(self, pin: Pin) -> Pin:
        """Add or complete the pin for ``pin.name`` (fields already set are kept; returns the stored pin)."""
        with self._locked():
            pins = self.pins()
            old = pins.get(pin.name)
            now = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
            if old is None:
                new = replace(pin, verified_at=pin.verified_at or now)
            else:
                merged = {k: (getattr(old, k) if getattr(old, k) is not None else getattr(pin, k))
                          for k in ("size", "sha256", "digest", "mirror", "verified_at")}
                new = replace(old, **merged, image_id=pin.image_id or old.image_id)
            pins[pin.name] = new
            self._write(pins)
            return new

    def forget(self, name: str) -> bool:
        with self._locked():
            pins = self.pins()
            if pins.pop(name, None) is None:
                return False
            self._write(pins)
            return True

    def _write(self, pins: dict[str, Pin]) -> None:
        body = {"version": LOCK_VERSION, "artifacts": {
            n: {k: v for k, v in asdict(p).items() if k != "name" and v is not None} for n, p in sorted(pins.items())}}
        tmp = self.path.with_name(self.path.name + f".tmp{os.getpid()}")
        text = json.dumps(body, indent=2) + "\n"
        try:
            tmp.write_text(text)
            os.replace(tmp, self.path)
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if is_disk_full(exc):
                raise disk_full(self.path, len(text.encode()), kept="the pin file is unchanged") from None
            raise

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".flock"), "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
