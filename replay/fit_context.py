"""A trace scaled to fit a small context window: :func:`fit_context` scales each program's
token counts so that its largest call fits (the test models' 2,048 tokens, small KV caches),
keeping the trace valid. ``ttlctl synth --max-context`` and ``bench/fit_window.py`` apply it."""

from __future__ import annotations

import polars as pl

from ttlctl.errors import ConfigError

#: a window at least this long fits every call a trace can hold (its counts are 64-bit, and
#: the scale factor a float): a longer ``--max-context`` is read as this one
_ENDLESS = 2**53


def _call_tokens() -> pl.Expr:
    """Each call's prompt + output, summed in 128 bits (two counts near the columns' 64-bit
    limit would wrap negative, and the call would read as short)."""
    return pl.col("input_tokens").cast(pl.Int128) + pl.col("output_tokens")


def programs_over(frame: pl.DataFrame, limit: int) -> int:
    """How many programs have a call (prompt + output) longer than ``limit`` tokens: those
    :func:`fit_context` scales."""
    limit = min(limit, _ENDLESS)
    longest = frame.group_by("program_id").agg(_call_tokens().max().alias("longest"))
    return int((longest["longest"] > limit).sum())


def fit_context(frame: pl.DataFrame, limit: int, min_output: int = 4) -> pl.DataFrame:
    """Scale each program's token counts so that its largest call (prompt + output)
    fits in ``limit`` tokens: small models' windows (the 2,048 of the test models)
    and small KV caches. Programs that fit are left as they are; pauses and tools
    are kept. A scaled call keeps at least ``min_output`` output tokens (a few
    decode steps), and its reused prefix never exceeds its prompt or the previous
    call's prompt + output, so the trace stays valid. A null ``reused_tokens`` (the
    canonical default: the previous call's prompt + output, capped at this prompt)
    stays null: it means the same of the scaled calls. Works on any canonical trace
    (``bench/fit_window.py`` applies it to ingested real traces)."""
    if limit <= min_output:
        raise ConfigError(f"--max-context must be above {min_output} tokens, not {limit}")
    limit = min(limit, _ENDLESS)
    tokens = ("input_tokens", "output_tokens", "reused_tokens")
    total = _call_tokens()
    work = frame.sort("program_id", "turn").with_columns(
        _f=(pl.lit(float(limit)) / total.max().over("program_id")).clip(upper_bound=1.0),
        **{f"_{c}": pl.col(c) for c in tokens},
    )
    # the output at least min_output tokens, and one token short of the window at most,
    # which leaves the prompt a token (limit > min_output); the prompt never rounded to 0
    # (an empty prompt is no call: vLLM refuses it, and so does every reader of the trace)
    out = pl.min_horizontal(
        pl.max_horizontal((pl.col("_output_tokens") * pl.col("_f")).round(), pl.lit(min_output)),
        pl.lit(limit - 1),
    )
    work = work.with_columns(_out=out.cast(pl.Int64))
    inp = pl.max_horizontal(
        pl.min_horizontal((pl.col("_input_tokens") * pl.col("_f")).round(), limit - pl.col("_out")),
        pl.lit(1),
    )
    work = work.with_columns(_in=inp.cast(pl.Int64))
    previous = (pl.col("_in") + pl.col("_out")).shift(1).over("program_id")
    reused = (pl.col("_reused_tokens") * pl.col("_f")).round().cast(pl.Int64)
    work = work.with_columns(
        _reused=pl.when(pl.col("_reused_tokens").is_null())
        .then(None)
        .when(pl.col("turn") == 0)
        .then(pl.min_horizontal(reused, pl.col("_in")))
        .otherwise(pl.min_horizontal(reused, pl.col("_in"), previous))
    )
    scaled = pl.col("_f") < 1.0
    return work.with_columns(
        input_tokens=pl.when(scaled).then(pl.col("_in")).otherwise(pl.col("_input_tokens")),
        output_tokens=pl.when(scaled).then(pl.col("_out")).otherwise(pl.col("_output_tokens")),
        reused_tokens=pl.when(scaled).then(pl.col("_reused")).otherwise(pl.col("_reused_tokens")),
    ).select(frame.columns)
