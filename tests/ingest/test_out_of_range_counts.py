"""A whole number past what its trace column holds (a token count past 64 bits, a turn or a
block size past 32) is a bad record of its reader, named by file and record with exit code
2, as the canonical reader names one ("invalid input_tokens"): it used to reach polars as a
row and end ingest in a traceback (OverflowError, exit code 1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.ingest.badinput import assert_cli_error_line
from ttlctl.cli import app
from ttlctl.ingest.pipeline import ingest
from ttlctl.trace import io as trace_io

T0 = 1_764_000_000.0
ASSISTANT = {"role": "assistant", "branch_path": [], "conversation_id": 0}
#: format -> (file name, its records, the bad record, the reason the error starts with)
CASES: dict[str, tuple[str, list[dict[str, Any]], str, str]] = {
    "engine-log": (
        "engine.jsonl",
        [{"schema": "ttlctl.engine-log/1", "request_id": "r1", "program_id": "p",
          "arrival_unix_s": T0, "finish_unix_s": T0 + 1, "prompt_tokens": 1e20,
          "output_tokens": 5, "is_last": True}],
        "line 1",
        "out-of-range prompt_tokens: 1e+20",
    ),
    "mooncake": (
        "m.jsonl",
        [{"timestamp": 0, "input_length": 1e20, "output_length": 5, "hash_ids": [1]}],
        "line 1",
        "out-of-range input_length: 1e+20",
    ),
    "tracelab": (
        "t.jsonl",
        [{"session_id": "s", "round_index": 3e9, "input_tokens_total": 100,
          "output_tokens": 5, "timing_events": [], "tools": []}],
        "line 1",
        "out-of-range round_index: 3000000000.0 (at most 2,147,483,647)",
    ),
    "litellm": (
        "l.jsonl",
        [{"timestamp": "2026-04-23T17:42:10+00:00", "prompt_tokens": 1e20,
          "completion_tokens": 5, "request": {"messages": []}, "response": {}}],
        "line 1",
        "out-of-range prompt_tokens: 1e+20",
    ),
    "trtllm-scaffolding": (
        "x.trace.json",
        [{"trace_id": "x", "events": [ASSISTANT | {"event_type": "message",
          "prompt_tokens": 1e20, "completion_tokens": 5}]}],
        "events[0]",
        "out-of-range prompt_tokens: 1e+20",
    ),
    "mini-swe-agent": (
        "r.traj.json",
        [{"messages": [{"role": "user", "content": "task"}, {"role": "assistant",
          "content": "x", "extra": {"response": {"created": 1_700_000_000,
          "usage": {"prompt_tokens": 1e20, "completion_tokens": 5}}}}]}],
        "messages[1]",
        "out-of-range prompt_tokens: 1e+20",
    ),
    "swe-agent": (
        "r.traj",
        [{"trajectory": [{"action": "ls", "observation": "o", "response": "r"}],
          "history": [], "info": {"model_stats": {"tokens_sent": 1e20}}}],
        "trajectory[0]",
        "out-of-range tokens_sent: 1e+20",
    ),
    "claude-code": (
        "c.json",
        [{"id": "c", "block_size": 3e9, "tool_tokens": 4e9,
          "requests": [{"t": 0, "in": 100, "out": 10}]}],
        "block_size",
        "out-of-range block_size: 3000000000.0",
    ),
}  # fmt: skip


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_a_number_past_its_column_is_a_bad_record(tmp_path: Path, fmt: str) -> None:
    name, records, record, reason = CASES[fmt]
    path = tmp_path / name
    if name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    else:
        path.write_text(json.dumps(records[0]))
    assert_cli_error_line(path, fmt, tmp_path / "t.parquet", record, reason)


def test_a_broken_line_of_a_round_past_its_column_rejects_its_session(tmp_path: Path) -> None:
    """TraceLab: a line that does not parse but names its session and a round_index past
    32 bits is that session's bad record (malformed JSON), not a row polars cannot hold."""
    good = {"session_id": "s", "round_index": 0, "input_tokens_total": 100,
            "output_tokens": 5, "timing_events": [], "tools": []}  # fmt: skip
    path = tmp_path / "t.jsonl"
    broken = '{"session_id": "s", "round_index": 99999999999, "input_tokens_total": 1\n'
    path.write_text(json.dumps(good) + "\n" + broken + json.dumps(good | {"round_index": 1}))
    assert_cli_error_line(path, "tracelab", tmp_path / "t.parquet", "line 2", "malformed JSON")


def _engine_log(path: Path, **fields: Any) -> Path:
    record = CASES["engine-log"][1][0] | {"prompt_tokens": 100} | fields
    path.write_text(json.dumps(record) + "\n")
    return path


@pytest.mark.parametrize(
    ("field", "value"),
    [("prompt_tokens", 10**400), ("arrival_unix_s", 10**400), ("finish_unix_s", -(10**400))],
    ids=["count", "seconds", "negative"],
)
def test_a_whole_number_past_a_floats_range_is_a_bad_record(
    tmp_path: Path, field: str, value: int
) -> None:
    """JSON bounds no number: one past a float's range is out of range too, not a traceback
    (OverflowError, exit code 1)."""
    path = _engine_log(tmp_path / "engine.jsonl", **{field: value})
    reason = f"out-of-range {field}: {str(value)[:59]}"
    assert_cli_error_line(path, "engine-log", tmp_path / "t.parquet", "line 1", reason)


def test_a_timestamp_past_a_floats_range_is_a_bad_record(tmp_path: Path) -> None:
    """The same for an epoch time given as a number (LiteLLM's timestamp)."""
    record = CASES["litellm"][1][0] | {"prompt_tokens": 100, "timestamp": 10**400}
    path = tmp_path / "l.jsonl"
    path.write_text(json.dumps(record) + "\n")
    reason = f"out-of-range timestamp: {str(10**400)[:59]}"
    assert_cli_error_line(path, "litellm", tmp_path / "t.parquet", "line 1", reason)


def test_the_largest_count_a_column_holds_is_kept(tmp_path: Path) -> None:
    """2**63 - 1 is taken as it is (through a float it read as 2**63, refused as past the
    limit it equals); one more is refused."""
    top = 2**63 - 1
    out = tmp_path / "t.parquet"
    ingest([_engine_log(tmp_path / "top.jsonl", prompt_tokens=top)], out, fmt="engine-log")
    assert trace_io.read(out)["input_tokens"].to_list() == [top]
    path = _engine_log(tmp_path / "past.jsonl", prompt_tokens=top + 1)
    reason = f"out-of-range prompt_tokens: {top + 1} (at most {top:,})"
    assert_cli_error_line(path, "engine-log", tmp_path / "past.parquet", "line 1", reason)


#: a whole number longer than Python's int() reads (its limit is 4,300 digits)
LONG = "7" * 5000


@pytest.mark.parametrize("fmt", [None, *sorted(CASES)])
def test_a_number_too_long_to_read_is_malformed_json(tmp_path: Path, fmt: str | None) -> None:
    """A whole number past the 4,300 digits Python's int() reads raised a ValueError of its
    own, not a JSON error: format detection ended in a traceback (exit code 1) and a reader
    said "unreadable"; it is malformed JSON, named by file and record (None: detected). The
    long number takes the place of each case's number past its column."""
    name, records, _, _ = CASES[fmt or "mooncake"]
    text = "".join(json.dumps(r) + "\n" for r in records)
    past = next(n for n in ("1e+20", "3000000000.0") if n in text)
    path = tmp_path / name
    # a JSON-lines log also holds a good line (one whose every line is bad is no such log)
    good = text.replace(past, "100", 1) if name.endswith(".jsonl") else ""
    path.write_text(good + text.replace(past, LONG, 1))
    args = ["ingest", str(path), "-o", str(tmp_path / "t.parquet")]
    result = CliRunner().invoke(app, [*args, *([] if fmt is None else ["--format", fmt])])
    assert result.exit_code == 2, result.output
    (line,) = [x for x in result.output.splitlines() if x.strip()]
    assert line.startswith(f"error: {path}: "), line
    assert "malformed JSON: a whole number of 5,000 digits, too long to read" in line, line
    assert not (tmp_path / "t.parquet").exists()


def test_a_broken_line_of_a_round_too_long_to_read_rejects_its_session(tmp_path: Path) -> None:
    """TraceLab: the salvaged round of a line that does not parse is read only when it could
    be a turn (ten digits): a 5,000-digit one ended the read in int()'s ValueError."""
    good = {"session_id": "s", "round_index": 0, "input_tokens_total": 100,
            "output_tokens": 5, "timing_events": [], "tools": []}  # fmt: skip
    path = tmp_path / "t.jsonl"
    broken = '{"session_id": "s", "round_index": ' + LONG + ', "input_tokens_total": 1\n'
    path.write_text(json.dumps(good) + "\n" + broken + json.dumps(good | {"round_index": 1}))
    assert_cli_error_line(path, "tracelab", tmp_path / "t.parquet", "line 2", "malformed JSON")
