"""The trace summary ``ttlctl ingest`` prints: a null ``reused_tokens`` (the reader does not
know it; the canonical default applies) is counted apart, not summed as 0."""

from __future__ import annotations

import polars as pl

from ttlctl.trace.columns import conform
from ttlctl.trace.summary import summarize


def _trace(reused: list[int | None]) -> pl.LazyFrame:
    n = len(reused)
    frame = pl.LazyFrame(
        {
            "program_id": ["p"] * n,
            "turn": list(range(n)),
            "input_tokens": [100 * (i + 1) for i in range(n)],
            "output_tokens": [10] * n,
            "reused_tokens": reused,
            "tool": ["bash"] * (n - 1) + [None],
        },
        schema_overrides={"reused_tokens": pl.Int64},
    )
    return conform(frame, keep_source=False)


def test_unknown_reuse_is_counted_apart_from_known_reuse() -> None:
    tokens = summarize(_trace([0, 90, None, 250]))["tokens"]
    assert tokens["reused"] == 340
    assert tokens["reused_unknown_calls"] == 1
    assert tokens["input"] == 1000 and tokens["output"] == 40


def test_a_trace_whose_reader_records_no_reuse_says_so() -> None:
    tokens = summarize(_trace([None, None, None]))["tokens"]
    assert tokens["reused"] == 0
    assert tokens["reused_unknown_calls"] == 3
