"""Stream an image archive into ``docker load`` while hashing it, never committing bad bytes.

The bytes go straight into ``docker load``'s stdin, so no copy of the archive touches the disk.
The engine only creates the image after it has read the whole archive (the tar's end marker),
so the last ``HOLD_BACK`` bytes are held until the stream has ended and its size and SHA-256
have been checked. On a mismatch, a truncated stream, an error or Ctrl-C, the ``docker load``
process is killed before it ever sees the end of the archive: the engine discards the upload
and no image, layer or tag is created. Anything the engine did report as loaded on a failure
path is removed again (only those ids, never other images).
"""
from __future__ import annotations

import hashlib
import re
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from envctl.errors import ChecksumMismatch, DockerError
from envctl.backends.docker import ENGINE as dk

HOLD_BACK = 1 << 20  # > the tar end marker (1 KiB) with a wide margin
_LOADED = re.compile(r"^Loaded image(?: ID)?: (\S+)\s*$", re.M)


@dataclass(frozen=True)
class LoadResult:
    image_id: str  # "sha256:..."
    tags: tuple[str, ...]  # RepoTags after tagging
    size: int  # archive bytes read
    sha256: str  # of the archive bytes


def file_chunks(path: Path, chunk: int = 1 << 20) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while data := fh.read(chunk):
            yield data


def inspect_id(ref: str) -> str | None:
    return dk.image_id_or_none(ref)


def _repo_tags(image_id: str) -> tuple[str, ...]:
    return dk.image_repo_tags(image_id)


def parse_loaded(output: str) -> list[str]:
    """Refs from ``docker load`` output: tags (``Loaded image: a:b``) or ids (``Loaded image ID: sha256:..``)."""
    return _LOADED.findall(output)


def load_stream(chunks: Iterable[bytes], *, tag: str | None = None, expected_sha256: str | None = None,
                expected_size: int | None = None, source: str = "stream",
                progress: Callable[[int], None] | None = None) -> LoadResult:
    """Pipe ``chunks`` into ``docker load``; verify; tag the image ``tag``. See the module doc for guarantees.

    ``source`` names where the bytes came from (a mirror), for messages. Raises ChecksumMismatch,
    FetchError (from the chunk iterator) or DockerError; in every case nothing is left loaded.
    """
    proc = dk.load_process()
    out: dict[str, bytes] = {}

    def drain(name: str) -> None:
        out[name] = getattr(proc, name).read()

    readers = [threading.Thread(target=drain, args=(n,), daemon=True) for n in ("stdout", "stderr")]
    for r in readers:
        r.start()
    h = hashlib.sha256()
    size = 0
    held = bytearray()
    ok = False
    try:
        assert proc.stdin is not None
        for chunk in chunks:
            h.update(chunk)
            size += len(chunk)
            held += chunk
            if len(held) > HOLD_BACK:
                cut = len(held) - HOLD_BACK
                _write(proc, bytes(held[:cut]), readers, out)
                del held[:cut]
            if progress:
                progress(size)
        digest = h.hexdigest()
        if expected_size is not None and size != expected_size:
            raise ChecksumMismatch(f"archive from {source} has {size} bytes, expected {expected_size}; nothing was loaded",
                                   "try another mirror (--mirror NAME)")
        if expected_sha256 and digest != expected_sha256:
            raise ChecksumMismatch(
                f"SHA-256 of the archive from {source} is {digest}, expected {expected_sha256}; nothing was loaded",
                "the mirror serves a corrupted or different file; try another mirror (--mirror NAME)",
            )
        _write(proc, bytes(held), readers, out)
        proc.stdin.close()
        rc = proc.wait()
        for r in readers:
            r.join()
        text = out.get("stdout", b"").decode(errors="replace")
        if rc != 0:
            err = out.get("stderr", b"").decode(errors="replace").strip()
            raise DockerError(f"docker load of the archive from {source} failed: {err[-400:] or f'exit {rc}'}",
                              "the archive is damaged or not a 'docker save' tarball; try another mirror")
        refs = parse_loaded(text)
        if not refs:
            raise DockerError(f"docker load of the archive from {source} reported no image: {text[-200:]!r}",
                              "the archive holds no image")
        ids = {i for i in (inspect_id(r) for r in refs) if i}
        if len(ids) != 1:
            _remove(refs)
            raise DockerError(f"the archive from {source} holds {len(ids)} images ({', '.join(refs)}); expected one",
                              "use an archive made by 'docker save' of one image")
        image_id = ids.pop()
        if tag:
            try:
                dk.tag_image(image_id, tag)
            except DockerError as exc:
                _remove(refs)
                raise DockerError(exc.message, "check the tag name") from None
        ok = True
        return LoadResult(image_id, _repo_tags(image_id), size, digest)
    finally:
        if not ok and proc.poll() is None:
            proc.kill()  # the engine sees the upload break before the end marker and discards it
            proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            try:
                pipe.close()  # type: ignore[union-attr]
            except OSError:
                pass


def _write(proc: subprocess.Popen[bytes], data: bytes, readers: list[threading.Thread], out: dict[str, bytes]) -> None:
    try:
        proc.stdin.write(data)  # type: ignore[union-attr]
    except BrokenPipeError as exc:
        proc.wait()
        for r in readers:
            r.join(5)
        err = out.get("stderr", b"").decode(errors="replace").strip()
        raise DockerError(f"docker load stopped reading: {err[-400:] or f'exit {proc.returncode}'}",
                          "the archive is damaged or not a 'docker save' tarball") from exc


def _remove(refs: list[str]) -> None:
    dk.remove_images_quietly(refs)


def save_stream(ref: str) -> tuple[subprocess.Popen[bytes], Iterator[bytes]]:
    """``docker save ref`` as a chunk iterator (the process is returned so callers can check its exit)."""
    proc = dk.save_process(ref)

    def chunks() -> Iterator[bytes]:
        assert proc.stdout is not None
        while data := proc.stdout.read(1 << 20):
            yield data

    return proc, chunks()

