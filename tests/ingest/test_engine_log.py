"""The engine-log format that the scheduler plugin writes (schema ttlctl.engine-log/1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

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
