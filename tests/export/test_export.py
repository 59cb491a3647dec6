"""`ttlctl export`: Mooncake JSONL that ttlctl (and other replayers) read back."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from ttlctl.cli import app
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
