"""The "Trace" section: programs, calls and tokens, the pause and latency quantiles, the
most called tools and the programs with the most calls."""

from __future__ import annotations

import polars as pl

from ttlctl.nouns import counted, listed
from ttlctl.report.markup import absent, note, table
from ttlctl.report.rundir import RunInputs
from ttlctl.trace.summary import summarize

#: the timing columns a trace may leave empty (docs/trace-format.md)
OPTIONAL = ("tool_s", "gap_s", "llm_s")


def section(run: RunInputs) -> str:
    if run.trace is None:
        return absent("trace.parquet")
    frame = run.trace
    s = summarize(frame.lazy())
    tok = s["tokens"]
    rows = [
        (label, st["count"], st["p50"], st["p90"], st["p99"], st["mean"])
        for label, st in (
            ("calls per program", s["calls_per_program"]),
            ("input tokens per call", tok["input_per_call"]),
            ("output tokens per call", tok["output_per_call"]),
            ("tool_s (measured tool time)", s["tool_s"]),
            ("gap_s (idle before next call)", s["gap_s"]),
            ("llm_s (call latency)", s["llm_s"]),
        )
    ]
    parts = [
        f"<p>{counted(s['programs'], 'program')}, {counted(s['calls'], 'call')}; tokens: input "
        f"{tok['input']:,}, output {tok['output']:,}, reused {tok['reused']:,}.</p>",
        table(("quantity", "count", "p50", "p90", "p99", "mean"), rows),
    ]
    # a column no call has (a synthetic trace records no latency) is a row of dashes:
    # say why, once
    missing = [column for column in OPTIONAL if s[column]["count"] == 0]
    if missing and s["calls"]:
        one = len(missing) == 1
        parts.append(
            note(
                f"{listed(missing)} {'is' if one else 'are'} not in this trace (no call records "
                f"{'it' if one else 'them'}): {'its row is' if one else 'their rows are'} empty."
            )
        )
    tools = s["tools"]
    if tools["distinct"]:
        parts.append(
            f"<p>Tools: {tools['distinct']:,} distinct, "
            f"{counted(tools['calls_with_tool'], 'call')} "
            f"(the {len(tools['top'])} most called):</p>"
        )
        parts.append(
            table(
                ("tool", "calls", "timed", "tool_s p50", "gap_s p50"),
                (
                    (t["tool"], t["calls"], t["timed"], t["tool_s_p50"], t["gap_s_p50"])
                    for t in tools["top"]
                ),
            )
        )
    else:
        parts.append(note("No tool named in this trace."))
    top = (
        frame.group_by("program_id")
        .agg(pl.len().alias("calls"), pl.col("input_tokens").max().alias("context"))
        .sort(["calls", "program_id"], descending=[True, False])
        .head(5)
    )
    parts.append("<p>Programs with the most calls:</p>")
    parts.append(
        table(
            ("program", "calls", "largest input (tokens)"),
            ((r["program_id"], r["calls"], r["context"]) for r in top.iter_rows(named=True)),
        )
    )
    return "".join(parts)
