"""The engine-log format that the scheduler plugin writes (schema ttlctl.engine-log/1)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ttlctl.cli import app
from ttlctl.ingest.formats.engine_log import SCHEMA
from ttlctl.ingest.formats.rotated import log_of
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rejects import IngestError
from ttlctl.trace import io as trace_io

T0 = 1_764_000_000.0


def _req(
    rid: str, program: str | None, arrival: float, finish: float, **extra: Any
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "schema": SCHEMA,
        "request_id": rid,
        "program_id": program,
        "tool": None,
        "is_last": None,
        "arrival_unix_s": T0 + arrival,
        "first_token_unix_s": T0 + arrival + 0.1,
        "finish_unix_s": T0 + finish,
        "prompt_tokens": 1000,
        "output_tokens": 50,
        "cached_tokens": 0,
        "finish_reason": "length",
        "ttl_s": 0.0,
    }
    row.update(extra)
    return row


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _log() -> list[dict[str, Any]]:
    # program p: three calls, written out of order (finish order), with tools tagged
    return [
        _req("r2", "p", 10.0, 11.0, tool="pytest"),
        _req("r1", "p", 0.0, 2.0, tool="grep"),
        _req("r3", "p", 20.0, 21.5, is_last=True),
        _req("x9", None, 5.0, 6.0),  # untagged traffic: its own one-call program
    ]


def test_engine_log_maps_to_canonical(tmp_path: Path) -> None:
    src = _write(tmp_path / "engine.jsonl", _log())
    report = ingest([src], tmp_path / "t.parquet")
    assert report.files[0].format == "engine-log"
    trace = trace_io.read(tmp_path / "t.parquet")
    p = trace.filter(trace["program_id"] == "p")
    assert p["turn"].to_list() == [0, 1, 2]
    assert p["arrival_s"].to_list() == [0.0, 10.0, 20.0]  # rebased to the first arrival
    assert p["tool"].to_list() == ["grep", "pytest", None]
    assert p["gap_s"].to_list() == [8.0, 9.0, None]  # next arrival - this finish
    assert p["llm_s"].to_list() == pytest.approx([2.0, 1.0, 1.5])
    assert p["tool_s"].null_count() == 3  # engines cannot see tool time
    assert trace.filter(trace["program_id"] == "request:x9").height == 1


@pytest.mark.parametrize(
    ("patch", "reason"),
    [
        ({"prompt_tokens": "many"}, "non-numeric prompt_tokens"),
        ({"finish_unix_s": T0 - 5}, "finish before arrival"),
        ({"output_tokens": -4}, "negative output_tokens"),
        ({"arrival_unix_s": None}, "missing arrival_unix_s"),
    ],
)
def test_bad_engine_records(tmp_path: Path, patch: dict[str, Any], reason: str) -> None:
    rows = _log()
    rows[0].update(patch)
    src = _write(tmp_path / "engine.jsonl", rows)
    with pytest.raises(IngestError, match=reason) as info:
        ingest([src], tmp_path / "t.parquet")
    assert "line 1" in str(info.value)
    report = ingest([src], tmp_path / "t.parquet", skip_bad=True)
    assert report.rejected == 3 and report.rows == 1  # program p goes whole
    assert report.records == report.rows + report.rejected == 4


def test_foreign_lines_and_broken_json(tmp_path: Path) -> None:
    src = tmp_path / "engine.jsonl"
    src.write_text(
        json.dumps(_req("a", "q", 0, 1)) + "\n" + '{"schema": "other/9"}\n' + "{broken\n"
    )
    with pytest.raises(IngestError, match="line 2: not an engine-log record"):
        ingest([src], tmp_path / "t.parquet", fmt="engine-log")
    report = ingest([src], tmp_path / "t.parquet", fmt="engine-log", skip_bad=True)
    assert (report.rows, report.rejected, report.records) == (1, 2, 3)


def test_a_foreign_lines_schema_is_told_in_jsons_words(tmp_path: Path) -> None:
    """A line without the schema read "schema is None" (Python's word for JSON's null)."""
    src = tmp_path / "engine.jsonl"
    src.write_text('{"request_id": "a"}\n{"schema": null}\n{"schema": "x/1"}\n')
    report = ingest([src], tmp_path / "t.parquet", fmt="engine-log", skip_bad=True,
                    allow_empty=True)  # fmt: skip
    assert report.rejects_path is not None
    lines = Path(report.rejects_path).read_text().splitlines()
    reasons = [json.loads(line)["reason"] for line in lines]
    want = '"ttlctl.engine-log/1"'
    assert reasons == [
        f"not an engine-log record: no schema (an engine log's lines have {want})",
        f"not an engine-log record: schema is null, not {want}",
        f'not an engine-log record: schema is "x/1", not {want}',
    ]


DATA = Path(__file__).resolve().parents[1] / "data" / "engine-log" / "engine.jsonl"


def test_shipped_sample_ingests_with_nothing_in_flight(tmp_path: Path) -> None:
    report = ingest([DATA], tmp_path / "t.parquet")
    trace = trace_io.read(tmp_path / "t.parquet")
    lines = len(DATA.read_text().splitlines())
    assert (report.records, report.rows, report.rejected) == (lines, lines, 0)
    assert report.in_flight == 0  # every tagged program of the sample ends with is_last
    last = trace.filter(trace["is_last"])
    assert last.height == trace["program_id"].n_unique()


def _in_flight_log() -> list[dict[str, Any]]:
    return [
        # p: finished (is_last on its last call)
        _req("a1", "p", 0.0, 1.0, tool="grep", is_last=False),
        _req("a2", "p", 3.0, 4.0, is_last=True),
        # q: a client that tags every call is_last: 0, still running (waiting on pytest)
        _req("b1", "q", 1.0, 2.0, tool="bash", is_last=False),
        _req("b2", "q", 5.0, 6.5, tool="pytest", is_last=False),
        # r: a client that never tags is_last, still running (waiting on bash)
        _req("c1", "r", 2.0, 2.5, tool="view"),
        _req("c2", "r", 4.0, 4.5, tool="bash"),
        _req("x1", None, 3.0, 3.2),  # untagged: a one-call program, not "in flight"
    ]


def test_programs_in_flight_end_at_their_last_logged_call(tmp_path: Path) -> None:
    src = _write(tmp_path / "engine.jsonl", _in_flight_log())
    report = ingest([src], tmp_path / "t.parquet")  # strict: nothing rejected
    assert (report.rows, report.rejected, report.in_flight) == (7, 0, 2)
    assert report.files[0].in_flight == 2
    trace = trace_io.read(tmp_path / "t.parquet").sort("program_id", "turn")
    for program, tools, gaps in (
        ("q", ["bash", None], [3.0, None]),
        ("r", ["view", None], [1.5, None]),
        ("p", ["grep", None], [2.0, None]),
    ):
        rows = trace.filter(trace["program_id"] == program)
        assert rows["is_last"].to_list() == [False, True]
        assert rows["tool"].to_list() == tools  # the trailing tool is unknown: dropped
        assert rows["gap_s"].to_list() == pytest.approx(gaps)


def test_in_flight_program_with_a_bad_record_is_rejected_not_counted(tmp_path: Path) -> None:
    rows = _in_flight_log()
    rows[2]["prompt_tokens"] = "lots"  # q's first call
    src = _write(tmp_path / "engine.jsonl", rows)
    with pytest.raises(IngestError, match="line 3: non-numeric prompt_tokens"):
        ingest([src], tmp_path / "t.parquet")
    report = ingest([src], tmp_path / "t.parquet", skip_bad=True)
    assert (report.rows, report.rejected, report.in_flight) == (5, 2, 1)


def test_ingest_command_reports_programs_in_flight(tmp_path: Path) -> None:
    src = _write(tmp_path / "engine.jsonl", _in_flight_log())
    result = CliRunner().invoke(app, ["ingest", str(src), "-o", str(tmp_path / "t.parquet")])
    assert result.exit_code == 0, result.output
    assert "2 program(s) still in flight" in result.output
    as_json = CliRunner().invoke(
        app, ["ingest", str(src), "-o", str(tmp_path / "t.parquet"), "--json", "-"]
    )
    assert json.loads(as_json.stdout)["ingest"]["in_flight"] == 2


def _facts(replica: str | None, kv_blocks: int = 63, **more: Any) -> dict[str, Any]:
    """An engine record as the plugin writes it (ttlctl.engine.facts)."""
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "kind": "engine",
        "at_unix_s": T0 - 1.0,
        "vllm_version": "0.32.0",
        "model": "tiny",
        "block_size": 32,
        "kv_blocks": kv_blocks,
        "kv_tokens": kv_blocks * 32,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 2048,
        "max_model_len": 1024,
        "async_scheduling": False,
        "prefix_caching": True,
        "bundle_sha256": "ab" * 32,
        "replica": replica,
    }
    return doc | more


def _two_replicas(tmp_path: Path, names: tuple[str | None, str | None]) -> list[Path]:
    """Program p runs turns 0 and 2 on the first replica and turn 1 on the second; each
    replica also has a program of its own and an untagged request with the same id (at
    another time: the same id at the same arrival is the same request, a duplicate)."""
    a = [
        _facts(names[0], kv_blocks=63),
        _req("a1", "p", 0.0, 1.0, tool="grep", is_last=False),
        _req("a2", "p", 6.0, 7.0, is_last=True),
        _req("a3", "only-a", 0.5, 1.0, is_last=True),
        _req("dup", None, 2.0, 2.5),
    ]
    b = [
        _facts(names[1], kv_blocks=127),
        _req("b1", "p", 3.0, 4.0, tool="bash", is_last=False),
        _req("b2", "only-b", 1.0, 2.0, is_last=True),
        _req("dup", None, 2.25, 2.75),
    ]
    return [_write(tmp_path / "a.jsonl", a), _write(tmp_path / "b.jsonl", b)]


def test_logs_of_two_replicas_merge_a_program_by_arrival(tmp_path: Path) -> None:
    """Issue 19, item 4: a program whose calls ran on two replicas is one program; each
    call keeps its replica; the engines' facts are kept in the trace's metadata."""
    logs = _two_replicas(tmp_path, ("r-a", "r-b"))
    report = ingest(logs, tmp_path / "t.parquet")
    assert (report.records, report.rows, report.rejected) == (7, 7, 0)
    assert [f.records for f in report.files] == [4, 3]
    trace = trace_io.read(tmp_path / "t.parquet").sort("program_id", "turn")
    p = trace.filter(trace["program_id"] == "p")
    assert p["turn"].to_list() == [0, 1, 2]
    assert p["replica"].to_list() == ["r-a", "r-b", "r-a"]
    assert p["tool"].to_list() == ["grep", "bash", None]
    assert p["gap_s"].to_list() == [2.0, 2.0, None]  # across replicas
    assert sorted(
        trace.filter(trace["program_id"].str.starts_with("request:dup"))["program_id"].to_list()
    ) == ["request:dup", "request:dup#2"]
    engines = trace_io.engines(tmp_path / "t.parquet")
    assert [(e["replica"], e["kv_tokens"], e["calls"]) for e in engines] == [
        ("r-a", 63 * 32, 4),
        ("r-b", 127 * 32, 3),
    ]
    assert engines == report.engines and engines[0]["file"] == str(logs[0])
    assert engines[0]["line"] == 1


def test_replicas_without_names_are_told_apart_by_file(tmp_path: Path) -> None:
    logs = _two_replicas(tmp_path, (None, None))
    ingest(logs, tmp_path / "t.parquet")
    trace = trace_io.read(tmp_path / "t.parquet")
    assert set(trace["replica"].to_list()) == {str(logs[0]), str(logs[1])}
    one = ingest([logs[0]], tmp_path / "one.parquet")
    assert trace_io.read(tmp_path / "one.parquet")["replica"].null_count() == 4
    assert one.engines[0]["replica"] is None


def test_the_schedulers_other_settings_are_kept_with_the_facts(tmp_path: Path) -> None:
    """The settings no replay models (``replay.engine_settings``) reach the trace as the
    plugin wrote them (a setting that may be off, 0, is a value; a share, a float); a line
    without them (an older plugin) keeps them null."""
    more = {
        "scheduling_policy": "fcfs",
        "long_prefill_token_threshold": 0,
        "long_prefill_token_threshold_adaptive": True,
        "prefill_schedule_interval": 1,
        "cache_aware_admission_window": 0,
        "cache_aware_admission_threshold": 1,
        "max_num_inflight_kv_loads": 2,
        "kv_connector": "NixlConnector",
        "scheduler_reserve_full_isl": False,
        "enable_chunked_prefill": True,
        "max_num_scheduled_tokens": 1024,
        "watermark": 0.05,
        "max_num_queued_tokens": 0,
    }
    src = _write(tmp_path / "engine.jsonl", [_facts("r", **more), *_log()])
    ingest([src], tmp_path / "t.parquet")
    (engine,) = trace_io.engines(tmp_path / "t.parquet")
    assert {k: engine[k] for k in more} == more
    assert isinstance(engine["cache_aware_admission_threshold"], float)
    assert engine["max_num_active_seqs"] is None and engine["max_num_queued_reqs"] is None
    old = _write(tmp_path / "old.jsonl", [_facts("r"), *_log()])
    ingest([old], tmp_path / "old.parquet")
    (engine,) = trace_io.engines(tmp_path / "old.parquet")
    assert all(engine[k] is None for k in more)


def test_a_log_without_facts_keeps_no_engines(tmp_path: Path) -> None:
    src = _write(tmp_path / "engine.jsonl", _log())
    assert ingest([src], tmp_path / "t.parquet").engines == []
    assert trace_io.engines(tmp_path / "t.parquet") == []


def test_a_bad_engine_record_is_a_bad_record(tmp_path: Path) -> None:
    src = _write(tmp_path / "engine.jsonl", [_facts("r", kv_blocks="lots"), *_log()])
    with pytest.raises(IngestError, match="line 1: bad engine record: kv_blocks"):
        ingest([src], tmp_path / "t.parquet")
    report = ingest([src], tmp_path / "t.parquet", skip_bad=True)
    assert (report.records, report.rows, report.rejected) == (5, 4, 1)


@pytest.mark.parametrize(
    ("facts", "why"),
    [
        ({"kv_blocks": 0}, "kv_blocks must be at least 1: 0"),
        ({"kv_blocks": 1, "kv_tokens": 8}, "kv_tokens 8 is not kv_blocks × block_size (1 × 32)"),
        ({"kv_blocks": None, "kv_tokens": 8}, "kv_tokens 8 hold no block of 32 tokens"),
        ({"max_num_seqs": 0}, "max_num_seqs must be at least 1: 0"),
        ({"max_num_active_seqs": 0}, "max_num_active_seqs must be at least 1: 0"),
        ({"prefill_schedule_interval": 0}, "prefill_schedule_interval must be at least 1: 0"),
        ({"long_prefill_token_threshold": -1}, "long_prefill_token_threshold must be at least 0"),
        ({"cache_aware_admission_window": 1.5}, "cache_aware_admission_window is not a whole"),
        ({"cache_aware_admission_threshold": 1.5}, "cache_aware_admission_threshold must be from"),
        ({"cache_aware_admission_threshold": "half"}, "cache_aware_admission_threshold is not a"),
        ({"cache_aware_admission_threshold": True}, "cache_aware_admission_threshold is not a"),
        ({"watermark": -0.1}, "watermark must be from 0 to 1"),
        ({"max_num_scheduled_tokens": 0}, "max_num_scheduled_tokens must be at least 1: 0"),
        ({"enable_chunked_prefill": "yes"}, "enable_chunked_prefill is not true or false"),
        ({"replica": ["x"]}, "replica is not text: ['x']"),
        ({"replica": 3}, "replica is not text: 3"),
        ({"model": {"name": "tiny"}}, "model is not text: {'name': 'tiny'}"),
    ],
)
def test_an_engine_that_could_not_run_is_a_bad_record(
    tmp_path: Path, facts: dict[str, Any], why: str
) -> None:
    """A size no engine runs with (no KV block, kv_tokens that disagree with the blocks) is
    refused where it is, by file and line; it used to pass, and refit or tune then failed
    on a flag (--kv-tokens) the user never gave, or replayed the defaults."""
    src = _write(tmp_path / "engine.jsonl", [_facts("r") | facts, *_log()])
    with pytest.raises(IngestError, match=f"line 1: bad engine record: {re.escape(why)}"):
        ingest([src], tmp_path / "t.parquet")


def test_a_program_id_used_again_after_its_last_call_is_a_new_program(tmp_path: Path) -> None:
    """Issue 22: a second run of the same programs against one server (a resumed session,
    a retried task) reads as ``<id>#2``, counted; it used to reject the whole log."""
    rows = [
        _req("r1", "p", 0.0, 1.0, tool="grep", is_last=False),
        _req("r2", "p", 2.0, 3.0, is_last=True),
        _req("s1", "p", 10.0, 11.0, tool="grep", is_last=False),
        _req("s2", "p", 12.0, 13.0, is_last=True),
        _req("t1", "p", 20.0, 21.0, tool="bash", is_last=False),  # a third run, in flight
        _req("u1", "p#2", 30.0, 31.0, is_last=True),  # a name the log already uses
    ]
    src = _write(tmp_path / "engine.jsonl", rows)
    report = ingest([src], tmp_path / "t.parquet")
    assert (report.rows, report.rejected, report.reused_ids, report.in_flight) == (6, 0, 2, 1)
    trace = trace_io.read(tmp_path / "t.parquet").sort("program_id", "turn")
    calls = dict(trace.group_by("program_id").len().iter_rows())
    assert calls == {"p": 2, "p#3": 2, "p#4": 1, "p#2": 1}
    assert trace.filter(trace["program_id"] == "p#3")["arrival_s"].to_list() == [10.0, 12.0]
    result = CliRunner().invoke(app, ["ingest", str(src), "-o", str(tmp_path / "t.parquet")])
    assert "2 program id(s) used again" in result.output


def test_a_contradiction_inside_one_run_stays_an_error_naming_file_and_line(
    tmp_path: Path,
) -> None:
    rows = [
        _req("r1", "p", 0.0, 1.0, tool="grep", is_last=False),
        _req("r2", "p", 2.0, 3.0, is_last="maybe"),
    ]
    src = _write(tmp_path / "engine.jsonl", rows)
    with pytest.raises(IngestError, match=r"engine.jsonl.*line 2: invalid is_last"):
        ingest([src], tmp_path / "t.parquet")


def test_aborted_calls_are_kept_with_no_output_and_counted(tmp_path: Path) -> None:
    """Issue 22: a client killed mid-run leaves calls the engine aborted (output 0); ingest
    keeps them as calls, counts them, and their program ends in flight."""
    rows = [
        _req("r1", "p", 0.0, 1.0, tool="grep", is_last=False),
        _req("r2", "p", 2.0, 2.2, tool="grep", output_tokens=0, finish_reason="abort"),
        _req("q1", "q", 0.0, 0.1, output_tokens=0, finish_reason="abort"),
    ]
    src = _write(tmp_path / "engine.jsonl", rows)
    report = ingest([src], tmp_path / "t.parquet")
    assert (report.rows, report.rejected, report.aborted, report.in_flight) == (3, 0, 2, 2)
    trace = trace_io.read(tmp_path / "t.parquet").sort("program_id", "turn")
    assert trace["output_tokens"].to_list() == [50, 0, 0]
    result = CliRunner().invoke(
        app, ["ingest", str(src), "-o", str(tmp_path / "t.parquet"), "--json", "-"]
    )
    assert json.loads(result.stdout)["ingest"]["aborted"] == 2


def test_rotated_parts_of_an_unnamed_log_are_one_replica(tmp_path: Path) -> None:
    """engine.jsonl and engine.jsonl.1 (logrotate's parts of one server's log, no replica
    named) are one replica, named by the log; alone they are one unnamed engine, as one
    file is. They were read as a replica per file."""
    a, b = _two_replicas(tmp_path, (None, None))
    older = [_facts(None, kv_blocks=63), _req("a0", "q", -9.0, -8.0, is_last=True)]
    rotated = _write(tmp_path / "a.jsonl.1", older)
    ingest([rotated, a, b], tmp_path / "t.parquet")
    trace = trace_io.read(tmp_path / "t.parquet")
    assert set(trace["replica"].to_list()) == {str(a), str(b)}
    assert trace.filter(trace["program_id"] == "q")["replica"].to_list() == [str(a)]
    engines = trace_io.engines(tmp_path / "t.parquet")
    assert [(e["replica"], e["calls"]) for e in engines] == [(str(a), 5), (str(b), 3)]
    alone = ingest([rotated, a], tmp_path / "alone.parquet")
    assert trace_io.read(tmp_path / "alone.parquet")["replica"].null_count() == 5
    assert [e["replica"] for e in alone.engines] == [None]
    assert [log_of(Path(n)).name for n in ("x.jsonl.2.gz", "x.jsonl.gz", "x.jsonl", "x.1")] == [
        "x.jsonl",
        "x.jsonl",
        "x.jsonl",
        "x",
    ]


@pytest.mark.parametrize(("named", "replica"), [(" r1 ", "r1"), ("   ", None), ("", None)])
def test_a_replica_is_named_without_the_blanks_around_it(
    tmp_path: Path, named: str, replica: str | None
) -> None:
    """As the plugin reads ``TTLCTL_REPLICA`` (stripped; a blank one names none). Regression:
    ``" r1 "`` was a replica apart from ``r1``, and ``"   "`` one named by blanks."""
    src = _write(tmp_path / "engine.jsonl", [_facts(named), *_log()])
    ingest([src], tmp_path / "t.parquet")
    assert set(trace_io.read(tmp_path / "t.parquet")["replica"].to_list()) == {replica}
    assert [e["replica"] for e in trace_io.engines(tmp_path / "t.parquet")] == [replica]


def test_a_replica_named_by_its_log_path_is_named_alike_in_column_and_metadata(
    tmp_path: Path,
) -> None:
    """Unnamed replicas are named by their logs' paths, without the blanks around them as
    every replica name is: the calls' column and the engines' metadata name them alike.
    Regression (a second reader's find): the column was stripped and the metadata not, so
    refit sized the replica ``alpha.jsonl `` from the defaults."""
    a, b = _two_replicas(tmp_path, (None, None))
    spaced = a.rename(tmp_path / "a.jsonl ")
    ingest([spaced, b], tmp_path / "t.parquet")
    column = set(trace_io.read(tmp_path / "t.parquet")["replica"].to_list())
    metadata = {e["replica"] for e in trace_io.engines(tmp_path / "t.parquet")}
    assert column == metadata == {str(tmp_path / "a.jsonl"), str(b)}


def test_a_call_finished_as_it_arrived_and_calls_that_overlap_are_kept(tmp_path: Path) -> None:
    """A call that finishes at its arrival (an abort before its first step) takes 0 s, not a
    bad record; a client's next call sent before this one finished pauses 0 s, not a
    negative gap."""
    rows = [
        _req("r1", "p", 0.0, 0.0, tool="grep"),
        _req("r2", "p", 5.0, 9.0, tool="grep"),
        _req("r3", "p", 8.0, 10.0, is_last=True),
    ]
    ingest([_write(tmp_path / "engine.jsonl", rows)], tmp_path / "t.parquet")
    trace = trace_io.read(tmp_path / "t.parquet")
    assert trace["llm_s"].to_list() == pytest.approx([0.0, 4.0, 2.0])
    assert trace["gap_s"].to_list() == [5.0, 0.0, None]


def test_an_engine_of_one_kv_block_is_kept(tmp_path: Path) -> None:
    """kv_tokens of exactly one block (the least an engine runs with) is no bad record."""
    src = _write(tmp_path / "engine.jsonl", [_facts("r", kv_blocks=1), *_log()])
    ingest([src], tmp_path / "t.parquet")
    (engine,) = trace_io.engines(tmp_path / "t.parquet")
    assert (engine["kv_blocks"], engine["kv_tokens"]) == (1, 32)
