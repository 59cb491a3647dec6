"""``--help``'s prose flows to the console's width (ttlctl.cli.help_prose): typer 0.29 kept
each docstring line break, and at 80 columns a paragraph printed as a line of text, then a
line of one word ("replicas", "that", "times"), in turn."""

from __future__ import annotations

import pytest
from typer import rich_utils
from typer.testing import CliRunner

from tests.cli.test_help_names import COMMANDS
from ttlctl.cli import app, help_prose


def description(help_text: str) -> list[list[str]]:
    """The help's prose after its first paragraph, as paragraphs of printed lines (the
    text between the usage line and the first panel)."""
    lines = help_text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("Usage:"))
    end = next(i for i, line in enumerate(lines) if line.startswith("╭"))
    paragraphs: list[list[str]] = [[]]
    for line in lines[start + 1 : end]:
        if line.strip():
            paragraphs[-1].append(line.strip())
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p][1:]  # after the first (one line, typer joins it)


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_paragraph_fills_its_lines_at_80_columns(path: tuple[str, ...]) -> None:
    res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    for paragraph in description(res.output):
        for line in paragraph[:-1]:  # all but a paragraph's last reach near the width
            assert len(line) > 55, (line, paragraph)


def test_the_commands_with_long_prose_have_it() -> None:
    """The check above reads real paragraphs: validate's and tune's are several lines."""
    for command in ("validate", "tune"):
        res = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "80"})
        assert max(len(p) for p in description(res.output)) >= 5


def test_a_kept_paragraph_keeps_its_lines() -> None:
    got = help_prose.flowed(["one\ntwo", "\b\nkeep\n  this", "three"])
    assert got == "one two\n\nkeep\n  this\n\nthree"


def test_a_typer_without_the_function_keeps_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(rich_utils, help_prose.TYPER_PROSE)
    assert help_prose.install() is False


def command_rows(help_text: str) -> dict[str, list[str]]:
    """The Commands panel's rows: each command's description, as printed lines."""
    rows: dict[str, list[str]] = {}
    inside, name = False, ""
    for line in help_text.splitlines():
        if line.startswith("╭─ Commands"):
            inside = True
        elif inside and line.startswith("╰"):
            break
        elif inside:
            cells = line.strip("│ ").split(None, 1)
            if not line.startswith("│  "):  # a command's name opens its row
                name, text = cells[0], cells[1] if len(cells) > 1 else ""
                rows[name] = [text.strip()]
            else:
                rows[name].append(line.strip("│ ").strip())
    return rows


@pytest.mark.parametrize("group", [[], ["bundle"]], ids=["ttlctl", "bundle"])
def test_a_group_lists_each_command_on_full_lines(group: list[str]) -> None:
    """Regression: `ttlctl --help` listed profile's and tune's summaries with their
    docstrings' line breaks: "…through vLLM on this device (or a" / "live vLLM server).",
    at any width."""
    res = CliRunner().invoke(app, [*group, "--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    rows = command_rows(res.output)
    assert len(rows) >= (10 if not group else 5), rows
    for name, lines in rows.items():
        for line in lines[:-1]:
            assert len(line) > 50, (name, lines)


def test_a_summary_is_the_first_paragraph_on_one_line() -> None:
    doc = """Measure what prefill costs (or a
    live server).

    More."""
    assert help_prose.summary(doc) == "Measure what prefill costs (or a live server)."
    assert help_prose.summary(None) is None
