"""The claude-code ("weka") reader: kv-cache-tester proxy traces of Claude Code sessions.

Expected values are computed here from the raw JSON with plain Python, never
copied from the reader's output.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import polars as pl
from typer.testing import CliRunner

from tests.ingest.badinput import assert_strict_errors, ingest_skipping_bad
from ttlctl.cli import app
from ttlctl.ingest.formats.claude_code import tool_hashes
from ttlctl.ingest.pipeline import ingest
from ttlctl.trace import io as trace_io

FORMAT = "claude-code"
SAMPLES_DIR = Path(__file__).resolve().parents[2] / "samples"
SAMPLE_FILES = tuple(sorted(p.name for p in (SAMPLES_DIR / "claude-code").glob("trace_*.json")))


# ---------------------------------------------------------------- independent oracle


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


def _expected(paths: list[Path]) -> dict[str, Any]:
    """Totals computed straight from the raw JSON (one program per file/sub-agent)."""
    out: dict[str, Any] = {
        "programs": 0,
        "calls": 0,
        "tools": 0,
        "input": 0,
        "output": 0,
        "reused": 0,
        "gaps": [],
        "llm": [],
        "arrivals": [],
    }

    def walk(reqs: list[dict[str, Any]], block: int, base: float) -> None:
        calls = [r for r in reqs if r.get("type") != "subagent"]
        out["programs"] += 1
        out["calls"] += len(calls)
        for i, r in enumerate(calls):
            out["input"] += int(r["in"])
            out["output"] += int(r["out"])
            out["arrivals"].append(base + float(r["t"]))
            if r.get("api_time") is not None:
                out["llm"].append(float(r["api_time"]))
            if i + 1 < len(calls):
                if r.get("stop") == "tool_use":
                    out["tools"] += 1
                nxt = calls[i + 1].get("think_time")
                if nxt is not None:
                    out["gaps"].append(float(nxt))
            if i > 0:
                a, b = calls[i - 1]["hash_ids"], r["hash_ids"]
                n = 0
                while n < min(len(a), len(b)) and a[n] == b[n]:
                    n += 1
                out["reused"] += min(n * block, int(r["in"]))
        for r in reqs:
            if r.get("type") == "subagent":
                walk(r["requests"], block, base + float(r.get("t", 0)))

    for path in paths:
        doc = json.loads(path.read_text())
        walk(doc["requests"], int(doc.get("block_size", 64)), 0.0)
    return out


def _check_against(trace: pl.DataFrame, exp: dict[str, Any]) -> None:
    assert trace["program_id"].n_unique() == exp["programs"]
    assert trace.height == exp["calls"]
    assert trace["input_tokens"].sum() == exp["input"]
    assert trace["output_tokens"].sum() == exp["output"]
    assert trace["reused_tokens"].sum() == exp["reused"]
    assert trace["tool"].drop_nulls().len() == exp["tools"]
    assert set(trace["tool"].drop_nulls().to_list()) <= {"unknown"}
    assert trace["tool_s"].null_count() == trace.height
    gaps = trace["gap_s"].drop_nulls().to_list()
    assert len(gaps) == len(exp["gaps"])
    assert math.isclose(sum(gaps), sum(exp["gaps"]), rel_tol=1e-9, abs_tol=1e-6)
    llm = trace["llm_s"].drop_nulls().to_list()
    assert len(llm) == len(exp["llm"])
    assert math.isclose(sum(llm), sum(exp["llm"]), rel_tol=1e-9, abs_tol=1e-6)
    assert sorted(trace["arrival_s"].to_list()) == sorted(exp["arrivals"])


# ---------------------------------------------------------------- samples


def test_samples(samples: Path, tmp_path: Path) -> None:
    folder = samples / FORMAT
    files = [folder / name for name in SAMPLE_FILES]
    out = tmp_path / "out.parquet"
    report = ingest([folder], out)  # auto-detection, LICENSE skipped
    assert report.formats() == {FORMAT: len(SAMPLE_FILES)} and len(SAMPLE_FILES) >= 3
    assert report.rejected == 0 and report.records == report.rows
    trace = trace_io.read(out)
    _check_against(trace, _expected(files))
    assert sorted(trace["program_id"].unique().to_list()) == sorted(
        json.loads(f.read_text())["id"] for f in files
    )


def test_sample_values_one_file(samples: Path, tmp_path: Path) -> None:
    path = samples / FORMAT / "trace_0052.json"
    raw = json.loads(path.read_text())["requests"]
    out = tmp_path / "one.parquet"
    ingest([path], out, fmt="weka")  # the alias
    trace = trace_io.read(out).sort("turn")
    assert trace.height == len(raw)
    for i, r in enumerate(raw):
        row = trace.row(i, named=True)
        assert row["turn"] == i
        assert row["arrival_s"] == float(r["t"])
        assert row["llm_s"] == _num(r.get("api_time"))
        nxt = raw[i + 1].get("think_time") if i + 1 < len(raw) else None
        assert row["gap_s"] == _num(nxt)
        last = i + 1 == len(raw)
        assert row["tool"] == (None if last or r["stop"] != "tool_use" else "unknown")
        assert row["is_last"] == last
    # a real record with no think_time leaves the previous call's gap null
    missing = [i for i, r in enumerate(raw) if i and r.get("think_time") is None]
    assert missing, "sample chosen to contain a request without think_time"
    assert trace["gap_s"][missing[0] - 1] is None


def test_shared_traces(shared_traces: Path, tmp_path: Path) -> None:
    folder = shared_traces / "claude-code"
    files = sorted(folder.glob("*.json"))
    out = tmp_path / "all.parquet"
    report = ingest([folder], out)  # auto-detection must pick claude-code for every file
    assert report.formats() == {FORMAT: len(files)}
    expected = _expected(files)
    assert report.rejected == 0
    assert report.records == report.rows == expected["calls"]
    _check_against(trace_io.read(out), expected)


# ---------------------------------------------------------------- sub-agents, strings


def _req(t: Any, n_in: Any, hashes: Any, **extra: Any) -> dict[str, Any]:
    req: dict[str, Any] = {
        "t": t,
        "type": "n",
        "in": n_in,
        "out": 10,
        "hash_ids": hashes,
        "input_types": ["text"],
        "output_types": ["text"],
        "stop": "tool_use",
        "api_time": 1.0,
        "think_time": 2.0,
    }
    req.update(extra)
    return req


def _write(path: Path, requests: list[Any], **top: Any) -> Path:
    doc = {"id": path.stem, "block_size": 64, "requests": requests, **top}
    path.write_text(json.dumps(doc))
    return path


def test_subagents_are_their_own_programs(tmp_path: Path) -> None:
    inner = {
        "t": 1.0,
        "type": "subagent",
        "requests": [
            _req(0.0, 200, [50, 51, 52, 53]),
            _req(3.0, 260, [50, 51, 52, 54, 55], stop="end_turn"),
        ],
    }
    sub = {
        "t": 20.0,
        "type": "subagent",
        "requests": [
            _req(0.0, 100, [20, 21]),
            inner,
            _req(8.0, 150, [20, 21, 22], stop="end_turn", think_time=4.5),
        ],
    }
    path = _write(
        tmp_path / "sess.json",
        [
            _req(0.0, 130, [1, 2, 3]),
            _req(10.0, 140, [1, 2, 4], think_time=7.0),
            sub,
            _req(40.0, 300, [1, 2, 4, 5, 6], stop="end_turn", think_time=11.0),
        ],
    )
    out = tmp_path / "out.parquet"
    report = ingest([path], out)
    assert report.records == report.rows == 7 and report.rejected == 0
    trace = trace_io.read(out)
    by = {
        p: trace.filter(pl.col("program_id") == p).sort("turn")
        for p in trace["program_id"].unique()
    }
    assert set(by) == {"sess", "sess/sub1", "sess/sub1/sub1"}
    assert by["sess"]["parent_program_id"].to_list() == [None] * 3
    assert by["sess/sub1"]["parent_program_id"].to_list() == ["sess", "sess"]
    assert by["sess/sub1/sub1"]["parent_program_id"].to_list() == ["sess/sub1"] * 2
    # nested t are relative to the sub-agent entry's t (as kv-cache-tester replays them)
    assert by["sess/sub1"]["arrival_s"].to_list() == [20.0, 28.0]
    assert by["sess/sub1/sub1"]["arrival_s"].to_list() == [21.0, 24.0]
    # the call that spawned a sub-agent has tool "subagent"; gaps are next think_time
    assert by["sess"]["tool"].to_list() == ["unknown", "subagent", None]
    assert by["sess"]["gap_s"].to_list() == [7.0, 11.0, None]
    assert by["sess/sub1"]["tool"].to_list() == ["subagent", None]
    assert by["sess/sub1"]["gap_s"].to_list() == [4.5, None]
    # reused: shared leading blocks x 64, capped at input
    assert by["sess"]["reused_tokens"].to_list() == [0, 128, 192]
    assert by["sess/sub1/sub1"]["reused_tokens"].to_list() == [0, 192]


def test_subagent_times_already_on_parent_clock(tmp_path: Path) -> None:
    sub = {
        "t": 20.0,
        "type": "subagent",
        "requests": [
            _req(20.5, 100, [20]),
            _req(25.0, 120, [20, 21], stop="end_turn"),
        ],
    }
    path = _write(
        tmp_path / "abs.json", [_req(0.0, 100, [1]), sub, _req(40.0, 150, [1, 2], stop="")]
    )
    out = tmp_path / "out.parquet"
    ingest([path], out, fmt=FORMAT)
    trace = trace_io.read(out).filter(pl.col("program_id") == "abs/sub1").sort("turn")
    assert trace["arrival_s"].to_list() == [20.5, 25.0]


def test_string_values_and_missing_optional_fields(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "s.json",
        [
            _req("0", "16592", [1, 2], api_time="3.5", think_time=None),
            {"t": "5.0", "type": "s", "in": "16700", "out": "7", "hash_ids": [1, 2, 3], "stop": ""},
        ],
        block_size="64",
    )
    out = tmp_path / "out.parquet"
    report = ingest([path], out, fmt=FORMAT)
    assert report.rows == 2
    trace = trace_io.read(out).sort("turn")
    assert trace["input_tokens"].to_list() == [16592, 16700]
    assert trace["llm_s"].to_list() == [3.5, None]
    assert trace["gap_s"].to_list() == [None, None]  # next call has no think_time
    assert trace["reused_tokens"].to_list() == [0, 128]


def test_program_id_falls_back_to_stem(tmp_path: Path) -> None:
    path = tmp_path / "no_id.json"
    path.write_text(json.dumps({"block_size": 64, "requests": [_req(0.0, 10, [1])]}))
    out = tmp_path / "out.parquet"
    ingest([path], out, fmt=FORMAT)
    assert trace_io.read(out)["program_id"].to_list() == ["no_id"]


# ---------------------------------------------------------------- bad input


def _good(tmp_path: Path) -> Path:
    return _write(tmp_path / "good.json", [_req(0.0, 100, [1]), _req(5.0, 120, [1, 2])])


def _bad_cases(tmp_path: Path, samples: Path) -> dict[str, tuple[Path, str, str | None]]:
    """name -> (file, reason expected in the error, record expected in the error)."""
    text = (samples / FORMAT / "trace_0165.json").read_text()
    cases: dict[str, tuple[Path, str, str | None]] = {}
    trunc = tmp_path / "trunc.json"
    trunc.write_text(text[: len(text) // 2])
    cases["truncated"] = (trunc, "truncated JSON", None)
    wrong = tmp_path / "mooncake.json"
    shutil.copy(samples / "mooncake" / "synthetic_trace_head.jsonl", wrong)
    cases["other format (JSONL)"] = (wrong, "malformed JSON", "line 2 column 1")
    traj = tmp_path / "run.traj.json"
    traj.write_text(json.dumps({"messages": [], "trajectory_format": "mini-swe-agent-1"}))
    cases["other format (object)"] = (traj, "not a claude-code trace", None)
    toplist = tmp_path / "list.json"
    toplist.write_text("[1, 2]")
    cases["top-level list"] = (toplist, "not a claude-code trace", None)
    empty = tmp_path / "empty.json"
    empty.write_text("  \n")
    cases["empty"] = (empty, "empty file", None)
    binary = tmp_path / "garbage.json"
    binary.write_bytes(b"\x00\x01\x02\xff" * 64)
    cases["binary"] = (binary, "binary data", None)
    r = [_req(0.0, 100, [1]), _req(5.0, 120, [1, 2]), _req(9.0, 130, [1, 2, 3])]
    del r[1]["in"]
    cases["missing in"] = (_write(tmp_path / "noin.json", r), "missing in", "requests[1]")
    r = [_req(0.0, 100, [1]), _req(5.0, 120, [1, 2], out="abc")]
    cases["non-numeric out"] = (
        _write(tmp_path / "nnout.json", r),
        "non-numeric out",
        "requests[1]",
    )
    r = [_req(0.0, 100, [1]), _req(5.0, 120, [1, 2], think_time=-3)]
    cases["negative think_time"] = (
        _write(tmp_path / "neg.json", r),
        "negative think_time",
        "requests[1]",
    )
    r = [_req(0.0, 100, [1]), _req(5.0, 120, [1, 2], api_time="slow")]
    cases["non-numeric api_time"] = (
        _write(tmp_path / "nnapi.json", r),
        "non-numeric api_time",
        "requests[1]",
    )
    r = [_req(0.0, 100, [1]), _req(5.0, -4, [1, 2])]
    cases["negative in"] = (_write(tmp_path / "negin.json", r), "negative in", "requests[1]")
    r = [_req(10.0, 100, [1]), _req(5.0, 120, [1, 2])]
    cases["out of order"] = (
        _write(tmp_path / "order.json", r),
        "out-of-order turns",
        "requests[1]",
    )
    odd: list[Any] = [_req(0.0, 100, [1]), "oops"]
    cases["request not an object"] = (
        _write(tmp_path / "notobj.json", odd),
        "not a JSON object",
        "requests[1]",
    )
    r = [_req(0.0, 100, [1]), _req(5.0, 120, {"a": 1})]
    cases["hash_ids not a list"] = (
        _write(tmp_path / "hash.json", r),
        "invalid hash_ids",
        "requests[1]",
    )
    r = [_req(0.0, 100, [1]), {"t": 3.0, "type": "subagent"}, _req(9.0, 130, [1, 2])]
    cases["subagent without requests"] = (
        _write(tmp_path / "sub.json", r),
        "invalid subagent",
        "requests[1]",
    )
    bs = _write(tmp_path / "bs.json", [_req(0.0, 100, [1])], block_size="big")
    cases["bad block_size"] = (bs, "non-numeric block_size", "block_size")
    zero = _write(tmp_path / "bs0.json", [_req(0.0, 100, [1])], block_size=0)
    cases["block_size 0"] = (zero, "invalid block_size: 0", "block_size")
    return cases


def test_bad_input_strict(tmp_path: Path, samples: Path) -> None:
    assert_strict_errors(_bad_cases(tmp_path, samples), FORMAT, tmp_path)


def test_bad_input_skip_bad(tmp_path: Path, samples: Path) -> None:
    good = _good(tmp_path)
    for name, (path, reason, _record) in _bad_cases(tmp_path, samples).items():
        report, trace, rejects = ingest_skipping_bad(
            [good, path], tmp_path / "skip.parquet", FORMAT, name
        )
        assert "good" in trace["program_id"].to_list(), name
        assert report.rows == trace.height
        assert any(reason in r["reason"] for r in rejects), (name, rejects)
        if path.name in ("noin.json", "nnout.json", "neg.json", "order.json"):
            # a bad record rejects its whole program, every record accounted for
            n = len(json.loads(path.read_text())["requests"])
            assert report.rejected == n and report.rows == 2, name


# ---------------------------------------------------------------- CLI


def test_cli(samples: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "cli.parquet"
    src = samples / FORMAT / "trace_0165.json"
    result = runner.invoke(app, ["ingest", str(src), "-o", str(out), "--format", FORMAT])
    assert result.exit_code == 0, result.output
    assert trace_io.read(out).height == len(json.loads(src.read_text())["requests"])

    bad = tmp_path / "broken_session.json"
    bad.write_text(src.read_text()[:500])
    result = runner.invoke(app, ["ingest", str(bad), "-o", str(out), "--format", "weka"])
    assert result.exit_code == 2
    assert "broken_session.json" in result.output


def test_tool_definitions_of_one_block_and_reuse_within_the_prompt(tmp_path: Path) -> None:
    """tool_tokens of exactly one block are one shared block on each top-level call; a call
    whose blocks all repeat the previous call's, its prompt ending inside the last one,
    reuses its whole prompt, no more."""
    requests = [_req(0.0, 100, [1, 2]), _req(5.0, 100, [1, 2], stop="end_turn")]
    out = tmp_path / "out.parquet"
    ingest([_write(tmp_path / "t.json", requests, tool_tokens=64)], out, fmt=FORMAT)
    trace = trace_io.read(out).sort("turn")
    assert trace["reused_tokens"].to_list() == [0, 100]
    assert [len(h) for h in trace["prefix_hashes"].to_list()] == [1, 1]
    assert trace["prefix_block_tokens"].to_list() == [64, 64]


def test_a_tool_set_of_more_blocks_than_any_call_is_hashed_as_far_as_the_calls_go(
    tmp_path: Path,
) -> None:
    """tool_tokens of 64e9 (a billion blocks, which ingest used to hash every one of, never
    ending): each call gets the blocks of its own prompt, the same hashes as a smaller
    count would name by the same size."""
    tools = 64 * 10**9
    requests = [_req(0.0, 100, [1, 2]), _req(5.0, 200, [1, 2, 3, 4], stop="end_turn")]
    out = tmp_path / "out.parquet"
    ingest([_write(tmp_path / "t.json", requests, tool_tokens=tools)], out, fmt=FORMAT)
    hashes = trace_io.read(out).sort("turn")["prefix_hashes"].to_list()
    assert hashes == [tool_hashes(tools, 64, 1), tool_hashes(tools, 64, 3)]
    assert tool_hashes(tools, 64, 3)[:1] == tool_hashes(tools, 64, 1)
    assert tool_hashes(1000, 64, 3) == tool_hashes(1000, 64)[:3]
