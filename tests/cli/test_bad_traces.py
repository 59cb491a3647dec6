"""A canonical trace is checked when a command reads it (ttlctl/trace/io.py): a row that
breaks the rules ingest applies to what it writes, or a trace version this ttlctl does not
read, is refused by fit, replay, export, tune and refit alike with one line naming the
file, the row (from 1, in file order) and the value: exit 2, nothing written. Each bad file
is a small good trace (tests/data/canonical/small.jsonl, ingested) with one value edited
and its version metadata kept, as a hand-edited or foreign-written trace would be."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from tests.cli.refusal import refused
from ttlctl.cli import app
from ttlctl.ingest.pipeline import ingest
from ttlctl.trace import io as trace_io
from ttlctl.trace.columns import PARQUET_METADATA, VERSION_KEY

SMALL = Path(__file__).parents[1] / "data" / "canonical" / "small.jsonl"


def _set(column: str, value: object, row: int = 1) -> Callable[[pl.DataFrame], pl.DataFrame]:
    """The frame with ``column`` set to ``value`` on ``row`` (0-based: file row ``row + 1``)."""

    def edit(frame: pl.DataFrame) -> pl.DataFrame:
        new = pl.lit(value, dtype=frame.schema[column])
        at = pl.int_range(pl.len()) == row
        return frame.with_columns(pl.when(at).then(new).otherwise(pl.col(column)).alias(column))

    return edit


#: name -> (the edit, the error after "FILE: "). Rows are 1-based in file order: p0's turns
#: are rows 1-4, p1's rows 5-8, … (five programs of four calls).
CASES: dict[str, tuple[Callable[[pl.DataFrame], pl.DataFrame], str]] = {
    "negative tool_s": (_set("tool_s", -3.0), "row 2: negative tool_s: -3.0"),
    "negative gap_s": (_set("gap_s", -3.0), "row 2: negative gap_s: -3.0"),
    "NaN tool_s": (_set("tool_s", float("nan")), "row 2: non-finite tool_s: NaN"),
    "NaN arrival_s": (_set("arrival_s", float("nan")), "row 2: non-finite arrival_s: NaN"),
    "infinite llm_s": (_set("llm_s", float("inf")), "row 2: non-finite llm_s: inf"),
    "null input_tokens": (_set("input_tokens", None), "row 2: missing input_tokens"),
    "null program_id": (_set("program_id", None, row=5), "row 6: missing program_id"),
    "blank tool": (
        _set("tool", " ", row=1),
        'row 2: empty tool name: null is no tool, "unknown" a tool whose name is not known',
    ),
    "blank replica": (
        lambda f: f.with_columns(
            pl.when(pl.int_range(pl.len()) == 1)
            .then(pl.lit(" "))
            .otherwise(pl.lit("r1"))
            .alias("replica")
        ),
        "row 2: empty replica name: null is no replica (a call whose replica is not known)",
    ),
    "negative input_tokens": (
        _set("input_tokens", -300),
        "row 2: negative input_tokens: -300",
    ),
    "zero input_tokens": (
        _set("input_tokens", 0, row=0),
        "row 1: input_tokens is 0: an empty prompt, which vLLM refuses",
    ),
    "negative output_tokens": (
        _set("output_tokens", -300),
        "row 2: negative output_tokens: -300",
    ),
    "reuse beyond the prompt": (
        _set("reused_tokens", 1_000_000),
        "row 2: reused_tokens exceeds input_tokens: 1000000 > 2700",
    ),
    "duplicate row": (
        lambda f: pl.concat([f, f.slice(4, 1)]),
        "row 21: duplicate (program, turn): turn 0 appears again (first at row 5)",
    ),
    "missing turn": (
        lambda f: f.filter(pl.int_range(pl.len()) != 1),
        "row 2: missing turn: turn 2 follows turn 0",
    ),
    # a count stored as a float that is not a whole number: refused as ingest refuses it
    # (the cast to the count's integer type cut it: 2700.5 read as 2700, turn 1.5 as 1)
    "fractional input_tokens": (
        lambda f: _set("input_tokens", 2700.5)(
            f.with_columns(pl.col("input_tokens").cast(pl.Float64))
        ),
        "row 2: invalid input_tokens: 2700.5",
    ),
    "fractional counts in two columns": (  # the first row, not the first column's
        lambda f: _set("input_tokens", 2700.5, row=9)(
            _set("output_tokens", 300.5, row=2)(
                f.with_columns(pl.col("input_tokens", "output_tokens").cast(pl.Float64))
            )
        ),
        "row 3: invalid output_tokens: 300.5",
    ),
    "a whole count past 64 bits": (
        lambda f: _set("input_tokens", 1e30)(
            f.with_columns(pl.col("input_tokens").cast(pl.Float64))
        ),
        "row 2: invalid input_tokens: 1e+30",
    ),
    "a whole turn past 32 bits": (
        lambda f: _set("turn", 3e9)(f.with_columns(pl.col("turn").cast(pl.Float64))),
        "row 2: invalid turn: 3000000000.0",
    ),
    "fractional turn": (
        lambda f: _set("turn", 1.5)(f.with_columns(pl.col("turn").cast(pl.Float64))),
        "row 2: invalid turn: 1.5",
    ),
    # a count stored as text that is no number: the first row with one, named with its
    # value (was polars' words, which named the column and no row)
    "text in input_tokens": (
        lambda f: _set("input_tokens", "x1", row=6)(
            _set("output_tokens", "3x", row=3)(
                f.with_columns(pl.col("input_tokens", "output_tokens").cast(pl.String))
            )
        ),
        "row 4: invalid output_tokens: '3x' (not Int64)",
    ),
    "text in turn": (
        lambda f: _set("turn", "1.5")(f.with_columns(pl.col("turn").cast(pl.String))),
        "row 2: invalid turn: '1.5' (not Int32)",
    ),
    # a bad value ranks before the broken program order it may cause, as in ingest
    "both": (
        lambda f: _set("tool_s", -1.0, row=9)(f.filter(pl.int_range(pl.len()) != 1)),
        "row 10: negative tool_s: -1.0",
    ),
}


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """small.jsonl ingested: 5 programs of 4 calls, in program and turn order."""
    path = tmp_path_factory.mktemp("good") / "small.parquet"
    ingest([SMALL], path)
    return path


def _write(frame: pl.DataFrame, path: Path, metadata: dict[str, str] | None = None) -> Path:
    frame.write_parquet(path, metadata=dict(PARQUET_METADATA) if metadata is None else metadata)
    return path


def _command(name: str, trace: Path, out: Path, fit: Path) -> list[str]:
    if name == "fit":
        return ["fit", str(trace), "-o", str(out)]
    if name == "replay":
        return ["replay", str(trace), "--policy", "vllm", "--no-timing", "--json", str(out)]
    if name == "export":
        return ["export", str(trace), "--to", "agentic-mooncake", "-o", str(out)]
    assert name == "tune"
    return ["tune", str(trace), "--fit", str(fit), "--profile", "llama-3.1-8b-h100",
            "--trials", "2", "-o", str(out)]  # fmt: skip


@pytest.fixture(scope="module")
def fit(good: Path) -> Path:
    path = good.parent / "fit.json"
    res = CliRunner().invoke(app, ["fit", str(good), "-o", str(path), "--bootstrap", "5"])
    assert res.exit_code == 0, res.output
    return path


@pytest.mark.parametrize("command", ["fit", "replay", "export"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_row_is_refused_naming_file_row_and_value(
    good: Path, fit: Path, tmp_path: Path, case: str, command: str
) -> None:
    edit, expected = CASES[case]
    bad = _write(edit(pl.read_parquet(good)), tmp_path / "bad.parquet")
    line = refused(_command(command, bad, tmp_path / "out", fit), tmp_path / "out", "error:")
    assert line == f"error: {bad}: {expected}"


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("99", "trace version 99, newer than this ttlctl reads (version 1)"),
        ("0", "unknown trace version '0' (its ttlctl.trace_version metadata)"),
        ("v1", "unknown trace version 'v1'"),
    ],
)
@pytest.mark.parametrize("command", ["fit", "replay", "export"])
def test_a_trace_version_not_read_here_is_refused(
    good: Path, fit: Path, tmp_path: Path, version: str, expected: str, command: str
) -> None:
    bad = _write(pl.read_parquet(good), tmp_path / "v.parquet", {VERSION_KEY: version})
    line = refused(_command(command, bad, tmp_path / "out", fit), tmp_path / "out", "error:")
    assert line.startswith(f"error: {bad}: {expected}")


@pytest.mark.parametrize("case", ["NaN tool_s", "zero input_tokens", "duplicate row"])
def test_tune_refuses_a_bad_trace_before_any_trial(
    good: Path, fit: Path, tmp_path: Path, case: str
) -> None:
    edit, expected = CASES[case]
    bad = _write(edit(pl.read_parquet(good)), tmp_path / "bad.parquet")
    line = refused(_command("tune", bad, tmp_path / "out", fit), tmp_path / "out", "error:")
    assert line == f"error: {bad}: {expected}"


@pytest.mark.parametrize("case", ["NaN tool_s", "zero input_tokens", "duplicate row", "version"])
def test_refit_refuses_a_bad_trace_given_as_its_log(
    good: Path, fit: Path, tmp_path: Path, case: str
) -> None:
    """refit reads its logs through ingest, whose Parquet records are rows too."""
    if case == "version":
        bad = _write(pl.read_parquet(good), tmp_path / "bad.parquet", {VERSION_KEY: "99"})
        expected = "trace version 99, newer than this ttlctl reads (version 1)"
    else:
        edit, expected = CASES[case]
        bad = _write(edit(pl.read_parquet(good)), tmp_path / "bad.parquet")
    bundle = tmp_path / "bundle.json"
    build = ["bundle", "build", "--fit", str(fit), "--profile", "llama-3.1-8b-h100"]
    res = CliRunner().invoke(app, [*build, "-o", str(bundle)])
    assert res.exit_code == 0, res.output
    before = bundle.read_bytes()
    args = ["refit", str(bad), "--bundle", str(bundle), "-o", str(tmp_path / "out")]
    line = refused(args, tmp_path / "out", "error:")
    assert line.startswith(f"error: {bad}: {expected}")
    assert bundle.read_bytes() == before


def test_a_good_trace_is_read_unchanged(good: Path, tmp_path: Path) -> None:
    """What ingest wrote passes; so does Parquet without version metadata (another tool's,
    docs/trace-format.md) and a file whose rows are not grouped by program: the frame read
    is the file's rows in the file's order."""
    written = pl.read_parquet(good)
    assert trace_io.read(good).equals(written)
    assert trace_io.scan(good).collect().equals(written)
    bare = _write(written, tmp_path / "bare.parquet", {})
    assert VERSION_KEY not in pl.read_parquet_metadata(bare)
    assert trace_io.read(bare).equals(written)
    shuffled = written.sample(fraction=1.0, shuffle=True, seed=3)
    mixed = _write(shuffled, tmp_path / "mixed.parquet")
    assert trace_io.read(mixed).equals(shuffled)


def test_rows_are_counted_in_file_order_when_programs_are_interleaved(
    good: Path, tmp_path: Path
) -> None:
    frame = _set("gap_s", -2.0, row=7)(pl.read_parquet(good))  # p1's last call (gap null)
    reversed_ = _write(frame.reverse(), tmp_path / "rev.parquet")  # row 8 is now row 13
    with pytest.raises(trace_io.TraceError, match=r"rev\.parquet: row 13: negative gap_s: -2\.0"):
        trace_io.read(reversed_)


def test_ingest_rejects_an_empty_prompt_and_counts_it(tmp_path: Path) -> None:
    """input_tokens 0 is a bad record (vLLM refuses an empty prompt): strict, one line;
    with --skip-bad its program goes to the rejects file and the count says why."""
    lines = SMALL.read_text().splitlines()
    first = json.loads(lines[0])
    first["input_tokens"] = 0
    src = tmp_path / "zero.jsonl"
    src.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    out = tmp_path / "t.parquet"
    line = refused(["ingest", str(src), "-o", str(out)], out, "error:")
    assert line == f"error: {src}: line 1: input_tokens is 0: an empty prompt, which vLLM refuses"

    res = CliRunner().invoke(app, ["ingest", str(src), "-o", str(out), "--skip-bad"])
    assert res.exit_code == 0, res.output
    assert "4 record(s) rejected" in res.stderr
    assert any(x.split() == ["1", "input_tokens", "is", "0"] for x in res.stderr.splitlines()), (
        res.stderr
    )
    rejects = [json.loads(x) for x in Path(f"{out}.rejects.jsonl").read_text().splitlines()]
    assert [r["record"] for r in rejects] == ["line 1", "line 2", "line 3", "line 4"]
    assert rejects[0]["reason"] == "input_tokens is 0: an empty prompt, which vLLM refuses"
    trace = trace_io.read(out)
    assert trace.height == 16 and "p0" not in trace["program_id"].to_list()
    # the trace ingest wrote replays (the zero-token call used to crash the KV pool)
    res = CliRunner().invoke(app, ["replay", str(out), "--policy", "vllm", "--no-timing"])
    assert res.exit_code == 0, res.output


def test_the_skip_bad_trace_of_a_refused_one_reads(good: Path, tmp_path: Path) -> None:
    """The way out the docs give: ingest the bad trace with --skip-bad, use what it keeps."""
    edit, _ = CASES["NaN tool_s"]
    bad = _write(edit(pl.read_parquet(good)), tmp_path / "bad.parquet")
    out = tmp_path / "clean.parquet"
    report = ingest([bad], out, skip_bad=True)
    assert report.rejected == 4 and report.rows == 16
    assert trace_io.read(out).height == 16
