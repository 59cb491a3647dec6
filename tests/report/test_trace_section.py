"""The trace section says why a timing row is empty: the column is not in the trace."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tests.report.pages import rows, section
from ttlctl.report import build_report
from ttlctl.report.markup import num
from ttlctl.trace import io as trace_io
from ttlctl.trace.summary import summarize


def _trace_section(run: Path, frame: pl.DataFrame) -> str:
    trace_io.write(frame.lazy(), run / "trace.parquet")
    page = build_report(run)
    return section(page, "trace")


def test_a_column_no_call_has_is_said_to_be_absent(sample_run: Path, tmp_path: Path) -> None:
    """Regression: on a synthetic trace (no latencies) the llm_s row was a row of "—" with
    count 0, and nothing said why."""
    frame = trace_io.read(sample_run / "trace.parquet")
    timed = frame.with_columns(pl.lit(1.5).alias("llm_s"))
    assert "not in this trace" not in _trace_section(tmp_path, timed)
    synthetic = frame.with_columns(pl.lit(None, dtype=pl.Float64).alias("llm_s"))
    section = _trace_section(tmp_path, synthetic)
    assert "llm_s is not in this trace (no call records it): its row is empty." in section
    untimed = synthetic.with_columns(pl.lit(None, dtype=pl.Float64).alias("tool_s"))
    section = _trace_section(tmp_path, untimed)
    assert "tool_s and llm_s are not in this trace (no call records them)" in section


def test_the_figures_are_the_traces_own(sample_run: Path, sample_page: str) -> None:
    """The counts and quantiles in their columns, the reused tokens, the tools' calls, and
    the programs with the most calls first."""
    frame = trace_io.read(sample_run / "trace.parquet")
    s = summarize(frame.lazy())
    text = section(sample_page, "trace")
    tok = s["tokens"]
    assert (
        f"tokens: input {tok['input']:,}, output {tok['output']:,}, reused {tok['reused']:,}."
    ) in text
    assert tok["reused"] != tok["input"]
    st = s["calls_per_program"]
    want = ["calls per program", *(num(st[k]) for k in ("count", "p50", "p90", "p99", "mean"))]
    assert rows(text)[0] == want and st["p90"] != st["p99"]
    tools = s["tools"]
    assert f"{tools['calls_with_tool']:,} calls (the " in text
    calls = frame.group_by("program_id").len()["len"].sort(descending=True).to_list()
    programs = rows(text.split("Programs with the most calls")[1])
    assert [int(r[1]) for r in programs] == calls[:5] and calls[0] > calls[-1]
