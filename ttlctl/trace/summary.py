"""What a canonical trace holds, in numbers: the table ``ttlctl ingest`` prints."""

from __future__ import annotations

from typing import Any

import polars as pl

from fitting.percentile import percentile
from ttlctl.trace.reuse import assumed_reuse

PERCENTILES = (50, 90, 99)
#: the token columns the summary sums
_TOTALLED = ("input_tokens", "output_tokens", "reused_tokens")


def percentiles(values: pl.Series) -> dict[str, Any]:
    """``{"count": n, "p50": x, "p90": y, "p99": z}``; null where samples are too few."""
    clean = values.drop_nulls().cast(pl.Float64)
    out: dict[str, Any] = {"count": clean.len()}
    samples = clean.to_numpy()
    for p in PERCENTILES:
        out[f"p{p}"] = percentile(samples, p)
    out["mean"] = float(clean.mean()) if clean.len() else None  # type: ignore[arg-type]
    return out


def summarize(trace: pl.LazyFrame, top_tools: int = 15) -> dict[str, Any]:
    """Counts, token totals, tools and pause percentiles of a canonical trace."""
    frame = trace.select(
        "program_id",
        "turn",
        "input_tokens",
        "output_tokens",
        "reused_tokens",
        "tool",
        "tool_s",
        "gap_s",
        "llm_s",
    ).collect()
    per_program = frame.group_by("program_id").len()["len"]
    # token totals in 128 bits: a column holds counts up to 2**63 - 1, and their sum wraps
    total = {c: int(frame[c].cast(pl.Int128).sum()) for c in _TOTALLED}
    # what the replay takes where reuse is not recorded (ttlctl.trace.reuse)
    assumed = (
        frame.with_columns(assumed_reuse().alias("assumed"))
        .filter(pl.col("reused_tokens").is_null())["assumed"]
        .cast(pl.Int128)
        .sum()
    )
    tools = (
        frame.filter(pl.col("tool").is_not_null())
        .group_by("tool")
        .agg(
            pl.len().alias("calls"),
            pl.col("tool_s").drop_nulls().len().alias("timed"),
            pl.coalesce("tool_s", "gap_s").drop_nulls().len().alias("paused"),
            pl.col("tool_s").median().alias("tool_s_p50"),
            pl.col("gap_s").median().alias("gap_s_p50"),
        )
        .sort(["calls", "tool"], descending=[True, False])
    )
    return {
        "programs": per_program.len(),
        "calls": frame.height,
        "calls_per_program": percentiles(per_program),
        "tokens": {
            "input": total["input_tokens"],
            "output": total["output_tokens"],
            # over the calls whose reader knows it; null means "the default applies"
            # (previous input + output), not 0 — those calls are counted apart
            "reused": total["reused_tokens"],
            "reused_unknown_calls": int(frame["reused_tokens"].null_count()),
            # over those calls: the reuse the replay assumes for them
            "reused_assumed": int(assumed or 0),
            "input_per_call": percentiles(frame["input_tokens"]),
            "output_per_call": percentiles(frame["output_tokens"]),
        },
        "tools": {
            "distinct": tools.height,
            "calls_with_tool": int(tools["calls"].sum()),
            # what `ttlctl fit` fits: a tool's call with a pause (tool_s, else gap_s)
            "calls_with_pause": int(tools["paused"].sum()),
            "distinct_with_pause": int((tools["paused"] > 0).sum()),
            "top": tools.head(top_tools).to_dicts(),
        },
        "tool_s": percentiles(frame["tool_s"]),
        "gap_s": percentiles(frame["gap_s"]),
        "llm_s": percentiles(frame["llm_s"]),
    }
