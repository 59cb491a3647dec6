"""The mooncake reader: Mooncake FAST'25 JSONL, programs inferred from hash_ids prefixes.

Expected values come from the raw lines: the program partition from a brute-force
scan over all open programs written here (the reader uses a dict index), the
rest from plain sums.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import polars as pl
from typer.testing import CliRunner

from tests.ingest.badinput import assert_strict_errors, ingest_skipping_bad
from ttlctl.cli import app
from ttlctl.ingest.pipeline import ingest
from ttlctl.trace import io as trace_io

FORMAT = "mooncake"
SAMPLE = Path("mooncake") / "synthetic_trace_head.jsonl"
BLOCK = 512


# ---------------------------------------------------------------- independent oracle


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _brute_programs(lines: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The documented heuristic by scanning every open program (no index)."""
    order = sorted(range(len(lines)), key=lambda i: (lines[i]["timestamp"], i))
    programs: list[dict[str, Any]] = []
    by_first: dict[Any, list[dict[str, Any]]] = {}  # only prunes keys that cannot match
    for seq, i in enumerate(order):
        req = lines[i]
        h = req["hash_ids"]
        best = None
        for prog in by_first.get(h[0], []) if h else []:
            last = prog["members"][-1]
            key = last["hash_ids"][:-1]
            if not key or h[: len(key)] != key or req["input_length"] <= last["input_length"]:
                continue
            rank = (len(key), prog["seq"])
            if best is None or rank > best[0]:
                best = (rank, prog)
        if best is None:
            prog = {"members": [], "seq": -1}
            programs.append(prog)
            if h:
                by_first.setdefault(h[0], []).append(prog)
        else:
            prog = best[1]
        prog["members"].append(req)
        prog["seq"] = seq
    return [p["members"] for p in programs]


def _shared(a: list[Any], b: list[Any]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _signature(calls: list[tuple[float, int, int]]) -> tuple[tuple[float, int, int], ...]:
    return tuple(calls)


def _trace_signatures(trace: pl.DataFrame) -> list[tuple[tuple[float, int, int], ...]]:
    out = []
    for _pid, group in trace.sort("program_id", "turn").group_by("program_id", maintain_order=True):
        out.append(
            _signature(
                list(
                    zip(
                        group["arrival_s"],
                        group["input_tokens"],
                        group["output_tokens"],
                        strict=True,
                    )
                )
            )
        )
    return sorted(out)


def _check_against(trace: pl.DataFrame, lines: list[dict[str, Any]]) -> None:
    programs = _brute_programs(lines)
    assert trace.height == len(lines)  # every line is exactly one call
    assert trace["program_id"].n_unique() == len(programs)
    expected = sorted(
        _signature(
            [(m["timestamp"] / 1000, m["input_length"], m["output_length"]) for m in members]
        )
        for members in programs
    )
    assert _trace_signatures(trace) == expected
    assert trace["input_tokens"].sum() == sum(x["input_length"] for x in lines)
    assert trace["output_tokens"].sum() == sum(x["output_length"] for x in lines)
    continuations = sum(len(m) - 1 for m in programs)
    assert trace["tool"].drop_nulls().len() == continuations
    assert trace["gap_s"].drop_nulls().len() == continuations
    gap_sum = sum(
        (b["timestamp"] - a["timestamp"]) / 1000 for m in programs for a, b in itertools.pairwise(m)
    )
    assert math.isclose(trace["gap_s"].sum(), gap_sum, rel_tol=1e-9, abs_tol=1e-6)
    reused = sum(
        min(_shared(a["hash_ids"], b["hash_ids"]) * BLOCK, b["input_length"])
        for m in programs
        for a, b in itertools.pairwise(m)
    )
    assert trace["reused_tokens"].sum() == reused
    assert trace["tool_s"].null_count() == trace["llm_s"].null_count() == trace.height


def _check_invariants(trace: pl.DataFrame, lines: list[dict[str, Any]]) -> None:
    """Each program's calls grow, and each continues the previous call's chain."""
    by_call = {(x["timestamp"] / 1000, x["input_length"], x["output_length"]): x for x in lines}
    for _pid, group in trace.sort("turn").group_by("program_id"):
        calls = [
            by_call[c]
            for c in zip(
                group["arrival_s"], group["input_tokens"], group["output_tokens"], strict=True
            )
        ]
        for a, b in itertools.pairwise(calls):
            key = a["hash_ids"][:-1]
            assert key and b["hash_ids"][: len(key)] == key
            assert b["input_length"] > a["input_length"]
            assert b["timestamp"] >= a["timestamp"]


# ---------------------------------------------------------------- samples, shared


def test_sample(samples: Path, tmp_path: Path) -> None:
    path = samples / SAMPLE
    out = tmp_path / "out.parquet"
    report = ingest([path.parent], out)  # auto-detection; LICENSE skipped
    assert report.formats() == {FORMAT: 1}
    lines = _lines(path)
    assert report.records == report.rows == len(lines) and report.rejected == 0
    trace = trace_io.read(out)
    _check_against(trace, lines)
    _check_invariants(trace, lines)
    assert all(p.startswith("synthetic_trace_head-mooncake-") for p in trace["program_id"].unique())


def test_shared_trace(shared_traces: Path, tmp_path: Path) -> None:
    path = shared_traces / "mooncake" / "synthetic_trace.jsonl"
    out = tmp_path / "all.parquet"
    report = ingest([path], out, fmt=FORMAT)
    lines = _lines(path)
    assert report.records == report.rows == len(lines) and report.rejected == 0
    trace = trace_io.read(out)
    _check_against(trace, lines)
    _check_invariants(trace, lines)


# ---------------------------------------------------------------- the heuristic, by hand


def _line(ts: Any, n_in: Any, hashes: Any, out: Any = 10, **extra: Any) -> str:
    row = {"timestamp": ts, "input_length": n_in, "output_length": out, "hash_ids": hashes}
    row.update(extra)
    return json.dumps(row)


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _programs_by_input(trace: pl.DataFrame) -> list[list[int]]:
    groups = trace.sort("turn").group_by("program_id", maintain_order=True).agg("input_tokens")
    return sorted(groups["input_tokens"].to_list())


def test_known_sessions(tmp_path: Path) -> None:
    # S = 2-block system prompt shared by sessions A and B; they must stay apart.
    # Inputs are unique so each call names itself. Lines are not in time order.
    lines = [
        _line(0, 1800, [1, 2, 10, 11]),  # A turn 0
        _line(500, 1700, [1, 2, 20, 21]),  # B turn 0 (same system prompt)
        _line(9000, 3000, [1, 2, 10, 12, 13, 14]),  # A turn 1 (A0 less last block)
        _line(4000, 2900, [1, 2, 20, 22, 23, 24]),  # B turn 1 (before A1 in time)
        _line(7000, 1100, [1, 2, 30]),  # C: only the system prompt shared
        _line(12000, 4100, [1, 2, 10, 12, 13, 15, 16, 17, 18]),  # A turn 2
        _line(13000, 2950, [1, 2, 20, 22, 23, 25]),  # B turn 2 (a short follow-up)
        _line(14000, 5000, [7, 8, 9, 40, 41, 42, 43, 44, 45, 46]),  # D alone
    ]
    path = _write(tmp_path / "hand.jsonl", lines)
    out = tmp_path / "out.parquet"
    report = ingest([path], out, fmt=FORMAT)
    assert report.rows == 8
    trace = trace_io.read(out)
    assert _programs_by_input(trace) == sorted(
        [
            [1800, 3000, 4100],
            [1700, 2900, 2950],
            [1100],
            [5000],
        ]
    )
    a = trace.filter(pl.col("input_tokens").is_in([1800, 3000, 4100])).sort("turn")
    assert a["arrival_s"].to_list() == [0.0, 9.0, 12.0]
    assert a["gap_s"].to_list() == [9.0, 3.0, None]  # next arrival - this arrival
    assert a["tool"].to_list() == ["unknown", "unknown", None]
    assert a["reused_tokens"].to_list() == [0, 3 * BLOCK, 5 * BLOCK]
    assert a["program_id"][0].startswith("hand-mooncake-")
    single = trace.filter(pl.col("input_tokens") == 1100)
    assert single["tool"].to_list() == [None] and single["gap_s"].to_list() == [None]


def test_not_longer_is_not_a_continuation(tmp_path: Path) -> None:
    # Same document, another question of the same length: a new program.
    path = _write(
        tmp_path / "q.jsonl",
        [
            _line(0, 2000, [1, 2, 3, 4]),
            _line(10, 2000, [1, 2, 3, 5]),
            _line(20, 1500, [1, 2, 3]),
        ],
    )
    out = tmp_path / "out.parquet"
    ingest([path], out, fmt=FORMAT)
    assert _programs_by_input(trace_io.read(out)) == [[1500], [2000], [2000]]


def test_longest_key_then_most_recent(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "tie.jsonl",
        [
            _line(0, 1000, [1, 2]),  # P starts; key [1]
            _line(1, 2000, [1, 2, 3, 4]),  # continues P; P's key becomes [1,2,3]
            _line(2, 1100, [1, 9]),  # matches no key -> R, key [1]
            _line(3, 1200, [1, 8]),  # continues R (key [1], longer)
            _line(4, 5000, [1, 2, 3, 4, 5, 6]),  # matches P's [1,2,3] and R's [1]: longest wins
        ],
    )
    out = tmp_path / "out.parquet"
    ingest([path], out, fmt=FORMAT)
    assert _programs_by_input(trace_io.read(out)) == [[1000, 2000, 5000], [1100, 1200]]

    # two open programs with the same key: the most recently active one continues
    path = _write(
        tmp_path / "recent.jsonl",
        [
            _line(0, 1000, [1, 2, 3]),  # X, key [1,2]
            _line(1, 900, [1, 2, 4]),  # not longer than X -> Y, key [1,2]
            _line(2, 1500, [1, 2, 5, 6]),  # both match; Y is the most recent
        ],
    )
    out = tmp_path / "out2.parquet"
    ingest([path], out, fmt=FORMAT)
    assert _programs_by_input(trace_io.read(out)) == [[900, 1500], [1000]]


def test_sessions_and_delay(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "sess.jsonl",
        [
            json.dumps(
                {
                    "session_id": "a",
                    "timestamp": 0,
                    "input_length": 100,
                    "output_length": 5,
                    "hash_ids": [1],
                }
            ),
            json.dumps(
                {
                    "session_id": "b",
                    "timestamp": 50,
                    "input_length": 90,
                    "output_length": 5,
                    "hash_ids": [7],
                }
            ),
            json.dumps(
                {
                    "session_id": "a",
                    "delay": 2500,
                    "input_length": "700",
                    "output_length": 5,
                    "hash_ids": [1, 2],
                }
            ),
            json.dumps(
                {
                    "session_id": "a",
                    "timestamp": 9000,
                    "input_length": 900,
                    "output_length": 5,
                    "hash_ids": [1, 2, 3],
                }
            ),
            json.dumps(
                {
                    "session_id": "b",
                    "timestamp": 1050,
                    "delay_ms": 400,
                    "input_length": 95,
                    "output_length": 5,
                }
            ),
            _line(100, 60, [5]),  # no session: its own inferred program
        ],
    )
    out = tmp_path / "out.parquet"
    report = ingest([path], out, fmt=FORMAT)
    assert report.rows == 6
    trace = trace_io.read(out)
    a = trace.filter(pl.col("program_id") == "sess-a").sort("turn")
    assert a["input_tokens"].to_list() == [100, 700, 900]
    assert a["arrival_s"].to_list() == [0.0, None, 9.0]
    assert a["gap_s"].to_list() == [2.5, None, None]  # no delay, no arrival to diff
    assert a["tool"].to_list() == ["unknown", "unknown", None]
    assert a["reused_tokens"].to_list() == [0, 512, 900]
    b = trace.filter(pl.col("program_id") == "sess-b").sort("turn")
    assert b["gap_s"].to_list() == [0.4, None]
    assert b["reused_tokens"].to_list() == [0, None]
    assert trace.filter(pl.col("program_id").str.contains("mooncake")).height == 1


# ---------------------------------------------------------------- bad input


def _bad_cases(tmp_path: Path, samples: Path) -> dict[str, tuple[Path, str, str | None]]:
    """name -> (file, reason in the error, record in the error)."""
    good = [_line(0, 1000, [1, 2]), _line(10, 1600, [1, 2, 3, 4]), _line(20, 700, [9, 8])]
    cases: dict[str, tuple[Path, str, str | None]] = {}
    text = "\n".join(good)
    cases["truncated"] = (
        _write(tmp_path / "trunc.jsonl", [text[:-12]]),
        "malformed JSON",
        "line 3",
    )
    cases["other format"] = (
        samples / "claude-code" / "trace_0165.json",
        "not a mooncake record",
        "line 1",
    )
    cases["pretty JSON"] = (
        _write(tmp_path / "pretty.jsonl", ["{", ' "a": 1', "}"]),
        "malformed JSON",
        "line 1",
    )
    cases["not an object"] = (
        _write(tmp_path / "list.jsonl", ["[1, 2]"]),
        "not a JSON object",
        "line 1",
    )
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    cases["empty"] = (empty, "empty file", None)
    binary = tmp_path / "garbage.jsonl"
    binary.write_bytes(bytes(range(256)) * 4)
    cases["binary"] = (binary, "binary data", None)
    cases["missing input_length"] = (
        _write(
            tmp_path / "noin.jsonl",
            [good[0], json.dumps({"timestamp": 5, "hash_ids": [1], "output_length": 3})],
        ),
        "missing input_length",
        "line 2",
    )
    cases["missing timestamp"] = (
        _write(
            tmp_path / "nots.jsonl",
            [json.dumps({"input_length": 5, "output_length": 3, "hash_ids": [1]})],
        ),
        "missing timestamp",
        "line 1",
    )
    cases["non-numeric output_length"] = (
        _write(tmp_path / "nnout.jsonl", [good[0], _line(5, 10, [3], out="abc")]),
        "non-numeric output_length",
        "line 2",
    )
    cases["negative input_length"] = (
        _write(tmp_path / "negin.jsonl", [_line(5, -10, [3])]),
        "negative input_length",
        "line 1",
    )
    cases["negative timestamp"] = (
        _write(tmp_path / "negts.jsonl", [_line(-5, 10, [3])]),
        "negative timestamp",
        "line 1",
    )
    cases["bad hash_ids"] = (
        _write(tmp_path / "hash.jsonl", [_line(5, 10, "abc")]),
        "invalid hash_ids",
        "line 1",
    )
    sess = [
        json.dumps({"session_id": 1, "timestamp": 5000, "input_length": 10, "output_length": 1}),
        json.dumps({"session_id": 1, "timestamp": 1000, "input_length": 20, "output_length": 1}),
        json.dumps({"session_id": 1, "timestamp": 9000, "input_length": 30, "output_length": 1}),
    ]
    cases["out-of-order session"] = (
        _write(tmp_path / "order.jsonl", sess),
        "out-of-order turns",
        "line 2",
    )
    neg = [
        sess[0],
        json.dumps({"session_id": 1, "delay": -4, "input_length": 20, "output_length": 1}),
    ]
    cases["negative delay"] = (_write(tmp_path / "negdelay.jsonl", neg), "negative delay", "line 2")
    nn = [
        sess[0],
        json.dumps({"session_id": 1, "delay_ms": "soon", "input_length": 20, "output_length": 1}),
    ]
    cases["non-numeric delay_ms"] = (
        _write(tmp_path / "nndelay.jsonl", nn),
        "non-numeric delay_ms",
        "line 2",
    )
    return cases


def test_bad_input_strict(tmp_path: Path, samples: Path) -> None:
    assert_strict_errors(_bad_cases(tmp_path, samples), FORMAT, tmp_path)


def test_bad_input_skip_bad(tmp_path: Path, samples: Path) -> None:
    good = _write(tmp_path / "good.jsonl", [_line(0, 1000, [1, 2]), _line(10, 1600, [1, 2, 3])])
    for name, (path, reason, _record) in _bad_cases(tmp_path, samples).items():
        report, trace, rejects = ingest_skipping_bad(
            [good, path], tmp_path / "skip.parquet", FORMAT, name
        )
        assert trace.height == report.rows
        assert trace.filter(pl.col("program_id").str.starts_with("good-")).height == 2, name
        assert any(reason in r["reason"] for r in rejects), (name, rejects)
    # a bad line of an inferred program is rejected alone; the other lines stay
    path, _, _ = _bad_cases(tmp_path, samples)["truncated"]
    report = ingest([path], tmp_path / "t.parquet", fmt=FORMAT, skip_bad=True)
    assert (report.rows, report.rejected, report.records) == (2, 1, 3)
    # a bad line of a session rejects that whole session
    path, _, _ = _bad_cases(tmp_path, samples)["out-of-order session"]
    report = ingest([path], tmp_path / "o.parquet", fmt=FORMAT, skip_bad=True, allow_empty=True)
    assert (report.rows, report.rejected, report.records) == (0, 3, 3)


# ---------------------------------------------------------------- CLI


def test_cli(samples: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "cli.parquet"
    src = samples / SAMPLE
    result = runner.invoke(app, ["ingest", str(src), "-o", str(out), "--format", FORMAT])
    assert result.exit_code == 0, result.output
    assert trace_io.read(out).height == len(_lines(src))

    bad = tmp_path / "cut_trace.jsonl"
    bad.write_text(src.read_text()[:700])
    result = runner.invoke(app, ["ingest", str(bad), "-o", str(out), "--format", FORMAT])
    assert result.exit_code == 2
    assert "cut_trace.jsonl" in result.output


def test_a_line_that_does_not_parse_but_names_its_session_rejects_it(tmp_path: Path) -> None:
    """A session's line cut short after its ``session_id``: the session is rejected whole,
    not kept with a hole where the call was (its pause spanning the lost call); a session
    without a broken line stays. Regression (a second reader's find)."""

    def call(session: str, ts: int, n_in: int) -> str:
        return json.dumps({"session_id": session, "timestamp": ts, "input_length": n_in,
                           "output_length": 5, "hash_ids": [ts]})  # fmt: skip

    lines = [call("a", 0, 100), call("b", 500, 90), call("a", 1000, 200), call("a", 3000, 300)]
    lines[2] = lines[2][: lines[2].index('"input_length"')]
    _, trace, rejects = ingest_skipping_bad(
        [_write(tmp_path / "s.jsonl", lines)], tmp_path / "t.parquet", "mooncake"
    )
    assert trace["program_id"].unique().to_list() == ["s-b"]
    reasons = {r["record"]: r["reason"] for r in rejects}
    assert reasons["line 3"].startswith("malformed JSON")
    assert (
        reasons["line 1"]
        == reasons["line 4"]
        == ("rejected with its program: s-a has a bad record (line 3)")
    )


def test_equal_timestamps_are_taken_in_file_order(tmp_path: Path) -> None:
    """Lines of one timestamp are taken as the file orders them: the second continues the
    first's program (it is longer and its hash_ids extend the first's key), not the reverse."""
    path = _write(tmp_path / "tie.jsonl", [_line(0, 600, [1, 2]), _line(0, 1100, [1, 2, 3])])
    out = tmp_path / "out.parquet"
    ingest([path], out, fmt=FORMAT)
    assert _programs_by_input(trace_io.read(out)) == [[600, 1100]]


def test_a_hash_id_past_64_bits_is_kept_by_its_digest(tmp_path: Path) -> None:
    """A shared integer hash id of 2**63, one past a 64-bit integer, is kept by its digest
    (as a string id is); the largest that fits, 2**63 - 1, as it is."""
    big, top = 1 << 63, (1 << 63) - 1
    path = _write(
        tmp_path / "big.jsonl", [_line(0, 1100, [big, top, 5]), _line(9, 1100, [big, top, 6])]
    )
    out = tmp_path / "out.parquet"
    ingest([path], out, fmt=FORMAT)
    hashes = trace_io.read(out)["prefix_hashes"].to_list()
    assert hashes[0] == hashes[1]
    assert hashes[0][1] == top and hashes[0][0] not in (big, top)
    assert -(1 << 63) <= hashes[0][0] < (1 << 63)


def test_tool_events_name_a_tool_only_when_every_event_names_it(tmp_path: Path) -> None:
    """An event naming no tool_class beside one naming grep: the pause is an unknown tool,
    not grep (the events do not all name one)."""
    first = {"session_id": "s", "timestamp": 0, "input_length": 100, "output_length": 10}
    events = [{"tool_class": "grep"}, {"duration_ms": 5}]
    second = first | {"timestamp": 1000, "input_length": 200, "tool_events": events}
    path = _write(tmp_path / "t.jsonl", [json.dumps(first), json.dumps(second)])
    ingest([path], tmp_path / "t.parquet", fmt=FORMAT)
    assert trace_io.read(tmp_path / "t.parquet").sort("turn")["tool"].to_list() == ["unknown", None]
