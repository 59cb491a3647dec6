"""The reuse a call is taken to have where its trace does not record it.

A null ``reused_tokens`` is the trace format's default (docs/trace-format.md): the call's
prompt repeats its program's previous call, prompt and output (nothing for a program's
first call), at most this call's own prompt. One expression, so that what the replay
takes (:func:`replay.workload.from_frame`) and what ``ingest`` reports as assumed
(:func:`ttlctl.trace.summary.summarize`) are the same figure.
"""

from __future__ import annotations

import polars as pl

from ttlctl.trace.columns import COUNT_MAX


def assumed_reuse() -> pl.Expr:
    """Each row's default reuse: the previous call's input + output in its program (by
    turn; 0 for the first), at most this call's input. The sum saturates at the columns'
    largest count instead of wrapping negative (two counts near the 64-bit limit); at most
    this input, the result is the same."""
    inp, out = pl.col("input_tokens"), pl.col("output_tokens")
    room = pl.lit(COUNT_MAX) - inp  # what a sum may add to this input without wrapping
    # a null output stays null (as in a plain sum): neither branch is taken then
    added = pl.when(out <= room).then(out).when(out > room).then(room)
    previous = (inp + added).shift(1).over("program_id", order_by="turn").fill_null(0)
    return pl.min_horizontal(previous, inp)


def reuse() -> pl.Expr:
    """Each row's reuse as the replay takes it: the recorded ``reused_tokens``, else
    :func:`assumed_reuse` (named ``reused_tokens``)."""
    return pl.coalesce(pl.col("reused_tokens"), assumed_reuse()).alias("reused_tokens")
