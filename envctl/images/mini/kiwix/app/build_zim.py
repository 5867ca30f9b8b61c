"""Write the mini Wikipedia ZIM (run at image build time with Debian's python3-libzim).

Usage: ``python3 build_zim.py OUT.zim``. The archive holds the articles of ``articles.py`` as
front articles, a full-text (Xapian) index and title index, the metadata kiwix-serve shows, and a
48x48 illustration. Everything is deterministic except libzim's own UUID and date fields.

libzim 8.1.1 (Debian bookworm) leaves an entry out of the title index when its title equals its
path (e.g. "Pittsburgh"), so kiwix-serve's /suggest would not offer it. Such articles get a
redirect with a distinct title (``REDIRECTS``, as Wikipedia has, e.g. "Pittsburgh, Pennsylvania"),
which is indexed and resolves to the article. Full-text search is not affected.
"""
from __future__ import annotations

import re
import struct
import sys
import zlib

from libzim.writer import Creator, Hint, Item, StringProvider

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from articles import ARTICLES, LANDING, REDIRECTS  # noqa: E402

LINK = re.compile(r"\[\[([^|\]]+)(?:\|([^\]]+))?\]\]", re.S)


def relative_href(src: str, target: str) -> str:
    # "./" keeps a target such as "User:X" from being read as a URL scheme.
    return "../" * src.count("/") + ("./" if not src.count("/") else "") + target


def render(path: str, title: str, body: str) -> str:
    def link(m: re.Match) -> str:
        target, label = m.group(1), m.group(2) or m.group(1).replace("_", " ")
        if target not in ARTICLES:
            raise SystemExit(f"{path}: link to missing article {target!r}")
        return f'<a href="{relative_href(path, target)}" title="{target}">{" ".join(label.split())}</a>'

    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title></head><body>"
        f'<div id="content" class="mw-body"><h1 id="firstHeading" class="firstHeading">{title}</h1>'
        f'<div id="mw-content-text">{LINK.sub(link, body)}</div></div></body></html>'
    )


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


class Article(Item):
    def __init__(self, path: str, title: str, html: str) -> None:
        super().__init__()
        self.path, self.title, self.html = path, title, html

    def get_path(self) -> str:
        return self.path

    def get_title(self) -> str:
        return self.title

    def get_mimetype(self) -> str:
        return "text/html"

    def get_contentprovider(self) -> StringProvider:
        return StringProvider(self.html)

    def get_hints(self) -> dict:
        return {Hint.FRONT_ARTICLE: True}


def main(out: str) -> None:
    with Creator(out).config_indexing(True, "eng") as creator:
        creator.set_mainpath(LANDING)
        for path, (title, body) in ARTICLES.items():
            creator.add_item(Article(path, title, render(path, title, body)))
        for path, (title, target) in REDIRECTS.items():
            if target not in ARTICLES:
                raise SystemExit(f"redirect {path!r} to missing article {target!r}")
            creator.add_redirection(path, title, target, {Hint.FRONT_ARTICLE: True})
        for name, value in {
            "Name": "wikipedia_en_all",
            "Title": "Wikipedia",
            "Description": "Mini offline Wikipedia for envctl (a few articles)",
            "Language": "eng",
            "Creator": "Wikipedia",
            "Publisher": "envctl",
            "Date": "2022-05-01",
            "Flavour": "maxi",
            "Tags": "wikipedia;_category:wikipedia;_pictures:yes;_videos:no;_details:yes;_ftindex:yes",
        }.items():
            creator.add_metadata(name, value)
        creator.add_illustration(48, png(48, 48, (51, 102, 204)))
    print(f"wrote {out} with {len(ARTICLES)} articles")


if __name__ == "__main__":
    main(sys.argv[1])
