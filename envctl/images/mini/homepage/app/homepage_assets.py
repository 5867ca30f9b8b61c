"""Generate the homepage's static PNGs at image build time: site logos and VWA task input images.

Deterministic (colours derived from the file name) and tiny, so nothing binary lives in git.
Usage: ``python3 -m sites.homepage_assets STATIC_DIR``
"""
from __future__ import annotations

import hashlib
import struct
import sys
import zlib
from pathlib import Path

FIGURES = ["classifieds", "onestopshop", "cms", "reddit", "gitlab", "map", "calculator", "scratchpad",
           "wikipedia", "manual1", "manual2"]
# A few VisualWebArena task input images (site, task, count), at upstream's paths.
INPUT_IMAGES = [("classifieds", 8, 1), ("classifieds", 9, 1), ("classifieds", 32, 1), ("classifieds", 54, 1),
                ("reddit", 0, 1), ("reddit", 1, 1), ("reddit", 105, 2), ("reddit", 113, 3),
                ("shopping", 0, 1), ("shopping", 1, 1), ("shopping", 2, 2)]


def png(width: int, height: int, seed: str) -> bytes:
    """An RGB PNG: a diagonal blend between two colours derived from ``seed``."""
    h = hashlib.sha256(seed.encode()).digest()
    a, b = h[0:3], h[3:6]
    rows = bytearray()
    for y in range(height):
        rows.append(0)
        for x in range(width):
            t = (x + y) / (width + height - 2 or 1)
            rows += bytes(int(a[c] + (b[c] - a[c]) * t) for c in range(3))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(bytes(rows), 9)) + chunk(b"IEND", b"")


def input_image_paths() -> list[str]:
    return [f"input_images/{site}/task_{task}/input_{k}.png" for site, task, n in INPUT_IMAGES for k in range(n)]


def generate(static: Path) -> list[Path]:
    written = []
    for name in FIGURES:
        written.append(static / "figures" / f"{name}.png")
        written[-1].parent.mkdir(parents=True, exist_ok=True)
        written[-1].write_bytes(png(96, 96, f"figure:{name}"))
    for rel in input_image_paths():
        written.append(static / rel)
        written[-1].parent.mkdir(parents=True, exist_ok=True)
        written[-1].write_bytes(png(160, 120, rel))
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python3 -m sites.homepage_assets STATIC_DIR", file=sys.stderr)
        sys.exit(2)
    print(f"wrote {len(generate(Path(sys.argv[1])))} images")
