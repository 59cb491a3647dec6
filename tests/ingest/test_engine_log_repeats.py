"""A request an engine log holds twice (same request_id, same arrival) is a duplicate record,
rejected alone and naming the line it repeats, in its file or in another read before (a copy
of a log, a rotated part given twice, one request in two replicas' logs); a request id used
again at another time is another call."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from tests.ingest.badinput import ingest_skipping_bad, read_rejects
from tests.ingest.test_engine_log import T0, _facts, _log, _req, _two_replicas, _write
from ttlctl.cli import app
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rejects import IngestError
from ttlctl.trace import io as trace_io

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


def _served_log(tmp_path: Path) -> Path:
    """One server's log, as the plugin writes it: its engine line (no replica named), then
    two programs and an untagged request."""
    rows = [_facts(None), *_log(), _req("q1", "q", 3.0, 4.0, is_last=True)]
    (tmp_path / "logs").mkdir()
    return _write(tmp_path / "logs" / "engine.jsonl", rows)


def _copy(src: Path, name: str) -> Path:
    dest = src.with_name(name)
    shutil.copy(src, dest)
    return dest


def _same_as_alone(alone: Path, together: Path, kept: Path | None = None) -> None:
    """The trace ``together`` is the trace of the log read ``alone``: rows (replica column
    included) and the engines' facts in its metadata, first seen in the file ``kept`` when
    given (the copy, read first)."""
    assert_frame_equal(trace_io.read(alone), trace_io.read(together))
    engines = trace_io.engines(alone)
    if kept is not None:
        engines = [dict(e, file=str(kept)) for e in engines]
    assert trace_io.engines(together) == engines


@pytest.mark.parametrize("name", ["engine.copy.jsonl", "engine-copy.jsonl"])
def test_a_copy_of_a_log_under_another_name_is_its_requests_once(name: str, tmp_path: Path) -> None:
    """Regression: the copy read as another replica's log ("10 records → 10 calls"), each
    program's calls twice, at the same times, on two replicas. Now each of the copy's
    requests is a duplicate record naming the line it repeats: the trace is the log's alone.
    The files are read in name order (a folder walked): ``engine-copy.jsonl`` comes before
    ``engine.jsonl``, so it is the one kept and the original's lines are the duplicates."""
    log = _served_log(tmp_path)
    copy = _copy(log, name)
    first, second = sorted([log, copy])
    ingest([log], tmp_path / "alone.parquet")
    out = tmp_path / "out" / "t.parquet"
    res = CliRunner().invoke(app, ["ingest", str(log.parent), "-o", str(out), "--skip-bad"])
    assert res.exit_code == 0, res.output
    _same_as_alone(tmp_path / "alone.parquet", out, first)
    assert trace_io.read(out)["replica"].null_count() == 5  # one log: no replica named
    rejects = read_rejects(str(out) + ".rejects.jsonl")
    assert [(r["file"], r["record"]) for r in rejects] == [
        (str(second), f"line {n}") for n in range(2, 7)
    ]
    assert rejects[1]["reason"] == f"{REPEAT} ({first}, line 3)"
    text = " ".join(res.output.split())
    assert "10 records → 5 calls" in text and "5 record(s) rejected" in text, text
    assert "5 duplicate request" in text, text
    # without --skip-bad the first duplicate stops the run, naming both files and lines
    strict = CliRunner().invoke(app, ["ingest", str(log.parent), "-o", str(out)])
    assert strict.exit_code == 2
    line = " ".join(strict.output.split())
    assert f"error: {second}: line 2: duplicate request: request_id " in line, line
    assert f"is logged already ({first}, line 2)" in line, line


def test_a_copy_among_replicas_is_no_replica_of_its_own(tmp_path: Path) -> None:
    """Two replicas' logs (no replica named: each named by its file) and a copy of one: the
    trace is the two logs' alone, the copy's requests its duplicates, its engine line no
    engine of its own."""
    a, b = _two_replicas(tmp_path, (None, None))
    ingest([a, b], tmp_path / "two.parquet")
    copy = _copy(a, "c.jsonl")
    report, trace, rejects = ingest_skipping_bad([a, b, copy], tmp_path / "t.parquet", "engine-log")
    _same_as_alone(tmp_path / "two.parquet", tmp_path / "t.parquet")
    assert set(trace["replica"].to_list()) == {str(a), str(b)}
    assert report.rejected_by_reason == {"duplicate request": 4}
    assert {r["file"] for r in rejects} == {str(copy)}


def test_one_request_in_two_replicas_logs_is_kept_in_the_first(tmp_path: Path) -> None:
    """The same request (id and arrival) in the logs of two replicas, each with calls of its
    own: the first file's line stands, the second's is the duplicate; the replicas and the
    other calls are as without it."""
    a, b = _two_replicas(tmp_path, ("r-a", "r-b"))
    ingest([a, b], tmp_path / "two.parquet")
    line = a.read_text().splitlines()[2]  # a2: p's last call, on r-a
    b.write_text(b.read_text() + line + "\n")
    report, _, rejects = ingest_skipping_bad([a, b], tmp_path / "t.parquet", "engine-log")
    _same_as_alone(tmp_path / "two.parquet", tmp_path / "t.parquet")
    assert [(r["file"], r["record"], r["reason"]) for r in rejects] == [
        (
            str(b),
            "line 5",
            f'duplicate request: request_id "a2", arrived at {T0 + 6.0}, '
            f"is logged already ({a}, line 3)",
        )
    ]
    assert report.files[1].records == 4  # b's three calls and its duplicate
