"""Write the mini Wikipedia ZIM (run at image build time with Debian's python3-libzim).

Usage: ``python3 build_zim.py OUT.zim [TASK_PAGES.json]``. The archive holds the articles of
``articles.py`` as front articles, a full-text (Xapian) index and title index, the metadata
kiwix-serve shows, and a 48x48 illustration. Everything is deterministic except libzim's own UUID and
date fields.

With TASK_PAGES.json (files/task_pages.json: the start pages of the benchmark tasks that open on
Wikipedia) every ``/<book>/A/<path>`` not yet in ARTICLES becomes an article titled after its path
(body from ``articles.TASK_BODIES``, pictures from ``articles.TASK_IMAGES``) and every
``/<book>/I/<name>`` an image entry. Pictures are small WebP drawings made with Pillow (lossless, so
the same bytes every build); they are stored at ``I/<name>``, which kiwix-serve serves at
``/<book>/I/<name>`` like upstream's image URLs.

libzim 8.1.1 (Debian bookworm) leaves an entry out of the title index when its title equals its
path (e.g. "Pittsburgh"), so kiwix-serve's /suggest would not offer it. Such articles get a
redirect with a distinct title (``REDIRECTS``, as Wikipedia has, e.g. "Pittsburgh, Pennsylvania"),
which is indexed and resolves to the article. Full-text search is not affected.
"""
from __future__ import annotations

import io
import json
import re
import struct
import sys
import zlib
from urllib.parse import unquote

from libzim.writer import Creator, Hint, Item, StringProvider

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from articles import ARTICLES, LANDING, REDIRECTS, TASK_BODIES, TASK_IMAGES  # noqa: E402

BOOK = "wikipedia_en_all_maxi_2022-05"

LINK = re.compile(r"\[\[([^|\]]+)(?:\|([^\]]+))?\]\]", re.S)


def relative_href(src: str, target: str) -> str:
    # "./" keeps a target such as "User:X" from being read as a URL scheme.
    return "../" * src.count("/") + ("./" if not src.count("/") else "") + target


def render(path: str, title: str, body: str, images: list[tuple[str, str]] = ()) -> str:
    def link(m: re.Match) -> str:
        target, label = m.group(1), m.group(2) or m.group(1).replace("_", " ")
        if target not in ARTICLES:
            raise SystemExit(f"{path}: link to missing article {target!r}")
        return f'<a href="{relative_href(path, target)}" title="{target}">{" ".join(label.split())}</a>'

    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title></head><body>"
        f'<div id="content" class="mw-body"><h1 id="firstHeading" class="firstHeading">{title}</h1>'
        f'<div id="mw-content-text">{figures(path, images)}{LINK.sub(link, body)}</div></div></body></html>'
    )


def figures(path: str, images: list[tuple[str, str]]) -> str:
    return "".join(
        f'<figure class="thumb"><img src="{relative_href(path, "I/" + name)}" alt="{caption}" '
        f'width="{size[0]}" height="{size[1]}"><figcaption>{caption}</figcaption></figure>'
        for name, caption in images
        for size in [DRAWINGS[name][0]]
    )


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


# ---- pictures (Pillow is imported lazily: the plain build needs only python3-libzim) ----

def _up(d) -> None:
    d.rectangle((0, 0, 160, 120), fill=(135, 196, 235))
    for i, (x, y) in enumerate([(50, 20), (65, 12), (80, 18), (95, 10), (110, 22), (72, 30), (92, 32)]):
        d.line((x, y + 8, 80, 70), fill=(90, 90, 90))
        d.ellipse((x - 8, y - 8, x + 8, y + 8), fill=[(230, 60, 60), (250, 200, 40), (70, 160, 230), (120, 200, 90)][i % 4])
    d.rectangle((58, 78, 102, 110), fill=(240, 220, 170))
    d.polygon([(52, 80), (80, 62), (108, 80)], fill=(160, 80, 60))
    d.rectangle((74, 92, 84, 110), fill=(120, 70, 40))


def _digging(d) -> None:
    d.rectangle((0, 0, 160, 70), fill=(170, 215, 240))
    d.rectangle((0, 70, 160, 120), fill=(120, 85, 50))
    d.ellipse((90, 78, 140, 98), fill=(60, 40, 20))
    d.ellipse((40, 48, 92, 76), fill=(200, 150, 80))  # dog body
    d.ellipse((82, 52, 104, 74), fill=(200, 150, 80))  # head, down in the hole
    d.polygon([(86, 54), (80, 44), (92, 52)], fill=(150, 100, 50))
    for x in (46, 60, 74, 86):
        d.rectangle((x, 70, x + 5, 84), fill=(200, 150, 80))


def _pokeball(d) -> None:
    d.rectangle((0, 0, 120, 120), fill=(255, 255, 255))
    d.pieslice((10, 10, 110, 110), 180, 360, fill=(230, 30, 40))
    d.pieslice((10, 10, 110, 110), 0, 180, fill=(245, 245, 245))
    d.ellipse((10, 10, 110, 110), outline=(20, 20, 20), width=4)
    d.rectangle((10, 57, 110, 63), fill=(20, 20, 20))
    d.ellipse((46, 46, 74, 74), fill=(20, 20, 20))
    d.ellipse((52, 52, 68, 68), fill=(255, 255, 255))


def _rudolph(d) -> None:
    d.rectangle((0, 0, 120, 120), fill=(30, 40, 90))
    for x in (30, 90):
        d.line((x, 40, x + (-12 if x < 60 else 12), 10), fill=(110, 70, 30), width=4)
    d.ellipse((30, 30, 90, 100), fill=(140, 90, 50))
    d.ellipse((45, 50, 53, 58), fill=(0, 0, 0))
    d.ellipse((67, 50, 75, 58), fill=(0, 0, 0))
    d.ellipse((50, 78, 70, 98), fill=(235, 20, 30))


def _yoda(d) -> None:
    d.rectangle((0, 0, 120, 120), fill=(60, 70, 60))
    d.polygon([(10, 45), (40, 50), (40, 62)], fill=(140, 175, 90))
    d.polygon([(110, 45), (80, 50), (80, 62)], fill=(140, 175, 90))
    d.ellipse((35, 30, 85, 85), fill=(140, 175, 90))
    d.ellipse((45, 50, 55, 58), fill=(30, 30, 20))
    d.ellipse((65, 50, 75, 58), fill=(30, 30, 20))
    d.rectangle((30, 85, 90, 120), fill=(170, 150, 110))


def _cattle(d) -> None:
    d.rectangle((0, 0, 160, 60), fill=(170, 215, 240))
    d.rectangle((0, 60, 160, 120), fill=(90, 160, 70))
    d.rectangle((40, 45, 110, 80), fill=(25, 20, 20))  # body
    d.rectangle((106, 38, 128, 60), fill=(25, 20, 20))  # head
    d.polygon([(108, 38), (104, 30), (112, 36)], fill=(220, 210, 190))
    for x in (44, 58, 92, 102):
        d.rectangle((x, 80, x + 6, 100), fill=(25, 20, 20))


def _slices(d) -> None:
    d.rectangle((0, 0, 160, 120), fill=(90, 60, 40))
    d.ellipse((10, 10, 150, 110), fill=(245, 245, 240))
    for i, y in enumerate((30, 48, 66, 84)):
        d.ellipse((30 + 4 * i, y - 8, 130 - 4 * i, y + 8), fill=(200, 60, 70))
        for x in range(42 + 4 * i, 120 - 4 * i, 14):
            d.line((x, y - 4, x + 7, y + 4), fill=(250, 230, 225), width=2)  # marbling


def _calling_codes(d) -> None:
    from PIL import ImageFont

    font = ImageFont.load_default()
    d.rectangle((0, 0, 360, 180), fill=(200, 225, 245))
    zones = [  # zone, box, colour: a rough world map of the first digit of country calling codes
        ("1", (20, 25, 95, 75), (230, 120, 120)), ("5", (60, 85, 110, 150), (240, 180, 90)),
        ("3", (150, 25, 185, 50), (120, 170, 230)), ("4", (150, 52, 185, 62), (90, 130, 210)),
        ("2", (150, 68, 200, 140), (150, 200, 110)), ("7", (190, 15, 300, 45), (200, 130, 200)),
        ("9", (200, 50, 255, 95), (240, 220, 100)), ("8", (260, 50, 310, 90), (120, 210, 200)),
        ("6", (270, 100, 340, 150), (250, 150, 180)),
    ]
    for zone, box, colour in zones:
        d.rectangle(box, fill=colour, outline=(80, 80, 80))
        d.text((box[0] + 3, box[1] + 2), zone, fill=(0, 0, 0), font=font)
    d.text((262, 76), "+82 KR", fill=(0, 0, 0), font=font)
    d.text((4, 164), "Calling codes: +1 US  +44 UK  +81 JP  +82 KR  +86 CN", fill=(0, 0, 0), font=font)


# name -> ((width, height), drawing)
DRAWINGS = {
    "Up_house_balloons.png.webp": ((160, 120), _up),
    "Dog_digging.jpg.webp": ((160, 120), _digging),
    "Poke_Ball.svg.png.webp": ((120, 120), _pokeball),
    "Rudolph_red_nose.png.webp": ((120, 120), _rudolph),
    "Yoda_figure.png.webp": ((120, 120), _yoda),
    "Japanese_Black_cattle.jpg.webp": ((160, 120), _cattle),
    "Wagyu_beef_thin_slices.jpg.webp": ((160, 120), _slices),
    "Country_calling_codes_map.svg.png.webp": ((360, 180), _calling_codes),
}


def webp(name: str) -> bytes:
    from PIL import Image, ImageDraw, features

    if not features.check("webp"):
        raise SystemExit("Pillow lacks WebP support")
    size, draw = DRAWINGS.get(name, ((64, 64), None))
    img = Image.new("RGB", size, (234, 236, 240))
    if draw is None:  # an I/ task page without its own drawing: a plain grey picture
        ImageDraw.Draw(img).rectangle((8, 8, size[0] - 9, size[1] - 9), outline=(162, 169, 177), width=2)
    else:
        draw(ImageDraw.Draw(img))
    out = io.BytesIO()
    img.save(out, "WEBP", lossless=True, quality=100, method=4, exact=True)
    return out.getvalue()


def task_pages(path: str) -> tuple[dict[str, str], list[str]]:
    """(A/ path -> title for articles not in ARTICLES, I/ names) of the task start pages in ``path``."""
    articles: dict[str, str] = {}
    images: list[str] = []
    for entry in json.load(open(path, encoding="utf-8")):
        prefix = f"/{BOOK}/"
        if not entry["path"].startswith(prefix):
            raise SystemExit(f"task page outside the book: {entry['path']!r}")
        ns, _, rest = entry["path"][len(prefix):].partition("/")
        rest = unquote(rest)
        if ns == "A" and rest not in ARTICLES:
            articles[rest] = rest.replace("_", " ")
        elif ns == "I":
            images.append(rest)
        elif ns != "A":
            raise SystemExit(f"task page in unsupported namespace: {entry['path']!r}")
    return dict(sorted(articles.items())), sorted(set(images))


def generic_body(title: str) -> str:
    return (f"<p><b>{title}</b> is an article of the offline Wikipedia.</p>"
            f"<h2>Overview</h2><p>This copy holds a short summary of {title}.</p>")


class Picture(Item):
    def __init__(self, path: str, data: bytes) -> None:
        super().__init__()
        self.path, self.data = path, data

    def get_path(self) -> str:
        return self.path

    def get_title(self) -> str:
        return ""

    def get_mimetype(self) -> str:
        return "image/webp"

    def get_contentprovider(self) -> StringProvider:
        return StringProvider(self.data)

    def get_hints(self) -> dict:
        return {Hint.COMPRESS: False}


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


def main(out: str, pages: str | None = None) -> None:
    task_articles, task_images = task_pages(pages) if pages else ({}, [])
    pictures = sorted({name for path in task_articles for name, _ in TASK_IMAGES.get(path, [])} | set(task_images))
    with Creator(out).config_indexing(True, "eng") as creator:
        creator.set_mainpath(LANDING)
        for path, (title, body) in ARTICLES.items():
            creator.add_item(Article(path, title, render(path, title, body)))
        for path, title in task_articles.items():
            body = TASK_BODIES.get(path) or generic_body(title)
            creator.add_item(Article(path, title, render(path, title, body, TASK_IMAGES.get(path, []))))
        for name in pictures:
            creator.add_item(Picture("I/" + name, webp(name)))
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
    print(f"wrote {out} with {len(ARTICLES) + len(task_articles)} articles and {len(pictures)} pictures")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
