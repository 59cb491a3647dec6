"""The engine-log format that the scheduler plugin writes (schema ttlctl.engine-log/1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ttlctl.cli import app
from ttlctl.ingest.formats.engine_log import SCHEMA
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rejects import IngestError
from ttlctl.trace import io as trace_io

T0 = 1_764_000_000.0


def _req(
    rid: str, program: str | None, arrival: float, finish: float, **extra: Any
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "schema": SCHEMA,
        "request_id": rid,
        "program_id": program,
        "tool": None,
        "is_last": None,
        "arrival_unix_s": T0 + arrival,
        "first_token_unix_s": T0 + arrival + 0.1,
        "finish_unix_s": T0 + finish,
        "prompt_tokens": 1000,
        "output_tokens": 50,
        "cached_tokens": 0,
        "finish_reason": "length",
        "ttl_s": 0.0,
    }
    row.update(extra)
    return row


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _log() -> list[dict[str, Any]]:
    # program p: three calls, written out of order (finish order), with tools tagged
    return [
        _req("r2", "p", 10.0, 11.0, tool="pytest"),
        _req("r1", "p", 0.0, 2.0, tool="grep"),
        _req("r3", "p", 20.0, 21.5, is_last=True),
        _req("x9", None, 5.0, 6.0),  # untagged traffic: its own one-call program
    ]


def test_engine_log_maps_to_canonical(tmp_path: Path) -> None:
    src = _write(tmp_path / "engine.jsonl", _log())
    report = ingest([src], tmp_path / "t.parquet")
    assert report.files[0].format == "engine-log"
    trace = trace_io.read(tmp_path / "t.parquet")
    p = trace.filter(trace["program_id"] == "p")
    assert p["turn"].to_list() == [0, 1, 2]
    assert p["arrival_s"].to_list() == [0.0, 10.0, 20.0]  # rebased to the first arrival
    assert p["tool"].to_list() == ["grep", "pytest", None]
    assert p["gap_s"].to_list() == [8.0, 9.0, None]  # next arrival - this finish
    assert p["llm_s"].to_list() == pytest.approx([2.0, 1.0, 1.5])
    assert p["tool_s"].null_count() == 3  # engines cannot see tool time
    assert trace.filter(trace["program_id"] == "request:x9").height == 1


@pytest.mark.parametrize(
    ("patch", "reason"),
    [
        ({"prompt_tokens": "many"}, "non-numeric prompt_tokens"),
        ({"finish_unix_s": T0 - 5}, "finish before arrival"),
        ({"output_tokens": -4}, "negative output_tokens"),
        ({"arrival_unix_s": None}, "missing arrival_unix_s"),
    ],
)
def test_bad_engine_records(tmp_path: Path, patch: dict[str, Any], reason: str) -> None:
    rows = _log()
    rows[0].update(patch)
    src = _write(tmp_path / "engine.jsonl", rows)
    with pytest.raises(IngestError, match=reason) as info:
        ingest([src], tmp_path / "t.parquet")
    assert "line 1" in str(info.value)
    report = ingest([src], tmp_path / "t.parquet", skip_bad=True)
    assert report.rejected == 3 and report.rows == 1  # program p goes whole
    assert report.records == report.rows + report.rejected == 4


def test_foreign_lines_and_broken_json(tmp_path: Path) -> None:
    src = tmp_path / "engine.jsonl"
    src.write_text(
        json.dumps(_req("a", "q", 0, 1)) + "\n" + '{"schema": "other/9"}\n' + "{broken\n"
    )
    with pytest.raises(IngestError, match="line 2: not an engine-log record"):
        ingest([src], tmp_path / "t.parquet", fmt="engine-log")
    report = ingest([src], tmp_path / "t.parquet", fmt="engine-log", skip_bad=True)
    assert (report.rows, report.rejected, report.records) == (1, 2, 3)


DATA = Path(__file__).resolve().parents[1] / "data" / "engine-log" / "engine.jsonl"


def test_shipped_sample_ingests_with_nothing_in_flight(tmp_path: Path) -> None:
    report = ingest([DATA], tmp_path / "t.parquet")
    trace = trace_io.read(tmp_path / "t.parquet")
    lines = len(DATA.read_text().splitlines())
    assert (report.records, report.rows, report.rejected) == (lines, lines, 0)
    assert report.in_flight == 0  # every tagged program of the sample ends with is_last
    last = trace.filter(trace["is_last"])
    assert last.height == trace["program_id"].n_unique()


def _in_flight_log() -> list[dict[str, Any]]:
    return [
        # p: finished (is_last on its last call)
        _req("a1", "p", 0.0, 1.0, tool="grep", is_last=False),
        _req("a2", "p", 3.0, 4.0, is_last=True),
        # q: a client that tags every call is_last: 0, still running (waiting on pytest)
        _req("b1", "q", 1.0, 2.0, tool="bash", is_last=False),
        _req("b2", "q", 5.0, 6.5, tool="pytest", is_last=False),
        # r: a client that never tags is_last, still running (waiting on bash)
        _req("c1", "r", 2.0, 2.5, tool="view"),
        _req("c2", "r", 4.0, 4.5, tool="bash"),
        _req("x1", None, 3.0, 3.2),  # untagged: a one-call program, not "in flight"
    ]


def test_programs_in_flight_end_at_their_last_logged_call(tmp_path: Path) -> None:
    src = _write(tmp_path / "engine.jsonl", _in_flight_log())
    report = ingest([src], tmp_path / "t.parquet")  # strict: nothing rejected
    assert (report.rows, report.rejected, report.in_flight) == (7, 0, 2)
    assert report.files[0].in_flight == 2
    trace = trace_io.read(tmp_path / "t.parquet").sort("program_id", "turn")
    for program, tools, gaps in (
        ("q", ["bash", None], [3.0, None]),
        ("r", ["view", None], [1.5, None]),
        ("p", ["grep", None], [2.0, None]),
    ):
        rows = trace.filter(trace["program_id"] == program)
        assert rows["is_last"].to_list() == [False, True]
        assert rows["tool"].to_list() == tools  # the trailing tool is unknown: dropped
        assert rows["gap_s"].to_list() == pytest.approx(gaps)


def test_in_flight_program_with_a_bad_record_is_rejected_not_counted(tmp_path: Path) -> None:
    rows = _in_flight_log()
    rows[2]["prompt_tokens"] = "lots"  # q's first call
    src = _write(tmp_path / "engine.jsonl", rows)
    with pytest.raises(IngestError, match="line 3: non-numeric prompt_tokens"):
        ingest([src], tmp_path / "t.parquet")
    report = ingest([src], tmp_path / "t.parquet", skip_bad=True)
    assert (report.rows, report.rejected, report.in_flight) == (5, 2, 1)


def test_ingest_command_reports_programs_in_flight(tmp_path: Path) -> None:
    src = _write(tmp_path / "engine.jsonl", _in_flight_log())
    result = CliRunner().invoke(app, ["ingest", str(src), "-o", str(tmp_path / "t.parquet")])
    assert result.exit_code == 0, result.output
    assert "2 program(s) still in flight" in result.output
    as_json = CliRunner().invoke(
        app, ["ingest", str(src), "-o", str(tmp_path / "t.parquet"), "--json", "-"]
    )
    assert json.loads(as_json.stdout)["ingest"]["in_flight"] == 2
