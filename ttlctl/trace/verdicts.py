"""What the trace's rules (:mod:`ttlctl.trace.rules`) say of a frame: ingest's good rows and
rejected rows, each with its reason (:func:`split`), and a trace read back's first broken row
(:func:`first_broken`). A rejected row's reason names where the record it refers to is (the
first copy of a duplicate, a bad program's bad record): its record, and its file when that is
another (:func:`_place`).
"""

from __future__ import annotations

import polars as pl

from ttlctl.trace.columns import REASON, SOURCE_FILE, SOURCE_RECORD, SOURCE_ROW
from ttlctl.trace.rules import CODE, FIRST_COPY, RANK, TOOL_NAME, check, maybe_blank, messages


def split(checked: pl.LazyFrame) -> tuple[pl.LazyFrame, pl.DataFrame]:
    """(good rows, rejected rows with ``reason``) from :func:`check`'s output.

    The rejected rows are collected (they are few, or the input is bad anyway);
    the good rows stay lazy so that they can be streamed to the output.
    """
    flagged = checked.filter(pl.col(CODE) != 0)
    bad_programs = flagged.select("program_id").unique().collect()["program_id"]
    in_bad = pl.col("program_id").is_in(bad_programs.implode(), nulls_equal=True)
    helpers = [
        "_prev_turn",
        "_prev_arrival",
        "_prev_arrival_turn",
        "_last",
        CODE,
        SOURCE_ROW,
        TOOL_NAME,
    ]
    good = checked.filter(~in_bad).drop(*helpers, REASON)
    if bad_programs.len() == 0:
        return good, pl.DataFrame(
            schema={
                SOURCE_FILE: pl.String,
                SOURCE_RECORD: pl.String,
                "reason": pl.String,
                "program_id": pl.String,
                "turn": pl.Int32,
                RANK: pl.Int8,
            }
        )
    # messages are formatted in memory: few rows, and polars 2.1's streaming engine
    # panics on string-valued when/then chains. A bad program's rows are all here, in
    # turn order, so the first of a (program, turn) is its first copy read.
    placed = checked.filter(in_bad).with_columns(
        pl.coalesce(pl.col(SOURCE_RECORD), pl.format("line {}", pl.col(SOURCE_ROW)))
    )
    first = [pl.col(c).first().over("program_id", "turn") for c in (SOURCE_FILE, SOURCE_RECORD)]
    rows = messages(placed.with_columns(_place(*first).alias(FIRST_COPY))).collect(
        engine="in-memory"
    )
    first_bad = (
        rows.filter(pl.col(CODE) != 0)
        .group_by("program_id", maintain_order=True)
        .agg(pl.col(SOURCE_FILE, SOURCE_RECORD).first().name.prefix("_bad"))
    )
    rejected = rows.join(
        first_bad, on="program_id", how="left", nulls_equal=True, maintain_order="left"
    ).select(
        SOURCE_FILE,
        SOURCE_RECORD,
        pl.coalesce(
            pl.col(REASON),
            pl.format(
                "rejected with its program: {} has a bad record ({})",
                pl.col("program_id"),
                _place(pl.col(f"_bad{SOURCE_FILE}"), pl.col(f"_bad{SOURCE_RECORD}")),
            ),
        ).alias("reason"),
        "program_id",
        "turn",
        pl.when(pl.col(CODE) != 0).then(pl.col(RANK)).otherwise(3).cast(pl.Int8).alias(RANK),
    )
    return good, rejected


def _place(file: pl.Expr, record: pl.Expr) -> pl.Expr:
    """Where another row of the input is, seen from this row's: its record, and its file
    when that is another (the style of a duplicate request's reason)."""
    return (
        pl.when(file.eq_missing(pl.col(SOURCE_FILE)))
        .then(record)
        .otherwise(pl.format("{}, {}", file, record))
    )


#: The columns the rules read.
COLUMNS = (
    "program_id",
    "turn",
    "arrival_s",
    "input_tokens",
    "output_tokens",
    "reused_tokens",
    "tool",
    "tool_s",
    "gap_s",
    "llm_s",
    "is_last",
    "prefix_hashes",
    "prefix_block_tokens",
)
#: Of :data:`COLUMNS`, those the rules read only for being null or not (and a tool's name,
#: where it may be blank: :data:`TOOL_NAME`).
NULLNESS_ONLY = ("tool", "prefix_hashes")


def first_broken(frame: pl.LazyFrame | pl.DataFrame) -> tuple[int, str] | None:
    """The row that breaks a rule, closest to the root cause, and why; None when none does.

    For a canonical trace read back (:mod:`ttlctl.trace.io`): ``frame`` has the canonical
    columns, and the row is numbered from 1 in its order. A bad value ranks before a broken
    program order, then the first such row. The same rules as ingest's, so a trace ingest
    wrote always passes. Columnar: the only rows formatted are the bad ones.
    """
    lazy = frame.lazy()
    # the optional replica column (a rule reads it: a blank name), null where absent
    replica = "replica" in lazy.collect_schema().names()
    rows = (
        lazy.select(
            *(c for c in COLUMNS if c not in NULLNESS_ONLY),
            # a boolean, null where the value is, stands in for the names and lists
            *(pl.when(pl.col(c).is_not_null()).then(True).alias(c) for c in NULLNESS_ONLY),
            maybe_blank(pl.col("tool")).alias(TOOL_NAME),
            pl.col("replica") if replica else pl.lit(None, dtype=pl.String).alias("replica"),
        )
        .with_row_index(SOURCE_ROW, offset=1)
        .with_columns(pl.lit(None, dtype=pl.String).alias(REASON))  # no reader's reason
        .collect()
    )
    flagged = check(rows).filter(pl.col(CODE) != 0).collect()
    if flagged.height == 0:
        return None
    keys = ["program_id", "turn"]
    firsts = (  # where each flagged (program, turn) first appears: only on a bad trace
        rows.lazy()
        .join(flagged.lazy().select(keys).unique(), on=keys, how="semi", nulls_equal=True)
        .group_by(keys)
        .agg(pl.format("row {}", pl.col(SOURCE_ROW).min()).alias(FIRST_COPY))
    )
    head = (
        messages(flagged.lazy().join(firsts, on=keys, how="left", nulls_equal=True))
        .sort(RANK, SOURCE_ROW)
        .select(SOURCE_ROW, REASON)
        .head(1)
        .collect(engine="in-memory")
        .row(0)
    )
    return int(head[0]), str(head[1])
