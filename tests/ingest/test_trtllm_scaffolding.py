"""The trtllm-scaffolding reader: TensorRT-LLM scaffolding execution traces.

Expected values are computed here from the raw JSON with plain Python, never
copied from the reader's output. These traces carry no timestamps, so there is
no out-of-order clock to test; ordering comes from the event list itself.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from tests.ingest.badinput import (
    assert_cli_error_line,
    assert_strict_error,
    ingest_skipping_bad,
)
from ttlctl.cli import app
from ttlctl.ingest.pipeline import ingest
from ttlctl.trace import io as trace_io

FORMAT = "trtllm-scaffolding"
SAMPLE = "django__django-16801.trace.json"


# ---------------------------------------------------------------- independent oracle


def _expected(paths: list[Path]) -> dict[str, dict[str, list[Any]]]:
    """Per trace (root branch, one conversation, as in the shipped files)."""
    out: dict[str, dict[str, list[Any]]] = {}
    for path in paths:
        doc = json.loads(path.read_text())
        events = doc["events"]
        assert all(not e.get("branch_path") for e in events)
        cols: dict[str, list[Any]] = {"input": [], "output": [], "tool": [], "tool_s": []}
        for i, e in enumerate(events):
            if e["event_type"] != "message" or e["role"] != "assistant":
                continue
            cols["input"].append(e["prompt_tokens"])
            cols["output"].append(e["completion_tokens"])
            tools = []
            for f in events[i + 1 :]:
                if f["event_type"] == "message" and f["role"] == "assistant":
                    break
                if f["event_type"] == "tool_call":
                    tools.append(f)
            if tools:
                longest = max(tools, key=lambda t: t["duration_ms"])
                cols["tool"].append(longest["tool_name"])
                cols["tool_s"].append(sum(t["duration_ms"] for t in tools) / 1000)
            else:
                cols["tool"].append(None)
                cols["tool_s"].append(None)
        cols["tool"][-1] = None  # nothing follows the last call
        cols["tool_s"][-1] = None
        out[doc["trace_id"]] = cols
    return out


def _check(trace: pl.DataFrame, exp: dict[str, dict[str, list[Any]]]) -> None:
    assert trace["program_id"].n_unique() == len(exp)
    assert trace.height == sum(len(c["input"]) for c in exp.values())
    assert trace["input_tokens"].sum() == sum(sum(c["input"]) for c in exp.values())
    assert trace["output_tokens"].sum() == sum(sum(c["output"]) for c in exp.values())
    for program, cols in exp.items():
        rows = trace.filter(pl.col("program_id") == program).sort("turn")
        n = len(cols["input"])
        assert rows["turn"].to_list() == list(range(n))
        assert rows["tool"].to_list() == cols["tool"]
        got = rows["tool_s"].to_list()
        assert [g is None for g in got] == [w is None for w in cols["tool_s"]]
        assert [g for g in got if g is not None] == pytest.approx(
            [w for w in cols["tool_s"] if w is not None]
        )
        assert rows["gap_s"].to_list() == got  # gap_s = tool_s when a tool ran
        assert rows["arrival_s"].to_list() == [0.0] + [None] * (n - 1)
        assert rows["parent_program_id"].null_count() == n
        # reuse: previous prompt + previous (non-reasoning) output, capped
        reused = rows["reused_tokens"].to_list()
        assert reused[0] is None
        for i in range(1, n):
            assert reused[i] == min(cols["input"][i], cols["input"][i - 1] + cols["output"][i - 1])


# ---------------------------------------------------------------- real data


def test_sample(samples: Path, tmp_path: Path) -> None:
    src = samples / FORMAT / SAMPLE
    report = ingest([src], tmp_path / "t.parquet", fmt="auto")
    assert report.files[0].format == FORMAT
    assert report.rejected == 0
    trace = trace_io.read(tmp_path / "t.parquet")
    exp = _expected([src])
    _check(trace, exp)
    doc = json.loads(src.read_text())
    assert trace["program_id"][0] == doc["trace_id"]
    # the job ends with complete_task after the last call: not a tool of any row
    assert doc["events"][-1]["tool_name"] == "complete_task"
    assert "complete_task" not in trace["tool"].drop_nulls().to_list()


def test_shared_traces(shared_traces: Path, tmp_path: Path) -> None:
    folder = shared_traces / "trtllm-scaffolding"
    files = sorted(folder.glob("*.json"))
    assert files
    report = ingest([folder], tmp_path / "t.parquet", fmt=FORMAT)
    assert report.rejected == 0
    _check(trace_io.read(tmp_path / "t.parquet"), _expected(files))


# ---------------------------------------------------------------- branches, parallel tools


def _msg(role: str, path: list[int], conv: int, **extra: Any) -> dict[str, Any]:
    return {
        "event_type": "message",
        "branch_path": path,
        "conversation_id": conv,
        "role": role,
        **extra,
    }


def _call(path: list[int], conv: int, prompt: int, out: int = 10, **extra: Any) -> dict[str, Any]:
    return _msg("assistant", path, conv, prompt_tokens=prompt, completion_tokens=out, **extra)


def _tool(path: list[int], name: str, ms: Any) -> dict[str, Any]:
    return {"event_type": "tool_call", "branch_path": path, "tool_name": name, "duration_ms": ms}


def _job() -> dict[str, Any]:
    return {
        "trace_id": "job",
        "events": [
            _msg("system", [], 0, tokens=100),
            _call([], 0, 120, reasoning_tokens=4),
            # two tools dispatched together, then one more: max(0.1, 0.3) + 0.2
            {
                "event_type": "parallel_start",
                "branch_path": [],
                "children": [_tool([], "grep", 100.0), _tool([], "fetch", 300.0)],
            },
            _tool([], "shell", 200.0),
            _call([], 0, 400),
            {"event_type": "parallel_start", "branch_path": [], "num_branches": 2},
            _msg("system", [0], 0, tokens=50),
            _call([0], 0, 60),
            _tool([0], "search", 1500.0),
            _call([0], 0, 90),
            _tool([0], "complete", 1.0),
            _call([1], 0, 70),
            {"event_type": "parallel_end", "branch_path": []},
            _call([], 0, 500, llm_duration_ms=2500.0),  # full traces time each call
            _call([], 1, 80),  # a second root conversation (e.g. a summariser)
        ],
    }


def test_branches_and_parallel_tools(tmp_path: Path) -> None:
    src = tmp_path / "job.trace.json"
    src.write_text(json.dumps(_job()))
    report = ingest([src], tmp_path / "t.parquet", fmt="auto")
    assert report.files[0].format == FORMAT
    assert report.records == report.rows == 7
    trace = trace_io.read(tmp_path / "t.parquet")
    by = {
        p: trace.filter(pl.col("program_id") == p).sort("turn")
        for p in trace["program_id"].unique().to_list()
    }
    assert sorted(by) == ["job", "job/b0/c0", "job/b1/c0", "job/c1"]
    root = by["job"]
    assert root["tool"].to_list() == ["fetch", None, None]  # the longest of the three
    assert root["tool_s"].to_list()[0] == pytest.approx(0.5)
    assert root["gap_s"].to_list()[0] == pytest.approx(0.5)
    assert root["reused_tokens"].to_list() == [None, 120 + 10 - 4, 400 + 10]
    assert root["llm_s"].to_list() == [None, None, 2.5]
    sub = by["job/b0/c0"]
    assert sub["tool"].to_list() == ["search", None]
    assert sub["tool_s"].to_list()[0] == pytest.approx(1.5)
    assert sub["parent_program_id"].to_list() == ["job", "job"]
    assert by["job/b1/c0"]["parent_program_id"].to_list() == ["job"]
    assert by["job/c1"]["parent_program_id"].to_list() == [None]
    assert trace.filter(pl.col("turn") == 0)["arrival_s"].to_list() == [0.0] * 4


# ---------------------------------------------------------------- bad input


def _bad_file(tmp_path: Path, case: str, samples: Path) -> Path:
    doc = json.loads((samples / FORMAT / SAMPLE).read_text())
    doc["trace_id"] = "bad"
    path = tmp_path / f"{case}.trace.json"
    events = doc["events"]
    if case == "truncated":
        text = json.dumps(doc, indent=2)
        path.write_text(text[: len(text) // 2])
        return path
    if case == "wrong-format":
        shutil.copy(samples / "tracelab" / "round_trace.jsonl", path)
        return path
    if case == "wrong-shape":
        path.write_text(json.dumps({"trace_id": "x", "requests": []}))
        return path
    if case == "empty":
        path.write_text("")
        return path
    if case == "binary":
        path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00" * 30)
        return path
    if case == "missing-tokens":
        del events[5]["prompt_tokens"]
    elif case == "non-numeric-tokens":
        events[5]["completion_tokens"] = "many"
    elif case == "negative-duration":
        events[6]["duration_ms"] = -3.0
    elif case == "non-numeric-duration":
        events[6]["duration_ms"] = "fast"
    elif case == "no-calls":
        doc["events"] = [e for e in events if e.get("role") != "assistant"]
    else:
        raise AssertionError(case)
    path.write_text(json.dumps(doc))
    return path


BAD = {
    "truncated": (None, "truncated JSON"),
    "wrong-format": (None, "malformed JSON"),
    "wrong-shape": (None, "not a TensorRT-LLM scaffolding trace"),
    "empty": (None, "empty file"),
    "binary": (None, "binary data"),
    "missing-tokens": ("events[5]", "missing prompt_tokens"),
    "non-numeric-tokens": ("events[5]", "non-numeric completion_tokens"),
    "negative-duration": ("events[5]", "negative duration_ms"),
    "non-numeric-duration": ("events[5]", "non-numeric duration_ms"),
    "no-calls": (None, "no assistant messages"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input(case: str, tmp_path: Path, samples: Path) -> None:
    bad = _bad_file(tmp_path, case, samples)
    good = samples / FORMAT / SAMPLE
    record, reason = BAD[case]
    assert_strict_error([bad, good], bad, FORMAT, tmp_path / "strict.parquet", record, reason)

    _, trace, rejects = ingest_skipping_bad([bad, good], tmp_path / "t.parquet", FORMAT)
    good_id = json.loads(good.read_text())["trace_id"]
    assert trace["program_id"].unique().to_list() == [good_id]
    assert all(r["file"] == str(bad) for r in rejects)


def test_cli(samples: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "t.parquet"
    src = samples / FORMAT / SAMPLE
    result = runner.invoke(app, ["ingest", str(src), "-o", str(out), "--format", FORMAT])
    assert result.exit_code == 0, result.output
    assert trace_io.read(out).height == 4
    bad = _bad_file(tmp_path, "negative-duration", samples)
    result = runner.invoke(app, ["ingest", str(bad), "-o", str(out), "--format", FORMAT])
    assert result.exit_code == 2
    assert bad.name in result.output


# ---------------------------------------------------------------- event types and roles

#: name -> (index of the sample's event changed, its change, reason expected)
KIND_CASES: dict[str, tuple[int, Any, str]] = {
    "call without a role": (5, lambda e: e.pop("role"), "missing role"),
    "call with a misspelt event_type": (
        5,
        lambda e: e.update(event_type="mesage"),
        "unknown event_type: 'mesage' (expected message, tool_call, parallel_start, "
        "parallel_end, drop_kv_cache)",
    ),
    "call with a non-string role": (5, lambda e: e.update(role=1), "non-string role: 1"),
    "call with a misspelt role": (
        5,
        lambda e: e.update(role="assistent"),
        "unknown role: 'assistent' (expected system, user, assistant, tool)",
    ),
    "tool call without event_type": (6, lambda e: e.pop("event_type"), "missing event_type"),
    "tool call with a non-string event_type": (
        6,
        lambda e: e.update(event_type=7),
        "non-string event_type: 7",
    ),
    "user message with a misspelt role": (1, lambda e: e.update(role="usr"), "unknown role"),
}


@pytest.mark.parametrize("case", sorted(KIND_CASES))
def test_bad_event_kind_is_a_bad_record(case: str, samples: Path, tmp_path: Path) -> None:
    """An event of no known type, or a message of no known role, is never passed over (a
    call would vanish, a tool's pause be lost, unseen): it takes a call's place, a bad
    record, and its program is rejected whole with every record counted."""
    index, change, reason = KIND_CASES[case]
    doc = json.loads((samples / FORMAT / SAMPLE).read_text())
    doc["trace_id"] = "bad"
    calls = sum(e.get("role") == "assistant" for e in doc["events"])
    was_a_call = doc["events"][index].get("role") == "assistant"
    change(doc["events"][index])
    bad = tmp_path / "bad.trace.json"
    bad.write_text(json.dumps(doc))
    record = f"events[{index}]"
    assert_cli_error_line(bad, FORMAT, tmp_path / "strict.parquet", record, reason)

    good = samples / FORMAT / SAMPLE
    report, trace, rejects = ingest_skipping_bad([bad, good], tmp_path / "t.parquet", FORMAT)
    assert trace["program_id"].unique().to_list() == [json.loads(good.read_text())["trace_id"]]
    assert report.rows == calls
    assert report.rejected == calls + (not was_a_call)
    own = [r for r in rejects if r["record"] == record]
    assert len(own) == 1 and own[0]["reason"].startswith(reason), own
    others = [r for r in rejects if r["record"] != record]
    assert all(r["reason"].startswith("rejected with its program") for r in others)


def test_event_not_an_object_rejects_the_trace(samples: Path, tmp_path: Path) -> None:
    """An event that is not an object names no branch or conversation: the trace is
    rejected whole, one reject standing for its calls and that event."""
    doc = json.loads((samples / FORMAT / SAMPLE).read_text())
    doc["trace_id"] = "bad"
    calls = sum(e.get("role") == "assistant" for e in doc["events"])
    doc["events"][5] = "oops"
    bad = tmp_path / "bad.trace.json"
    bad.write_text(json.dumps(doc))
    reason = "malformed event: not a JSON object"
    assert_cli_error_line(bad, FORMAT, tmp_path / "strict.parquet", "events[5]", reason)
    good = samples / FORMAT / SAMPLE
    report, trace, rejects = ingest_skipping_bad([bad, good], tmp_path / "t.parquet", FORMAT)
    assert trace["program_id"].unique().to_list() == [json.loads(good.read_text())["trace_id"]]
    assert report.rejected == calls  # the 3 calls left, and the event in a call's place
    assert [(r["record"], r["records"]) for r in rejects] == [("events[5]", calls)]
    assert rejects[0]["reason"].startswith(reason)


def test_bad_event_in_another_conversations_pause(tmp_path: Path) -> None:
    """A bad event after a call of conversation 1 may be a tool of that call's pause:
    that program is rejected too, not written with no tool."""
    doc = {
        "trace_id": "job",
        "events": [
            _call([], 0, 100),
            _call([], 1, 50),
            {"event_type": "tool_cal", "branch_path": [], "tool_name": "x", "duration_ms": 5},
            _call([], 1, 80),
            _call([], 0, 200),
            _call([], 2, 30),
        ],
    }
    path = tmp_path / "job.trace.json"
    path.write_text(json.dumps(doc))
    report, trace, rejects = ingest_skipping_bad([path], tmp_path / "t.parquet", FORMAT)
    assert trace["program_id"].to_list() == ["job/c2"]
    assert report.rejected == 5  # 4 calls and the bad event
    by_record = {r["record"]: r["reason"] for r in rejects}
    assert by_record["events[2]"].startswith("unknown event_type: 'tool_cal'")
    assert by_record["events[1]"].startswith("unknown event_type: 'tool_cal'")
    assert by_record["events[1]"].endswith("(events[2])")


def test_bad_event_among_parallel_children(tmp_path: Path) -> None:
    doc = {
        "trace_id": "job",
        "events": [
            _call([], 0, 100),
            {
                "event_type": "parallel_start",
                "branch_path": [],
                "children": [_tool([], "grep", 10.0), {"branch_path": [], "tool_name": "x"}],
            },
            _call([], 0, 200),
        ],
    }
    path = tmp_path / "job.trace.json"
    path.write_text(json.dumps(doc))
    record = "events[1].children[1]"
    assert_cli_error_line(path, FORMAT, tmp_path / "o.parquet", record, "missing event_type")


def test_every_event_type_and_role_is_read(tmp_path: Path) -> None:
    """The event types and roles TensorRT-LLM writes are read, none a bad record."""
    doc = {
        "trace_id": "job",
        "events": [
            _msg("system", [], 0, tokens=10),
            _msg("user", [], 0, tokens=10),
            _call([], 0, 100),
            _tool([], "shell", 20.0),
            _msg("tool", [], 0, tokens=5),
            {"event_type": "drop_kv_cache", "branch_path": []},
            {"event_type": "parallel_start", "branch_path": [], "num_branches": 1},
            _call([0], 0, 40),
            {"event_type": "parallel_end", "branch_path": []},
            _call([], 0, 200),
        ],
    }
    path = tmp_path / "job.trace.json"
    path.write_text(json.dumps(doc))
    report = ingest([path], tmp_path / "o.parquet", fmt=FORMAT)
    assert report.rejected == 0
    assert report.rows == 3
    trace = trace_io.read(tmp_path / "o.parquet").filter(pl.col("program_id") == "job")
    assert trace.sort("turn")["tool"].to_list() == ["shell", None]


def test_reasoning_past_the_completion_leaves_the_context_as_it_was(tmp_path: Path) -> None:
    """A call reporting more reasoning tokens than completion tokens added nothing to the
    context: the next call reuses the previous prompt whole, not less."""
    doc = {"trace_id": "r", "events": [_call([], 0, 120, reasoning_tokens=15), _call([], 0, 400)]}
    src = tmp_path / "r.trace.json"
    src.write_text(json.dumps(doc))
    ingest([src], tmp_path / "t.parquet", fmt=FORMAT)
    assert trace_io.read(tmp_path / "t.parquet").sort("turn")["reused_tokens"].to_list() == [
        None,
        120,
    ]
