"""Checks every ingested row against the canonical trace's rules.

Row rules (a value out of range) and program rules (turns 0..n-1, no duplicate,
arrivals in turn order, ``is_last`` on the last turn) are both computed as polars
expressions over a frame sorted by (program, turn), so the whole check is
columnar. A program with any bad row is rejected whole: the trace that comes out
is always valid, and every rejected row is accounted for with its reason.
"""

from __future__ import annotations

import polars as pl

from ttlctl.trace.schema import REASON, SOURCE_FILE, SOURCE_RECORD

#: Slack allowed between a recorded gap and the tool time inside it (clock rounding).
GAP_TOLERANCE_S = 1e-3


def _neg(name: str) -> pl.Expr:
    return pl.col(name).is_not_null() & (pl.col(name) < 0)


def _nonfinite(name: str) -> pl.Expr:
    return pl.col(name).is_not_null() & ~pl.col(name).is_finite()


def _row_reasons() -> pl.Expr:
    """The first row-level problem of each row, or null."""
    checks: list[tuple[pl.Expr, pl.Expr | str]] = [
        (pl.col("program_id").is_null() | (pl.col("program_id") == ""), "missing program_id"),
        (pl.col("turn").is_null(), "missing turn"),
        (pl.col("turn") < 0, "negative turn"),
        (pl.col("input_tokens").is_null(), "missing input_tokens"),
        (pl.col("output_tokens").is_null(), "missing output_tokens"),
        (pl.col("input_tokens") < 0, "negative input_tokens"),
        (pl.col("output_tokens") < 0, "negative output_tokens"),
        (_neg("reused_tokens"), "negative reused_tokens"),
        (
            pl.col("reused_tokens").is_not_null()
            & (pl.col("reused_tokens") > pl.col("input_tokens")),
            "reused_tokens exceeds input_tokens",
        ),
    ]
    for name in ("arrival_s", "tool_s", "gap_s", "llm_s"):
        checks.append((_nonfinite(name), f"non-finite {name}"))
        checks.append((_neg(name), f"negative {name}"))
    checks.append(
        (
            pl.col("tool_s").is_not_null()
            & pl.col("gap_s").is_not_null()
            & (pl.col("gap_s") < pl.col("tool_s") - GAP_TOLERANCE_S),
            "gap_s shorter than tool_s",
        )
    )
    expr: pl.Expr = pl.lit(None, dtype=pl.String)
    for cond, reason in reversed(checks):
        expr = pl.when(cond.fill_null(False)).then(pl.lit(reason)).otherwise(expr)
    return expr


def _program_reasons() -> pl.Expr:
    """Problems seen against the previous row of the same program (frame sorted)."""
    prog = pl.col("program_id")
    same = prog == prog.shift(1)
    first = ~same.fill_null(False)
    prev_turn = pl.col("turn").shift(1)
    arrival_ff = pl.col("arrival_s").forward_fill().over("program_id")
    prev_arrival = arrival_ff.shift(1)
    last = (prog != prog.shift(-1)).fill_null(True)
    checks: list[tuple[pl.Expr, pl.Expr]] = [
        (
            same & (pl.col("turn") == prev_turn),
            pl.format("duplicate (program, turn): turn {} appears twice", pl.col("turn")),
        ),
        (
            first & (pl.col("turn") != 0),
            pl.format("missing turn: program starts at turn {}", pl.col("turn")),
        ),
        (
            same & (pl.col("turn") != prev_turn + 1),
            pl.format("missing turn: turn {} follows turn {}", pl.col("turn"), prev_turn),
        ),
        (
            (pl.col("turn") == 0) & pl.col("arrival_s").is_null(),
            pl.lit("missing arrival_s on turn 0"),
        ),
        (
            same & (pl.col("arrival_s") < prev_arrival),
            pl.format(
                "out-of-order turns: turn {} arrives at {} s, before turn {} at {} s",
                pl.col("turn"),
                pl.col("arrival_s").round(3),
                prev_turn,
                prev_arrival.round(3),
            ),
        ),
        (
            pl.col("is_last").is_not_null() & (pl.col("is_last") != last),
            pl.format(
                "is_last is {} on turn {}, which is {}the program's last",
                pl.col("is_last"),
                pl.col("turn"),
                pl.when(last).then(pl.lit("")).otherwise(pl.lit("not ")),
            ),
        ),
        (
            last & pl.col("tool").is_not_null(),
            pl.lit("tool named after the program's last call"),
        ),
    ]
    expr: pl.Expr = pl.lit(None, dtype=pl.String)
    for cond, reason in reversed(checks):
        expr = pl.when(cond.fill_null(False)).then(reason).otherwise(expr)
    return expr


def check(frame: pl.LazyFrame) -> pl.LazyFrame:
    """Sort by (program, turn) and add ``_reason`` (null for a good row) and ``_bad_program``.

    ``is_last`` left null by a reader is derived here from the turn order.
    """
    sorted_ = frame.sort(["program_id", "turn"], nulls_last=True, maintain_order=True)
    with_reason = sorted_.with_columns(
        pl.coalesce(pl.col(REASON), _row_reasons(), _program_reasons()).alias(REASON)
    )
    prog = pl.col("program_id")
    last = (prog != prog.shift(-1)).fill_null(True)
    return with_reason.with_columns(
        pl.col("is_last").fill_null(last),
        pl.col(REASON).is_not_null().any().over("program_id").alias("_bad_program"),
    )


def split(checked: pl.LazyFrame) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """(good rows, rejected rows with a reason each) from :func:`check`'s output."""
    good = checked.filter(~pl.col("_bad_program")).drop(REASON, "_bad_program")
    bad = checked.filter(pl.col("_bad_program"))
    first_bad = (
        bad.filter(pl.col(REASON).is_not_null())
        .group_by("program_id", maintain_order=True)
        .agg(pl.col(SOURCE_RECORD).first().alias("_first_bad"))
    )
    rejected = bad.join(first_bad, on="program_id", how="left", nulls_equal=True,
                        maintain_order="left").select(
        SOURCE_FILE,
        SOURCE_RECORD,
        pl.coalesce(
            pl.col(REASON),
            pl.format(
                "rejected with its program: {} has a bad record ({})",
                pl.col("program_id"),
                pl.col("_first_bad"),
            ),
        ).alias("reason"),
        "program_id",
        "turn",
    )
    return good, rejected
