"""Synthetic workloads: the paper's per-program statistics, determinism, canonical validity."""

from __future__ import annotations

import math
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import typer
from typer.testing import CliRunner

from replay import synth as synth_module
from replay.fit_context import fit_context, programs_over
from replay.synth import program_ids, synth
from replay.synth_workloads import WORKLOADS, Tool, solved_tools, turns_distribution
from replay.workload import from_frame
from ttlctl.cli import synth as synth_cli
from ttlctl.errors import ConfigError
from ttlctl.ingest.pipeline import ingest
from ttlctl.trace import io as trace_io
from ttlctl.trace.columns import COLUMNS

#: the Continuum paper's figures (../shared/traces/README.md), written out here on purpose:
#: (turns mean, sd), (tool time mean, sd in s), (tokens per program mean, sd)
PAPER = {
    "swe-bench": ((10.9, 2.1), (0.925, 3.550), (70_000, 20_000)),
    "bfcl": ((6.3, 2.3), (1.923, 2.133), (93_000, 69_000)),
}
MEAN_TOL = 0.10
SD_TOL = 0.20
#: The sample sd of a heavy-tailed mixture converges slowly: its error grows with the
#: kurtosis (about 100 for the SWE-bench tools), so with ~20k tool calls the sample sd
#: of tool time spreads ±7% (1σ) from seed to seed and reached +30% in 60 seeds tried.
TOOL_SD_TOL = 0.35

PROGRAMS = 2_000


def _stats(frame: pl.DataFrame) -> dict[str, tuple[float, float]]:
    last = frame.filter(pl.col("is_last"))
    turns = (last["turn"] + 1).cast(pl.Float64)
    tools = frame["tool_s"].drop_nulls()
    tokens = last["input_tokens"].cast(pl.Float64)
    return {
        "turns": (float(turns.mean()), float(turns.std())),  # type: ignore[arg-type]
        "tool": (float(tools.mean()), float(tools.std())),  # type: ignore[arg-type]
        "tokens": (float(tokens.mean()), float(tokens.std())),  # type: ignore[arg-type]
    }


def _close(got: float, want: float, tol: float) -> bool:
    return abs(got / want - 1) <= tol


@pytest.mark.parametrize("workload", ["swe-bench", "bfcl"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_paper(workload: str, seed: int) -> None:
    stats = _stats(synth(workload, PROGRAMS, seed))
    (tm, ts), (dm, ds), (km, ks) = PAPER[workload]
    assert _close(stats["turns"][0], tm, MEAN_TOL), stats
    assert _close(stats["turns"][1], ts, SD_TOL), stats
    assert _close(stats["tool"][0], dm, MEAN_TOL), stats
    assert _close(stats["tool"][1], ds, TOOL_SD_TOL), stats
    assert _close(stats["tokens"][0], km, MEAN_TOL), stats
    assert _close(stats["tokens"][1], ks, SD_TOL), stats


@pytest.mark.parametrize("workload", ["swe-bench", "bfcl"])
def test_distributions_are_exact_in_expectation(workload: str) -> None:
    (tm, ts), (dm, ds), _ = PAPER[workload]
    support, probs = turns_distribution(tm, ts)
    assert support[0] == 2 and abs(probs.sum() - 1) < 1e-12
    mean = float(probs @ support)
    assert abs(mean - tm) < 1e-6
    assert abs(float(probs @ (support - mean) ** 2) ** 0.5 - ts) < 1e-6
    tools = solved_tools(WORKLOADS[workload])
    m1 = sum(t.weight * t.moments()[0] for t in tools)
    m2 = sum(t.weight * t.moments()[1] for t in tools)
    assert abs(m1 - dm) < 1e-9
    assert abs((m2 - m1 * m1) ** 0.5 - ds) < 1e-9
    if workload == "swe-bench":
        assert ds > 3 * dm  # the heavy tail


@pytest.mark.parametrize("workload", ["swe-bench", "bfcl"])
def test_shape_of_each_program(workload: str) -> None:
    frame = synth(workload, 300, 7)
    assert frame.schema == pl.Schema(COLUMNS)
    assert frame.height == frame.unique(["program_id", "turn"]).height
    assert frame["program_id"].n_unique() == 300
    prev = (pl.col("input_tokens") + pl.col("output_tokens")).shift(1).over("program_id")
    checked = frame.with_columns(prev=prev)
    first, later = checked.filter(pl.col("turn") == 0), checked.filter(pl.col("turn") > 0)
    assert (first["reused_tokens"] == 0).all()
    assert (first["arrival_s"] == 0.0).all()
    assert (first["input_tokens"] >= 1_000).all() and (first["input_tokens"] <= 8_000).all()
    assert (later["reused_tokens"] == later["prev"]).all()  # context grows by output + result
    assert (later["input_tokens"] > later["prev"]).all()
    assert later["arrival_s"].null_count() == later.height
    assert frame["llm_s"].null_count() == frame.height
    last = frame.filter(pl.col("is_last"))
    assert last.height == 300 and (last["turn"] >= 1).all()
    assert last["tool"].null_count() == 300 and last["tool_s"].null_count() == 300
    middle = frame.filter(~pl.col("is_last"))
    assert middle["tool"].null_count() == 0
    assert (middle["gap_s"] == middle["tool_s"]).all() and (middle["tool_s"] > 0).all()
    assert frame["output_tokens"].min() >= 16 and frame["output_tokens"].max() <= 2_048  # type: ignore[operator]
    assert 100 < frame["output_tokens"].mean() < 400  # type: ignore[operator]
    # the replay reads it: every program, every call, pauses from tool_s
    work = from_frame(frame)
    assert len(work.programs) == 300 and work.calls == frame.height
    assert all(p.start_s == 0.0 for p in work.programs)


def test_seeded() -> None:
    a = synth("swe-bench", 200, 3)
    assert a.equals(synth("swe-bench", 200, 3))
    assert not a.equals(synth("swe-bench", 200, 4))
    assert not synth("bfcl", 200, 3).equals(synth("bfcl", 200, 4))


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_seeded_by_the_seed_and_the_workloads_name(workload: str) -> None:
    """replay/synth.py: every draw comes from ``SeedSequence([seed, crc32(workload)])``, its
    first the programs' turns (so a seed draws another stream per workload)."""
    spec = WORKLOADS[workload]
    rng = np.random.default_rng(np.random.SeedSequence([7, zlib.crc32(workload.encode())]))
    support, probs = turns_distribution(spec.turns_mean, spec.turns_sd)
    turns = rng.choice(support, size=50, p=probs)
    frame = synth(workload, 50, 7)
    drawn = frame.group_by("program_id", maintain_order=True).len()["len"].to_list()
    assert drawn == turns.tolist()


def test_the_turns_run_from_2_to_the_mean_plus_8_sd() -> None:
    for spec in WORKLOADS.values():
        support, probs = turns_distribution(spec.turns_mean, spec.turns_sd)
        top = math.ceil(spec.turns_mean + 8 * spec.turns_sd)
        assert support.tolist() == list(range(2, top + 1)) and len(probs) == len(support)


@pytest.mark.parametrize(("workload", "output_mean"), [("swe-bench", 283.3), ("bfcl", 170.0)])
def test_outputs_and_tool_results_are_drawn_as_documented(
    workload: str, output_mean: float
) -> None:
    """replay/synth.py: outputs lognormal, median 250 or 150 and sigma 0.5 (means about 283
    and 170); each tool result at least 16 tokens plus its share, the same in
    expectation at every turn (rounding only adds a few tokens to the last one): here the
    first and the last of each program of three calls or more."""
    frame = synth(workload, PROGRAMS, 1)
    assert _close(float(frame["output_tokens"].mean()), output_mean, 0.03)  # type: ignore[arg-type]
    grown = pl.col("input_tokens").shift(-1).over("program_id") - pl.col("input_tokens")
    results = frame.with_columns(
        result=grown - pl.col("output_tokens"),
        last_turn=pl.col("turn").max().over("program_id"),
    ).filter(~pl.col("is_last"))
    assert int(results["result"].min()) >= 16  # type: ignore[arg-type]  # "a minimum of 16"
    longer = results.filter(pl.col("last_turn") >= 2)
    first = longer.filter(pl.col("turn") == 0)["result"].mean()
    last = longer.filter(pl.col("turn") == pl.col("last_turn") - 1)["result"].mean()
    assert _close(float(last), float(first), 0.15)  # type: ignore[arg-type]


def test_the_tool_tables_are_the_documented_ones() -> None:
    """Each tool's weight, mean, cv and result weight as replay/synth.py's tables give
    them (the solved tool's mean and cv to the table's rounding)."""
    doc = synth_module.__doc__ or ""
    for spec in WORKLOADS.values():
        for tool, solved in zip(spec.tools, solved_tools(spec), strict=True):
            (row,) = [line for line in doc.splitlines() if line.split()[:1] == [tool.name]]
            numbers = [float(x) for x in row.replace("≈", "").split()[1:5]]
            assert numbers[0] == tool.weight and numbers[3] == tool.result_weight, row
            assert solved.mean_s is not None and solved.cv is not None
            assert numbers[1] == round(solved.mean_s, 2 if tool.mean_s is not None else 1), row
            assert numbers[2] == round(solved.cv, 1), row


def test_a_tool_table_that_cannot_reach_the_papers_figures_is_refused() -> None:
    """The solved tool's mean must come out above 0 (here exactly 0)."""
    tools = (Tool("a", 0.5, 1.0, 0.5, 1.0), Tool("b", 0.5, None, None, 1.0))
    spec = replace(WORKLOADS["bfcl"], tool_mean_s=0.5, tool_sd_s=1.0, tools=tools)
    with pytest.raises(ValueError, match="cannot reach the paper's mean and sd"):
        solved_tools(spec)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown workload"):
        synth("nope", 10, 0)
    with pytest.raises(ValueError, match="at least 1"):
        synth("bfcl", 0, 0)
    with pytest.raises(ConfigError, match=r"^--seed must be non-negative, not -1$"):
        synth("bfcl", 10, -1)  # named before numpy's own refusal of a negative seed


@pytest.mark.parametrize("workload", ["swe-bench", "bfcl"])
def test_passes_canonical_validation(tmp_path: Path, workload: str) -> None:
    frame = synth(workload, PROGRAMS, 0)
    src = tmp_path / "synth.parquet"
    assert trace_io.write(frame.lazy(), src) == frame.height
    report = ingest([src], tmp_path / "back.parquet", fmt="canonical")  # strict: raises on bad
    assert report.rows == frame.height and report.rejected == 0
    back = trace_io.read(tmp_path / "back.parquet").sort(["program_id", "turn"])
    assert back.select(list(COLUMNS)).equals(frame)


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("synth")(synth_cli.synth)

    @app.command("noop")
    def _noop() -> None:  # a second command, so "synth" is a subcommand as in ttlctl
        pass

    return app


def test_cli(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "t.parquet"
    args = ["synth", "--workload", "bfcl", "--programs", "50", "--seed", "5", "-o", str(out)]
    res = runner.invoke(_app(), args)
    assert res.exit_code == 0, res.output
    assert res.stdout.count("\n") == 1 and "bfcl" in res.stdout and str(out) in res.stdout
    written = trace_io.read(out)
    assert written.select(list(COLUMNS)).equals(synth("bfcl", 50, 5))

    res = runner.invoke(_app(), ["synth", "--workload", "swe", "--programs", "5", "-o", str(out)])
    assert res.exit_code == 2 and "unknown workload" in res.output
    assert res.output.strip().count("\n") == 0 and "Traceback" not in res.output
    res = runner.invoke(_app(), ["synth", "--workload", "bfcl", "--programs", "0", "-o", str(out)])
    assert res.exit_code == 2 and "at least 1" in res.output


@pytest.mark.parametrize("limit", [1900, 600])
def test_fit_context_scales_programs_into_a_small_window(tmp_path: Path, limit: int) -> None:
    """--max-context: every call fits, programs that already fit are unchanged, pauses
    and tools are kept, outputs keep a few tokens, and the trace stays valid."""
    frame = synth("swe-bench", 40, 3)
    # one program that already fits: a program's first and last calls, made small
    first = frame.filter(pl.col("program_id") == frame["program_id"][0])
    small = first.filter((pl.col("turn") == 0) | pl.col("is_last")).with_columns(
        turn=pl.Series([0, 1]).cast(first["turn"].dtype),
        input_tokens=pl.Series([100, 150]),
        output_tokens=pl.Series([10, 2]),
        reused_tokens=pl.Series([0, 110]),
        program_id=pl.lit("fits"),
    )
    frame = pl.concat([frame, small.select(frame.columns)]).sort("program_id", "turn")
    scaled = fit_context(frame, limit)
    assert scaled.columns == frame.columns and scaled.height == frame.height
    assert (scaled["input_tokens"] + scaled["output_tokens"]).max() <= limit
    assert scaled.filter(pl.col("program_id") != "fits")["output_tokens"].min() >= 4
    assert scaled.filter(pl.col("program_id") == "fits").equals(
        frame.filter(pl.col("program_id") == "fits")
    )
    for col in ("tool_s", "gap_s", "tool", "turn", "is_last"):
        assert scaled[col].equals(frame[col]), col
    # the largest call of a scaled program comes close to the window
    peaks = scaled.group_by("program_id").agg(
        (pl.col("input_tokens") + pl.col("output_tokens")).max()
    )
    assert peaks.filter(pl.col("program_id") != "fits")["input_tokens"].min() >= limit * 0.97
    src = tmp_path / "scaled.parquet"
    trace_io.write(scaled.lazy(), src)
    report = ingest([src], tmp_path / "back.parquet", fmt="canonical")  # strict
    assert report.rows == scaled.height and report.rejected == 0
    with pytest.raises(ValueError, match="above 4"):
        fit_context(frame, 4)


@pytest.mark.parametrize("limit", [5, 10, 20, 40])
def test_fit_context_never_empties_a_prompt(tmp_path: Path, limit: int) -> None:
    """Regression: `synth --max-context 10` (or 20, 40) rounded a small scaled prompt to
    0 tokens, and every command then refused the trace it wrote ('row 1: input_tokens is
    0: an empty prompt'); a call almost all output could take the whole window as output.
    Every scaled call keeps a prompt of at least one token within the window."""
    frame = synth("bfcl", 50, 0)
    first = frame.filter(pl.col("program_id") == frame["program_id"][0]).head(1)
    mostly_output = first.with_columns(
        input_tokens=pl.lit(1, dtype=first["input_tokens"].dtype),
        output_tokens=pl.lit(999, dtype=first["output_tokens"].dtype),
        reused_tokens=pl.lit(0, dtype=first["reused_tokens"].dtype),
        program_id=pl.lit("mostly-output"),
        is_last=pl.lit(True),
        tool=pl.lit(None, dtype=first["tool"].dtype),
        tool_s=pl.lit(None, dtype=first["tool_s"].dtype),
        gap_s=pl.lit(None, dtype=first["gap_s"].dtype),
    )
    frame = pl.concat([frame, mostly_output.select(frame.columns)])
    scaled = fit_context(frame, limit)
    assert scaled["input_tokens"].min() >= 1
    assert (scaled["input_tokens"] + scaled["output_tokens"]).max() <= limit
    assert scaled["output_tokens"].min() >= 4
    src = tmp_path / "scaled.parquet"
    trace_io.write(scaled.lazy(), src)
    report = ingest([src], tmp_path / "back.parquet", fmt="canonical")  # strict
    assert report.rows == scaled.height and report.rejected == 0


def test_cli_max_context(tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    args = ["synth", "--workload", "swe-bench", "--programs", "8", "--max-context", "1900"]
    res = CliRunner().invoke(_app(), [*args, "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "8 programs scaled to 1,900 tokens" in res.stdout
    written = trace_io.read(out).sort("program_id", "turn")
    assert written.select(list(COLUMNS)).equals(fit_context(synth("swe-bench", 8, 0), 1900))


def test_cli_max_context_says_how_many_programs_it_scaled(tmp_path: Path) -> None:
    """`--max-context 500000` said "scaled to 500,000 tokens" though every call already fit
    and nothing was scaled; the line counts the programs scaled (those with a longer call)."""
    out = tmp_path / "t.parquet"
    drawn = synth("swe-bench", 20, 0)
    longest = (drawn["input_tokens"] + drawn["output_tokens"]).max()
    assert isinstance(longest, int)
    args = ["synth", "--workload", "swe-bench", "--programs", "20", "-o", str(out)]
    res = CliRunner().invoke(_app(), [*args, "--max-context", str(longest)])
    assert res.exit_code == 0, res.output
    assert f"none scaled: every call within {longest:,} tokens" in res.stdout
    assert trace_io.read(out).sort("program_id", "turn").select(list(COLUMNS)).equals(drawn)
    per_program = drawn.group_by("program_id").agg(
        (pl.col("input_tokens") + pl.col("output_tokens")).max().alias("longest")
    )
    limit = int(per_program["longest"].median())
    over = int((per_program["longest"] > limit).sum())
    assert 0 < over < 20
    res = CliRunner().invoke(_app(), [*args, "--max-context", str(limit)])
    assert f"(seed 0, {over} programs scaled to {limit:,} tokens)" in res.stdout, res.stdout
    # a window past what a count holds scales nothing (it overflowed polars' integers)
    res = CliRunner().invoke(_app(), [*args, "--max-context", str(10**20)])
    assert res.exit_code == 0 and "none scaled" in res.stdout, res.output
    assert trace_io.read(out).sort("program_id", "turn").select(list(COLUMNS)).equals(drawn)


def test_fit_context_keeps_a_reused_prefix_within_the_previous_scaled_call() -> None:
    """Scaled by 0.1, the first call (24 + 44 tokens) rounds to 2 + 4 and the second's
    68 reused tokens to 7: cut to the 6 the first call's stream now holds."""
    frame = pl.DataFrame(
        {
            "program_id": ["p", "p"],
            "turn": [0, 1],
            "input_tokens": [24, 9956],
            "output_tokens": [44, 44],
            "reused_tokens": [0, 68],
        }
    )
    scaled = fit_context(frame, 1000).sort("turn")
    assert scaled["input_tokens"].to_list() == [2, 996]
    assert scaled["output_tokens"].to_list() == [4, 4]
    assert scaled["reused_tokens"].to_list() == [0, 6]


def test_fit_context_sees_a_call_past_64_bits_as_long() -> None:
    """A call whose prompt + output passes the counts' 64-bit range is the longest of its
    program, and is scaled (a wrapped sum read it as negative: the program counted as
    fitting and the call was left whole)."""
    frame = pl.DataFrame(
        {
            "program_id": ["p", "p"],
            "turn": [0, 1],
            "input_tokens": [2**63 - 11, 1_000],
            "output_tokens": [100, 5],
            "reused_tokens": [0, 0],
        }
    )
    assert programs_over(frame, 2048) == 1
    scaled = fit_context(frame, 2048).sort("turn")
    assert scaled["input_tokens"].to_list() == [2044, 1]
    assert scaled["output_tokens"].to_list() == [4, 4]


def test_fit_context_reads_an_endless_window_as_one_every_call_fits() -> None:
    frame = pl.DataFrame(
        {
            "program_id": ["p"],
            "turn": [0],
            "input_tokens": [50],
            "output_tokens": [9],
            "reused_tokens": [0],
        }
    )
    assert fit_context(frame, 10**40).equals(frame)


def test_fit_context_keeps_a_null_reused_prefix_null(tmp_path: Path) -> None:
    """A real trace's null reused_tokens (the canonical default: the previous prompt +
    output, capped at this prompt) stays null when scaled: turn 0 must not come out
    claiming a prefix shared with no call. bench/fit_window.py does this to a file."""
    import subprocess
    import sys

    frame = pl.DataFrame(
        {
            "program_id": ["p", "p", "p", "q"],
            "turn": [0, 1, 2, 0],
            "input_tokens": [3000, 5000, 8000, 1000],
            "output_tokens": [100, 200, 400, 50],
            "reused_tokens": [None, None, 4000, None],
            "tool": ["ls", "cat", None, None],
            "tool_s": [0.5, 1.0, None, None],
            "gap_s": [0.6, 1.2, None, None],
            "is_last": [False, False, True, True],
        }
    ).with_columns(arrival_s=pl.Series([0.0, None, None, 3.0]))
    frame = frame.select(c for c in COLUMNS if c in frame.columns)
    scaled = fit_context(frame, 2000).sort("program_id", "turn")
    p = scaled.filter(pl.col("program_id") == "p")
    assert p["reused_tokens"].to_list() == [None, None, 952]  # 4000 x 2000/8400
    assert (p["input_tokens"] + p["output_tokens"]).max() == 2000
    assert scaled.filter(pl.col("program_id") == "q").equals(
        frame.filter(pl.col("program_id") == "q")
    )
    src, dst = tmp_path / "real.parquet", tmp_path / "scaled.parquet"
    trace_io.write(frame.lazy(), src)
    script = Path(__file__).resolve().parents[2] / "bench" / "fit_window.py"
    done = subprocess.run(
        [sys.executable, str(script), str(src), "--max-context", "2000", "-o", str(dst)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "wrote 4 calls, scaled to 2,000 tokens" in done.stdout
    written = trace_io.read(dst).sort("program_id", "turn")
    assert written.select(scaled.columns).equals(scaled)


def test_program_ids_sort_as_numbered_with_the_fewest_digits() -> None:
    """Six digits up to 10⁶ programs (ids to 999999), seven from one more: the width is the
    largest id's, not the count's (10⁶ programs would take seven)."""
    assert program_ids("swe", 3) == ["swe-000000", "swe-000001", "swe-000002"]
    assert program_ids("swe", 10**6)[-1] == "swe-999999"
    ids = program_ids("swe", 10**6 + 1)
    assert ids[-1] == "swe-1000000" and ids[0] == "swe-0000000"
    assert ids == sorted(ids)
