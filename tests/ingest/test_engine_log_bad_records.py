"""An engine log's bad records: each rejects its program whole under one reason, its own,
and the program's other calls name it as the cause; no call of a rejected program is given
a reason it does not have (the place the bad record took among the calls)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.ingest.badinput import ingest_skipping_bad
from tests.ingest.test_engine_log import _req, _write
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rejects import IngestError


def _reasons(rows: list[dict[str, Any]], tmp_path: Path) -> dict[str, str]:
    """The rejects of a --skip-bad ingest of ``rows``, reason by line."""
    src = _write(tmp_path / "engine.jsonl", rows)
    _, _, rejects = ingest_skipping_bad([src], tmp_path / "t.parquet", "engine-log")
    return {r["record"]: r["reason"] for r in rejects}


def _program(**bad: Any) -> list[dict[str, Any]]:
    """Program p of three calls, the second with ``bad`` fields, the last tagged is_last;
    q, a good program, between them."""
    return [
        _req("r1", "p", 0.0, 1.0, tool="grep"),
        _req("r2", "p", 2.0, 3.0, tool="bash", **bad),
        _req("q1", "q", 2.5, 3.5, is_last=True),
        _req("r3", "p", 4.0, 5.0, is_last=True),
    ]


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({"prompt_tokens": -7}, "negative prompt_tokens: -7"),
        ({"arrival_unix_s": None}, "missing arrival_unix_s"),
        ({"arrival_unix_s": "soon"}, "non-numeric arrival_unix_s: 'soon'"),
    ],
)
def test_a_bad_call_is_its_programs_one_reason(
    bad: dict[str, Any], reason: str, tmp_path: Path
) -> None:
    """Regression: a bad record mid-program was sorted after the program's last call, so that
    call read "is_last is true on turn 1, which is not the program's last" (false), and the
    others "rejected with its program: p has a bad record (line 4)" (the last call, not the
    cause)."""
    because = "rejected with its program: p has a bad record (line 2)"
    assert _reasons(_program(**bad), tmp_path) == {
        "line 1": because,
        "line 2": reason,
        "line 4": because,
    }


def test_a_bad_call_of_a_program_in_flight_is_its_one_reason(tmp_path: Path) -> None:
    """A program in flight (no is_last) with a bad record mid-program is ended at its last
    call as a good one is, so that call's tool does not read "tool named after the
    program's last call" now that the bad record is placed by its arrival."""
    rows = [
        _req("r1", "p", 0.0, 1.0, tool="grep"),
        _req("r2", "p", 2.0, 3.0, tool="bash", output_tokens=-1),
        _req("r3", "p", 4.0, 5.0, tool="pytest"),  # waiting on pytest when the log was read
        _req("q1", "q", 0.5, 1.5, is_last=True),
    ]
    because = "rejected with its program: p has a bad record (line 2)"
    assert _reasons(rows, tmp_path) == {
        "line 1": because,
        "line 2": "negative output_tokens: -1",
        "line 3": because,
    }
    report = ingest([tmp_path / "engine.jsonl"], tmp_path / "t.parquet", skip_bad=True)
    assert report.in_flight == 0  # p is rejected, not counted in flight


def test_a_bad_call_after_its_program_ended_is_the_next_run_of_its_id(tmp_path: Path) -> None:
    """A bad record that arrived after its program's last call belongs to the id's next run
    (p#2). Regression: it joined the ended program, whose last call then read "is_last is
    true on turn 1, which is not the program's last", and took it down."""
    rows = [
        _req("r1", "p", 0.0, 1.0, tool="grep"),
        _req("r2", "p", 2.0, 3.0, is_last=True),
        _req("s1", "p", 9.0, 10.0, prompt_tokens=-3),
    ]
    assert _reasons(rows, tmp_path) == {"line 3": "negative prompt_tokens: -3"}


def test_strict_ingest_names_the_bad_call(tmp_path: Path) -> None:
    src = _write(tmp_path / "engine.jsonl", _program(prompt_tokens=-7))
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "t.parquet")
    assert (info.value.record, info.value.reason) == ("line 2", "negative prompt_tokens: -7")


def _broken(rows: list[dict[str, Any]], line: int, keep: int, path: Path) -> Path:
    """``rows`` written as a log whose ``line`` (1-based) keeps only its first ``keep``
    characters (malformed JSON; cut short when it is the last line)."""
    lines = [json.dumps(r) for r in rows]
    lines[line - 1] = lines[line - 1][:keep]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_line_that_does_not_parse_but_names_its_program_rejects_it_whole(
    tmp_path: Path,
) -> None:
    """Regression: under --skip-bad a malformed line was rejected alone, and its program
    kept its other calls, renumbered: a call short, and the pause before the lost call
    spanning it (the fit then read that as a tool's pause)."""
    rows = _program()
    cut = json.dumps(rows[1]).index('"tool"')  # past program_id, before the rest
    src = _broken(rows, 2, cut, tmp_path / "engine.jsonl")
    report, frame, rejects = ingest_skipping_bad([src], tmp_path / "t.parquet", "engine-log")
    assert sorted(frame["program_id"].unique()) == ["q"]
    because = "rejected with its program: p has a bad record (line 2)"
    reasons = {r["record"]: r["reason"] for r in rejects}
    assert reasons["line 1"] == because and reasons["line 4"] == because
    assert reasons["line 2"].startswith("malformed JSON")
    assert report.records == 4 and report.rejected == 3


def test_a_line_cut_before_its_program_is_rejected_alone(tmp_path: Path) -> None:
    """A line that no longer names its program (cut before ``program_id``) cannot reject
    it: it is rejected alone, as before."""
    rows = _program()
    cut = json.dumps(rows[1]).index('"program_id"')
    src = _broken(rows, 2, cut, tmp_path / "engine.jsonl")
    _, frame, rejects = ingest_skipping_bad([src], tmp_path / "t.parquet", "engine-log")
    assert sorted(frame["program_id"].unique()) == ["p", "q"]
    assert [(r["record"], r["reason"][:14]) for r in rejects] == [("line 2", "malformed JSON")]


def test_a_broken_line_on_another_replica_rejects_its_program(tmp_path: Path) -> None:
    """Two replicas' logs: the program's broken line in one rejects its calls in both."""
    rows = _program()
    first = _write(tmp_path / "a.jsonl", [rows[0], rows[2]])
    cut = json.dumps(rows[3]).index('"is_last"')
    second = _broken([rows[1], rows[3]], 2, cut, tmp_path / "b.jsonl")
    _, frame, rejects = ingest_skipping_bad([first, second], tmp_path / "t.parquet", "engine-log")
    assert sorted(frame["program_id"].unique()) == ["q"]
    assert sorted(Path(r["file"]).name + ":" + r["record"] for r in rejects) == [
        "a.jsonl:line 1",
        "b.jsonl:line 1",
        "b.jsonl:line 2",
    ]


def test_a_tagged_line_without_its_request_id_is_a_bad_record(tmp_path: Path) -> None:
    """The plugin writes a request id on every line; without one, a request logged twice
    (a copy of the log, another replica's) cannot be told. Regression: such a line was a
    call, and the same line in two replicas' logs made two calls of its program."""
    assert _reasons(_program(request_id=None), tmp_path) == {
        "line 1": "rejected with its program: p has a bad record (line 2)",
        "line 2": "missing request_id",
        "line 4": "rejected with its program: p has a bad record (line 2)",
    }


@pytest.mark.parametrize("copy_first", [False, True], ids=["log first", "copy first"])
def test_a_copy_taken_while_its_last_line_was_written_is_still_a_copy(
    tmp_path: Path, copy_first: bool
) -> None:
    """A log and its copy, whose last line is cut (copied mid-write): the cut line repeats
    the log's whole one (its request id, of its program), so it is a duplicate, the copy is
    no replica when the log is read first, and no program is rejected whichever file is read
    first (read first, the copy's whole lines stand, as any first line read does, and the
    log's own last line makes it a replica apart: a partial copy sorting first, as before).
    Regression (a second reader's find): the cut line rejected its program, intact in the
    log."""
    rows = [_req("r1", "p", 0.0, 1.0, tool="grep"), _req("q1", "q", 0.5, 1.5, is_last=True),
            _req("r2", "p", 2.0, 3.0, is_last=True)]  # fmt: skip
    log = _write(tmp_path / "engine.jsonl", rows)
    for cut_at in ('"tool"', '"first_token_unix_s"'):  # before, after its arrival
        copy = _broken(rows, 3, json.dumps(rows[2]).index(cut_at), tmp_path / "copy.jsonl")
        files = [copy, log] if copy_first else [log, copy]
        _, frame, rejects = ingest_skipping_bad(files, tmp_path / "t.parquet", "engine-log")
        assert sorted(frame.select("program_id", "turn").rows()) == [("p", 0), ("p", 1), ("q", 0)]
        if not copy_first:  # the copy's every request is the log's: one log, no names
            assert frame["replica"].null_count() == frame.height
        assert all(r["reason"].startswith("duplicate request") for r in rejects), rejects
        assert len(rejects) == 3
        # the cut line's reject says it is a copy, and why it did not parse
        (cut,) = [
            r["reason"] for r in rejects if Path(r["file"]) == copy and r["record"] == "line 3"
        ]
        assert cut.endswith(")") and "(malformed JSON" in cut, cut


def test_a_broken_line_of_an_id_used_again_rejects_its_own_run(tmp_path: Path) -> None:
    """p runs r1-r3 (is_last), then again (s1, s2): r2's line, cut before its arrival,
    takes the place of the line before it of p in its file, so it rejects p's first run,
    and the second (p#2) is kept whole. Regression: it went to the last run, rejecting the
    intact p#2 and leaving p a call short."""
    rows = [
        _req("r1", "p", 0.0, 1.0, tool="grep"),
        _req("r2", "p", 2.0, 3.0, tool="bash"),
        _req("r3", "p", 4.0, 5.0, is_last=True),
        _req("s1", "p", 10.0, 11.0, tool="grep"),
        _req("s2", "p", 12.0, 13.0, is_last=True),
    ]
    src = _broken(rows, 2, json.dumps(rows[1]).index('"tool"'), tmp_path / "engine.jsonl")
    _, frame, rejects = ingest_skipping_bad([src], tmp_path / "t.parquet", "engine-log")
    assert sorted(frame.select("program_id", "turn").rows()) == [("p#2", 0), ("p#2", 1)]
    because = "rejected with its program: p has a bad record (line 2)"
    assert {r["record"]: r["reason"] for r in rejects} == {
        "line 1": because,
        "line 2": rejects[1]["reason"],
        "line 3": because,
    }
    assert rejects[1]["reason"].startswith("malformed JSON")


def test_a_broken_line_naming_a_numeric_program_rejects_it(tmp_path: Path) -> None:
    """A good line's numeric program_id is read as its text; a broken line's is too."""
    rows = [
        _req("r1", 7, 0.0, 1.0, tool="grep"),
        _req("r2", 7, 2.0, 3.0, tool="bash"),
        _req("r3", 7, 4.0, 5.0, is_last=True),
        _req("q1", "q", 0.5, 1.5, is_last=True),
    ]
    src = _broken(rows, 2, json.dumps(rows[1]).index('"tool"'), tmp_path / "engine.jsonl")
    _, frame, _ = ingest_skipping_bad([src], tmp_path / "t.parquet", "engine-log")
    assert frame["program_id"].to_list() == ["q"]


def _cut_rows(rows: list[dict[str, Any]], line: int, key: str, path: Path) -> Path:
    """``rows`` as a log whose ``line`` is cut just before ``key``."""
    return _broken(rows, line, json.dumps(rows[line - 1]).index(f'"{key}"'), path)


def test_a_cut_line_is_no_copy_of_a_line_of_its_own_log(tmp_path: Path) -> None:
    """A client's retry under its own request id (c1 twice), the retry's line cut before its
    arrival: in its own log the id is no proof of a copy, so the line is a bad record and
    rejects p whole. Regression (a second reader's find): it was rejected alone as a
    duplicate of the first c1, and p kept a hole."""
    rows = [
        _req("c1", "p", 0.0, 1.0, tool="grep"),
        _req("c1", "p", 2.0, 3.0, tool="bash"),
        _req("c2", "p", 4.0, 5.0, is_last=True),
        _req("q1", "q", 0.5, 1.5, is_last=True),
    ]
    src = _cut_rows(rows, 2, "tool", tmp_path / "engine.jsonl")
    _, frame, rejects = ingest_skipping_bad([src], tmp_path / "t.parquet", "engine-log")
    assert frame["program_id"].to_list() == ["q"]
    assert not any(r["reason"].startswith("duplicate") for r in rejects)


def test_a_cut_line_in_a_rotated_part_takes_its_place_after_the_older_part(
    tmp_path: Path,
) -> None:
    """p's first call in engine.jsonl.1, its second (cut before its arrival) and third
    (is_last) in engine.jsonl, then p again: the cut line follows p's call in the older
    part, so it rejects p's first run, and p#2 is kept whole."""
    rows = [_req("r1", "p", 0.0, 1.0, tool="grep"), _req("r2", "p", 2.0, 3.0, tool="bash"),
            _req("r3", "p", 4.0, 5.0, is_last=True), _req("s1", "p", 10.0, 11.0, tool="grep"),
            _req("s2", "p", 12.0, 13.0, is_last=True)]  # fmt: skip
    older = _write(tmp_path / "engine.jsonl.1", rows[:1])
    newer = _cut_rows(rows[1:], 1, "tool", tmp_path / "engine.jsonl")
    _, frame, _ = ingest_skipping_bad([newer, older], tmp_path / "t.parquet", "engine-log")
    assert sorted(frame.select("program_id", "turn").rows()) == [("p#2", 0), ("p#2", 1)]


def test_a_cut_lines_is_last_ends_its_run(tmp_path: Path) -> None:
    """A line cut after ``"is_last": true`` (written before the arrival): it ends p's first
    run, so only that run is rejected; p#2 and q are kept."""
    rows = [_req("r1", "p", 0.0, 1.0, tool="grep"), _req("r2", "p", 2.0, 3.0, is_last=True),
            _req("s1", "p", 10.0, 11.0, tool="grep"), _req("s2", "p", 12.0, 13.0, is_last=True),
            _req("q1", "q", 14.0, 15.0, is_last=True)]  # fmt: skip
    src = _cut_rows(rows, 2, "arrival_unix_s", tmp_path / "engine.jsonl")
    _, frame, _ = ingest_skipping_bad([src], tmp_path / "t.parquet", "engine-log")
    kept = sorted(frame.select("program_id", "turn").rows())
    assert kept == [("p#2", 0), ("p#2", 1), ("q", 0)]


def test_a_log_and_its_copy_cut_alike_give_the_log_alone(tmp_path: Path) -> None:
    """The log and its copy both end in the same cut line: the copy's is a duplicate of the
    log's (read first), and the copy is no replica."""
    rows = [_req("r1", "p", 0.0, 1.0, tool="grep"), _req("q1", "q", 0.5, 1.5, is_last=True),
            _req("r2", "p", 2.0, 3.0, is_last=True)]  # fmt: skip
    log = _cut_rows(rows, 3, "tool", tmp_path / "engine.jsonl")
    copy = _cut_rows(rows, 3, "tool", tmp_path / "engine.copy.jsonl")
    _, alone, _ = ingest_skipping_bad([log], tmp_path / "a.parquet", "engine-log")
    _, both, rejects = ingest_skipping_bad([log, copy], tmp_path / "b.parquet", "engine-log")
    assert both.equals(alone)
    assert sum("cut short there too (malformed JSON" in r["reason"] for r in rejects) == 1


def test_a_cut_line_is_no_copy_of_a_line_of_its_logs_older_part(tmp_path: Path) -> None:
    """A log's rotated parts are one log: a retry under one id, its line cut in the newer
    part, the first in the older one, is a bad record (p rejected), not a copy."""
    rows = [
        _req("c1", "p", 0.0, 1.0, tool="grep"),
        _req("c1", "p", 2.0, 3.0, tool="bash"),
        _req("c2", "p", 4.0, 5.0, is_last=True),
        _req("q1", "q", 0.5, 1.5, is_last=True),
    ]
    older = _write(tmp_path / "engine.jsonl.1", [rows[0], rows[3]])
    newer = _cut_rows(rows[1:3], 1, "tool", tmp_path / "engine.jsonl")
    _, frame, rejects = ingest_skipping_bad([older, newer], tmp_path / "t.parquet", "engine-log")
    assert frame["program_id"].to_list() == ["q"]
    assert not any(r["reason"].startswith("duplicate") for r in rejects)
