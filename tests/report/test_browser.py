"""The page in a real headless browser: it parses, shows every section, and draws its plots.

Needs a Chromium binary (Debian: ``apt-get install -y chromium``; or set $CHROMIUM);
skipped with a reason where there is none. The report has no script, so image
decoding is checked from outside: every <img> is a valid PNG (``check_png``), and
the screenshot of the page holds far more coloured pixels than the same page with
its images taken out (the tables and text are grey).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.report.pages import SECTIONS, check_png, parse, png_bytes
from tests.report.runs import EVIL_PROGRAM, EVIL_TOOL

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
)
WIDTH, HEIGHT = 1280, 4000


def chromium() -> str:
    env = os.environ.get("CHROMIUM")
    found = env if env and shutil.which(env) else None
    for name in CANDIDATES:
        found = found or shutil.which(name)
    if found is None:
        pytest.skip(
            "no Chromium binary on PATH (tried $CHROMIUM, " + ", ".join(CANDIDATES) + "); "
            "install one, e.g. `apt-get install -y chromium`, to run the browser test"
        )
    return found


def browse(binary: str, page: Path, profile: Path, *extra: str) -> str:
    res = subprocess.run(
        [binary, *FLAGS, f"--user-data-dir={profile}", *extra, page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def coloured_pixels(png: Path) -> tuple[int, int]:
    """(distinct colours, pixels whose channels differ by more than 60: not grey)."""
    image = Image.open(png).convert("RGB")
    assert image.size == (WIDTH, HEIGHT)
    colours: list[tuple[int, Any]] = image.getcolors(WIDTH * HEIGHT) or []
    saturated = sum(n for n, rgb in colours if max(rgb) - min(rgb) > 60)
    return len(colours), saturated


@pytest.fixture(scope="module")
def browser() -> str:
    return chromium()


def test_dom_has_sections_and_images(browser: str, evil_page: str, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(evil_page, encoding="utf-8")
    dom_text = browse(browser, page, tmp_path / "profile", "--dump-dom")
    dom = parse(dom_text)
    assert dom.section_ids == list(SECTIONS)
    imgs = dom.all("img")
    assert len(imgs) == len(parse(evil_page).all("img")) >= 8
    for attrs in imgs:
        check_png(png_bytes(attrs["src"]))
    assert "<script" not in dom_text.lower()
    assert not any(a.startswith("on") for _, attrs in dom.tags for a in attrs)
    # the browser read the injections as text (and serialises them escaped)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom_text
    assert EVIL_TOOL not in dom_text and EVIL_PROGRAM not in dom_text


def test_screenshot_shows_the_plots(browser: str, evil_page: str, tmp_path: Path) -> None:
    shots = {}
    bare = re.sub(r"<img [^>]*>", "", evil_page)
    for name, text in (("report", evil_page), ("bare", bare)):
        page = tmp_path / f"{name}.html"
        page.write_text(text, encoding="utf-8")
        shot = tmp_path / f"{name}.png"
        browse(
            browser, page, tmp_path / f"profile-{name}",
            f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}",
        )  # fmt: skip
        assert shot.is_file() and shot.stat().st_size > 10_000
        shots[name] = coloured_pixels(shot)
    (distinct, coloured), (_, bare_coloured) = shots["report"], shots["bare"]
    assert distinct > 500, "a blank or nearly blank page"
    assert coloured > 20_000 and coloured > 10 * (bare_coloured + 100), shots
