"""The reuse a call is taken to have where its trace does not record it.

A null ``reused_tokens`` is the trace format's default (docs/trace-format.md): the call's
prompt repeats its program's previous call, prompt and output (nothing for a program's
first call), at most this call's own prompt. One expression, so that what the replay
takes (:func:`replay.workload.from_frame`) and what ``ingest`` reports as assumed
(:func:`ttlctl.trace.summary.summarize`) are the same figure.
"""

from __future__ import annotations

import polars as pl


def assumed_reuse() -> pl.Expr:
    """Each row's default reuse: the previous call's input + output in its program (by
    turn; 0 for the first), at most this call's input. Taken as the previous input plus
    what of the previous output fits below this input, so that no sum passes this input:
    two counts near a column's 64-bit limit would wrap negative."""

    def previous(column: str) -> pl.Expr:
        return pl.col(column).shift(1).over("program_id", order_by="turn")

    inp = pl.col("input_tokens")
    room = inp - previous("input_tokens")  # what this input holds past the previous one
    capped = (
        pl.when(room <= 0)
        .then(inp)
        .otherwise(previous("input_tokens") + pl.min_horizontal(previous("output_tokens"), room))
        .fill_null(0)
    )
    return pl.min_horizontal(capped, inp)


def reuse() -> pl.Expr:
    """Each row's reuse as the replay takes it: the recorded ``reused_tokens``, else
    :func:`assumed_reuse` (named ``reused_tokens``)."""
    return pl.coalesce(pl.col("reused_tokens"), assumed_reuse()).alias("reused_tokens")
