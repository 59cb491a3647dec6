"""What a canonical trace holds, in numbers: the table ``ttlctl ingest`` prints."""

from __future__ import annotations

from typing import Any

import polars as pl

PERCENTILES = (50, 90, 99)


def _min_samples(p: int) -> int:
    """Fewest samples for which the p-th percentile means something (p99 needs 100)."""
    return max(1, round(100 / (100 - p)))


def percentiles(values: pl.Series) -> dict[str, Any]:
    """``{"count": n, "p50": x, "p90": y, "p99": z}``; null where samples are too few."""
    clean = values.drop_nulls().cast(pl.Float64)
    out: dict[str, Any] = {"count": clean.len()}
    for p in PERCENTILES:
        key = f"p{p}"
        if clean.len() >= _min_samples(p):
            q = clean.quantile(p / 100, interpolation="linear")
            out[key] = None if q is None else float(q)
        else:
            out[key] = None
    out["mean"] = float(clean.mean()) if clean.len() else None  # type: ignore[arg-type]
    return out


def summarize(trace: pl.LazyFrame, top_tools: int = 15) -> dict[str, Any]:
    """Counts, token totals, tools and pause percentiles of a canonical trace."""
    frame = trace.select(
        "program_id",
        "input_tokens",
        "output_tokens",
        "reused_tokens",
        "tool",
        "tool_s",
        "gap_s",
        "llm_s",
    ).collect()
    per_program = frame.group_by("program_id").len()["len"]
    tools = (
        frame.filter(pl.col("tool").is_not_null())
        .group_by("tool")
        .agg(
            pl.len().alias("calls"),
            pl.col("tool_s").drop_nulls().len().alias("timed"),
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
            "input": int(frame["input_tokens"].sum()),
            "output": int(frame["output_tokens"].sum()),
            "reused": int(frame["reused_tokens"].sum()),
            "input_per_call": percentiles(frame["input_tokens"]),
            "output_per_call": percentiles(frame["output_tokens"]),
        },
        "tools": {
            "distinct": tools.height,
            "calls_with_tool": int(tools["calls"].sum()),
            "top": tools.head(top_tools).to_dicts(),
        },
        "tool_s": percentiles(frame["tool_s"]),
        "gap_s": percentiles(frame["gap_s"]),
        "llm_s": percentiles(frame["llm_s"]),
    }
