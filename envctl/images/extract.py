"""Unpack a downloaded data archive (tar, tar.gz, zip) as the catalog's ``extract`` describes.

Entries are streamed (``tarfile`` in stream mode, ``zipfile`` one member at a time), never
loaded whole. Each entry name is checked (absolute paths and ``..`` are refused), ``strip`` is
applied, and the entry goes to the target whose prefix it falls under:

* a directory ``{data_dir}/<path>``: written into ``<path>.extracting`` beside it, which is renamed
  into place only when every entry is in;
* a Docker volume (``{instance}-osm-data``): a helper container (envctl.backends.docker) unpacks
  a re-written tar stream into ``.envctl-partial/`` inside the volume and moves it into place
  only after the stream ended complete.

Both finish by writing ``.envctl-extract.json`` (the archive's SHA-256) as the last step, so an
interrupted extract never looks complete: a rerun skips a target whose marker names the same
archive and redoes any other.
"""
from __future__ import annotations

import io
import json
import os
import posixpath
import shutil
import stat
import tarfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, BinaryIO, Callable, Iterator, Literal, Protocol

from envctl.errors import DockerError, EnvctlError
from envctl.paths import confined

if TYPE_CHECKING:
    from envctl.backends.docker import Engine


def _engine() -> "Engine":
    """The engine volumes are unpacked into (imported when a volume is: a swarm node's data helper has no Docker
    library, and unpacks into volumes mounted as directories)."""
    from envctl.backends.docker import ENGINE

    return ENGINE

MARKER = ".envctl-extract.json"
PENDING = ".envctl-extract.pending"
PARTIAL_DIR = ".envctl-partial"
ProgressFn = Callable[[int, "int | None"], None]


class ExtractSpec(Protocol):
    """The fields of ``envctl.catalog.Extract`` this module reads."""

    format: str
    strip: int | str

    def targets(self) -> dict[str, str]: ...


class ExtractError(EnvctlError):
    """An archive that cannot be unpacked safely or completely; nothing incomplete was put in place."""


@dataclass(frozen=True)
class Target:
    prefix: tuple[str, ...]  # entry path prefix (after strip); () = every entry
    kind: Literal["dir", "volume", "mount"]  # mount: a volume mounted here as a directory (a swarm node's helper)
    where: str  # absolute directory, or volume name

    @property
    def label(self) -> str:
        return f"volume {self.where}" if self.kind == "volume" else self.where


@dataclass(frozen=True)
class ExtractResult:
    action: Literal["extracted", "present"]
    targets: tuple[str, ...]
    entries: int = 0
    bytes: int = 0
    seconds: float = 0.0
    unmatched: tuple[str, ...] = ()  # destination prefixes no entry fell under


@dataclass
class _Entry:
    parts: tuple[str, ...]  # after strip
    kind: Literal["file", "dir", "symlink", "hardlink"]
    mode: int
    mtime: float
    size: int = 0
    uid: int = 0
    gid: int = 0
    linkname: str = ""  # symlink: the link text; hardlink: archive path of the target (after strip)
    link_parts: tuple[str, ...] = ()
    data: IO[bytes] | None = None


def _split(name: str) -> tuple[str, ...]:
    return tuple(p for p in name.replace("\\", "/").split("/") if p not in ("", "."))


def _safe(name: str, archive: str) -> tuple[str, ...]:
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise ExtractError(f"{archive} has an entry with an absolute path ({name!r}); refused, nothing was put in place",
                           "the archive is unsafe or damaged; delete it and download it again from another mirror")
    parts = _split(name)
    if ".." in parts:
        raise ExtractError(f"{archive} has an entry that climbs out with '..' ({name!r}); refused, nothing was put in place",
                           "the archive is unsafe or damaged; delete it and download it again from another mirror")
    return parts


def _stripped(parts: tuple[str, ...], strip: int | str) -> tuple[str, ...] | None:
    if isinstance(strip, int):
        return parts[strip:] if len(parts) > strip else None
    pre = _split(strip)
    if parts[: len(pre)] != pre or len(parts) == len(pre):
        return None
    return parts[len(pre):]


# ---------------------------------------------------------------- targets


def render(target: str, data_root: Path, instance: str,
           volume_dirs: dict[str, Path] | None = None) -> tuple[Literal["dir", "volume", "mount"], str]:
    """Where ``target`` is: a directory under the data root, or a named volume (``volume_dirs``: the directory a
    volume is mounted at, on a swarm node's data helper)."""
    if target.startswith("{data_dir}"):
        # Checked at catalog load; again here, resolved, as defence in depth (extracts may run as root).
        return "dir", str(confined(data_root, target[len("{data_dir}"):].lstrip("/"), "extract target"))
    volume = target.replace("{instance}", instance)
    if volume_dirs and volume in volume_dirs:
        return "mount", str(volume_dirs[volume])
    return "volume", volume


def resolve(spec: ExtractSpec, data_root: Path, instance: str,
            volume_dirs: dict[str, Path] | None = None) -> list[Target]:
    """The concrete targets, longest prefix first (an entry goes to the most specific one)."""
    out = []
    for prefix, target in spec.targets().items():
        kind, where = render(target, data_root, instance, volume_dirs)
        out.append(Target(_split(prefix), kind, where))
    return sorted(out, key=lambda t: -len(t.prefix))


def _marker(sha256: str, archive: str) -> bytes:
    return json.dumps({"archive": archive, "sha256": sha256,
                       "extracted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode() + b"\n"


def _marker_ok(raw: str | bytes | None, sha256: str) -> bool:
    try:
        return json.loads(raw or "").get("sha256") == sha256
    except (ValueError, AttributeError):
        return False


def done(targets: list[Target], sha256: str) -> bool:
    """True when every target holds a complete extract of the archive with this SHA-256."""
    vols = [t for t in targets if t.kind == "volume"]
    for t in targets:
        if t.kind in ("dir", "mount"):
            try:
                if not _marker_ok((Path(t.where) / MARKER).read_bytes(), sha256):
                    return False
            except OSError:
                return False
    if vols:
        dk = _engine()
        if not all(dk.volume_exists(t.where) for t in vols):
            return False
        mounts = {t.where: f"/t/{i}" for i, t in enumerate(vols)}
        for i, _ in enumerate(vols):
            rc, out = dk.helper_run(mounts, ["cat", f"/t/{i}/{MARKER}"])
            if rc != 0 or not _marker_ok(out, sha256):
                return False
    return True


# ---------------------------------------------------------------- reading archives


class _Counting(io.RawIOBase):
    """A read-only file wrapper that reports how far into the archive the reader is."""

    def __init__(self, fh: BinaryIO, cb: Callable[[int], None]) -> None:
        self.fh, self.cb, self.pos = fh, cb, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self.fh.readinto(b)  # type: ignore[attr-defined]
        self.pos += n or 0
        self.cb(self.pos)
        return n or 0


def _tar_entries(path: Path, fmt: str, name: str, on_pos: Callable[[int], None]) -> Iterator[tuple[str, _Entry]]:
    with open(path, "rb") as raw:
        counted = io.BufferedReader(_Counting(raw, on_pos), 1 << 20)
        try:
            with tarfile.open(fileobj=counted, mode="r|gz" if fmt == "tar.gz" else "r|") as tar:
                for m in tar:
                    if m.isdir():
                        kind: Literal["file", "dir", "symlink", "hardlink"] = "dir"
                    elif m.isreg():
                        kind = "file"
                    elif m.issym():
                        kind = "symlink"
                    elif m.islnk():
                        kind = "hardlink"
                    else:
                        continue  # devices, fifos: never part of a data archive
                    e = _Entry((), kind, m.mode, m.mtime, m.size, m.uid, m.gid, m.linkname)
                    if kind == "file":
                        e.data = tar.extractfile(m)
                    yield m.name, e
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise ExtractError(f"{name} is not a readable {fmt} archive: {exc}",
                               "delete it and download it again (envctl images get)") from exc


def _zip_entries(path: Path, name: str, on_pos: Callable[[int], None]) -> Iterator[tuple[str, _Entry]]:
    try:
        with zipfile.ZipFile(path) as zf:
            pos = 0
            for info in zf.infolist():
                mode = info.external_attr >> 16
                mtime = time.mktime(info.date_time + (0, 0, -1))
                if info.is_dir():
                    yield info.filename, _Entry((), "dir", (mode & 0o7777) or 0o755, mtime)
                elif stat.S_ISLNK(mode):
                    yield info.filename, _Entry((), "symlink", 0o777, mtime, linkname=zf.read(info).decode())
                else:
                    with zf.open(info) as data:
                        yield info.filename, _Entry((), "file", (mode & 0o7777) or 0o644, mtime, info.file_size, data=data)
                pos += info.compress_size
                on_pos(pos)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
        raise ExtractError(f"{name} is not a readable zip archive: {exc}",
                           "delete it and download it again (envctl images get)") from exc


# ---------------------------------------------------------------- writers


class _DirWriter:
    """Writes one target directory via ``<dir>.extracting``, renamed into place by ``commit``."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.tmp = target.with_name(target.name + ".extracting")
        self.dirs: list[tuple[Path, int, float]] = []
        self.root = os.geteuid() == 0
        if self.tmp.exists():
            shutil.rmtree(self.tmp)
        self.tmp.mkdir(parents=True)

    def add(self, rel: tuple[str, ...], e: _Entry) -> None:
        path = self.tmp.joinpath(*rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        if e.kind == "dir":
            path.mkdir(exist_ok=True)
            self.dirs.append((path, e.mode, e.mtime))
            if self.root:
                os.lchown(path, e.uid, e.gid)
            return
        if path.is_symlink() or path.exists():
            path.unlink()
        if e.kind == "symlink":
            os.symlink(e.linkname, path)
        elif e.kind == "hardlink":
            os.link(self.tmp.joinpath(*e.link_parts), path)
            return
        else:
            assert e.data is not None
            with open(path, "wb") as out:
                shutil.copyfileobj(e.data, out, 1 << 20)
            os.chmod(path, (e.mode & 0o7777) | stat.S_IRUSR | stat.S_IWUSR)
        if self.root:
            os.lchown(path, e.uid, e.gid)
        if e.kind == "file":
            os.utime(path, (e.mtime, e.mtime))

    def commit(self, marker: bytes) -> None:
        for path, mode, mtime in reversed(self.dirs):  # children first: a read-only dir is set last
            os.chmod(path, (mode & 0o7777) | stat.S_IRWXU)
            os.utime(path, (mtime, mtime))
        (self.tmp / MARKER).write_bytes(marker)
        old = self.target.with_name(self.target.name + ".old")
        if old.exists():
            shutil.rmtree(old)
        if self.target.exists():
            os.rename(self.target, old)
        os.rename(self.tmp, self.target)  # the one step that makes the extract visible
        if old.exists():
            shutil.rmtree(old)

    def abort(self) -> None:
        # never resumed from (the next run starts it again), and on a full disk it holds the space that is missing
        shutil.rmtree(self.tmp, ignore_errors=True)


class _MountWriter(_DirWriter):
    """Writes one target that is a mount point (a named volume mounted as a directory, which cannot be renamed):
    into ``<dir>/.envctl-partial``, whose contents replace the directory's by ``commit``, as a volume's do."""

    def __init__(self, target: Path) -> None:  # noqa: D107 - the partial directory is inside the target
        self.target = target
        self.tmp = target / PARTIAL_DIR
        self.dirs = []
        self.root = os.geteuid() == 0
        (target / MARKER).unlink(missing_ok=True)
        if self.tmp.exists():
            shutil.rmtree(self.tmp)
        self.tmp.mkdir(parents=True)

    def commit(self, marker: bytes) -> None:
        for path, mode, mtime in reversed(self.dirs):
            os.chmod(path, (mode & 0o7777) | stat.S_IRWXU)
            os.utime(path, (mtime, mtime))
        for old in self.target.iterdir():
            if old.name != PARTIAL_DIR:
                shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
        for new in self.tmp.iterdir():
            os.rename(new, self.target / new.name)
        st = self.tmp.stat()
        os.chmod(self.target, stat.S_IMODE(st.st_mode))
        if self.root:
            os.chown(self.target, st.st_uid, st.st_gid)
        self.tmp.rmdir()
        (self.target / MARKER).write_bytes(marker)  # last: the extract is complete


_VOLUME_SCRIPT = f"""set -e
for d in /t/*; do rm -rf "$d/{PARTIAL_DIR}" "$d/{MARKER}" "$d/{PENDING}"; mkdir "$d/{PARTIAL_DIR}"; done
tar -x --numeric-owner -f - -C /t
for d in /t/*; do test -f "$d/{PENDING}" || {{ echo "incomplete stream for $d" >&2; exit 3; }}; done
for d in /t/*; do
  find "$d" -mindepth 1 -maxdepth 1 ! -name {PARTIAL_DIR} ! -name {PENDING} -exec rm -rf {{}} +
  find "$d/{PARTIAL_DIR}" -mindepth 1 -maxdepth 1 -exec mv -t "$d" {{}} +
  chown --reference="$d/{PARTIAL_DIR}" "$d"; chmod --reference="$d/{PARTIAL_DIR}" "$d"
  rmdir "$d/{PARTIAL_DIR}"
  mv "$d/{PENDING}" "$d/{MARKER}"
done
"""


class _VolumeWriter:
    """Streams entries for several volumes into one helper container as a re-written tar."""

    def __init__(self, volumes: list[str], labels: dict[str, str]) -> None:
        dk = _engine()
        for v in volumes:
            if not dk.volume_exists(v):
                dk.volume_create(v, labels)
        self.index = {v: i for i, v in enumerate(volumes)}
        self.proc = dk.helper_stdin_process({v: f"/t/{i}" for v, i in self.index.items()}, ["sh", "-c", _VOLUME_SCRIPT])
        assert self.proc.stdin is not None
        self.tar = tarfile.open(fileobj=self.proc.stdin, mode="w|", format=tarfile.PAX_FORMAT)

    def _name(self, volume: str, rel: tuple[str, ...]) -> str:
        return "/".join((str(self.index[volume]), PARTIAL_DIR, *rel))

    def add(self, volume: str, rel: tuple[str, ...], e: _Entry) -> None:
        info = tarfile.TarInfo(self._name(volume, rel))
        info.mode, info.mtime, info.uid, info.gid = e.mode & 0o7777, int(e.mtime), e.uid, e.gid
        if e.kind == "dir":
            info.type = tarfile.DIRTYPE
        elif e.kind == "symlink":
            info.type, info.linkname = tarfile.SYMTYPE, e.linkname
        elif e.kind == "hardlink":
            info.type, info.linkname = tarfile.LNKTYPE, self._name(volume, e.link_parts)
        else:
            info.size = e.size
        self._write(info, e.data if e.kind == "file" else None)

    def _write(self, info: tarfile.TarInfo, data: IO[bytes] | None) -> None:
        try:
            self.tar.addfile(info, data)
        except (BrokenPipeError, OSError) as exc:
            raise DockerError(f"the helper container unpacking into the volumes stopped: {self._stderr()}",
                              "check 'docker info' and free space on the Docker data root") from exc

    def _stderr(self) -> str:
        self.proc.wait()
        err = self.proc.stderr.read().decode(errors="replace").strip() if self.proc.stderr else ""
        return err[-300:] or f"exit {self.proc.returncode}"

    def commit(self, marker: bytes) -> None:
        for v in self.index:
            info = tarfile.TarInfo(f"{self.index[v]}/{PENDING}")
            info.size, info.mode = len(marker), 0o644
            self._write(info, io.BytesIO(marker))
        try:
            self.tar.close()
            self.proc.stdin.close()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError):
            pass
        out = self.proc.stdout.read() if self.proc.stdout else b""
        if self.proc.wait() != 0:
            raise DockerError(f"unpacking into volumes {', '.join(self.index)} failed: {self._stderr()} {out[-200:]!r}",
                              "check free space on the Docker data root, then rerun 'envctl images get'")

    def abort(self) -> None:
        # The stream ends without the completion entries: the helper exits before moving anything.
        setattr(self.tar, "closed", True)  # never write an end-of-archive marker, not even from a finaliser
        stream = self.tar.fileobj
        if stream is not None and hasattr(stream, "closed"):
            stream.closed = True
        try:
            self.proc.stdin.close()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError):
            pass
        try:
            self.proc.wait(60)
        except Exception:  # noqa: BLE001
            self.proc.kill()


# ---------------------------------------------------------------- extract


@dataclass
class _Route:
    target: Target
    symlinks: set[tuple[str, ...]] = field(default_factory=set)


def extract(archive: Path, spec: ExtractSpec, *, sha256: str, data_root: Path, instance: str = "default",
            labels: dict[str, str] | None = None, progress: ProgressFn | None = None,
            force: bool = False, volume_dirs: dict[str, Path] | None = None) -> ExtractResult:
    """Unpack ``archive`` (whose SHA-256 is ``sha256``) into the spec's targets; skip when already done.

    Raises ExtractError for an unsafe or unreadable archive, DockerError when a volume cannot be
    written. In every failure case no target is marked complete.

    Long because: one pass over the archive feeds every target (directories and volume helpers) and the
    cleanup on failure must see all of them; its steps are the members of that one pass.
    """
    began = time.monotonic()
    name = archive.name
    targets = resolve(spec, data_root, instance, volume_dirs)
    labels_ = {"envctl.instance": instance, "envctl.artifact": name, **(labels or {})}
    if not force and done(targets, sha256):
        return ExtractResult("present", tuple(t.label for t in targets))
    total = archive.stat().st_size
    last = [0.0]

    def on_pos(pos: int) -> None:
        now = time.monotonic()
        if progress and (now - last[0] >= 0.25 or pos >= total):
            last[0] = now
            progress(min(pos, total), total)

    routes = [_Route(t) for t in targets]
    dirs = {t.where: (_DirWriter if t.kind == "dir" else _MountWriter)(Path(t.where))
            for t in targets if t.kind in ("dir", "mount")}
    vols = _VolumeWriter([t.where for t in targets if t.kind == "volume"], labels_) \
        if any(t.kind == "volume" for t in targets) else None
    matched: set[tuple[str, ...]] = set()
    entries = written = 0
    ok = False
    try:
        source = _zip_entries(archive, name, on_pos) if spec.format == "zip" else _tar_entries(archive, spec.format, name, on_pos)
        for raw_name, e in source:
            parts = _safe(raw_name, name)
            rel = _stripped(parts, spec.strip)
            if rel is None:
                continue
            route = next((r for r in routes if rel[: len(r.target.prefix)] == r.target.prefix), None)
            if route is None:
                continue
            t = route.target
            matched.add(t.prefix)
            rel = rel[len(t.prefix):]
            if not rel and e.kind != "dir":
                continue  # only the prefix directory itself maps onto the target (its mode and owner)
            if any(rel[:i] in route.symlinks for i in range(1, len(rel))):
                raise ExtractError(f"{name}: entry {raw_name!r} would be written through a symlink; refused, nothing was put in place",
                                   "the archive is unsafe; delete it and download it again from another mirror")
            if e.kind == "hardlink":
                lp = _stripped(_safe(e.linkname, name), spec.strip)
                if lp is None or lp[: len(t.prefix)] != t.prefix or len(lp) == len(t.prefix):
                    raise ExtractError(f"{name}: hard link {raw_name!r} points outside its destination ({e.linkname!r})",
                                       "the archive cannot be unpacked with this 'extract' setting; check the catalog")
                e.link_parts = lp[len(t.prefix):]
            if e.kind == "symlink":
                route.symlinks.add(rel)
                escapes = posixpath.normpath(posixpath.join(*rel[:-1], e.linkname) if rel[:-1] else e.linkname).startswith("..")
                if escapes or (e.linkname.startswith("/") and t.kind == "dir"):
                    raise ExtractError(f"{name}: symlink {raw_name!r} -> {e.linkname!r} points outside its destination; "
                                       "refused, nothing was put in place",
                                       "the archive is unsafe; delete it and download it again from another mirror")
            if t.kind in ("dir", "mount"):
                dirs[t.where].add(rel, e)
            else:
                assert vols is not None
                vols.add(t.where, rel, e)
            entries += 1
            written += e.size if e.kind == "file" else 0
        if not matched:
            raise ExtractError(f"{name} has no entries under the catalog's destination prefixes "
                               f"({', '.join('/'.join(t.prefix) or '(all)' for t in targets)}) after strip {spec.strip!r}",
                               "check the artifact's 'extract' in the catalog against the archive's layout (tar -tf)")
        marker = _marker(sha256, name)
        if vols is not None:
            vols.commit(marker)
        for w in dirs.values():
            w.commit(marker)
        ok = True
    finally:
        if not ok:
            if vols is not None:
                vols.abort()
            for w in dirs.values():
                w.abort()
    if progress:
        progress(total, total)
    unmatched = tuple("/".join(t.prefix) for t in targets if t.prefix not in matched)
    return ExtractResult("extracted", tuple(t.label for t in targets), entries, written, time.monotonic() - began, unmatched)


def unpacked_estimate(spec: ExtractSpec, archive_size: int | None) -> int | None:
    """Bytes the unpacked entries take (the spec's ``size`` when given; else the archive's size)."""
    size = getattr(spec, "size", None)
    return size if size is not None else archive_size
