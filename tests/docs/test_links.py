"""Every link between the docs reaches a page that exists, and a heading on it.

docs/results.md and docs/benchmarks.md were split into a current page and a log
(results-log.md, benchmarks-log.md), and a link into a section that moved would still
open the old page, at its top, without a word. Anchors are matched the way GitHub makes
them from a heading: lower case, punctuation dropped (letters of any script, digits, `_`
and `-` kept), spaces as `-`, and a repeated heading numbered `-1`, `-2`, … . The code's
docstrings and comments that cite a page by path (`docs/results-log.md`) are held to the
same: the page must exist (bar another project's page cited by its own path).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "examples").glob("*/README.md")),
]
CODE = ("ttlctl", "fitting", "replay", "profiles", "bench", "tests")
LINK = re.compile(r"\]\(([^)\s]+)\)")
CITED = re.compile(r"(?<![\w/.])docs/[\w.-]+\.md\b")
#: pages of other projects the code cites by their own path (vllm-router's docs/)
OUTSIDE = {"docs/program_scheduling.md"}


def prose(text: str) -> str:
    """The page without its fenced code blocks (a `](x)` in code is not a link)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings."""
    seen: dict[str, int] = {}
    for line in prose(page.read_text()).splitlines():
        match = re.match(r"#{1,6}\s+(.*)$", line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, 0) + 1
        if seen[slug] > 1:
            seen[f"{slug}-{seen[slug] - 1}"] = 1
    return set(seen)


def broken(page: Path) -> list[str]:
    """The page's relative links whose file or heading is missing."""
    found = []
    for href in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z]+:", href):
            continue
        path, _, anchor = href.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            found.append(f"{href} (no such file)")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            found.append(f"{href} (no such heading)")
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_reaches_a_page_and_a_heading(page: Path) -> None:
    assert broken(page) == []


def test_the_logs_are_linked_from_the_index_and_from_their_pages() -> None:
    for log, page in (("results-log.md", "results.md"), ("benchmarks-log.md", "benchmarks.md")):
        assert f"]({log})" in (ROOT / "docs" / "README.md").read_text()
        assert f"]({log}" in (ROOT / "docs" / page).read_text()


def test_a_page_the_code_cites_exists() -> None:
    missing = [
        f"{source.relative_to(ROOT)}: {cited}"
        for folder in CODE
        for source in sorted((ROOT / folder).rglob("*.py"))
        for cited in CITED.findall(source.read_text())
        if cited not in OUTSIDE and not (ROOT / cited).exists()
    ]
    assert missing == []


#: a file or folder of this repository named in a page's code span (`examples/fleet/`,
#: `samples/SOURCES.md`): the places a reader is told to look in
NAMED = re.compile(r"`((?:samples|examples|bench|deploy|docs|tests/data)/[\w./-]*)`")


def unnamed(page: Path) -> list[str]:
    """The repository paths the page names in code spans that do not exist (a glob or a
    placeholder in capitals is no path)."""
    return [
        path
        for path in NAMED.findall(page.read_text())
        if not re.search(r"[*A-Z]", path) and path not in OUTSIDE and not (ROOT / path).exists()
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_a_page_names_exists(page: Path) -> None:
    """Regression: validate.md sent readers to `samples/fleet-engine-logs/`, a folder that
    never existed (the logs are in `examples/fleet/`)."""
    assert unnamed(page) == []


def test_a_broken_anchor_is_caught(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A page\n\n## A heading (2026-12-04 12:30 UTC)\n")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md#a-heading-2026-12-04-1230-utc) [moved](a.md#a-window) [gone](c.md)\n"
    )
    assert broken(page) == ["a.md#a-window (no such heading)", "c.md (no such file)"]
