"""A blank tool name ("" or only spaces) names no tool. In a canonical input it is a bad value,
as a blank program_id is (`empty tool name`: null is no tool, "unknown" a tool whose name is
not known, and the input says neither); a reader of a log whose tool call has a blank name
writes "unknown" (a tool ran), as for a call with no name, and an engine log's blank tag is no
tag. Regression: a canonical `"tool": ""` was kept as a tool named "", fitted and priced as
one, and TraceLab's and TensorRT-LLM's blank names were kept as they were."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rejects import IngestError
from ttlctl.trace import io as trace_io

REASON = 'empty tool name: null is no tool, "unknown" a tool whose name is not known'
DATA = Path(__file__).parents[1] / "data"


def _call(program: str, turn: int, tool: str | None) -> dict[str, object]:
    return {"program_id": program, "turn": turn, "arrival_s": 5.0 * turn,
            "input_tokens": 100, "output_tokens": 10, "tool": tool, "tool_s": 1.0}  # fmt: skip


@pytest.mark.parametrize("blank", ["", "   ", "\t", "\u3000"])
def test_a_blank_tool_in_a_canonical_input_is_a_bad_value(tmp_path: Path, blank: str) -> None:
    rows = [_call("a", 0, "bash"), _call("a", 1, None), _call("b", 0, blank), _call("b", 1, None)]
    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "out.parquet")
    assert str(info.value) == f"{src}: line 3: {REASON}"
    report = ingest([src], tmp_path / "out.parquet", skip_bad=True)
    assert (report.rows, report.rejected) == (2, 2)
    assert report.rejected_by_reason == {"empty tool name": 1, "rejected with its program": 1}
    assert trace_io.read(tmp_path / "out.parquet")["tool"].to_list() == ["bash", None]


def test_in_csv_an_empty_field_is_no_tool_and_spaces_are_a_bad_value(tmp_path: Path) -> None:
    src = tmp_path / "t.csv"
    src.write_text(
        "program_id,turn,arrival_s,input_tokens,output_tokens,tool\n"
        'a,0,0,100,10,\na,1,5,100,10,\nb,0,0,100,10," "\nb,1,5,100,10,\n'
    )
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "out.parquet")
    assert str(info.value) == f"{src}: line 4: {REASON}"
    ingest([src], tmp_path / "out.parquet", skip_bad=True)
    trace = trace_io.read(tmp_path / "out.parquet")
    assert trace["program_id"].to_list() == ["a", "a"] and trace["tool"].null_count() == 2


@pytest.mark.parametrize(
    ("fmt", "sample", "key"),
    [
        ("tracelab", "tracelab/round_trace.jsonl", "tool_name"),
        ("trtllm-scaffolding", "trtllm-scaffolding/django__django-16801.trace.json", "tool_name"),
    ],
)
def test_a_log_s_blank_tool_name_is_an_unknown_tool(
    samples: Path, tmp_path: Path, fmt: str, sample: str, key: str
) -> None:
    """Every tool name of the sample made blank: each call followed by a tool has "unknown"
    where it had the name, and no other call changes."""
    original = samples / sample
    blanked = tmp_path / original.name
    text, count = re.subn(rf'("{key}":\s*)"[^"]*"', r'\1"  "', original.read_text())
    assert count > 0
    blanked.write_text(text)
    ingest([original], tmp_path / "named.parquet", fmt=fmt)
    ingest([blanked], tmp_path / "blank.parquet", fmt=fmt)
    named = trace_io.read(tmp_path / "named.parquet")
    blank = trace_io.read(tmp_path / "blank.parquet")
    unknown = pl.when(pl.col("tool").is_not_null()).then(pl.lit("unknown")).alias("tool")
    assert blank.equals(named.with_columns(unknown))
    assert named["tool"].drop_nulls().ne("unknown").any()  # the sample names its tools


def test_an_engine_log_s_blank_tool_tag_is_no_tag(tmp_path: Path) -> None:
    lines = (DATA / "engine-log" / "engine.jsonl").read_text().splitlines()
    tagged = [json.loads(line) for line in lines]
    assert any(obj.get("tool") for obj in tagged)
    for obj in tagged:
        if obj.get("tool"):
            obj["tool"] = " "
    src = tmp_path / "engine.jsonl"
    src.write_text("".join(json.dumps(obj) + "\n" for obj in tagged))
    ingest([src], tmp_path / "out.parquet", fmt="engine-log")
    assert trace_io.read(tmp_path / "out.parquet")["tool"].null_count() > 0
    assert trace_io.read(tmp_path / "out.parquet")["tool"].drop_nulls().to_list() == []


def test_blanks_around_a_canonical_tool_name_are_not_part_of_it(tmp_path: Path) -> None:
    """As the engine and the log readers read a name: the bundle fitted on the trace is then
    asked for the name the engine looks up (``bash``, not ``bash ``)."""
    rows = [_call("a", 0, " bash "), _call("a", 1, "grep\t"), _call("a", 2, None)]
    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = ingest([src], tmp_path / "out.parquet")
    assert (report.rows, report.rejected) == (3, 0)
    trace = trace_io.read(tmp_path / "out.parquet").sort("turn")
    assert trace["tool"].to_list() == ["bash", "grep", None]


REPLICA_REASON = "empty replica name: null is no replica (a call whose replica is not known)"


@pytest.mark.parametrize("blank", ["", "   ", "\u3000"])
def test_a_blank_replica_in_a_canonical_input_is_a_bad_value(tmp_path: Path, blank: str) -> None:
    """As a blank tool is: null says the replica is not known; a blank says nothing. Blanks
    around a name are not part of it (``" r1 "`` is ``r1``)."""
    rows = [_call("a", 0, "bash") | {"replica": " r1 "}, _call("a", 1, None) | {"replica": "r1"}]
    rows += [_call("b", 0, "bash") | {"replica": blank}, _call("b", 1, None)]
    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "out.parquet")
    assert str(info.value) == f"{src}: line 3: {REPLICA_REASON}"
    report = ingest([src], tmp_path / "out.parquet", skip_bad=True)
    assert report.rejected_by_reason == {"empty replica name": 1, "rejected with its program": 1}
    assert trace_io.read(tmp_path / "out.parquet")["replica"].to_list() == ["r1", "r1"]
