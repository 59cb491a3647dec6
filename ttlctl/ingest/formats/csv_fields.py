"""A CSV file's records whose number of fields is not the header's.

polars reads a record with fewer fields than the header padded with nulls (silently), and
one with more is an error for the whole file. This finds them, so that each is a bad
record of its own, named by its line: the file's lines scanned as text (columnar, out of
core), the separators outside quotes counted. A quoted field may hold a newline: a line
that starts inside quotes (an odd number of quotes before it) goes on with the record
before it. A blank line (outside quotes) is no record: it is listed as :data:`BLANK`, for
the reader to drop the row of nulls polars makes of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

import polars as pl

#: the reason's opening words, as the count by reason groups it
WRONG_WIDTH = "wrong number of fields"
#: the column of :func:`ragged`'s reason
RAGGED = "_ragged"
#: :func:`ragged`'s reason for a blank line: no record (polars reads it as a row of nulls)
BLANK = "blank line"

_LINE = pl.col("line")
_QUOTES = _LINE.str.count_matches('"', literal=True)
#: a quoted part (or one left open at the line's end) of a line, its separators not counted
_QUOTED = r'"[^"]*("|$)'


def ragged(src: Path | IO[bytes], names: list[str], first_row: int) -> pl.DataFrame:
    """The records of the CSV ``src`` (header ``names``) with other than ``len(names)``
    fields, and its blank lines: ``_row`` (the reader's row index: the first record after
    the header is ``first_row``) and :data:`RAGGED`, the reason (:data:`BLANK`: no record)."""
    inside = ((_QUOTES.cum_sum() - _QUOTES) % 2) == 1  # the line starts inside quotes
    unquoted = pl.when(inside).then(pl.lit('"') + _LINE).otherwise(_LINE)
    lines = (
        pl.scan_lines(src, name="line")
        .with_columns(_inside=inside)
        .with_columns(
            _record=(~pl.col("_inside")).cum_sum() - 1,
            _commas=unquoted.str.replace_all(_QUOTED, "").str.count_matches(",", literal=True),
            _spans=pl.col("_inside") | pl.col("_inside").shift(-1).fill_null(False),
            _blank=_LINE.str.strip_chars() == "",
        )
    )
    width = len(names)
    odd = lines.filter(
        (pl.col("_record") > 0)
        & (
            (pl.col("_blank") & ~pl.col("_inside"))
            | (~pl.col("_blank") & (pl.col("_spans") | (pl.col("_commas") + 1 != width)))
        )
    ).collect(engine="streaming")
    blank = odd.filter(pl.col("_blank") & ~pl.col("_inside"))
    fields = (
        odd.filter(~pl.col("_blank"))
        .group_by("_record", maintain_order=True)
        .agg(pl.col("_commas").sum() + 1)
        .filter(pl.col("_commas") != width)
    )
    row = (pl.col("_record") - 1 + first_row).cast(pl.get_index_type()).alias("_row")
    return pl.concat(
        [
            fields.select(
                row,
                pl.Series(RAGGED, [_why(n, names) for n in fields["_commas"]], dtype=pl.String),
            ),
            blank.select(row, pl.lit(BLANK, dtype=pl.String).alias(RAGGED)),
        ]
    ).sort("_row")


def _why(fields: int, names: list[str]) -> str:
    """The reason a record of ``fields`` fields is bad, naming what it lacks."""
    said = f"{WRONG_WIDTH}: {fields} where the header has {len(names)}"
    if fields > len(names):
        return said
    missing = names[fields:]
    gone = missing[0] if len(missing) == 1 else f"{missing[0]} to {missing[-1]}"
    return f"{said} ({gone} missing)"


def unclosed_quote(src: Path | IO[bytes]) -> int | None:
    """The line (1-based, the header's is 1) of the CSV ``src`` that opens a quoted field no
    quote closes before the file ends, or None when every quote closes: polars cannot
    read past it (the rest of the file would be one field), so the reader refuses the
    file, naming that line."""
    lines = (
        pl.scan_lines(src, name="line")
        .with_row_index("_line", offset=1)
        .with_columns(_after=_QUOTES.cum_sum() % 2 == 1)  # inside quotes at the line's end
    )
    ends = (
        lines.select(
            pl.col("_after").last().alias("open"),
            # the last line that ends inside quotes and starts outside them opened the field
            pl.col("_line")
            .filter(pl.col("_after") & ~pl.col("_after").shift(1).fill_null(False))
            .last()
            .alias("at"),
        )
        .collect(engine="streaming")
        .row(0)
    )
    opened, at = ends
    return int(at) if opened else None
