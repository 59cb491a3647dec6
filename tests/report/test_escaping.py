"""Strings from untrusted logs are text in the page: never markup, script or mathtext."""

from __future__ import annotations

import html
import json
from pathlib import Path

from tests.report.pages import SECTIONS, check_png, parse, png_bytes, section
from tests.report.runs import (
    EVIL_DIR,
    EVIL_PARAM,
    EVIL_POLICY,
    EVIL_PROGRAM,
    EVIL_TOOL,
    MATH_TOOL,
)
from ttlctl.report import build_report
from ttlctl.report.png import label

#: every tag the page may contain
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "h1", "h2", "nav", "a", "section",
    "p", "code", "table", "tr", "th", "td", "div", "figure", "figcaption", "img",
}  # fmt: skip


def test_untrusted_strings_are_escaped(evil_run: Path, evil_page: str) -> None:
    for text in (EVIL_TOOL, EVIL_PROGRAM, MATH_TOOL, EVIL_POLICY, EVIL_PARAM, EVIL_DIR):
        assert html.escape(text, quote=True) in evil_page, text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in evil_page
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in evil_page
    assert "<script" not in evil_page.lower()
    assert "could not be drawn" not in evil_page  # mathtext did not choke on `$\frac{x}{0}$`


def test_no_tag_or_attribute_from_the_data(evil_page: str) -> None:
    page = parse(evil_page)
    assert page.section_ids == list(SECTIONS)
    assert {tag for tag, _ in page.tags} <= ALLOWED_TAGS
    for tag, attrs in page.tags:
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
        if tag == "img":
            check_png(png_bytes(attrs["src"]))
        if tag == "a":
            assert str(attrs["href"]).startswith("#")
    # the injected <img src=x> stayed text: every image is one of our plots
    assert len(page.all("img")) == evil_page.count('src="data:image/png;base64,')
    # tool names reach attributes (alt, title) escaped, and intact
    assert f"pause CDF of tool {EVIL_TOOL}" in [a.get("alt") for a in page.all("img")]


def test_nothing_from_the_network(evil_page: str) -> None:
    lowered = evil_page.lower()
    for needle in ("http://", "https://", "url(", "@import", "<link", "//cdn"):
        assert needle not in lowered
    assert "content-security-policy" in lowered and "default-src 'none'" in evil_page


def test_a_fleets_router_policy_and_replica_names_are_escaped(tmp_path: Path) -> None:
    """The Fleet section writes the router's name and settings, each policy's name (its
    tables' rows and its per-replica heading) and the replicas' names from replay.json."""
    router = {"name": EVIL_TOOL, "settings": {EVIL_PARAM: EVIL_PROGRAM}, "replicas": 2}
    per_replica = [{"replica": EVIL_PARAM, "llm_calls": 3}, {"replica": 1, "llm_calls": 4}]
    result = {"policy": EVIL_POLICY, "router": router, "per_replica": per_replica}
    (tmp_path / "replay.json").write_text(json.dumps({"results": [result]}), encoding="utf-8")
    text = build_report(tmp_path)
    fleet = section(text, "fleet")
    assert "could not be drawn" not in fleet
    page = parse(text)
    assert {tag for tag, _ in page.tags} <= ALLOWED_TAGS | {"h3", "details", "summary"}
    assert not [a for _, attrs in page.tags for a in attrs if a.startswith("on")]
    for said in (EVIL_TOOL, EVIL_POLICY, f"{EVIL_PARAM} = {EVIL_PROGRAM}"):
        assert html.escape(said, quote=True) in fleet, said


def test_a_plot_label_is_one_short_line_without_mathtext() -> None:
    """A tool or policy name in a plot: ``$`` escaped (``$\\frac{x}{0}$`` was drawn as a
    fraction), control characters as spaces, a long name cut."""
    assert label(MATH_TOOL) == MATH_TOOL.replace("$", r"\$")
    assert label("a\nb\tc") == "a b c"
    assert label("x" * 60, 20) == "x" * 19 + "…"
