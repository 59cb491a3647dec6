"""Helpers to take a report page apart: its tags, its images, its sections."""

from __future__ import annotations

import base64
import io
import re
from dataclasses import dataclass, field
from html import unescape
from html.parser import HTMLParser

from PIL import Image

SECTIONS = ("inputs", "trace", "cdfs", "tau", "jct", "pinned", "fleet", "tune")
PNG_PREFIX = "data:image/png;base64,"


@dataclass
class Page:
    tags: list[tuple[str, dict[str, str | None]]] = field(default_factory=list)

    def all(self, tag: str) -> list[dict[str, str | None]]:
        return [attrs for name, attrs in self.tags if name == tag]

    @property
    def section_ids(self) -> list[str]:
        return [str(a.get("id")) for a in self.all("section")]


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.page.tags.append((tag, dict(attrs)))


def parse(text: str) -> Page:
    parser = _Parser()
    parser.feed(text)
    parser.close()
    return parser.page


def png_bytes(src: str | None) -> bytes:
    assert src is not None and src.startswith(PNG_PREFIX), (src or "")[:60]
    return base64.b64decode(src[len(PNG_PREFIX) :], validate=True)


def check_png(data: bytes) -> tuple[int, int]:
    """A whole, decodable PNG with pixels and no text chunks; returns its size."""
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    Image.open(io.BytesIO(data)).verify()
    image = Image.open(io.BytesIO(data))
    image.load()
    for chunk in (b"tEXt", b"iTXt", b"zTXt"):
        assert chunk not in data, f"PNG carries a {chunk!r} chunk (metadata)"
    assert b"http" not in data
    width, height = image.size
    assert width > 50 and height > 50
    colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is None or len(colours) > 8, "a blank plot"
    return width, height


def section(text: str, sid: str) -> str:
    """The HTML of the page's section ``sid``."""
    return text.split(f'<section id="{sid}">', 1)[1].split("</section>", 1)[0]


def rows(html_text: str) -> list[list[str]]:
    """The cells of each body row of the tables in ``html_text``, as text (unescaped)."""
    return [
        [unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in html_text.split("<tr>")[1:]
        if "<td" in row
    ]
