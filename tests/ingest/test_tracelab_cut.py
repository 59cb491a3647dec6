"""A TraceLab file cut short in its only round is reported as truncated, as by every JSON-lines
reader, not as another format. Regression: `ttlctl ingest` of such a file said "not a TraceLab
round trace: no line has round_index or timing_events" (a file cut after a whole round already
said "truncated JSON", tests/ingest/test_tracelab.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.cli.refusal import refused
from tests.ingest.badinput import assert_strict_error
from ttlctl.cli import app

TRUNCATED = "truncated JSON: the last line looks cut short (no newline ends it): "


def first_round_cut(samples: Path, folder: Path) -> Path:
    """The sample's first round, cut in half."""
    first = (samples / "tracelab" / "round_trace.jsonl").read_text().splitlines()[0]
    path = folder / "cut.jsonl"
    path.write_text(first[: len(first) // 2])
    return path


@pytest.mark.parametrize("fmt", ["tracelab", "auto"])
def test_a_file_cut_in_its_only_round_is_truncated(samples: Path, tmp_path: Path, fmt: str) -> None:
    cut = first_round_cut(samples, tmp_path)
    out = tmp_path / "t.parquet"
    line = refused(["ingest", str(cut), "--format", fmt, "-o", str(out)], out, "error: ")
    assert line.startswith(f"error: {cut}: line 1: {TRUNCATED}"), line


def test_skipped_it_is_one_reject_with_the_same_reason(samples: Path, tmp_path: Path) -> None:
    cut = first_round_cut(samples, tmp_path)
    out = tmp_path / "t.parquet"
    args = ["ingest", str(cut), "-o", str(out), "--skip-bad", "--allow-empty"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    rejects = Path(f"{out}.rejects.jsonl").read_text()
    assert TRUNCATED in rejects and "not a TraceLab" not in rejects, rejects


def test_a_file_of_no_rounds_is_still_not_tracelab(tmp_path: Path) -> None:
    # a whole last line, of no round: not a TraceLab file, cut or not
    path = tmp_path / "other.jsonl"
    path.write_text('{"round_index" : 1}x\n{"a": 1}\n')
    assert_strict_error(
        [path], path, "tracelab", tmp_path / "t.parquet", None, "not a TraceLab round trace"
    )


def test_a_json_document_named_tracelab_is_not_tracelab_rather_than_cut(
    samples: Path, tmp_path: Path
) -> None:
    # a pretty-printed JSON document (a mini-swe-agent trajectory) read with --format tracelab:
    # every line fails, the last (its closing brace, no newline after it) among them; that is a
    # file of another format, not one cut short at its last line. Regression: the error named
    # the last line, "line 1118: truncated JSON: the last line looks cut short".
    doc = samples / "mini-swe-agent" / "django__django-16485.traj.json"
    path = tmp_path / "run.traj.json"
    path.write_text(doc.read_text().rstrip("\n"))
    assert_strict_error(
        [path], path, "tracelab", tmp_path / "t.parquet", None, "not a TraceLab round trace"
    )
