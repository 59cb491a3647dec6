"""A count with its noun: singular for exactly one, plural otherwise, in every summary.
Regression: the summaries said "1 programs, 1 calls"."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ttlctl.cli import app
from ttlctl.nouns import counted, listed
from ttlctl.report import trace_summary
from ttlctl.report.rundir import load


def test_one_is_singular_and_every_other_count_plural() -> None:
    assert counted(1, "program") == "1 program"
    assert counted(0, "program") == "0 programs"
    assert counted(2, "call") == "2 calls"
    assert counted(12_345, "call") == "12,345 calls"
    assert counted(1, "policy", "policies") == "1 policy"
    assert counted(3, "policy", "policies") == "3 policies"


def _one_call(path: Path, programs: int) -> Path:
    rows = [
        {
            "program_id": f"p{i}",
            "turn": 0,
            "arrival_s": 0.0,
            "input_tokens": 100,
            "output_tokens": 10,
        }
        for i in range(programs)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_summaries_say_one_program_and_one_call(tmp_path: Path) -> None:
    runner = CliRunner()
    one = tmp_path / "one"
    one.mkdir()
    src = _one_call(tmp_path / "one.jsonl", 1)
    res = runner.invoke(app, ["ingest", str(src), "-o", str(one / "trace.parquet")])
    assert res.exit_code == 0, res.output
    assert "trace.parquet: 1 program, 1 call" in res.stdout
    assert "1 record → 1 call written to" in res.stderr
    assert "read 1 file: " in res.stderr
    assert "<p>1 program, 1 call;" in trace_summary.section(load(one))

    two = _one_call(tmp_path / "two.jsonl", 2)
    res = runner.invoke(app, ["ingest", str(two), "-o", str(tmp_path / "two.parquet")])
    assert res.exit_code == 0, res.output
    assert "two.parquet: 2 programs, 2 calls" in res.stdout
    assert "2 records → 2 calls written to" in res.stderr

    out = tmp_path / "synth.parquet"
    res = runner.invoke(app, ["synth", "--workload", "bfcl", "--programs", "1", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert " of 1 bfcl program (seed 0) to " in res.stdout


def test_words_are_listed_as_english_lists_them() -> None:
    assert listed([]) == ""
    assert listed(["llm_s"]) == "llm_s"
    assert listed(["gap_s", "llm_s"]) == "gap_s and llm_s"
    assert listed(["p50", "mean", "p95"]) == "p50, mean and p95"
