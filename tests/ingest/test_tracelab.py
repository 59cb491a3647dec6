"""The tracelab reader: TraceLab round traces (one JSON line per round = LLM call).

Expected values are computed here from the raw JSON with plain Python, never
copied from the reader's output.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from tests.ingest.badinput import assert_strict_error, ingest_skipping_bad
from ttlctl.cli import app
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rejects import IngestError
from ttlctl.trace import io as trace_io

FORMAT = "tracelab"
SAMPLE = "round_trace.jsonl"
ANSWER = ("reasoning", "text", "tool_call", "usage_report")


# ---------------------------------------------------------------- independent oracle


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _rounds(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _expected(paths: list[Path]) -> dict[str, dict[str, list[Any]]]:
    """Per session: the column values computed from the raw rounds."""
    sessions: dict[str, list[dict[str, Any]]] = {}
    for path in paths:
        for r in _rounds(path):
            sessions.setdefault(r["session_id"], []).append(r)
    out: dict[str, dict[str, list[Any]]] = {}
    for sid, rounds in sessions.items():
        rounds.sort(key=lambda r: r["round_index"])
        cols: dict[str, list[Any]] = {
            k: []
            for k in (
                "turn",
                "input",
                "output",
                "reused",
                "arrival",
                "end",
                "tool",
                "tool_s",
                "gap",
            )
        }
        for r in rounds:
            evs = r["timing_events"]
            first_answer = next(i for i, e in enumerate(evs) if e["event_type"] in ANSWER)
            inputs = [
                e for e in evs[:first_answer] if e["event_type"] in ("user_message", "tool_result")
            ]
            cols["turn"].append(r["round_index"])
            cols["input"].append(r["input_tokens_total"])
            cols["output"].append(r["output_tokens"])
            cols["reused"].append(min(r["prefix_tokens"], r["input_tokens_total"]))
            cols["arrival"].append(_ts((inputs[-1] if inputs else evs[0])["timestamp"]))
            cols["end"].append(max(_ts(e["timestamp"]) for e in evs if e["event_type"] in ANSWER))
            if r["tools"]:
                longest = sorted(
                    r["tools"], key=lambda t: (-t["tool_wall_latency_ms"], t["tool_index"])
                )[0]
                cols["tool"].append(longest["tool_name"])
                cols["tool_s"].append(
                    max(_ts(t["result_at"]) for t in r["tools"])
                    - min(_ts(t["emitted_at"]) for t in r["tools"])
                )
            else:
                cols["tool"].append(None)
                cols["tool_s"].append(None)
        cols["tool"][-1] = None
        cols["tool_s"][-1] = None
        for i in range(len(rounds)):
            if i + 1 == len(rounds):
                cols["gap"].append(None)
                continue
            gap = cols["arrival"][i + 1] - cols["end"][i]
            cols["gap"].append(max(gap, cols["tool_s"][i] or 0.0))
        out[sid] = cols
    return out


def _check(trace: pl.DataFrame, exp: dict[str, dict[str, list[Any]]]) -> None:
    assert trace["program_id"].n_unique() == len(exp)
    assert trace.height == sum(len(c["turn"]) for c in exp.values())
    assert trace["input_tokens"].sum() == sum(sum(c["input"]) for c in exp.values())
    assert trace["output_tokens"].sum() == sum(sum(c["output"]) for c in exp.values())
    assert trace["reused_tokens"].sum() == sum(sum(c["reused"]) for c in exp.values())
    assert trace["tool"].drop_nulls().len() == sum(
        t is not None for c in exp.values() for t in c["tool"]
    )
    origin = min(t for c in exp.values() for t in c["arrival"])
    for sid, cols in exp.items():
        rows = trace.filter(pl.col("program_id") == sid).sort("turn")
        assert rows["turn"].to_list() == cols["turn"]
        assert rows["tool"].to_list() == cols["tool"]
        assert rows["arrival_s"].to_list() == pytest.approx(
            [t - origin for t in cols["arrival"]], abs=1e-6
        )
        for got, want in zip(rows["tool_s"].to_list(), cols["tool_s"], strict=True):
            assert (got is None) == (want is None)
            if want is not None:
                assert got == pytest.approx(want, abs=1e-6)
        gaps = rows["gap_s"].to_list()
        assert gaps[-1] is None
        assert gaps[:-1] == pytest.approx(cols["gap"][:-1], abs=1e-6)
        llm = [e - a for a, e in zip(cols["arrival"], cols["end"], strict=True)]
        assert rows["llm_s"].to_list() == pytest.approx(llm, abs=1e-6)


# ---------------------------------------------------------------- real data


def test_sample(samples: Path, tmp_path: Path) -> None:
    src = samples / FORMAT / SAMPLE
    report = ingest([src], tmp_path / "t.parquet", fmt="auto")
    assert report.files[0].format == FORMAT
    assert report.rejected == 0
    assert report.records == report.rows == len(_rounds(src))
    trace = trace_io.read(tmp_path / "t.parquet")
    _check(trace, _expected([src]))
    # parallel Bash (0.86 s) + WebSearch (19.29 s) in the first Claude round:
    # named after the longer one, timed from the first emission to the last result
    first = _rounds(src)[0]
    row = trace.filter((pl.col("program_id") == first["session_id"]) & (pl.col("turn") == 0))
    assert row["tool"][0] == "WebSearch"
    span = _ts(first["tools"][1]["result_at"]) - _ts(first["tools"][0]["emitted_at"])
    assert row["tool_s"][0] == pytest.approx(span)
    assert row["gap_s"][0] >= row["tool_s"][0]


def test_shared_traces(shared_traces: Path, tmp_path: Path) -> None:
    folder = shared_traces / "tracelab"
    files = sorted(folder.glob("*.jsonl"))
    assert files
    report = ingest([folder], tmp_path / "t.parquet", fmt=FORMAT)
    assert report.rejected == 0
    assert report.records == report.rows == sum(len(_rounds(f)) for f in files)
    _check(trace_io.read(tmp_path / "t.parquet"), _expected(files))


# ---------------------------------------------------------------- synthetic rounds


def _event(kind: str, t: float, **extra: Any) -> dict[str, Any]:
    stamp = datetime.fromtimestamp(1_770_000_000 + t).astimezone().isoformat()
    return {"event_type": kind, "timestamp": stamp, **extra}


def _tool(index: int, name: str | None, start: float, stop: float) -> dict[str, Any]:
    return {
        "tool_index": index,
        "tool_name": name,
        "emitted_at": _event("x", start)["timestamp"],
        "result_at": _event("x", stop)["timestamp"],
        "tool_wall_latency_ms": round((stop - start) * 1000),
    }


def _session(sid: str = "s") -> list[dict[str, Any]]:
    base = {"session_id": sid, "prefix_tokens": 50, "output_tokens": 10}
    return [
        {
            **base,
            "round_index": 0,
            "input_tokens_total": 100,
            "timing_events": [
                _event("user_message", 0.0),
                _event("text", 2.0),
                _event("tool_call", 2.0),
                _event("tool_call", 2.0),
            ],
            "tools": [_tool(0, "a", 2.0, 5.0), _tool(1, "b", 2.0, 5.0)],
        },  # tie: lowest index
        {
            **base,
            "round_index": 1,
            "input_tokens_total": 200,
            "timing_events": [
                _event("tool_result", 5.0),
                _event("tool_result", 5.0),
                _event("tool_call", 6.0),
            ],
            "tools": [_tool(0, None, 6.0, 7.5)],
        },  # no name: "unknown"
        {
            **base,
            "round_index": 2,
            "input_tokens_total": 30,  # prefix capped at input
            "timing_events": [_event("tool_result", 7.5), _event("text", 8.0)],
            "tools": [],
        },
        {
            **base,
            "round_index": 3,
            "input_tokens_total": 300,
            "timing_events": [_event("user_message", 20.0), _event("tool_call", 21.0)],
            "tools": [_tool(0, "c", 21.0, 22.0)],
        },  # truncated session: no call follows
    ]


def _write(path: Path, rounds: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rounds))
    return path


def test_synthetic_rules(tmp_path: Path) -> None:
    src = _write(tmp_path / "s.jsonl", _session())
    ingest([src], tmp_path / "t.parquet", fmt=FORMAT)
    trace = trace_io.read(tmp_path / "t.parquet").sort("turn")
    assert trace["tool"].to_list() == ["a", "unknown", None, None]
    assert trace["tool_s"].to_list()[:2] == pytest.approx([3.0, 1.5])
    assert trace["tool_s"][3] is None
    assert trace["gap_s"].to_list()[:3] == pytest.approx([3.0, 1.5, 12.0])
    assert trace["arrival_s"].to_list() == pytest.approx([0.0, 5.0, 7.5, 20.0])
    assert trace["llm_s"].to_list() == pytest.approx([2.0, 1.0, 0.5, 1.0])
    assert trace["reused_tokens"].to_list() == [50, 50, 30, 50]


@pytest.mark.parametrize(
    ("indices", "reason"),
    [([0, 1, 3], "missing turn"), ([0, 1, 1], "duplicate"), ([1, 2, 3], "missing turn")],
)
def test_round_index_gaps_are_caught(tmp_path: Path, indices: list[int], reason: str) -> None:
    rounds = _session()[:3]
    for r, i in zip(rounds, indices, strict=True):
        r["round_index"] = i
    src = _write(tmp_path / "s.jsonl", rounds)
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "t.parquet", fmt=FORMAT)
    assert reason in info.value.reason
    assert info.value.file == str(src)


# ---------------------------------------------------------------- bad input


def _bad_file(tmp_path: Path, case: str, samples: Path) -> Path:
    rounds = _rounds(samples / FORMAT / SAMPLE)
    for r in rounds:
        r["session_id"] = "bad-" + r["session_id"]
    path = tmp_path / f"{case}.jsonl"
    first = rounds[1]  # line 2: a Claude round with one WebSearch tool
    if case == "truncated":
        text = "".join(json.dumps(r) + "\n" for r in rounds)
        path.write_text(text[: len(text) - 300])
        return path
    if case == "wrong-format":
        shutil.copy(samples / "litellm" / "tau2_retail_10__2473490a.jsonl", path)
        return path
    if case == "empty":
        path.write_text("\n\n")
        return path
    if case == "binary":
        path.write_bytes(bytes(range(256)) * 20)
        return path
    if case == "missing-tokens":
        del first["input_tokens_total"]
    elif case == "non-numeric":
        first["output_tokens"] = "lots"
    elif case == "negative-tokens":
        first["prefix_tokens"] = -1
    elif case == "negative-duration":
        first["tools"][0]["tool_wall_latency_ms"] = -5
    elif case == "non-numeric-duration":
        first["tools"][0]["tool_wall_latency_ms"] = "slow"
    elif case == "result-before-emit":
        t = first["tools"][0]
        t["emitted_at"], t["result_at"] = t["result_at"], t["emitted_at"]
    elif case == "out-of-order":
        # round 2 arrives before round 1
        rounds[2]["timing_events"][0]["timestamp"] = "2026-06-01T05:00:00.000Z"
    elif case == "bad-timestamp":
        first["timing_events"][0]["timestamp"] = "not a time"
    elif case == "missing-session":
        del first["session_id"]
    else:
        raise AssertionError(case)
    return _write(path, rounds)


BAD = {
    # (record named in strict mode, reason text)
    "truncated": ("line 19", "truncated JSON: the last line looks cut short"),
    "wrong-format": (None, "not a TraceLab round trace"),
    "empty": (None, "empty file"),
    "binary": (None, "binary data"),
    "missing-tokens": ("line 2", "missing input_tokens_total"),
    "non-numeric": ("line 2", "non-numeric output_tokens"),
    "negative-tokens": ("line 2", "negative prefix_tokens"),
    "negative-duration": ("line 2", "negative tools[0].tool_wall_latency_ms"),
    "non-numeric-duration": ("line 2", "non-numeric tools[0].tool_wall_latency_ms"),
    "result-before-emit": ("line 2", "negative tool time"),
    "out-of-order": ("line 3", "out-of-order"),
    "bad-timestamp": ("line 2", "bad timing_events[0].timestamp"),
    "missing-session": ("line 2", "missing session_id"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input(case: str, tmp_path: Path, samples: Path) -> None:
    bad = _bad_file(tmp_path, case, samples)
    good = samples / FORMAT / SAMPLE
    record, reason = BAD[case]
    assert_strict_error([bad, good], bad, FORMAT, tmp_path / "strict.parquet", record, reason)

    _, trace, rejects = ingest_skipping_bad([bad, good], tmp_path / "t.parquet", FORMAT)
    good_sessions = {r["session_id"] for r in _rounds(good)}
    kept = set(trace["program_id"].unique().to_list())
    assert good_sessions <= kept
    # the damaged session is gone whole; the other session of the bad file may stay
    damaged = "bad-" + _rounds(good)[-1 if case == "truncated" else 1]["session_id"]
    assert damaged not in kept
    assert trace.filter(pl.col("program_id").is_in(list(good_sessions))).height == len(
        _rounds(good)
    )
    assert all(r["file"] == str(bad) for r in rejects)


def test_cli(samples: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "t.parquet"
    src = samples / FORMAT / SAMPLE
    result = runner.invoke(app, ["ingest", str(src), "-o", str(out), "--format", FORMAT])
    assert result.exit_code == 0, result.output
    assert trace_io.read(out).height == len(_rounds(src))
    bad = _bad_file(tmp_path, "non-numeric", samples)
    result = runner.invoke(app, ["ingest", str(bad), "-o", str(out), "--format", FORMAT])
    assert result.exit_code == 2
    assert bad.name in result.output


def test_a_tie_goes_to_the_lowest_tool_index_and_an_instant_answer_takes_0_s(
    tmp_path: Path,
) -> None:
    """Tools of equal time listed out of their tool_index order: the lowest tool_index names
    the pause, not the first listed. A round answered at its input's timestamp took 0 s."""
    rounds = _session()
    rounds[0]["tools"].reverse()  # b (index 1) listed first
    rounds[2]["timing_events"] = [_event("tool_result", 7.5), _event("text", 7.5)]
    ingest([_write(tmp_path / "s.jsonl", rounds)], tmp_path / "t.parquet", fmt=FORMAT)
    trace = trace_io.read(tmp_path / "t.parquet").sort("turn")
    assert trace["tool"][0] == "a"
    assert trace["llm_s"][2] == 0.0
