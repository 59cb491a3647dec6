"""The shared-prefix columns (``prefix_hashes``, ``prefix_block_tokens``): canonical
round trips, bad values, and what the Mooncake and Claude Code readers fill in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from replay.workload import from_frame
from ttlctl.export import rows as export_rows
from ttlctl.ingest.formats.claude_code import tool_hashes
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rejects import IngestError
from ttlctl.trace import io as trace_io

ROWS = [
    {
        "program_id": "a",
        "turn": 0,
        "arrival_s": 0.0,
        "input_tokens": 100,
        "output_tokens": 5,
        "prefix_hashes": [1, 2, -3],
        "prefix_block_tokens": 16,
    },
    {
        "program_id": "a",
        "turn": 1,
        "arrival_s": 2.0,
        "input_tokens": 300,
        "output_tokens": 5,
        "prefix_hashes": [],
        "prefix_block_tokens": 16,
    },
    {
        "program_id": "b",
        "turn": 0,
        "arrival_s": 1.0,
        "input_tokens": 50,
        "output_tokens": 5,
        "prefix_hashes": None,
        "prefix_block_tokens": None,
    },
]


def _prefixes(path: Path) -> list[tuple[Any, Any]]:
    frame = trace_io.read(path).sort("program_id", "turn")
    return list(zip(frame["prefix_hashes"].to_list(), frame["prefix_block_tokens"], strict=True))


EXPECTED = [([1, 2, -3], 16), ([], 16), (None, None)]


@pytest.mark.parametrize("suffix", ["jsonl", "csv", "parquet"])
def test_canonical_inputs_round_trip_the_prefix(tmp_path: Path, suffix: str) -> None:
    src = tmp_path / f"in.{suffix}"
    if suffix == "jsonl":
        src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    elif suffix == "csv":  # a list as JSON writes it, or space-separated
        src.write_text(
            "program_id,turn,arrival_s,input_tokens,output_tokens,prefix_hashes,"
            "prefix_block_tokens\n"
            'a,0,0,100,5,"[1, 2, -3]",16\na,1,2,300,5,[],16\nb,0,1,50,5,,\n'
        )
    else:
        pl.DataFrame(ROWS).write_parquet(src)
    out = tmp_path / "out.parquet"
    ingest([src], out)
    assert _prefixes(out) == EXPECTED
    again = tmp_path / "again.parquet"
    ingest([out], again)  # the written trace reads back the same
    assert _prefixes(again) == EXPECTED


def test_csv_with_space_separated_hashes(tmp_path: Path) -> None:
    src = tmp_path / "in.csv"
    src.write_text(
        "program_id,turn,arrival_s,input_tokens,output_tokens,prefix_hashes,prefix_block_tokens\n"
        "a,0,0,100,5,7 8 9,512\n"
    )
    ingest([src], tmp_path / "out.parquet")
    assert _prefixes(tmp_path / "out.parquet") == [([7, 8, 9], 512)]


@pytest.mark.parametrize(
    ("hashes", "block", "reason"),
    [
        ('"[1, x]"', "16", "invalid prefix_hashes"),
        ('"[1, 2.5]"', "16", "invalid prefix_hashes"),
        ('"[1, 2]"', "", "prefix_hashes need a positive prefix_block_tokens"),
        ('"[1, 2]"', "0", "prefix_hashes need a positive prefix_block_tokens"),
    ],
)
def test_bad_prefix_values_are_rejected(
    tmp_path: Path, hashes: str, block: str, reason: str
) -> None:
    src = tmp_path / "in.csv"
    src.write_text(
        "program_id,turn,arrival_s,input_tokens,output_tokens,prefix_hashes,prefix_block_tokens\n"
        f"a,0,0,100,5,{hashes},{block}\n"
    )
    with pytest.raises(IngestError, match=reason):
        ingest([src], tmp_path / "out.parquet")


def test_an_empty_list_of_hashes_shares_nothing_but_still_needs_its_block_size(
    tmp_path: Path,
) -> None:
    """An empty list says nothing is shared, as a null does, given with a positive
    ``prefix_block_tokens`` (trace-format.md); without one it is refused as any list is."""
    head = "program_id,turn,arrival_s,input_tokens,output_tokens,prefix_hashes,prefix_block_tokens"
    src = tmp_path / "in.csv"
    src.write_text(f'{head}\na,0,0,100,5,"[]",16\n')
    ingest([src], tmp_path / "out.parquet")
    (program,) = from_frame(pl.read_parquet(tmp_path / "out.parquet")).programs
    assert program.calls[0].prefix is None
    src.write_text(f'{head}\na,0,0,100,5,"[]",\n')
    with pytest.raises(IngestError, match="prefix_hashes need a positive prefix_block_tokens"):
        ingest([src], tmp_path / "refused.parquet")


def test_old_traces_without_the_columns_read_as_null(tmp_path: Path) -> None:
    src = tmp_path / "old.jsonl"
    src.write_text(json.dumps({k: v for k, v in ROWS[2].items() if "prefix" not in k}) + "\n")
    ingest([src], tmp_path / "out.parquet")
    assert _prefixes(tmp_path / "out.parquet") == [(None, None)]


# ---------------------------------------------------------------- mooncake


def test_mooncake_prefix_is_what_other_programs_carry(tmp_path: Path) -> None:
    """Sessions s1 and s2 share blocks 1, 2 (a system prompt) and part ways; s3 shares
    nothing. s1's second turn keeps the shared two; a prompt of 1.5 blocks gets only its
    full block."""
    lines = [
        {
            "session_id": "s1",
            "timestamp": 0,
            "input_length": 2000,
            "output_length": 5,
            "hash_ids": [1, 2, 3, 4],
        },
        {
            "session_id": "s1",
            "timestamp": 10,
            "input_length": 3000,
            "output_length": 5,
            "hash_ids": [1, 2, 3, 4, 5, 6],
        },
        {
            "session_id": "s2",
            "timestamp": 5,
            "input_length": 1600,
            "output_length": 5,
            "hash_ids": [1, 2, 7, 8],
        },
        {
            "session_id": "s3",
            "timestamp": 6,
            "input_length": 1600,
            "output_length": 5,
            "hash_ids": [9, 10, 11, 12],
        },
        {
            "session_id": "s4",
            "timestamp": 7,
            "input_length": 768,
            "output_length": 5,
            "hash_ids": [1, 2],
        },
    ]
    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    ingest([src], tmp_path / "out.parquet", fmt="mooncake")
    frame = trace_io.read(tmp_path / "out.parquet").sort("program_id", "turn")
    got = dict(
        zip(
            [f"{p}:{t}" for p, t in zip(frame["program_id"], frame["turn"], strict=True)],
            zip(frame["prefix_hashes"].to_list(), frame["prefix_block_tokens"], strict=True),
            strict=True,
        )
    )
    assert got == {
        "t-s1:0": ([1, 2], 512),
        "t-s1:1": ([1, 2], 512),
        "t-s2:0": ([1, 2], 512),
        "t-s3:0": (None, None),
        "t-s4:0": ([1], 512),
    }


def test_mooncake_string_hash_ids_become_stable_integers(tmp_path: Path) -> None:
    lines = [
        {
            "session_id": s,
            "timestamp": 0,
            "input_length": 1100,
            "output_length": 5,
            "hash_ids": ["sys", "x" + s, "y"],
        }
        for s in ("a", "b")
    ]
    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    ingest([src], tmp_path / "out.parquet", fmt="mooncake")
    hashes = trace_io.read(tmp_path / "out.parquet")["prefix_hashes"].to_list()
    assert len(hashes[0]) == 1 and hashes[0] == hashes[1]


# ---------------------------------------------------------------- claude code


def _session(path: Path, sid: str, tools: int | None, calls: list[int]) -> Path:
    doc: dict[str, Any] = {
        "id": sid,
        "block_size": 64,
        "requests": [
            {
                "t": i,
                "type": "n",
                "in": n,
                "out": 10,
                "hash_ids": list(range(1, n // 64 + 2)),
                "stop": "tool_use",
                "think_time": 1.0,
            }
            for i, n in enumerate(calls)
        ],
    }
    if tools is not None:
        doc["tool_tokens"] = tools
    path.write_text(json.dumps(doc))
    return path


def test_claude_code_sessions_with_the_same_tools_share_them(tmp_path: Path) -> None:
    a = _session(tmp_path / "a.json", "a", 1000, [500, 5000])
    b = _session(tmp_path / "b.json", "b", 1000, [3000])
    c = _session(tmp_path / "c.json", "c", 1200, [3000])
    d = _session(tmp_path / "d.json", "d", None, [3000])
    ingest([a, b, c, d], tmp_path / "out.parquet", fmt="claude-code")
    frame = trace_io.read(tmp_path / "out.parquet").sort("program_id", "turn")
    rows = {
        f"{p}:{t}": (h, bt)
        for p, t, h, bt in zip(
            frame["program_id"],
            frame["turn"],
            frame["prefix_hashes"].to_list(),
            frame["prefix_block_tokens"],
            strict=True,
        )
    }
    tools = tool_hashes(1000, 64)
    assert len(tools) == 15  # 1000 // 64 full blocks
    assert rows["a:0"] == (tools[:7], 64)  # a prompt of 500 tokens: 7 full blocks
    assert rows["a:1"] == rows["b:0"] == (tools, 64)
    assert rows["c:0"][0] is not None and rows["c:0"][0][0] != tools[0]
    assert rows["d:0"] == (None, None)


# ---------------------------------------------------------------- export and back


def test_mooncake_export_keeps_the_sharing_and_reads_back(tmp_path: Path) -> None:
    """Programs a and b share 3 blocks of 512 tokens, c only the first (a tree); a's second
    call repeats its first call's stream. The export gives the shared blocks the same ids in
    every program and ingest reads the same sharing back."""
    rows = [
        {
            "program_id": p,
            "turn": t,
            "arrival_s": 0.0 if t == 0 else None,
            "input_tokens": n,
            "output_tokens": 10,
            "reused_tokens": r,
            "prefix_hashes": h,
            "prefix_block_tokens": 512,
        }
        for p, t, n, r, h in [
            ("a", 0, 2048, 0, [1, 2, 3]),
            ("a", 1, 3000, 2058, [1, 2, 3]),
            ("b", 0, 1800, 0, [1, 2, 3]),
            ("c", 0, 1800, 0, [1, 9]),
        ]
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ingest([src], tmp_path / "t.parquet")
    lines = export_rows(trace_io.read(tmp_path / "t.parquet"), "mooncake", 512)
    assert [x["session_id"] for x in lines] == ["a", "a", "b", "c"]
    a0, a1, b0, c0 = (x["hash_ids"] for x in lines)
    assert a0[:3] == b0[:3] and c0[0] == a0[0] and c0[1] != a0[1]
    assert a1[:3] == a0[:3] and a1[3] == a0[3]  # its own block after the shared ones
    assert len(set(a0[3:]) & set(b0[3:] + c0[1:])) == 0
    out = tmp_path / "x.jsonl"
    out.write_text("".join(json.dumps(x) + "\n" for x in lines))
    ingest([out], tmp_path / "back.parquet", fmt="mooncake")
    back = trace_io.read(tmp_path / "back.parquet").sort("program_id", "turn")
    assert [len(h) if h else 0 for h in back["prefix_hashes"].to_list()] == [3, 3, 3, 1]
