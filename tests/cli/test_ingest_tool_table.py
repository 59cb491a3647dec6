"""Ingest's tool table says when it shows only the most called tools.

On the shipped samples it read "tools: 27 distinct" above 15 rows and said nothing of the
other 12 (the report's page said "the 15 most called"; the terminal did not), so a tool
with a pause that fit then listed seemed to be missing from the trace.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ttlctl.cli import app


def ingested(tmp_path: Path, tools: int) -> str:
    """Ingest one two-call program per tool, tool k called k + 1 times; the table's text."""
    rows = []
    for k in range(tools):
        for rep in range(k + 1):
            pid = f"p{k}-{rep}"
            rows.append(
                {"program_id": pid, "turn": 0, "arrival_s": 0.0, "input_tokens": 10,
                 "output_tokens": 2, "tool": f"tool{k:02d}", "tool_s": 1.0, "gap_s": 1.0}
            )  # fmt: skip
            rows.append(
                {"program_id": pid, "turn": 1, "arrival_s": 5.0, "input_tokens": 20,
                 "output_tokens": 2}
            )  # fmt: skip
    log = tmp_path / f"t{tools}.jsonl"
    log.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / f"t{tools}.parquet"
    res = CliRunner().invoke(app, ["ingest", str(log), "-o", str(out)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    return res.stdout


def test_a_cut_tool_table_says_how_many_it_shows(tmp_path: Path) -> None:
    text = ingested(tmp_path, 20)
    assert "tools: 20 distinct" in text
    assert "the 15 most called of 20 tools; `ttlctl fit` lists every tool with a pause" in text
    assert "tool19" in text and "tool05" in text and "tool04" not in text


def test_a_whole_tool_table_says_nothing_more(tmp_path: Path) -> None:
    text = ingested(tmp_path, 15)
    assert "tool00" in text and "most called" not in text
