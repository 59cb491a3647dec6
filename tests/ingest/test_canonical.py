"""The canonical reader and the common validation, on hand-made traces."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from ttlctl.cli import app
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rejects import IngestError
from ttlctl.trace import io as trace_io
from ttlctl.trace.columns import all_columns


def _call(program: str, turn: int, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "program_id": program,
        "turn": turn,
        "arrival_s": float(turn) * 10.0,
        "input_tokens": 100 * (turn + 1),
        "output_tokens": 10,
    }
    row.update(extra)
    return row


def _good_rows() -> list[dict[str, Any]]:
    return [
        _call("a", 0, tool="bash", tool_s=1.5, gap_s=2.0),
        _call("a", 1, tool="grep", tool_s=0.2, gap_s=0.3),
        _call("a", 2),
        _call("b", 0, tool="read", tool_s=4.0),
        _call("b", 1),
    ]


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_round_trip(tmp_path: Path) -> None:
    src = _jsonl(tmp_path / "t.jsonl", _good_rows())
    report = ingest([src], tmp_path / "out.parquet")
    trace = trace_io.read(tmp_path / "out.parquet")
    assert report.rows == 5 and report.records == 5 and report.rejected == 0
    assert trace.schema == pl.Schema(all_columns())
    assert trace["program_id"].to_list() == ["a", "a", "a", "b", "b"]
    assert trace["is_last"].to_list() == [False, False, True, False, True]
    assert trace.filter(pl.col("program_id") == "a")["tool_s"].to_list() == [1.5, 0.2, None]


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_csv_and_parquet_inputs(tmp_path: Path, suffix: str) -> None:
    frame = pl.DataFrame(_good_rows())
    src = tmp_path / f"t.{suffix}"
    if suffix == "csv":
        frame.write_csv(src)
    else:
        frame.write_parquet(src)
    report = ingest([src], tmp_path / "out.parquet", fmt="auto")
    assert report.files[0].format == "canonical"
    assert report.rows == 5
    out = trace_io.read(tmp_path / "out.parquet")
    assert out["input_tokens"].sum() == frame["input_tokens"].sum()


def test_shuffled_rows_are_sorted_by_program_and_turn(tmp_path: Path) -> None:
    rows = _good_rows()
    src = _jsonl(tmp_path / "t.jsonl", [rows[i] for i in (4, 2, 0, 3, 1)])
    ingest([src], tmp_path / "out.parquet")
    out = trace_io.read(tmp_path / "out.parquet")
    assert list(zip(out["program_id"], out["turn"], strict=True)) == [
        ("a", 0),
        ("a", 1),
        ("a", 2),
        ("b", 0),
        ("b", 1),
    ]


BAD_CASES = [
    ("duplicate", _call("a", 1), "duplicate (program, turn)"),
    ("gap", _call("a", 4), "missing turn"),
    ("negative tool_s", _call("a", 2, tool="x", tool_s=-1.0), "negative tool_s"),
    ("empty prompt", _call("a", 2, input_tokens=0), "input_tokens is 0: an empty prompt"),
    ("non-numeric tokens", _call("a", 2, input_tokens="lots"), "invalid input_tokens"),
    ("fractional tokens", _call("a", 2, output_tokens=1.5), "invalid output_tokens"),
    (
        "gap shorter than tool",
        _call("a", 2, tool="x", tool_s=5.0, gap_s=1.0),
        "gap_s shorter than tool_s",
    ),
    ("out of order", _call("a", 2, arrival_s=1.0), "out-of-order turns"),
    ("reuse too large", _call("a", 2, reused_tokens=10**6), "reused_tokens exceeds"),
    (
        "gap just past the slack",
        _call("a", 2, tool="x", tool_s=5.0, gap_s=4.998),
        "gap_s shorter than tool_s",
    ),
    ("tool after the last call", _call("a", 2, tool="x"), "tool named after the program's last"),
    (
        "is_last false on the last call",
        _call("a", 2, is_last=False),
        "is_last is false on turn 2, which is the program's last",
    ),
]


@pytest.mark.parametrize(("label", "bad", "reason"), BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_rows_strict_and_skip(
    tmp_path: Path, label: str, bad: dict[str, Any], reason: str
) -> None:
    rows = _good_rows()
    rows[2] = bad
    src = _jsonl(tmp_path / "t.jsonl", rows)
    out = tmp_path / "out.parquet"
    with pytest.raises(IngestError) as info:
        ingest([src], out)
    assert str(src) in str(info.value) and "line 3" in str(info.value)
    assert reason in str(info.value)
    assert not out.exists(), "strict mode must write nothing"

    report = ingest([src], out, skip_bad=True)
    trace = trace_io.read(out)
    # program a is rejected whole (3 rows), program b survives
    assert trace["program_id"].unique().to_list() == ["b"]
    assert report.rejected == 3 and report.rows == 2
    assert report.records == report.rows + report.rejected
    lines = [json.loads(x) for x in Path(report.rejects_path or "").read_text().splitlines()]
    assert len(lines) == 3
    assert any(reason in x["reason"] for x in lines)
    assert all(x["file"] == str(src) for x in lines)


def test_values_at_the_rules_bounds_are_good(tmp_path: Path) -> None:
    """The other side of BAD_CASES (docs/trace-format.md, "The rules every trace obeys"):
    a gap within 1 ms below its tool time (the slack for clock rounding), two turns
    arriving at the same instant (only an earlier arrival is out of order), reused_tokens
    equal to input_tokens, an output of 0 tokens and a tool of 0 s are all kept."""
    rows = [
        _call("a", 0, tool="bash", tool_s=1.5, gap_s=1.4995),
        _call("a", 1, arrival_s=0.0, reused_tokens=200, output_tokens=0, tool="x", tool_s=0.0),
        _call("a", 2, arrival_s=0.0, gap_s=0.0),
    ]
    report = ingest([_jsonl(tmp_path / "t.jsonl", rows)], tmp_path / "out.parquet")
    assert (report.rows, report.rejected) == (3, 0)
    assert trace_io.read(tmp_path / "out.parquet")["reused_tokens"].to_list() == [None, 200, None]


def test_an_arrival_before_an_earlier_turn_s_is_out_of_order_across_a_missing_one(
    tmp_path: Path,
) -> None:
    """arrival_s may be null after turn 0, but arrivals stay in turn order: a turn that
    arrives before the last arrival recorded is out of order even when the turn just
    before it has none; the error names the turn whose arrival it is before (turn 0's, not
    turn 1's, which has none)."""
    rows = [
        _call("a", 0, arrival_s=10.0),
        _call("a", 1, arrival_s=None),
        _call("a", 2, arrival_s=5.0),
    ]
    said = r"line 3: out-of-order turns: turn 2 arrives at 5\.0 s, before turn 0 at 10\.0 s"
    with pytest.raises(IngestError, match=said):
        ingest([_jsonl(tmp_path / "t.jsonl", rows)], tmp_path / "out.parquet")


def test_truncated_jsonl_line_is_rejected_alone(tmp_path: Path) -> None:
    """A file cut mid-record (its last line unparsable, no newline after it) says the last
    line looks truncated; the same line with a newline, or a bad line before the last,
    is malformed. Either way the line alone is rejected."""
    rows = _good_rows()
    text = "".join(json.dumps(r) + "\n" for r in rows)
    cut = '{"program_id": "c", "turn": 0, "input_'  # cut mid-record
    lines = text.splitlines(keepends=True)
    middle = "".join(lines[:2]) + cut + "\n" + "".join(lines[2:]).rstrip("\n")
    src = tmp_path / "t.jsonl"
    for n, (content, reason) in enumerate(
        [
            (text + cut, "truncated JSON: the last line looks cut short (no newline ends it): "),
            (text + cut + "\n", "malformed JSON: "),
            (middle, "malformed JSON: "),  # and the file ends without a newline
        ]
    ):
        src.write_text(content)
        line = "line 3" if content == middle else "line 6"
        out = tmp_path / f"out{n}.parquet"
        with pytest.raises(IngestError) as info:
            ingest([src], out)
        assert str(info.value).startswith(f"{src}: {line}: {reason}"), str(info.value)
        assert "\n" not in str(info.value)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            ["t.jsonl", *(f"out{i}.parquet{x}" for i in range(n) for x in ("", ".rejects.jsonl"))]
        )
        report = ingest([src], out, skip_bad=True)
        assert report.rows == 5 and report.rejected == 1 and report.records == 6
        (reject,) = [
            json.loads(x) for x in Path(report.rejects_path or "").read_text().splitlines()
        ]
        assert reject["record"] == line and reject["reason"].startswith(reason)


def test_missing_required_column_is_a_clear_error(tmp_path: Path) -> None:
    src = tmp_path / "t.csv"
    pl.DataFrame({"program_id": ["a"], "turn": [0], "input_tokens": [1]}).write_csv(src)
    with pytest.raises(IngestError, match="output_tokens"):
        ingest([src], tmp_path / "o.parquet", fmt="canonical")


@pytest.mark.parametrize("content", [b"\x00\x01\x02garbage\xff" * 20, b"not a trace\n"])
def test_garbage_files(tmp_path: Path, content: bytes) -> None:
    src = tmp_path / "junk.jsonl"
    src.write_bytes(content)
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "o.parquet")
    assert str(src) in str(info.value)
    # every record rejected: an error, and nothing written, unless allowed
    out = tmp_path / "o.parquet"
    with pytest.raises(IngestError, match=r"every record was rejected \(1; the first: "):
        ingest([src], out, skip_bad=True)
    assert not out.exists() and not (tmp_path / "o.parquet.rejects.jsonl").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.jsonl"]
    report = ingest([src], out, skip_bad=True, allow_empty=True)
    assert report.rows == 0 and report.rejected == 1
    assert out.exists() and (tmp_path / "o.parquet.rejects.jsonl").exists()


def test_a_file_given_twice_is_read_once(tmp_path: Path) -> None:
    """`ingest logs logs/run.jsonl` (or the same file twice) reads each file once: read
    twice, its programs would be rejected as duplicate turns."""
    folder = tmp_path / "logs"
    folder.mkdir()
    src = _jsonl(folder / "run.jsonl", _good_rows())
    once = ingest([src], tmp_path / "once.parquet")
    twice = ingest([folder, src, folder / "." / "run.jsonl"], tmp_path / "twice.parquet")
    assert [f.path for f in twice.files] == [str(src)]
    assert twice.rows == once.rows == len(_good_rows()) and twice.rejected == 0


@pytest.mark.parametrize("skip_bad", [False, True])
def test_an_empty_folder_is_an_empty_trace_only_when_allowed(
    tmp_path: Path, skip_bad: bool
) -> None:
    """A folder with no log in it is an empty input: an error that writes nothing, unless
    --allow-empty, which writes the empty trace (and, with --skip-bad, its empty rejects),
    as it does for an input whose records are all rejected."""
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "README.md").write_text("notes, not a log\n")
    out = tmp_path / "out" / "o.parquet"
    flags = ["--skip-bad"] if skip_bad else []
    runner = CliRunner()
    res = runner.invoke(app, ["ingest", str(folder), "-o", str(out), *flags])
    assert res.exit_code == 2 and "no log files to ingest" in res.output, res.output
    assert not (tmp_path / "out").exists()

    res = runner.invoke(app, ["ingest", str(folder), "-o", str(out), "--allow-empty", *flags])
    assert res.exit_code == 0, res.output
    assert trace_io.read(out).height == 0
    assert (tmp_path / "out" / "o.parquet.rejects.jsonl").exists() == skip_bad
    report = ingest([folder], tmp_path / "again.parquet", skip_bad=skip_bad, allow_empty=True)
    assert (report.records, report.rows, report.rejected) == (0, 0, 0)
    assert report.files == [] and report.skipped == [str(folder / "README.md")]


def test_outputs_left_in_a_folder_read_are_skipped_when_it_is_read_again(
    tmp_path: Path,
) -> None:
    """`ingest logs -o logs/trace.parquet`, run twice, reads the logs both times.
    Regression: the second run read the first run's trace.parquet (and its rejects and
    --json files) as logs: `duplicate (program, turn)`, exit 2; with --skip-bad
    --allow-empty it replaced the trace with an empty one."""
    folder = tmp_path / "logs"
    folder.mkdir()
    _jsonl(folder / "run.jsonl", _good_rows())
    out = folder / "trace.parquet"
    args = ["ingest", str(folder), "-o", str(out), "--json", str(folder / "s.json")]
    lenient = ["--skip-bad", "--allow-empty"]
    for flags in ([], [], lenient, lenient):  # the last reads the rejects file left
        res = CliRunner().invoke(app, [*args, *flags])
        assert res.exit_code == 0, res.output
        assert trace_io.read(out).height == len(_good_rows())
        report = json.loads((folder / "s.json").read_text())["ingest"]
        assert [f["path"] for f in report["files"]] == [str(folder / "run.jsonl")]
    assert report["outputs_skipped"] == [
        str(folder / name) for name in ("s.json", "trace.parquet", "trace.parquet.rejects.jsonl")
    ]
    (folder / "s.json").unlink()  # not an output of the next run: it would be read
    res = CliRunner().invoke(app, ["ingest", str(folder), "-o", str(out)])
    assert "skipped 2 files this command writes (not read as logs): " in res.stderr
    (folder / "run.jsonl").unlink()
    res = CliRunner().invoke(app, ["ingest", str(folder), "-o", str(out), "--json", "-"])
    assert res.exit_code == 2
    assert res.stderr.strip().endswith(
        "no log files to ingest (only this command's own outputs, skipped)"
    ), res.stderr
    assert trace_io.read(out).height == len(_good_rows())


def test_streaming_path_matches_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [_call(f"p{p}", t) for p in range(50) for t in range(7)]
    rows[40]["tool_s"] = -3.0  # one bad program
    src = _jsonl(tmp_path / "t.jsonl", rows)
    mem = ingest([src], tmp_path / "mem.parquet", skip_bad=True)
    monkeypatch.setenv("TTLCTL_STREAMING_BYTES", "1")
    streamed = ingest([src], tmp_path / "stream.parquet", skip_bad=True)
    assert streamed.streamed and not mem.streamed
    assert (streamed.rows, streamed.rejected) == (mem.rows, mem.rejected) == (343, 7)
    assert streamed.records == mem.records == 350  # records = written + rejected
    a = trace_io.read(tmp_path / "mem.parquet").sort(["program_id", "turn"])
    b = trace_io.read(tmp_path / "stream.parquet").sort(["program_id", "turn"])
    assert a.equals(b)

    # buckets far smaller than the input: many of them, each program whole in one
    from ttlctl.ingest import validate

    checked: list[int] = []
    real = validate.rules.check

    def counting(frame: Any) -> Any:
        checked.append(frame.height)
        return real(frame)

    monkeypatch.setattr(validate.rules, "check", counting)
    monkeypatch.setenv("TTLCTL_BUCKET_BYTES", "100")
    buckets = ingest([src], tmp_path / "buckets.parquet", skip_bad=True)
    assert len(checked) > 1 and sum(checked) == 350, checked
    assert (buckets.rows, buckets.rejected, buckets.records) == (343, 7, 350)
    c = trace_io.read(tmp_path / "buckets.parquet").sort(["program_id", "turn"])
    assert a.equals(c)


def test_a_reject_standing_for_several_records_counts_them_all_by_reason() -> None:
    """The count by reason ingest prints adds up to the records rejected, a reject that
    stands for several records (``records``) counting each; ``raw`` is kept whole up to
    2,000 characters and clipped with an ellipsis past it."""
    from ttlctl.ingest.rejects import RejectSink

    stream = io.StringIO()
    sink = RejectSink(skip_bad=True, stream=stream)
    sink.reject("a.json", None, "unreadable as x: boom", records=3)
    sink.reject("a.json", "line 2", "negative tool_s: -1", raw="y" * 2000)
    sink.reject("a.json", "line 3", "negative tool_s: -2", raw="z" * 2001)
    assert sink.count == 5 and sum(sink.by_reason.values()) == 5
    assert sink.by_reason == {"unreadable as x": 3, "negative tool_s": 2}
    lines = [json.loads(x) for x in stream.getvalue().splitlines()]
    assert [x["records"] for x in lines] == [3, 1, 1]
    assert lines[1]["raw"] == "y" * 2000 and lines[2]["raw"] == "z" * 2000 + "…"


def test_cli_ingest_json_and_errors(tmp_path: Path) -> None:
    src = _jsonl(tmp_path / "t.jsonl", _good_rows())
    runner = CliRunner()
    res = runner.invoke(app, ["ingest", str(src), "-o", str(tmp_path / "o.parquet"), "--json", "-"])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout)
    assert payload["summary"]["programs"] == 2 and payload["summary"]["calls"] == 5
    assert payload["summary"]["tools"]["distinct"] == 3

    bad = _jsonl(tmp_path / "bad.jsonl", [*_good_rows(), _call("b", 1)])
    res = runner.invoke(app, ["ingest", str(bad), "-o", str(tmp_path / "o2.parquet")])
    assert res.exit_code == 2
    assert "bad.jsonl" in res.output and "duplicate" in res.output
    assert "Traceback" not in res.output

    res = runner.invoke(
        app, ["ingest", str(src), "-o", str(tmp_path / "o3.parquet"), "--format", "nonsense"]
    )
    assert res.exit_code == 2 and "unknown format" in res.output

    res = runner.invoke(app, ["ingest", str(tmp_path / "nope.jsonl"), "-o", "x.parquet"])
    assert res.exit_code == 2 and "no such file" in res.output


def test_load_json_names_truncation_and_deep_nesting(tmp_path: Path) -> None:
    from ttlctl.ingest.jsontext import load_json
    from ttlctl.ingest.rejects import RejectSink

    cut = tmp_path / "cut.json"
    cut.write_text('{"requests": [{"t": "0.0", "in": "12')  # cut inside a string
    with pytest.raises(IngestError, match="truncated JSON"):
        load_json(cut, RejectSink(skip_bad=False))
    # a whole document (it ends with its closing bracket, of a list too) broken inside
    broken = tmp_path / "broken.json"
    broken.write_text('[{"t": 0.0},, {"t": 1.0}]')
    with pytest.raises(IngestError, match="malformed JSON"):
        load_json(broken, RejectSink(skip_bad=False))
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    stream = io.StringIO()
    sink = RejectSink(skip_bad=True, stream=stream)
    assert load_json(deep, sink) is None
    assert sink.count == 1
    assert json.loads(stream.getvalue())["reason"] == "malformed JSON: nesting too deep"


@pytest.mark.parametrize(("suffix", "record"), [("csv", "line 4"), ("parquet", "row 3")])
def test_a_bad_row_is_named_by_its_line_or_row(tmp_path: Path, suffix: str, record: str) -> None:
    """The third row, bad: a CSV's line 4 (its header is line 1), a Parquet file's row 3 (from
    1, as a trace read back names its rows)."""
    rows = _good_rows()
    rows[2] = _call("a", 2, tool="x", tool_s=-1.0)
    frame, src = pl.DataFrame(rows), tmp_path / f"t.{suffix}"
    if suffix == "csv":
        frame.write_csv(src)
    else:
        frame.write_parquet(src)
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "out.parquet")
    assert (info.value.file, info.value.record) == (str(src), record)
    assert info.value.reason.startswith("negative tool_s")


def test_csv_booleans_as_numbers_and_blank_values(tmp_path: Path) -> None:
    """is_last written as 1.0 / 0.0 (a float column's true and false) reads as true and false;
    a value of blanks is no value (null), not an invalid one."""
    src = tmp_path / "t.csv"
    src.write_text(
        "program_id,turn,arrival_s,input_tokens,output_tokens,tool,tool_s,is_last\n"
        "a,0,0,100,10,bash, ,0.0\n"
        "a,1,10,200,10,,,1.0\n"
    )
    ingest([src], tmp_path / "out.parquet")
    trace = trace_io.read(tmp_path / "out.parquet")
    assert trace["is_last"].to_list() == [False, True]
    assert trace["tool_s"].to_list() == [None, None]


def test_every_record_rejected_names_the_first_bad_one_not_its_programs_echo(
    tmp_path: Path,
) -> None:
    """With --skip-bad and nothing left to write, the error names the first bad record (turn
    1's), not the good turn 0 rejected with its program ahead of it."""
    src = _jsonl(tmp_path / "t.jsonl", [_call("a", 0), _call("a", 1, tool_s=-1.0)])
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "out.parquet", skip_bad=True)
    assert f"the first: {src}: line 2: negative tool_s" in info.value.reason
