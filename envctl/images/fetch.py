"""HTTP(S) download of large artifacts: resumable, segmented, hashed while streaming, sniffed.

Two ways to get bytes from one mirror:

* :func:`download` writes ``<dest>.partial`` beside the final name (plus ``<dest>.partial.json``
  recording which byte ranges are done) and renames it to ``dest`` only after the size and
  SHA-256 check out. When the server honours ``Range`` the file is fetched in several parallel
  segments, a dropped connection is resumed from where it stopped, and a later run (after Ctrl-C
  or a crash) continues from the partial file. Without ``Range`` it falls back to one stream.
* :func:`open_stream` yields the bytes in order for piping into ``docker load``; a dropped
  connection is re-opened with ``Range`` from the current offset when the server allows it.

Both reject an HTML page where an archive was expected (a Google Drive quota page), a dead or
stalled mirror (connect/read timeouts) and a mirror slower than ``min_rate``, with messages that
name the mirror. ``gdrive`` share links go through the usual confirm-form flow first.
"""
from __future__ import annotations

import errno
import hashlib
import html
import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Literal
from urllib.parse import urlencode, urljoin

import requests

from envctl.errors import ChecksumMismatch, DiskSpaceError, FetchError
from envctl.paths import disk_full, human_bytes, is_disk_full

CHUNK = 1 << 20
READ_BYTES = 256 * 1024  # per socket read: small enough for timely progress and Ctrl-C
HEAD_BYTES = 64 * 1024  # sniffed before trusting a response
MIN_SEGMENT = 8 * CHUNK  # smaller files are not worth splitting
Expect = Literal["tar", "zim", None]
ProgressFn = Callable[[int, "int | None"], None]  # (bytes done, total or None)
TotalCheck = Callable[["int | None"], None]  # sees the length the server announced; raises to refuse it

_QUOTA_PHRASES = (b"quota exceeded", b"too many users have viewed or downloaded", b"download quota")
_GDRIVE_ID = re.compile(r"(?:/file/d/|[?&]id=)([A-Za-z0-9_-]{10,})")


@dataclass(frozen=True)
class Timeouts:
    connect: float = 15.0
    read: float = 60.0  # a read that stalls this long means the mirror is dead
    min_rate: float = 0.0  # bytes/s averaged over ``rate_window``; 0 disables the check
    rate_window: float = 60.0
    retries: int = 4  # re-opens per segment after a dropped connection


@dataclass(frozen=True)
class Downloaded:
    path: Path
    size: int
    sha256: str
    mirror: str
    url: str
    resumed_from: int  # bytes already present from an earlier run
    segments: int  # parallel segments used (1: single stream)
    seconds: float


def partial_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".partial")


def state_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".partial.json")


def expect_for(name: str) -> Expect:
    low = name.lower()
    if low.endswith(".tar"):
        return "tar"
    if low.endswith(".zim"):
        return "zim"
    return None


# ---------------------------------------------------------------- sniffing


def looks_like_tar(head: bytes) -> bool:
    """True when ``head`` starts with a valid tar header block (checksum verified)."""
    if len(head) < 512:
        return False
    block = head[:512]
    try:
        stored = int(block[148:156].replace(b"\0", b" ").strip() or b"-1", 8)
    except ValueError:
        return False
    return stored == sum(block[:148]) + 8 * 32 + sum(block[156:512])


def check_head(head: bytes, content_type: str, *, expect: Expect, mirror: str, url: str) -> None:
    """Raise FetchError when the first bytes are not what an archive of kind ``expect`` starts with."""
    start = head.lstrip()[:200].lower()
    if "text/html" in content_type.lower() or start.startswith((b"<!doctype html", b"<html")):
        low = head.lower()
        if any(p in low for p in _QUOTA_PHRASES):
            raise FetchError(
                f"mirror {mirror} returned a Google Drive 'download quota exceeded' page instead of the file ({url})",
                "try another mirror (--mirror NAME) or retry in 24 hours",
            )
        raise FetchError(
            f"mirror {mirror} returned an HTML page instead of the file ({url})",
            "the link is probably dead or needs a login; try another mirror (--mirror NAME)",
        )
    if expect == "tar" and not (looks_like_tar(head) or head.startswith(b"\x1f\x8b")):  # docker load takes tar.gz too
        raise FetchError(f"mirror {mirror} did not return a tar archive ({url}): first bytes {head[:16]!r}",
                         "try another mirror (--mirror NAME)")
    if expect == "zim" and not head.startswith(b"ZIM\x04"):
        raise FetchError(f"mirror {mirror} did not return a ZIM file ({url}): first bytes {head[:16]!r}",
                         "try another mirror (--mirror NAME)")


# ---------------------------------------------------------------- HTTP helpers


class _RateWatch:
    """Raises FetchError when the average rate over the last window falls below ``min_rate``."""

    def __init__(self, t: Timeouts, mirror: str) -> None:
        self.t, self.mirror = t, mirror
        self.start = time.monotonic()
        self.mark = (self.start, 0)
        self.lock = threading.Lock()

    def check(self, done: int) -> None:
        if self.t.min_rate <= 0:
            return
        now = time.monotonic()
        with self.lock:
            t0, d0 = self.mark
            if now - t0 < self.t.rate_window:
                return
            rate = (done - d0) / (now - t0)
            self.mark = (now, done)
        if rate < self.t.min_rate:
            raise FetchError(
                f"mirror {self.mirror} is too slow: {rate / 1024:.0f} KiB/s over the last {self.t.rate_window:.0f}s "
                f"(minimum {self.t.min_rate / 1024:.0f} KiB/s)",
                "it was skipped; pick another with --mirror NAME, or lower ENVCTL_MIN_RATE",
            )


def session_for() -> requests.Session:
    s = requests.Session()
    s.headers["User-Agent"] = "envctl-fetch/1"
    s.headers["Accept-Encoding"] = "identity"  # byte offsets must be offsets in the file
    return s


def open_range(session: requests.Session, url: str, start: int, end: int | None, t: Timeouts, mirror: str
          ) -> requests.Response:
    headers = {"Range": f"bytes={start}-{'' if end is None else end - 1}"}
    try:
        resp = session.get(url, headers=headers, stream=True, timeout=(t.connect, t.read), allow_redirects=True)
    except requests.ConnectionError as exc:
        raise FetchError(f"mirror {mirror} is unreachable ({url}): {_short(exc)}", "try another mirror (--mirror NAME)") from exc
    except requests.Timeout as exc:
        raise FetchError(f"mirror {mirror} did not answer within {t.connect:.0f}s ({url})", "try another mirror") from exc
    if resp.status_code == 416:
        resp.close()
        raise FetchError(f"mirror {mirror} rejected byte range {start}- ({url})", "delete the .partial file and retry")
    if resp.status_code >= 400:
        resp.close()
        raise FetchError(f"mirror {mirror} answered HTTP {resp.status_code} for {url}", "try another mirror (--mirror NAME)")
    return resp


def total_and_ranges(resp: requests.Response) -> tuple[int | None, bool]:
    """(total size, whether Range is honoured) from a response to a ``Range: bytes=0-`` request."""
    if resp.status_code == 206:
        m = re.match(r"bytes \d+-\d+/(\d+)", resp.headers.get("Content-Range", ""))
        return (int(m.group(1)) if m else None), True
    length = resp.headers.get("Content-Length")
    return (int(length) if length and length.isdigit() else None), False


def _short(exc: BaseException) -> str:
    text = str(exc)
    for marker, why in (("NameResolutionError", "its host name does not resolve"), ("Connection refused", "connection refused"),
                        ("timed out", "timed out"), ("Connection reset", "connection reset")):
        if marker in text:
            return why
    return text if len(text) < 200 else text[:200] + "..."


def _chunks(resp: requests.Response, mirror: str, url: str, t: Timeouts) -> Iterator[bytes]:
    """Body chunks; a stall or a drop becomes a FetchError marked resumable by the caller."""
    try:
        for chunk in _pieces(resp):
            if chunk:
                yield chunk
    except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
        raise _Dropped(f"mirror {mirror} dropped the connection ({_short(exc)})") from exc
    except requests.Timeout as exc:
        raise _Dropped(f"mirror {mirror} stalled for {t.read:.0f}s") from exc
    finally:
        resp.close()


class _Dropped(FetchError):
    """A connection ended early; resumable when the server honours Range."""


def _pieces(resp: requests.Response) -> Iterator[bytes]:
    """The one decoding iterator of a response's body: the sniffed head and the rest both come from it. (Reading
    the head with ``raw.read`` and the rest with ``iter_content`` broke every chunked body: http.client's and
    urllib3's chunk parsers disagreed about where the first chunk ended.)"""
    pieces = getattr(resp, "_envctl_pieces", None)
    if pieces is None:
        pieces = resp.iter_content(READ_BYTES)
        setattr(resp, "_envctl_pieces", pieces)
    return pieces


def _sniff(resp: requests.Response, mirror: str, url: str, expect: Expect) -> bytes:
    """The first bytes of the body (at least ``HEAD_BYTES`` when there are as many), checked to be what ``expect``
    says (not an HTML page)."""
    head = b""
    try:
        for piece in _pieces(resp):
            head += piece
            if len(head) >= HEAD_BYTES:
                break
    except Exception as exc:  # urllib3 protocol / timeout errors
        resp.close()
        raise FetchError(f"mirror {mirror} dropped the connection before sending any data ({url}): {_short(exc)}",
                         "try another mirror (--mirror NAME)") from exc
    try:
        check_head(head, resp.headers.get("Content-Type", ""), expect=expect, mirror=mirror, url=url)
    except FetchError:
        resp.close()
        raise
    return head


# ---------------------------------------------------------------- Google Drive


def gdrive_direct_url(session: requests.Session, url: str, t: Timeouts, mirror: str) -> str:
    """Resolve a Drive share link to a URL that returns the bytes (following the 'virus scan' confirm form).

    Raises FetchError for the quota page. Returns the original URL when Drive answers with the file at once.
    """
    m = _GDRIVE_ID.search(url)
    if "drive.google.com" in url and m:
        url = "https://drive.google.com/uc?" + urlencode({"export": "download", "id": m.group(1)})
    try:
        resp = session.get(url, stream=True, timeout=(t.connect, t.read))
    except requests.RequestException as exc:
        raise FetchError(f"mirror {mirror} is unreachable ({url}): {_short(exc)}", "try another mirror (--mirror NAME)") from exc
    with resp:
        if "text/html" not in resp.headers.get("Content-Type", ""):
            return resp.url
        page = resp.raw.read(256 * 1024, decode_content=True) or b""
    low = page.lower()
    if any(p in low for p in _QUOTA_PHRASES):
        raise FetchError(f"mirror {mirror}: Google Drive download quota exceeded for {url}",
                         "try another mirror (--mirror NAME) or retry in 24 hours")
    form = re.search(rb'<form[^>]*id="download-form"[^>]*action="([^"]+)"(.*?)</form>', page, re.S)
    if form:
        action = html.unescape(form.group(1).decode())
        fields = dict(re.findall(r'name="([^"]+)"\s+value="([^"]*)"', form.group(2).decode()))
        return urljoin(resp.url, action) + "?" + urlencode(fields)
    token = re.search(rb"confirm=([0-9A-Za-z_-]+)", page)
    if token and m:
        return urljoin(resp.url, "/uc?" + urlencode({"export": "download", "confirm": token.group(1).decode(), "id": m.group(1)}))
    raise FetchError(f"mirror {mirror}: Google Drive answered with a page but no download form ({url})",
                     "the file may be private or removed; try another mirror")


def s3_https_url(url: str) -> str:
    """``s3://bucket/key`` -> the public virtual-hosted HTTPS URL (for buckets readable without signing)."""
    if not url.startswith("s3://"):
        return url
    bucket, _, key = url[5:].partition("/")
    return f"https://{bucket}.s3.amazonaws.com/{key}"


# ---------------------------------------------------------------- file download


@dataclass
class _Segment:
    start: int
    end: int
    done: int = 0  # bytes written from start

    @property
    def pos(self) -> int:
        return self.start + self.done

    @property
    def finished(self) -> bool:
        return self.pos >= self.end


def _split(start: int, end: int, n: int) -> list[_Segment]:
    n = max(1, min(n, (end - start) // MIN_SEGMENT or 1))
    step = (end - start) // n
    bounds = [start + i * step for i in range(n)] + [end]
    return [_Segment(bounds[i], bounds[i + 1]) for i in range(n) if bounds[i] < bounds[i + 1]]


@dataclass
class _Plan:
    total: int
    segments: list[_Segment] = field(default_factory=list)

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_text(json.dumps({"total": self.total, "segments": [[s.start, s.end, s.done] for s in self.segments]}))
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: Path, total: int) -> "_Plan | None":
        try:
            data = json.loads(path.read_text())
            segs = [_Segment(int(a), int(b), int(c)) for a, b, c in data["segments"]]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if data.get("total") != total or not segs:
            return None
        return cls(total, segs)


def _discard(dest: Path) -> None:
    for p in (partial_path(dest), state_path(dest), state_path(dest).with_name(state_path(dest).name + ".tmp")):
        p.unlink(missing_ok=True)


def _room(fd: int, size: int) -> None:
    """ENOSPC unless what the file open on ``fd`` still lacks of ``size`` bytes fits on its filesystem: a disk
    too small fails before a byte is fetched, not when it fills."""
    st, fs = os.fstat(fd), os.fstatvfs(fd)
    if size - st.st_blocks * 512 > fs.f_bavail * fs.f_frsize:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _reserve(fd: int, size: int) -> None:
    """Give the partial file its whole length (sparse), once :func:`_room` says it fits."""
    _room(fd, size)
    if os.fstat(fd).st_size < size:
        os.truncate(fd, size)


def _full(dest: Path, total: int | None, done: int | None) -> DiskSpaceError:
    """The partial download of ``dest`` removed after its filesystem filled: one line naming it, and what it
    needs (the announced length; without one, more than what fitted)."""
    _discard(dest)
    kept = "the partial file was removed"
    if not total and done:
        kept = f"it needs more than the {human_bytes(done)} that fitted (the mirror announced no length); {kept}"
    return disk_full(dest, total, what="to download", kept=kept,
                     hint="free space there (or point ENVCTL_DATA_DIR at a bigger disk) and run 'envctl images get' again")


def download(url: str, dest: Path, *, mirror: str, expected_size: int | None = None,
             expected_sha256: str | None = None, expect: Expect = None, segments: int = 4,
             progress: ProgressFn | None = None, timeouts: Timeouts = Timeouts(),
             session: requests.Session | None = None, check_total: TotalCheck | None = None) -> Downloaded:
    """Fetch ``url`` into ``dest`` (resuming ``dest.partial``), verify size and SHA-256, rename into place.

    ``expected_size`` is an exact byte count (a pin), never an estimate; without it the length the
    server announces (Content-Length / Content-Range) is the one checked. ``check_total`` sees
    that announced length before any byte is written and may raise to refuse the mirror.
    A checksum or size mismatch deletes the partial bytes and raises ChecksumMismatch naming the
    mirror. Interrupts (KeyboardInterrupt, errors) keep the partial file and its range record so
    the next call resumes. A full filesystem removes them (the space is given back) and raises
    DiskSpaceError naming it, what is free and the file's size; with a known length that is found
    before any byte is fetched (the partial file is allocated whole first).
    """
    try:
        return _download(url, dest, mirror=mirror, expected_size=expected_size, expected_sha256=expected_sha256,
                         expect=expect, segments=segments, progress=progress, timeouts=timeouts, session=session,
                         check_total=check_total)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        raise _full(dest, getattr(exc, "envctl_total", None), getattr(exc, "envctl_done", None)) from None


def _download(url: str, dest: Path, *, mirror: str, expected_size: int | None, expected_sha256: str | None,
              expect: Expect, segments: int, progress: ProgressFn | None, timeouts: Timeouts,
              session: requests.Session | None, check_total: TotalCheck | None) -> Downloaded:
    """:func:`download`, but a full disk surfaces as the OSError (carrying ``envctl_total``)."""
    began = time.monotonic()
    session = session or session_for()
    dest.parent.mkdir(parents=True, exist_ok=True)
    part, state = partial_path(dest), state_path(dest)
    first = open_range(session, url, 0, None, timeouts, mirror)
    total, ranges = total_and_ranges(first)
    if check_total is not None:
        try:
            check_total(total)
        except BaseException:
            first.close()
            raise
    if expected_size is not None and total is not None and total != expected_size:
        first.close()
        raise FetchError(f"mirror {mirror} offers {total} bytes for {dest.name}, expected {expected_size} ({url})",
                         "the mirror serves a different file; try another mirror (--mirror NAME)")
    head = _sniff(first, mirror, url, expect)
    body = _chunks(first, mirror, url, timeouts)

    if ranges and total is not None:
        plan = _Plan.load(state, total) if part.exists() else None
        if plan is None:
            have = part.stat().st_size if part.exists() and not state.exists() else 0
            have = min(have, total)
            plan = _Plan(total, ([_Segment(0, have, have)] if have else []) + _split(have, total, segments))
        resumed = sum(s.done for s in plan.segments)
        opener = [head, body]
        try:
            digest = _fetch_segments(session, url, part, state, plan, mirror, timeouts, progress, opener)
        except OSError as exc:
            exc.envctl_total = total  # type: ignore[attr-defined]
            raise
        finally:
            body.close()  # type: ignore[attr-defined]
        size, used = total, sum(1 for s in plan.segments if s.end > s.start)
    else:
        resumed = 0
        try:
            digest, size = _fetch_single(part, head, body, total, progress, _RateWatch(timeouts, mirror))
        except OSError as exc:
            exc.envctl_total = total  # type: ignore[attr-defined]
            raise
        state.unlink(missing_ok=True)
        used = 1

    want_size = expected_size if expected_size is not None else total
    if want_size is not None and size != want_size:
        _discard(dest)
        raise ChecksumMismatch(f"mirror {mirror} sent {size} bytes of {dest.name}, expected {want_size}; the bad bytes were deleted",
                               "try another mirror (--mirror NAME)")
    if expected_sha256 and digest != expected_sha256:
        _discard(dest)
        raise ChecksumMismatch(
            f"SHA-256 of {dest.name} from mirror {mirror} is {digest}, expected {expected_sha256}; the bad bytes were deleted",
            "the mirror serves a corrupted or different file; try another mirror (--mirror NAME)",
        )
    os.replace(part, dest)
    state.unlink(missing_ok=True)
    return Downloaded(dest, size, digest, mirror, url, resumed, used, time.monotonic() - began)


def _fetch_single(part: Path, head: bytes, body: Iterator[bytes], total: int | None,
                  progress: ProgressFn | None, watch: _RateWatch) -> tuple[str, int]:
    """One stream from byte 0 (the server cannot seek, so any old partial is overwritten)."""
    h = hashlib.sha256()
    done = 0
    with open(part, "wb") as out:
        if total:
            _room(out.fileno(), total)
        try:
            for chunk in _prepend(head, body):
                out.write(chunk)
                h.update(chunk)
                done += len(chunk)
                watch.check(done)
                if progress:
                    progress(done, total)
        except _Dropped as exc:
            raise FetchError(f"{exc.message} after {done} of {total or '?'} bytes, and it does not support Range, "
                             "so the download cannot resume", "try another mirror (--mirror NAME)") from exc
        except OSError as exc:
            exc.envctl_done = done  # type: ignore[attr-defined]
            raise
        finally:
            body.close()  # type: ignore[attr-defined]
    return h.hexdigest(), done


def _prepend(head: bytes, body: Iterator[bytes]) -> Iterator[bytes]:
    if head:
        yield head
    yield from body


def _fetch_segments(session: requests.Session, url: str, part: Path, state: Path, plan: _Plan, mirror: str,
                    t: Timeouts, progress: ProgressFn | None, opener: list | None = None) -> str:
    """Fill the missing ranges of ``part`` in parallel threads while one thread hashes the file in order.

    ``opener`` is ``[head, body]`` of an open response from byte 0, used for a fresh segment at 0.

    Long because: the range fetchers and the hasher are closures sharing one file descriptor, one condition and
    one stop event; apart they would need a class that carries exactly these and nothing else.
    """
    opener_seg = next((s for s in plan.segments if s.start == 0 and s.done == 0), None)
    with open(part, "ab"):
        pass
    fd = os.open(part, os.O_RDWR)
    try:
        _reserve(fd, plan.total)
        cond = threading.Condition()
        stop = threading.Event()
        errors: list[BaseException] = []
        watch = _RateWatch(t, mirror)
        done_total = [sum(s.done for s in plan.segments)]

        def worker(seg: _Segment) -> None:
            attempts = 0
            while not seg.finished and not stop.is_set():
                body: Iterator[bytes] | None = None
                try:
                    if seg is opener_seg and opener:
                        body, head = opener[1], opener[0]  # the probe's response already streams from byte 0
                        opener.clear()
                        body = _prepend(head, body)
                    else:
                        resp = open_range(session, url, seg.pos, seg.end, t, mirror)
                        if resp.status_code != 206:
                            resp.close()
                            raise FetchError(f"mirror {mirror} stopped honouring Range ({url})", "retry, or try another mirror")
                        body = _chunks(resp, mirror, url, t)
                    for chunk in body:
                        chunk = chunk[: seg.end - seg.pos]
                        os.pwrite(fd, chunk, seg.pos)
                        with cond:
                            seg.done += len(chunk)
                            done_total[0] += len(chunk)
                            cond.notify_all()
                        if stop.is_set():
                            return
                        watch.check(done_total[0])
                        if progress:
                            progress(done_total[0], plan.total)
                        if seg.finished:
                            break
                    if not seg.finished:
                        raise _Dropped(f"mirror {mirror} ended the response early")
                except _Dropped as exc:
                    attempts += 1
                    if attempts > t.retries:
                        errors.append(FetchError(f"{exc.message}; gave up after {t.retries} resumes", "retry later; the partial file is kept"))
                        stop.set()
                    elif stop.wait(min(0.2 * 2 ** attempts, 5.0)):
                        return
                except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                    errors.append(exc)
                    stop.set()
                    return
                finally:
                    if body is not None:
                        body.close()  # type: ignore[attr-defined]
                    with cond:
                        cond.notify_all()

        h = hashlib.sha256()

        def hasher() -> None:
            pos = 0
            for seg in sorted(plan.segments, key=lambda s: s.start):
                while pos < seg.end:
                    with cond:
                        while seg.pos <= pos and not stop.is_set():
                            cond.wait(0.5)
                        if stop.is_set() and seg.pos <= pos:
                            return
                        avail = seg.pos
                    while pos < avail:
                        data = os.pread(fd, min(CHUNK * 4, avail - pos), pos)
                        h.update(data)
                        pos += len(data)
            hashed[0] = pos

        hashed = [0]
        threads = [threading.Thread(target=worker, args=(s,), daemon=True) for s in plan.segments if not s.finished]
        threads.append(threading.Thread(target=hasher, daemon=True))
        for th in threads:
            th.start()
        last_save = time.monotonic()
        try:
            while not errors:
                alive = [th for th in threads if th.is_alive()]
                if not alive:
                    break
                alive[-1].join(0.2)
                if time.monotonic() - last_save > 2.0:
                    with cond:
                        plan.save(state)
                    last_save = time.monotonic()
        finally:
            stop.set()  # a no-op for finished threads; wakes the rest on error or interrupt
            for th in threads:
                th.join(5)
            with cond:
                plan.save(state)
        if errors:
            raise errors[0]
        if hashed[0] != plan.total:
            raise FetchError(f"download from mirror {mirror} stopped at {hashed[0]} of {plan.total} bytes", "retry; the partial file is kept")
        return h.hexdigest()
    finally:
        os.close(fd)


# ---------------------------------------------------------------- streaming


class Stream:
    """In-order bytes of one URL for a pipe; reconnects with Range after a drop when possible.

    ``total`` is known after construction (None for chunked responses without Range); ``done``
    counts bytes yielded.
    """

    def __init__(self, url: str, *, mirror: str, expect: Expect = None, expected_size: int | None = None,
                 timeouts: Timeouts = Timeouts(), session: requests.Session | None = None,
                 check_total: TotalCheck | None = None) -> None:
        self.url, self.mirror, self.t = url, mirror, timeouts
        self.session = session or session_for()
        self.done = 0
        self._resp = open_range(self.session, url, 0, None, timeouts, mirror)
        self.total, self.ranges = total_and_ranges(self._resp)
        if check_total is not None:
            try:
                check_total(self.total)
            except BaseException:
                self._resp.close()
                raise
        if expected_size is not None and self.total is not None and self.total != expected_size:
            self._resp.close()
            raise FetchError(f"mirror {mirror} offers {self.total} bytes, expected {expected_size} ({url})",
                             "the mirror serves a different file; try another mirror (--mirror NAME)")
        self._head = _sniff(self._resp, mirror, url, expect)
        self._body = _chunks(self._resp, mirror, url, timeouts)

    def close(self) -> None:
        self._body.close()  # type: ignore[attr-defined]

    def __iter__(self) -> Iterator[bytes]:
        watch = _RateWatch(self.t, self.mirror)
        attempts = 0
        try:
            if self._head:
                self.done += len(self._head)
                yield self._head
            while True:
                try:
                    for chunk in self._body:
                        self.done += len(chunk)
                        watch.check(self.done)
                        yield chunk
                    if self.total is None or self.done >= self.total:
                        break
                    raise _Dropped(f"mirror {self.mirror} ended the response early")
                except _Dropped as exc:
                    attempts += 1
                    if not self.ranges or self.total is None or attempts > self.t.retries:
                        why = "it does not support Range" if not self.ranges else f"gave up after {self.t.retries} resumes"
                        raise FetchError(f"{exc.message} after {self.done} of {self.total or '?'} bytes; {why}",
                                         "try another mirror (--mirror NAME)") from exc
                    resp = open_range(self.session, self.url, self.done, None, self.t, self.mirror)
                    if resp.status_code != 206:
                        resp.close()
                        raise FetchError(f"mirror {self.mirror} stopped honouring Range ({self.url})",
                                         "try another mirror (--mirror NAME)") from exc
                    self._body = _chunks(resp, self.mirror, self.url, self.t)
            if self.total is not None and self.done != self.total:
                raise FetchError(f"mirror {self.mirror} sent {self.done} bytes, announced {self.total}",
                                 "try another mirror (--mirror NAME)")
        finally:
            self.close()
