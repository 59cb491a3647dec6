"""`ttlctl export`: Mooncake JSONL that ttlctl (and other replayers) read back."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from ttlctl import export
from ttlctl.cli import app
from ttlctl.errors import ConfigError
from ttlctl.ingest.pipeline import ingest
from ttlctl.trace import io as trace_io


def _trace(path: Path) -> Path:
    rows = []
    for p, n in (("a", 3), ("b", 2)):
        for t in range(n):
            last = t == n - 1
            rows.append(
                {
                    "program_id": p,
                    "turn": t,
                    "arrival_s": 1.5 if t == 0 else None,
                    "input_tokens": 1000 + 1200 * t,
                    "output_tokens": 100,
                    "reused_tokens": None if t == 0 else 1000 + 1200 * (t - 1) + 100,
                    "tool": None if last else "grep",
                    "tool_s": None if last else 0.25,
                    "gap_s": None if last else 0.3,
                    "is_last": last,
                }
            )
    trace_io.write(pl.DataFrame(rows).lazy(), path)
    return path


def test_mooncake_round_trip(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.parquet")
    out = tmp_path / "x.jsonl"
    res = CliRunner().invoke(
        app, ["export", str(trace), "--to", "mooncake", "-o", str(out), "--block-size", "64"]
    )
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 5
    a0, a1, a2 = lines[0], lines[1], lines[2]
    assert a0["timestamp"] == 1500 and "delay" not in a0 and a1["delay"] == 250
    # a1 repeats a0's 1,000-token prompt and 100-token output: a0's 15 full prompt
    # blocks, then 2 blocks of a0's stream that a0's prompt never had (its partial
    # block changed once the output filled it)
    assert len(a0["hash_ids"]) == 16 and len(a1["hash_ids"]) == 35
    assert a1["hash_ids"][:15] == a0["hash_ids"][:15]
    assert not set(a1["hash_ids"][15:]) & set(a0["hash_ids"])
    # a2 repeats a1's 2,200-token prompt + 100 output: 34 of a1's blocks, then new ones
    assert a2["hash_ids"][:34] == a1["hash_ids"][:34]
    assert not set(a2["hash_ids"][34:]) & set(a1["hash_ids"])
    assert not set(lines[3]["hash_ids"]) & set(a0["hash_ids"])  # programs never share
    # ttlctl's own mooncake reader takes it back: same programs, calls and tokens
    report = ingest([out], tmp_path / "back.parquet", fmt="mooncake")
    back = trace_io.read(tmp_path / "back.parquet")
    assert report.rows == 5 and back["program_id"].n_unique() == 2
    assert back["input_tokens"].sum() == trace_io.read(trace)["input_tokens"].sum()


def test_agentic_mooncake_fields(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.parquet")
    out = tmp_path / "x.jsonl"
    res = CliRunner().invoke(
        app, ["export", str(trace), "--to", "agentic-mooncake", "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[1]["request_id"] == "a:1" and lines[1]["wait_for"] == "a:0"
    assert lines[1]["tool_wait_ms"] == 250
    assert lines[1]["tool_events"] == [{"tool_class": "grep", "duration_ms": 250}]
    res = CliRunner().invoke(app, ["export", str(trace), "--to", "nope", "-o", str(out)])
    assert res.exit_code == 2 and "unknown export format" in res.output


def test_agentic_mooncake_round_trips_the_tools(tmp_path: Path) -> None:
    """Regression: agentic Mooncake exported then ingested turned every tool into "unknown"
    and dropped tool_s (the reader ignored tool_events). The tool and its duration come
    back; the plain Mooncake export, which carries no tool, still reads as "unknown"."""
    trace = _trace(tmp_path / "t.parquet")
    frame = trace_io.read(trace).with_columns(  # program b runs pytest, a grep
        pl.when((pl.col("program_id") == "b") & pl.col("tool").is_not_null())
        .then(pl.lit("pytest"))
        .otherwise(pl.col("tool"))
        .alias("tool")
    )
    trace_io.write(frame.lazy(), trace)
    for fmt, tools, timed in (
        (
            "agentic-mooncake",
            ["grep", "grep", None, "pytest", None],
            [0.25, 0.25, None, 0.25, None],
        ),
        ("mooncake", ["unknown", "unknown", None, "unknown", None], [None] * 5),
    ):
        out = tmp_path / f"{fmt}.jsonl"
        res = CliRunner().invoke(app, ["export", str(trace), "--to", fmt, "-o", str(out)])
        assert res.exit_code == 0, res.output
        ingest([out], tmp_path / f"{fmt}.parquet", fmt="mooncake")
        back = trace_io.read(tmp_path / f"{fmt}.parquet").sort("program_id", "turn")
        assert back["tool"].to_list() == tools, fmt
        assert back["tool_s"].to_list() == timed, fmt
        # the pause comes back as the line's delay: tool_s where recorded (gap_s 0.3 is not)
        assert back["gap_s"].to_list() == [0.25, 0.25, None, 0.25, None], fmt


def test_a_call_no_tool_followed_round_trips_as_no_tool(tmp_path: Path) -> None:
    """A call followed by a person's message, not a tool (tool null, gap_s its pause):
    agentic Mooncake says so with an empty ``tool_events`` and reads back as no tool, where
    it came back as "unknown" (a tool fit would then model); a line without the field is
    still an unknown pause."""
    trace = _trace(tmp_path / "t.parquet")
    frame = trace_io.read(trace).with_columns(  # a person speaks after a's turn 1
        pl.when((pl.col("program_id") == "a") & (pl.col("turn") == 1))
        .then(pl.lit(None, dtype=pl.String))
        .otherwise(pl.col("tool"))
        .alias("tool"),
        pl.when((pl.col("program_id") == "a") & (pl.col("turn") == 1))
        .then(pl.lit(None, dtype=pl.Float64))
        .otherwise(pl.col("tool_s"))
        .alias("tool_s"),
    )
    trace_io.write(frame.lazy(), trace)
    out = tmp_path / "x.jsonl"
    res = CliRunner().invoke(
        app, ["export", str(trace), "--to", "agentic-mooncake", "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [line.get("tool_events") for line in lines[:3]] == [
        None,
        [{"tool_class": "grep", "duration_ms": 250}],
        [],
    ]
    assert lines[2]["tool_wait_ms"] == 300  # the person's pause: gap_s
    ingest([out], tmp_path / "back.parquet", fmt="mooncake")
    back = trace_io.read(tmp_path / "back.parquet").sort("program_id", "turn")
    assert back["tool"].to_list() == ["grep", None, None, "grep", None]
    assert back["gap_s"].to_list()[:2] == [0.25, 0.3]
    del lines[2]["tool_events"]  # as a writer that leaves the field out: unknown
    out.write_text("".join(json.dumps(x) + "\n" for x in lines))
    ingest([out], tmp_path / "unsaid.parquet", fmt="mooncake")
    unsaid = trace_io.read(tmp_path / "unsaid.parquet").sort("program_id", "turn")
    assert unsaid["tool"].to_list() == ["grep", "unknown", None, "grep", None]


def test_several_tool_events_give_one_tool_only_when_they_agree(tmp_path: Path) -> None:
    """Several events before a request: their tool when they all name one, no duration
    (events may overlap); a malformed tool_events is the line's reject, named."""
    line = {"session_id": "s", "input_length": 100, "output_length": 10}
    events = {
        "x": [{"tool_class": "grep", "duration_ms": 5}, {"tool_class": "grep"}],
        "y": [{"tool_class": "grep", "duration_ms": 5}, {"tool_class": "sed"}],
    }
    path = tmp_path / "t.jsonl"
    rows = []
    for session, evs in events.items():
        rows.append(line | {"session_id": session})
        rows.append(line | {"session_id": session, "input_length": 200, "tool_events": evs})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ingest([path], tmp_path / "t.parquet", fmt="mooncake")
    back = trace_io.read(tmp_path / "t.parquet").sort("program_id", "turn")
    assert back["tool"].to_list() == ["grep", None, "unknown", None]
    assert back["tool_s"].to_list() == [None] * 4
    path.write_text(json.dumps(line | {"tool_events": {"tool_class": "grep"}}) + "\n")
    res = CliRunner().invoke(app, ["ingest", str(path), "-o", str(tmp_path / "bad.parquet")])
    assert res.exit_code == 2 and "invalid tool_events: not a list of objects" in res.output


def test_trace_block_size_is_block_size_by_dynamos_name(tmp_path: Path) -> None:
    """`--trace-block-size 64` (Dynamo's flag) writes what `--block-size 64` writes: 64-token
    hash_ids blocks, not the default 512."""
    trace = _trace(tmp_path / "t.parquet")
    written = {}
    for flag in ("--block-size", "--trace-block-size"):
        out = tmp_path / f"{flag.strip('-')}.jsonl"
        res = CliRunner().invoke(
            app, ["export", str(trace), "--to", "mooncake", "-o", str(out), flag, "64"]
        )
        assert res.exit_code == 0, res.output
        assert "64-token blocks" in res.output
        written[flag] = out.read_text()
    assert written["--trace-block-size"] == written["--block-size"]
    assert len(json.loads(written["--block-size"].splitlines()[0])["hash_ids"]) == 16


def test_hash_ids_keep_the_reused_full_blocks_in_turn_order() -> None:
    """Blocks of 10 tokens, the calls given out of turn order: each call keeps the ids of
    the full blocks its reused tokens cover (a null reused_tokens: the previous prompt and
    output), of the previous call's prompt then output, and the pause before it (a
    person's gap_s when no tool ran) as its delay."""
    row = {"program_id": "z", "arrival_s": None, "prefix_hashes": None}
    frame = pl.DataFrame(
        [
            row | {"turn": 2, "input_tokens": 60, "output_tokens": 1, "reused_tokens": 25,
                   "tool": None, "tool_s": None, "gap_s": None},
            row | {"turn": 0, "input_tokens": 23, "output_tokens": 20, "reused_tokens": None,
                   "tool": None, "tool_s": None, "gap_s": 2.0, "arrival_s": 0.0},
            row | {"turn": 1, "input_tokens": 45, "output_tokens": 5, "reused_tokens": None,
                   "tool": "grep", "tool_s": 0.5, "gap_s": 0.7},
        ]
    )  # fmt: skip
    lines = export.rows(frame, "mooncake", block_size=10)
    # z:0's prompt: 0 1 2 (a partial third); its stream: 0 1, then 3 4 for its output
    # z:1 reuses 23 + 20 = 43 tokens: 4 blocks of the stream; z:2 reuses 25: 2 blocks
    assert [line["hash_ids"] for line in lines] == [
        [0, 1, 2], [0, 1, 3, 4, 5], [0, 1, 7, 8, 9, 10],
    ]  # fmt: skip
    assert [line.get("delay") for line in lines] == [None, 2000, 500]
    assert lines[0]["timestamp"] == 0 and "timestamp" not in lines[1]
    for bad in (0, -64):
        with pytest.raises(ConfigError, match="--block-size must be positive"):
            export.check("mooncake", bad)


def test_shared_blocks_lead_and_a_program_keeps_its_own_only_under_the_same_keys() -> None:
    """A shared prefix of two 10-token blocks: the same leading ids in every program; a
    call keeps its program's ids after them only when the call before had the same
    shared blocks; a prompt shorter than the prefix takes only the shared blocks it holds
    whole (its partial block is its own)."""
    row = {"arrival_s": None, "tool": None, "tool_s": None, "gap_s": None,
           "prefix_block_tokens": 10}  # fmt: skip
    calls = [  # (program, turn, input, output, reused, prefix_hashes)
        ("z", 0, 35, 5, None, [1, 2]),
        ("z", 1, 50, 5, 40, [1, 2]),
        ("z", 2, 50, 5, 50, [1, 9]),
        ("z", 3, 15, 5, 10, [1, 2]),
        ("zy", 0, 30, 5, None, [1, 2]),
    ]
    frame = pl.DataFrame(
        [
            row | {"program_id": p, "turn": t, "input_tokens": i, "output_tokens": o,
                   "reused_tokens": r, "prefix_hashes": h}
            for p, t, i, o, r, h in calls
        ]
    )  # fmt: skip
    lines = export.rows(frame, "mooncake", block_size=10)
    assert [line["hash_ids"] for line in lines] == [
        [0, 1, 2, 3],  # shared 0 1, then its own
        [0, 1, 2, 4, 5],  # same keys: z:0's own 2 and output 4 kept
        [0, 6, 7, 8, 9],  # one key in common, then none of its own stream
        [0, 10],  # 15 tokens: the first shared block only
        [0, 1, 12],  # another program: the same shared ids (11: z:3's output)
    ]
