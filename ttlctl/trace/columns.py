"""The canonical trace (trace v1): one row per LLM call.

This module is the single place that names the columns and their types
(docs/trace-format.md). Every reader conforms to it and every
writer writes it.
"""

from __future__ import annotations

from typing import Final

import polars as pl

TRACE_VERSION: Final = 1

#: Column name -> polars dtype, in file order.
COLUMNS: Final[dict[str, pl.DataType]] = {
    "program_id": pl.String(),
    "turn": pl.Int32(),
    "arrival_s": pl.Float64(),
    "input_tokens": pl.Int64(),
    "output_tokens": pl.Int64(),
    "reused_tokens": pl.Int64(),
    "tool": pl.String(),
    "tool_s": pl.Float64(),
    "gap_s": pl.Float64(),
    "llm_s": pl.Float64(),
    "is_last": pl.Boolean(),
}

#: The largest whole number a count column holds (``input_tokens`` …, Int64), and a turn
#: or a block size (Int32); a test holds each to its column's type (written out, not read
#: off polars at import: that query cost every command ~20 ms of start-up).
COUNT_MAX: Final = 2**63 - 1
TURN_MAX: Final = 2**31 - 1

#: Optional columns beyond trace v1 (docs/trace-format.md); kept when present, and a
#: trace without them stays valid.
#: ``parent_program_id`` links a sub-agent's program to the program that spawned it.
#: ``prefix_hashes`` / ``prefix_block_tokens``: the call's leading prompt blocks that other
#: programs share (a product's system prompt and tools), as chained block hashes of
#: ``prefix_block_tokens`` tokens each (docs/trace-format.md, "Shared prefixes").
#: ``replica`` names the engine that served the call (engine logs of several replicas).
EXTRA_COLUMNS: Final[dict[str, pl.DataType]] = {
    "parent_program_id": pl.String(),
    "prefix_hashes": pl.List(pl.Int64()),
    "prefix_block_tokens": pl.Int32(),
    "replica": pl.String(),
}

#: Columns a canonical input must carry (the others may be absent: filled with null).
REQUIRED: Final = ("program_id", "turn", "input_tokens", "output_tokens")

#: Bookkeeping columns used during ingest to name where each row came from.
SOURCE_FILE: Final = "_file"
SOURCE_RECORD: Final = "_record"
SOURCE_COLUMNS: Final = (SOURCE_FILE, SOURCE_RECORD)
#: Line number of a row whose ``_record`` is null ("line N"), for fast readers.
SOURCE_ROW: Final = "_row"
#: Set by a reader on a row whose record was bad (validation rejects its program).
REASON: Final = "_reason"

#: The metadata key of the trace version (checked on read: ttlctl.trace.io).
VERSION_KEY: Final = "ttlctl.trace_version"
#: Written into the Parquet file's key-value metadata.
PARQUET_METADATA: Final = {VERSION_KEY: str(TRACE_VERSION)}
#: The metadata key of the engines' facts (JSON list; docs/trace-format.md, "Engine facts").
ENGINES_KEY: Final = "ttlctl.engines"


def all_columns() -> dict[str, pl.DataType]:
    return {**COLUMNS, **EXTRA_COLUMNS}


def whole_count(value: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    """``value`` (a float) as the integer type ``dtype`` of its count column, null where it
    is no whole number that type holds (NaN, infinite, a fraction, out of its range): the one
    rule ingest applies to a count given as text or float, and the trace reader to a count
    column stored as floats."""
    whole = value.is_finite() & (value == value.floor())
    return pl.when(whole).then(value).otherwise(None).cast(dtype, strict=False)


def empty(with_source: bool = False) -> pl.DataFrame:
    """An empty frame with the canonical schema."""
    schema = dict(all_columns())
    if with_source:
        schema[SOURCE_FILE] = pl.String()
        schema[SOURCE_RECORD] = pl.String()
    return pl.DataFrame(schema=schema)


def conform(frame: pl.LazyFrame, keep_source: bool = True) -> pl.LazyFrame:
    """Select and cast the canonical columns (missing optional ones become null).

    Casts are strict only where values are already of a compatible type; readers
    validate raw values before calling this.
    """
    present = set(frame.collect_schema().names())
    exprs: list[pl.Expr] = []
    for name, dtype in all_columns().items():
        if name in present:
            exprs.append(pl.col(name).cast(dtype))
        else:
            exprs.append(pl.lit(None, dtype=dtype).alias(name))
    if keep_source:
        for name in (*SOURCE_COLUMNS, REASON):
            if name in present:
                exprs.append(pl.col(name).cast(pl.String))
            else:
                exprs.append(pl.lit(None, dtype=pl.String).alias(name))
        if SOURCE_ROW in present:
            exprs.append(pl.col(SOURCE_ROW).cast(pl.Int64))
        else:
            exprs.append(pl.lit(None, dtype=pl.Int64).alias(SOURCE_ROW))
    return frame.select(exprs)
