"""A request an engine log holds twice (same request_id, same arrival) is a duplicate record,
rejected alone and naming the line it repeats; a request id used again at another time is
another call."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tests.ingest.badinput import ingest_skipping_bad
from tests.ingest.test_engine_log import _log, _req, _write
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rejects import IngestError

REPEAT = 'duplicate request: request_id "r1", arrived at 1764000000.0, is logged already'


def test_a_line_logged_twice_is_a_duplicate_not_another_call(tmp_path: Path) -> None:
    """Regression: the line appended again read as an extra call ("5 records → 5 calls"),
    program p gaining a turn that arrived with its first."""
    rows = _log()  # r1 is line 2
    src = _write(tmp_path / "engine.jsonl", [*rows, rows[1]])
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "t.parquet")
    assert (info.value.record, info.value.reason) == ("line 5", f"{REPEAT} (line 2)")
    report, trace, rejects = ingest_skipping_bad([src], tmp_path / "t.parquet", "engine-log")
    assert [(r["record"], r["reason"]) for r in rejects] == [("line 5", f"{REPEAT} (line 2)")]
    assert report.rejected_by_reason == {"duplicate request": 1}
    assert trace.filter(trace["program_id"] == "p").height == 3  # the first line stands


def test_a_request_id_used_again_at_another_time_is_another_call(tmp_path: Path) -> None:
    """A client that sets its own ids (a retry under the same X-Request-Id) sends calls
    that share an id: each is a call."""
    rows = [
        _req("same", "p", 0.0, 1.0, tool="grep", finish_reason="abort", output_tokens=0),
        _req("same", "p", 2.0, 3.0, is_last=True),
    ]
    src = _write(tmp_path / "engine.jsonl", rows)
    report = ingest([src], tmp_path / "t.parquet")
    assert (report.rows, report.rejected) == (2, 0)


def test_a_rotated_part_given_twice_is_its_requests_once(tmp_path: Path) -> None:
    """Regression: nothing was rejected, and each request of the second copy was another
    call. (engine.jsonl.1 and engine.jsonl.1.gz are one part of one log.)"""
    older = _write(tmp_path / "engine.jsonl.1", _log())
    packed = tmp_path / "engine.jsonl.1.gz"
    packed.write_bytes(gzip.compress(older.read_bytes()))
    src = _write(tmp_path / "engine.jsonl", [_req("z1", "z", 30.0, 31.0, is_last=True)])
    report, trace, rejects = ingest_skipping_bad(
        [older, packed, src], tmp_path / "t.parquet", "engine-log"
    )
    assert (report.rows, report.rejected) == (5, 4)
    assert {r["file"] for r in rejects} == {str(packed)}
    assert rejects[1]["reason"] == f"{REPEAT} ({older}, line 2)"
    assert trace.height == 5
