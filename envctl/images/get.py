"""Get the full-flavor artifacts: try each source in catalog order until one works.

The library API behind ``envctl images list|get|verify|export|import|prune``:

* images are pulled from a registry, or streamed from a tarball mirror straight into
  ``docker load`` (no archive on disk); with ``keep_archive`` (or when a partial download from
  an earlier run exists) the tarball is downloaded with resume into the downloads dir first;
* registry images are pulled through ``ENVCTL_REGISTRY_MIRROR`` when set (:mod:`.registry`);
* data files (ZIM, map data) are downloaded with resume into the data dir at ``artifact.dest``,
  then unpacked when the artifact has an ``extract`` (:mod:`.extract`);
* every result is checked against the catalog's sha256 and the pin file (:mod:`.lock`) and
  pinned the first time. The catalog's ``size`` is an estimate (disk pre-check, progress); the
  exact length is the server's (Content-Length / Content-Range) and, once pinned, the pin's;
* a disk pre-check runs before anything is fetched;
* progress is reported as :class:`Event` objects (``to_json()`` for ``--json``).

Nothing here prints. Failures of one mirror become ``mirror-failed`` events and the next source
is tried; an artifact with no working source ends with ``GetResult.error`` set.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Protocol, Sequence

from envctl.errors import ChecksumMismatch, DockerError, EnvctlError, FetchError, UsageError
from envctl.images import disk, fetch, registry
from envctl.images import extract as ex
from envctl.images.load import LoadResult, inspect_id, file_chunks, load_stream, save_stream
from envctl.images.lock import LockFile, Pin, downloads_dir
from envctl.paths import confined, data_dir as site_data_dir, disk_full, is_disk_full
from envctl.validate import env_value
from envctl.backends.docker import ENGINE as dk


class SourceLike(Protocol):
    kind: str
    mirror: str
    url: str


class ArtifactLike(Protocol):
    """The fields of ``envctl.catalog.Artifact`` this module reads."""

    name: str
    kind: str
    image: str | None
    dest: str | None
    size: int | None  # an estimate: disk pre-check and progress only
    loaded_size: int | None
    sha256: str | None
    sources: Sequence[SourceLike]
    extract: Any  # envctl.catalog.Extract | None


EventType = Literal["plan", "start", "progress", "mirror-failed", "done", "skip", "error"]


@dataclass(frozen=True)
class Event:
    type: EventType
    artifact: str
    site: str | None = None
    mirror: str | None = None
    done: int | None = None  # bytes
    total: int | None = None  # bytes, when known
    message: str | None = None

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None}, separators=(",", ":"))


EventFn = Callable[[Event], None]


@dataclass(frozen=True)
class ArtifactInfo:
    """One row of ``envctl images list``."""

    site: str
    flavor: str
    name: str
    kind: str
    image: str | None
    dest: str | None  # absolute path for data files
    size: int | None
    loaded_size: int | None
    sources: tuple[str, ...]  # "kind:mirror url"
    present: bool
    sha256: str | None
    digest: str | None
    pinned_in: str | None  # "catalog" or the lock file path


Action = Literal["present", "pulled", "loaded", "downloaded", "extracted", "failed", "on nodes"]


@dataclass(frozen=True)
class GetResult:
    site: str | None
    name: str
    action: Action
    mirror: str | None = None
    sha256: str | None = None
    size: int | None = None
    image_id: str | None = None
    seconds: float = 0.0
    error: str | None = None  # every mirror's failure, when action == "failed"
    extracted: tuple[str, ...] = ()  # where a data archive was unpacked (dirs, "volume NAME")


@dataclass(frozen=True)
class VerifyResult:
    site: str | None
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Exported:
    path: Path
    size: int
    sha256: str


@dataclass(frozen=True)
class PruneResult:
    files: tuple[Path, ...]
    freed: int
    images: tuple[str, ...]


def _min_rate() -> float:
    """``$ENVCTL_MIN_RATE`` (bytes/s; validated: garbage is one line naming the variable), else 64 KiB/s."""
    rate = env_value("ENVCTL_MIN_RATE")
    return 64 * 1024.0 if rate is None else float(rate)


@dataclass
class Options:
    """Where things go and how hard to try (defaults follow the user's data dir)."""

    data_root: Path | None = None  # data files; default <data dir>/data
    downloads: Path | None = None  # partials and kept archives; default <data dir>/downloads
    lock: LockFile | None = None
    timeouts: fetch.Timeouts | None = None
    segments: int = 4
    check_disk: bool = True
    instance: str = "default"  # renders {instance} in extract targets (instance-scoped volumes)
    registry_mirror: str | None = None  # default: $ENVCTL_REGISTRY_MIRROR

    def resolved(self) -> "Options":
        return Options(
            data_root=self.data_root or site_data_dir(),
            downloads=self.downloads or downloads_dir(),
            lock=self.lock or LockFile(),
            timeouts=self.timeouts or fetch.Timeouts(min_rate=_min_rate()),
            segments=self.segments,
            check_disk=self.check_disk,
            instance=self.instance,
            registry_mirror=registry.mirror_setting(self.registry_mirror),
        )


# ---------------------------------------------------------------- selection


def artifacts(catalog, sites: Iterable[str] | None = None, flavor: str = "full") -> list[tuple[str, ArtifactLike]]:
    """(site, artifact) pairs of ``flavor`` for the named sites (all sites when None), catalog order."""
    names = list(sites) if sites else list(catalog.sites)
    out = []
    for name in names:
        site = catalog.site(name)
        f = site.flavors.get(flavor)
        for art in (f.artifacts if f else ()):
            out.append((name, art))
    return out


def _data_path(art: ArtifactLike, opts: Options) -> Path:
    """Where a data artifact goes: ``dest`` under the data directory, checked again here (the
    catalog refuses absolute and '..' paths at load; a symlink under the data dir could still lead
    out of it, and this may run as root)."""
    assert opts.data_root is not None and art.dest
    return confined(opts.data_root, art.dest, f"{art.name}: dest")


def _archive_path(art: ArtifactLike, opts: Options) -> Path:
    """Where an image archive is downloaded: its name under the downloads directory, confined there."""
    assert opts.downloads is not None
    return confined(opts.downloads, art.name, "artifact name")


def is_present(art: ArtifactLike, opts: Options) -> bool:
    """The image exists, or the data file exists with the pinned exact size (any size when unpinned)."""
    if art.kind == "image":
        return inspect_id(art.image or art.name) is not None
    path = _data_path(art, opts)
    if not path.is_file():
        return False
    pin = opts.lock.get(art.name)  # type: ignore[union-attr]
    return pin is None or pin.size is None or path.stat().st_size == pin.size


def list_images(catalog, *, sites: Iterable[str] | None = None, flavor: str = "full",
                options: Options | None = None) -> list[ArtifactInfo]:
    opts = (options or Options()).resolved()
    pins = opts.lock.pins()  # type: ignore[union-attr]
    rows = []
    for site, art in artifacts(catalog, sites, flavor):
        pin = pins.get(art.name)
        sha = art.sha256 or (pin.sha256 if pin else None)
        where = "catalog" if art.sha256 else (str(opts.lock.path) if pin else None)  # type: ignore[union-attr]
        rows.append(ArtifactInfo(
            site, flavor, art.name, art.kind, art.image,
            str(_data_path(art, opts)) if art.kind == "data" else None,
            (pin.size if pin and pin.size else None) or art.size, art.loaded_size,
            tuple(f"{s.kind}:{s.mirror} {s.url}" for s in art.sources),
            is_present(art, opts), sha, pin.digest if pin else None, where,
        ))
    return rows


@dataclass(frozen=True)
class PlannedArtifact:
    """One row of ``envctl images get --dry-run``: what would be fetched, from where, how big."""

    site: str | None
    name: str
    kind: str
    action: str  # "present", or what a get would do: "pull", "load" (a tarball), "download" (data)
    reference: str | None  # the registry reference pulled (through the registry mirror when set), else the URL
    mirror: str | None
    size: int | None  # bytes fetched: the pin's exact length, else the catalog's estimate; None: unknown
    loaded_size: int | None  # bytes on the engine once loaded or pulled (the catalog's figure)
    digest: str | None  # the registry digest (repo@sha256:...) from the catalog's reference or images.lock
    pinned_in: str | None  # "catalog", the lock file, or None: pinned by the first get
    note: str | None = None


@dataclass(frozen=True)
class GetPlan:
    flavor: str
    artifacts: list[PlannedArtifact]
    disk: list[dict[str, Any]]  # per filesystem: path, free, need, ok, what

    @property
    def fits(self) -> bool:
        return all(d["ok"] for d in self.disk)


def plan_get(catalog, sites: Iterable[str] | None = None, *, flavor: str = "full", mirror: str | None = None,
             keep_archive: bool = False, options: Options | None = None) -> GetPlan:
    """What ``get_images`` would do, fetching nothing: every artifact of ``flavor`` with its reference (a
    registry image through ``ENVCTL_REGISTRY_MIRROR`` when set), its size where known, its digest and where
    it is pinned (an image upstream names no digest for is pinned in ``images.lock`` by its first pull), and
    the disk check of what is missing."""
    opts = (options or Options()).resolved()
    assert opts.lock is not None
    rows: list[PlannedArtifact] = []
    missing: list[tuple[ArtifactLike, list[SourceLike]]] = []
    for site, art in artifacts(catalog, sites, flavor):
        srcs = _sources(art, mirror)
        pin = opts.lock.get(art.name)
        src = srcs[0] if srcs else None
        digest = pinned_in = None
        ref = src.url if src else None
        if src is not None and src.kind == "registry":
            if "@" in src.url:
                digest, pinned_in = src.url, "catalog"
            elif pin and pin.digest:
                digest, pinned_in = pin.digest, str(opts.lock.path)
            if opts.registry_mirror:
                ref = registry.mirror_ref(src.url, opts.registry_mirror)
        elif art.sha256 or (pin and pin.sha256):
            pinned_in = "catalog" if art.sha256 else str(opts.lock.path)
        present = is_present(art, opts)
        action = "present" if present else ("download" if art.kind == "data" else
                                            "pull" if src is not None and src.kind == "registry" else "load")
        note = None
        if src is not None and src.kind == "registry" and digest is None:
            note = "no digest: pinned in images.lock by the first pull; every later pull asks for that digest"
        rows.append(PlannedArtifact(site, art.name, art.kind, action, ref, src.mirror if src else None,
                                    (pin.size if pin and pin.size else None) or art.size, art.loaded_size,
                                    digest, pinned_in, note))
        if not present:
            missing.append((art, srcs))
    checks: list[disk.SpaceCheck] = []
    if missing:
        on_engine = any(a.kind == "image" or _into_volume(a) for a, _ in missing)
        root = disk.docker_root() if on_engine else Path("/")
        checks = disk.plan_space([n for a, srcs in missing for n in _needs(a, srcs, keep_archive, opts, root)])
    return GetPlan(flavor, rows, [{"path": str(c.path), "free": c.free, "need": c.need, "ok": c.ok, "what": list(c.what)}
                                  for c in checks])


# ---------------------------------------------------------------- get


def _sources(art: ArtifactLike, mirror: str | None) -> list[SourceLike]:
    if mirror is None:
        return list(art.sources)
    chosen = [s for s in art.sources if s.mirror == mirror]
    if not chosen:
        raise UsageError(f"{art.name} has no source from mirror '{mirror}'",
                         f"its mirrors: {', '.join(s.mirror for s in art.sources) or 'none'}")
    return chosen


def _needs(art: ArtifactLike, sources: list[SourceLike], keep_archive: bool, opts: Options,
           root: Path) -> list[disk.Need]:
    pin = opts.lock.get(art.name)  # type: ignore[union-attr]
    size = (pin.size if pin else None) or art.size  # exact when pinned, else the catalog's estimate
    if sources and sources[0].kind == "registry" and art.kind == "image":
        pulled = art.loaded_size or size  # a pull needs only the engine's room (slim images: no size but this)
        return [disk.Need(root, pulled, f"pull {art.name}")] if pulled else []
    if size is None or not sources:
        return []
    loaded = art.loaded_size or size
    if art.kind == "data":
        dest = _data_path(art, opts)
        have = fetch.partial_path(dest).stat().st_size if fetch.partial_path(dest).exists() else 0
        return [disk.Need(dest.parent, max(0, size - have), f"download {art.name}"), *_extract_needs(art, opts, size, root)]
    # The engine unpacks the archive into its tmp dir before registering the layers.
    needs = [disk.Need(root, size + loaded, f"load {art.name}")]
    archive = _archive_path(art, opts)
    part = fetch.partial_path(archive)
    if keep_archive or part.exists():
        have = part.stat().st_size if part.exists() else 0
        needs.append(disk.Need(opts.downloads, max(0, size - have), f"download {art.name}"))  # type: ignore[arg-type]
    return needs


def _extract_needs(art: ArtifactLike, opts: Options, size: int | None, root: Path) -> list[disk.Need]:
    if art.extract is None:
        return []
    est = ex.unpacked_estimate(art.extract, size)
    if not est:
        return []
    targets = ex.resolve(art.extract, opts.data_root, opts.instance)  # type: ignore[arg-type]
    share = est // len(targets)  # one archive feeding several targets: split the estimate
    return [disk.Need(Path(t.where).parent if t.kind == "dir" else root, share, f"extract {art.name} into {t.label}")
            for t in targets]


def _into_volume(art: ArtifactLike) -> bool:
    return art.extract is not None and any(not t.startswith("{data_dir}") for t in art.extract.targets().values())


def get_images(catalog, sites: Iterable[str] | None = None, *, flavor: str = "full", mirror: str | None = None,
               keep_archive: bool = False, jobs: int = 1, progress: EventFn | None = None,
               options: Options | None = None, data: bool = True) -> list[GetResult]:
    """Fetch every missing artifact of ``flavor`` for ``sites`` (all when None). See the module doc.

    ``data=False`` (a swarm, where each node fetches what the sites placed on it mount, at 'envctl up'): data
    artifacts are left to the nodes (``action="on nodes"``), images are fetched as always.
    Raises DiskSpaceError (before fetching anything) or UsageError (unknown mirror); per-artifact
    failures are returned as ``action="failed"`` results. KeyboardInterrupt propagates, leaving
    resumable partial files.
    """
    chosen = artifacts(catalog, sites, flavor)
    if data:
        return get_artifacts(chosen, mirror=mirror, keep_archive=keep_archive, jobs=jobs, progress=progress,
                             options=options)
    emit = _serialised(progress)
    got = {r.name: r for r in get_artifacts([(s, a) for s, a in chosen if a.kind != "data"], mirror=mirror,
                                            keep_archive=keep_archive, jobs=jobs, progress=emit, options=options)}
    for site, art in chosen:
        if art.kind == "data":
            emit(Event("skip", art.name, site, message="fetched by the node that runs the site, at 'envctl up' "
                                                       "(verified by the same pins)"))
            got[art.name] = GetResult(site, art.name, "on nodes")
    return [got[a.name] for _, a in chosen]


def get_artifacts(items: Sequence[tuple[str | None, ArtifactLike]], *, mirror: str | None = None,
                  keep_archive: bool = False, jobs: int = 1, progress: EventFn | None = None,
                  options: Options | None = None) -> list[GetResult]:
    opts = (options or Options()).resolved()
    emit = _serialised(progress)
    missing, results = [], {}
    unpack: list[tuple[str | None, ArtifactLike]] = []  # present archives whose extract may be missing
    for site, art in items:
        if is_present(art, opts):
            results[art.name] = GetResult(site, art.name, "present")
            emit(Event("skip", art.name, site, message="already present"))
            if art.kind == "data" and art.extract is not None:
                unpack.append((site, art))
        else:
            missing.append((site, art, _sources(art, mirror)))
    if missing and opts.check_disk:
        on_engine = any(a.kind == "image" or _into_volume(a) for _, a, _ in missing)
        root = disk.docker_root() if on_engine else Path("/")
        disk.check_space([n for _, a, srcs in missing for n in _needs(a, srcs, keep_archive, opts, root)])
    for site, art, _ in missing:
        emit(Event("plan", art.name, site, total=art.size))

    def one(item: tuple[str | None, ArtifactLike, list[SourceLike]]) -> GetResult:
        site, art, srcs = item
        return _get_one(site, art, srcs, keep_archive, opts, emit)

    if jobs <= 1 or len(missing) <= 1:
        done = [one(m) for m in missing]
    else:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            done = list(pool.map(one, missing))
    for r in done:
        results[r.name] = r
    unpack += [(site, art) for site, art, _ in missing
               if art.kind == "data" and art.extract is not None and results[art.name].action == "downloaded"]
    for site, art in unpack:
        results[art.name] = _unpack(site, art, results[art.name], opts, emit)
    return [results[a.name] for _, a in items]


def _unpack(site: str | None, art: ArtifactLike, res: GetResult, opts: Options, emit: EventFn) -> GetResult:
    """Unpack a present or just downloaded archive (skipped when its extract is complete)."""
    began = time.monotonic()
    lock = opts.lock
    assert lock is not None and opts.data_root is not None
    path = _data_path(art, opts)
    pin = lock.get(art.name)
    sha = res.sha256 or art.sha256 or (pin.sha256 if pin else None)
    try:
        if sha is None:  # a file put there by hand and never verified: hash it for the extract marker
            sha = sha256_file(path)
        targets = ex.resolve(art.extract, opts.data_root, opts.instance)
        if ex.done(targets, sha):
            return replace(res, extracted=tuple(t.label for t in targets))
        size = path.stat().st_size
        emit(Event("start", art.name, site, "extract", total=size, message="extracting into " +
                   ", ".join(t.label for t in targets)))
        got = ex.extract(path, art.extract, sha256=sha, data_root=opts.data_root, instance=opts.instance,
                         labels={"envctl.site": site} if site else None,
                         progress=lambda n, t: emit(Event("progress", art.name, site, "extract", n, t)))
    except (EnvctlError, OSError) as exc:
        if is_disk_full(exc):  # the extract removed its half-written directory
            exc = disk_full(Path(ex.resolve(art.extract, opts.data_root, opts.instance)[0].where), what="to unpack into",
                            kept="the half-unpacked files were removed")
        msg = f"extracting {art.name} failed: {exc}"
        emit(Event("error", art.name, site, message=msg))
        return replace(res, action="failed", error=msg, seconds=res.seconds + time.monotonic() - began)
    note = f"; no entries under {', '.join(got.unmatched)}" if got.unmatched else ""
    emit(Event("done", art.name, site, "extract", got.bytes, got.bytes,
               f"extracted {got.entries} entries in {got.seconds:.1f}s{note}"))
    return replace(res, action="extracted" if res.action == "present" else res.action, extracted=got.targets,
                   seconds=res.seconds + time.monotonic() - began)


def _serialised(progress: EventFn | None) -> EventFn:
    lock = threading.Lock()

    def emit(ev: Event) -> None:
        if progress:
            with lock:
                progress(ev)

    return emit


def _throttled(emit: EventFn, site: str | None, name: str, mirror: str) -> Callable[[int, int | None], None]:
    last = [0.0]

    def cb(done: int, total: int | None) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.25 or (total is not None and done >= total):
            last[0] = now
            emit(Event("progress", name, site, mirror, done, total))

    return cb


def _get_one(site: str | None, art: ArtifactLike, sources: list[SourceLike], keep_archive: bool, opts: Options,
             emit: EventFn) -> GetResult:
    began = time.monotonic()
    lock = opts.lock
    assert lock is not None and opts.timeouts is not None and opts.downloads is not None
    failures: list[str] = []
    archive = _archive_path(art, opts)
    if art.kind == "image" and archive.is_file():
        emit(Event("start", art.name, site, "local archive", total=archive.stat().st_size))
        try:
            action, sha, size, image_id = _load_archive(site, art, archive, "local archive", keep_archive, opts, emit)
            res = GetResult(site, art.name, action, "local archive", sha, size, image_id, time.monotonic() - began)
            emit(Event("done", art.name, site, res.mirror, size, size, f"loaded in {res.seconds:.1f}s"))
            return res
        except (FetchError, DockerError) as exc:
            failures.append(f"local archive {archive}: {exc.message}")
            emit(Event("mirror-failed", art.name, site, "local archive", message=exc.message))
    for i, src in enumerate(sources):
        last = i == len(sources) - 1
        emit(Event("start", art.name, site, src.mirror, total=art.size))
        try:
            result = _from_source(site, art, src, keep_archive, opts, emit, last)
            res = GetResult(site, art.name, result[0], src.mirror, result[1], result[2], result[3], time.monotonic() - began)
            emit(Event("done", art.name, site, src.mirror, res.size, res.size, f"{res.action} in {res.seconds:.1f}s"))
            return res
        except (FetchError, DockerError) as exc:
            pinned = lock.get(art.name)
            note = f" (pin in {lock.path})" if isinstance(exc, ChecksumMismatch) and pinned and not art.sha256 else ""
            if isinstance(exc, ChecksumMismatch) and exc.hint:
                note += f"; {exc.hint}"
            failures.append(f"{src.kind}:{src.mirror}: {exc.message}{note}")
            emit(Event("mirror-failed", art.name, site, src.mirror, message=exc.message + note))
    msg = f"no source worked for {art.name}: " + " | ".join(failures) if failures else f"{art.name} has no sources"
    emit(Event("error", art.name, site, message=msg))
    return GetResult(site, art.name, "failed", seconds=time.monotonic() - began, error=msg)


def _from_source(site: str | None, art: ArtifactLike, src: SourceLike, keep_archive: bool, opts: Options,
                 emit: EventFn, last: bool) -> tuple[Action, str | None, int | None, str | None]:
    """(action, sha256, size, image_id) from one source; raises FetchError / DockerError to try the next."""
    lock = opts.lock
    assert lock is not None and opts.timeouts is not None and opts.downloads is not None
    if src.kind == "registry":
        via = opts.registry_mirror
        pin = lock.get(art.name)
        # A reference without a digest that images.lock pins is pulled by the pinned digest: a mirror or a
        # moved tag cannot hand over another image, and nothing is tagged when it does not hold that one.
        pulled = registry.pull(src.url, mirror=via, pinned=pin.digest if pin else None,
                               progress=lambda line: emit(Event("progress", art.name, site, src.mirror, message=line)))
        where = f"{src.mirror} via {via}" if via else src.mirror
        lock.check(art.name, digest=pulled.digest, mirror=where)
        if art.image and art.image != src.url:
            dk.tag_image(pulled.image_id, art.image)
        lock.record(Pin(art.name, digest=pulled.digest, image_id=pulled.image_id, mirror=where))
        return "pulled", None, None, pulled.image_id

    # The slow-mirror check only skips a mirror when there is another one to go to.
    t = opts.timeouts if not last else fetch.Timeouts(**{**asdict(opts.timeouts), "min_rate": 0.0})
    session = fetch.session_for()
    url = src.url
    if src.kind == "gdrive":
        url = fetch.gdrive_direct_url(session, url, t, src.mirror)
    elif src.kind == "s3":
        url = fetch.s3_https_url(url)
    pin = lock.get(art.name)
    want_sha = art.sha256 or (pin.sha256 if pin else None)
    want_size = pin.size if pin else None  # exact; the catalog's size is only an estimate
    expect = "tar" if art.kind == "image" else fetch.expect_for(art.name)
    cb = _throttled(emit, site, art.name, src.mirror)

    def check_total(total: int | None) -> None:
        """The server's announced length against the pin's exact size: a different file is refused."""
        if total is not None:
            lock.check(art.name, size=total, mirror=src.mirror)

    if art.kind == "data":
        got = fetch.download(url, _data_path(art, opts), mirror=src.mirror, expected_size=want_size,
                             expected_sha256=want_sha, expect=expect, segments=opts.segments, progress=cb,
                             timeouts=t, session=session, check_total=check_total)
        lock.record(Pin(art.name, size=got.size, sha256=got.sha256, mirror=src.mirror))
        return "downloaded", got.sha256, got.size, None

    archive = _archive_path(art, opts)
    if keep_archive or fetch.partial_path(archive).exists():
        got = fetch.download(url, archive, mirror=src.mirror, expected_size=want_size, expected_sha256=want_sha,
                             expect="tar", segments=opts.segments, progress=cb, timeouts=t, session=session,
                             check_total=check_total)
        return _load_archive(site, art, archive, src.mirror, keep_archive, opts, emit)
    stream = fetch.Stream(url, mirror=src.mirror, expect="tar", expected_size=want_size, timeouts=t, session=session,
                          check_total=check_total)
    loaded = load_stream(stream, tag=art.image, expected_sha256=want_sha, expected_size=want_size,
                         source=f"mirror {src.mirror}", progress=lambda n: cb(n, stream.total))
    lock.record(Pin(art.name, size=loaded.size, sha256=loaded.sha256, image_id=loaded.image_id, mirror=src.mirror))
    return "loaded", loaded.sha256, loaded.size, loaded.image_id


def _load_archive(site: str | None, art: ArtifactLike, archive: Path, mirror: str, keep_archive: bool,
                  opts: Options, emit: EventFn) -> tuple[Action, str | None, int | None, str | None]:
    """Load a downloaded archive (checked against the pin while streaming); delete it unless kept."""
    lock = opts.lock
    assert lock is not None
    pin = lock.get(art.name)
    want_sha = art.sha256 or (pin.sha256 if pin else None)
    size = archive.stat().st_size
    cb = _throttled(emit, site, art.name, mirror)
    loaded = load_stream(file_chunks(archive), tag=art.image, expected_sha256=want_sha, source=f"{mirror} ({archive})",
                         progress=lambda n: cb(n, size))
    lock.record(Pin(art.name, size=loaded.size, sha256=loaded.sha256, image_id=loaded.image_id,
                    mirror=pin.mirror if pin else mirror))
    if not keep_archive:
        archive.unlink(missing_ok=True)
    return "loaded", loaded.sha256, loaded.size, loaded.image_id


# ---------------------------------------------------------------- verify


def sha256_file(path: Path, progress: Callable[[int], None] | None = None) -> str:
    h = hashlib.sha256()
    done = 0
    for chunk in file_chunks(path, 4 << 20):
        h.update(chunk)
        done += len(chunk)
        if progress:
            progress(done)
    return h.hexdigest()


def verify_images(catalog, sites: Iterable[str] | None = None, *, flavor: str = "full",
                  options: Options | None = None, progress: EventFn | None = None) -> list[VerifyResult]:
    """Re-check what is present against the catalog and the pins (data files are re-hashed)."""
    opts = (options or Options()).resolved()
    return [_verify_one(site, art, opts, _serialised(progress)) for site, art in artifacts(catalog, sites, flavor)]


def _verify_one(site: str | None, art: ArtifactLike, opts: Options, emit: EventFn) -> VerifyResult:
    lock = opts.lock
    assert lock is not None
    pin = lock.get(art.name)
    if art.kind == "image":
        image_id = inspect_id(art.image or art.name)
        if image_id is None:
            return VerifyResult(site, art.name, False, f"image {art.image} is not present; run 'envctl images get'")
        if pin and pin.image_id and pin.image_id != image_id:
            return VerifyResult(site, art.name, False, f"{art.image} is {image_id}, but {lock.path} pins {pin.image_id}")
        if pin is None:
            lock.record(Pin(art.name, image_id=image_id, mirror="local"))
            return VerifyResult(site, art.name, True, f"{art.image} present ({image_id[:19]}); pinned now")
        return VerifyResult(site, art.name, True, f"{art.image} is {image_id[:19]} as pinned")
    path = _data_path(art, opts)
    if not path.is_file():
        return VerifyResult(site, art.name, False, f"{path} is missing; run 'envctl images get'")
    size = path.stat().st_size
    redo = f"delete {path} and run 'envctl images get'"
    if pin and pin.size is not None and size != pin.size:
        return VerifyResult(site, art.name, False, f"{path} has {size} bytes, but {lock.path} pins {pin.size}; {redo}")
    want = art.sha256 or (pin.sha256 if pin else None)
    if want is None:
        # Nothing to compare the bytes with: at least the length must be the one the server offers.
        exact, mirror = _server_length(art, opts)
        if exact is None:
            return VerifyResult(site, art.name, False, f"{path} could not be verified (no pin, no sha256 in the catalog, "
                                f"and no mirror told its length: {mirror}); not pinned. Retry when a mirror is reachable")
        if exact != size:
            return VerifyResult(site, art.name, False, f"{path} has {size} bytes, but mirror {mirror} offers {exact}: "
                                f"it is incomplete or a different file; not pinned. {redo}")
    emit(Event("start", art.name, site, "local", total=size, message="hashing"))
    sha = sha256_file(path, lambda n: emit(Event("progress", art.name, site, "local", n, size)))
    if want and sha != want:
        return VerifyResult(site, art.name, False, f"{path} has SHA-256 {sha}, expected {want}; {redo}")
    unpacked = ""
    if art.extract is not None:
        targets = ex.resolve(art.extract, opts.data_root, opts.instance)  # type: ignore[arg-type]
        if not ex.done(targets, sha):
            return VerifyResult(site, art.name, False, f"{path} is intact but not (completely) extracted into "
                                f"{', '.join(t.label for t in targets)}; run 'envctl images get'")
        unpacked = f"; extracted into {', '.join(t.label for t in targets)}"
    if pin is None or pin.sha256 is None or pin.size is None:
        lock.record(Pin(art.name, size=size, sha256=sha, mirror=pin.mirror if pin else "local"))
        return VerifyResult(site, art.name, True, f"{path} ok ({size} bytes); pinned now (sha256 {sha[:12]}){unpacked}")
    return VerifyResult(site, art.name, True, f"{path} matches {size} bytes and sha256 {sha[:12]}{unpacked}")


def _server_length(art: ArtifactLike, opts: Options) -> tuple[int | None, str]:
    """(exact length, mirror) from the first source whose server announces one; (None, why) otherwise."""
    assert opts.timeouts is not None
    t = fetch.Timeouts(**{**asdict(opts.timeouts), "min_rate": 0.0})
    why = []
    for src in art.sources:
        if src.kind == "registry":
            continue
        session = fetch.session_for()
        try:
            url = fetch.gdrive_direct_url(session, src.url, t, src.mirror) if src.kind == "gdrive" else fetch.s3_https_url(src.url)
            resp = fetch.open_range(session, url, 0, 1, t, src.mirror)
        except FetchError as exc:
            why.append(exc.message)
            continue
        with resp:
            total, _ = fetch.total_and_ranges(resp)
            if "text/html" in resp.headers.get("Content-Type", ""):
                why.append(f"mirror {src.mirror} answered with an HTML page")
                continue
        if total is not None:
            return total, src.mirror
        why.append(f"mirror {src.mirror} announced no length")
    return None, "; ".join(why) or "no download sources"


# ---------------------------------------------------------------- export / import / prune


def export_image(tag: str, file: Path, *, progress: Callable[[int], None] | None = None) -> Exported:
    """``docker save`` ``tag`` into ``file`` (via a partial file) and write ``file.sha256`` beside it."""
    file = Path(file)
    file.parent.mkdir(parents=True, exist_ok=True)
    part = fetch.partial_path(file)
    proc, chunks = save_stream(tag)
    h, size = hashlib.sha256(), 0
    try:
        with open(part, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
                h.update(chunk)
                size += len(chunk)
                if progress:
                    progress(size)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        if proc.wait() != 0:
            raise DockerError(f"docker save {tag} failed: {err.strip()[-300:]}", "check the tag with 'docker images'")
    except BaseException as exc:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        part.unlink(missing_ok=True)
        if is_disk_full(exc):
            raise disk_full(file, what="to export into", kept="the partial file was removed") from None
        raise
    sha = h.hexdigest()
    side = file.with_name(file.name + ".sha256")
    try:
        side.write_text(f"{sha}  {file.name}\n")
    except OSError as exc:
        part.unlink(missing_ok=True)
        side.unlink(missing_ok=True)
        if is_disk_full(exc):
            raise disk_full(side, what="writing", kept="the partial export was removed") from None
        raise
    os.replace(part, file)  # last: a file without its .sha256 is never left
    return Exported(file, size, sha)


def import_image(file: Path, *, tag: str | None = None, progress: Callable[[int], None] | None = None) -> LoadResult:
    """Load an archive made by :func:`export_image` (checked against its ``.sha256`` file when present)."""
    file = Path(file)
    if not file.is_file():
        raise UsageError(f"{file} does not exist", "give the path of an archive made by 'envctl images export'")
    side = file.with_name(file.name + ".sha256")
    want = side.read_text().split()[0] if side.is_file() else None
    try:
        return load_stream(file_chunks(file), tag=tag, expected_sha256=want, expected_size=file.stat().st_size,
                           source=str(file), progress=progress)
    except ChecksumMismatch as exc:
        raise ChecksumMismatch(exc.message.split(";")[0] + "; nothing was loaded",
                               f"the file differs from {side.name}: copy it again from its source") from None


def prune(*, options: Options | None = None, dry_run: bool = False) -> PruneResult:
    """Remove partial downloads, interrupted extracts and dangling images envctl loaded or built."""
    opts = (options or Options()).resolved()
    files: list[Path] = []
    partial_dirs: list[Path] = []
    for base in (opts.downloads, opts.data_root):
        if base and base.is_dir():
            files += [p for p in base.rglob("*") if p.is_file() and p.name.endswith((".partial", ".partial.json"))]
    if opts.data_root and opts.data_root.is_dir():  # extract leftovers: never complete, safe to drop
        partial_dirs = [p for p in opts.data_root.rglob("*") if p.is_dir() and not p.is_symlink()
                        and p.name.endswith((".extracting", ".old")) and not p.parent.name.endswith((".extracting", ".old"))]
    freed = sum(p.stat().st_size for p in files)
    for d in partial_dirs:
        freed += sum(f.stat().st_size for f in d.rglob("*") if f.is_file() and not f.is_symlink())
        files.append(d)
    ours = {p.image_id for p in opts.lock.pins().values() if p.image_id}  # type: ignore[union-attr]
    dangling = dk.dangling_image_ids()
    built = set(dk.dangling_image_ids(label="org.envctl.built-by=envctl"))
    images = sorted({i for i in dangling if i in ours or i in built})
    if not dry_run:
        for p in files:
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        images = dk.remove_images_quietly(images)
    return PruneResult(tuple(files), freed, tuple(images))


__all__ = [
    "ArtifactInfo", "Event", "Exported", "GetResult", "Options", "PruneResult", "VerifyResult", "artifacts",
    "export_image", "get_artifacts", "get_images", "import_image", "list_images", "prune", "verify_images",
    "EnvctlError",
]
