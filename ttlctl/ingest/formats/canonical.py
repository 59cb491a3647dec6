"""The canonical trace itself, as Parquet, CSV or JSONL (docs/trace-format.md, trace v1).

Read lazily with polars scans, so memory stays bounded on inputs larger than
RAM. Values are read as text and cast without failing; a value that does not
cast (``"abc"`` for ``turn``) gives its row a reason and validation rejects the
program. A JSONL file with a line that is not JSON is read again line by line so
that only that line is rejected. Gzip data is read decompressed
(:func:`ttlctl.ingest.rawfile.source`), a name's suffix less ``.gz``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import polars as pl

from ttlctl.filekind import wide_text
from ttlctl.ingest.formats.csv_fields import BLANK, RAGGED, ragged, unclosed_quote
from ttlctl.ingest.jsontext import iter_jsonl, loads
from ttlctl.ingest.limits import streaming
from ttlctl.ingest.rawfile import SNIFF_BYTES, head_bytes, logical, size, source
from ttlctl.ingest.reader import Parsed
from ttlctl.ingest.rejects import RejectSink
from ttlctl.ingest.spool import GzipDamage
from ttlctl.trace import io as trace_io
from ttlctl.trace.columns import (
    REASON,
    REQUIRED,
    SOURCE_FILE,
    SOURCE_RECORD,
    SOURCE_ROW,
    all_columns,
    whole_count,
)

PARQUET_MAGIC = b"PAR1"
CSV_SUFFIXES = (".csv",)


class CanonicalReader:
    name = "canonical"
    aliases: Sequence[str] = ()

    def sniff(self, path: Path, head: bytes) -> bool:
        if head.startswith(PARQUET_MAGIC):
            try:
                return _has_required(pl.read_parquet_schema(source(path)).keys())
            except (pl.exceptions.PolarsError, GzipDamage):
                return True  # a damaged canonical trace: read() says what is wrong
        text = head.decode("utf-8", "replace")
        first = text.lstrip().split("\n", 1)[0].strip()
        if logical(path).suffix.lower() in CSV_SUFFIXES or (first and not first.startswith("{")):
            return _has_required(c.strip().strip('"') for c in first.split(","))
        if first.startswith("{"):
            try:
                obj = loads(first)
            except json.JSONDecodeError:
                return False
            return isinstance(obj, dict) and _has_required(obj.keys())
        return False

    def read(self, path: Path, sink: RejectSink) -> Parsed:
        try:
            src = source(path)
        except GzipDamage as exc:
            sink.reject(path, None, str(exc))
            return Parsed(pl.LazyFrame(), records=1)
        sniffed = head_bytes(path)
        head = sniffed[: len(PARQUET_MAGIC)]
        if len(sniffed) < SNIFF_BYTES and not sniffed.strip():  # nothing but blanks
            sink.reject(path, None, "empty file")
            return Parsed(pl.LazyFrame(), records=1)
        wide = wide_text(sniffed)  # polars would read its NUL bytes as damaged CSV or JSON
        if wide is not None:
            sink.reject(path, None, wide)
            return Parsed(pl.LazyFrame(), records=1)
        if head == PARQUET_MAGIC:
            damage = trace_io.unreadable(src)
            if damage is not None:
                sink.reject(path, None, f"damaged Parquet, truncated or corrupted: {damage}")
                return Parsed(pl.LazyFrame(), records=1)
            version = trace_io.unknown_version(src)
            if version is not None:
                sink.reject(path, None, version)
                return Parsed(pl.LazyFrame(), records=1)
            frame = pl.scan_parquet(src).with_row_index("_row", offset=1)
            record = pl.format("row {}", pl.col("_row"))
        elif logical(path).suffix.lower() in CSV_SUFFIXES or not head.lstrip().startswith(b"{"):
            opened = unclosed_quote(src)
            if not isinstance(src, Path):
                src.seek(0)
            if opened is not None:  # polars cannot read past it: the file is refused whole
                sink.reject(
                    path,
                    f"line {opened}",
                    'a quote here is never closed (an unbalanced "): the rest of the file '
                    "cannot be read",
                )
                return Parsed(pl.LazyFrame(), records=1)
            frame = _scan_csv(src)
            record = pl.format("line {}", pl.col("_row"))
        else:
            return _read_jsonl(path, src, sink)
        return _finish(frame, record, path)


def _scan_csv(src: Path | IO[bytes]) -> pl.LazyFrame:
    """The CSV's records as text, each with its row index (``line N``: the first after the
    header is 2) and, when its number of fields is not the header's, why (``_ragged``);
    a blank line is no record."""
    frame = pl.scan_csv(src, infer_schema=False, truncate_ragged_lines=True)
    names = frame.collect_schema().names()
    if not isinstance(src, Path):
        src.seek(0)
    bad = ragged(src, names, first_row=2)  # (polars read the header from src: start again)
    frame = frame.with_row_index("_row", offset=2)
    blank = bad.filter(pl.col(RAGGED) == BLANK)
    if blank.height:  # no records: polars' rows of nulls for blank lines go
        frame = frame.filter(~pl.col("_row").is_in(blank["_row"].implode()))
        bad = bad.filter(pl.col(RAGGED) != BLANK)
    if not bad.height:
        return frame
    why = pl.col("_row").replace_strict(
        bad["_row"], bad[RAGGED], default=None, return_dtype=pl.String
    )
    return frame.with_columns(why.alias(RAGGED))


def _has_required(names: object) -> bool:
    have = set(names)  # type: ignore[call-overload]
    return all(col in have for col in REQUIRED)


def _text_schema() -> dict[str, pl.DataType]:
    return {name: pl.String() for name in all_columns()}


def _read_jsonl(path: Path, src: Path | IO[bytes], sink: RejectSink) -> Parsed:
    """Typed read first (fast); any value of the wrong type sends the file to the text path.
    ``src``: what polars reads (:func:`~ttlctl.ingest.rawfile.source`)."""
    big = streaming(size(path))
    try:
        if big:
            typed = pl.scan_ndjson(src, schema=all_columns())
            typed.select(pl.len()).collect()  # a bad value surfaces here, not at write time
        else:
            typed = pl.read_ndjson(src, schema=all_columns()).lazy()
        return _finish_typed(typed, path)
    except pl.exceptions.PolarsError:
        pass
    try:
        if big:
            frame = pl.scan_ndjson(src, schema=_text_schema())
            frame.select(pl.len()).collect()
        else:
            frame = pl.read_ndjson(src, schema=_text_schema()).lazy()
    except pl.exceptions.PolarsError:
        return _read_jsonl_slow(path, sink)
    return _finish(
        frame.with_row_index("_row", offset=1), pl.format("line {}", pl.col("_row")), path
    )


def _finish_typed(frame: pl.LazyFrame, path: Path) -> Parsed:
    """A file whose values all had the right types: only bookkeeping columns to add."""
    names = set(frame.collect_schema().names())
    missing = [col for col in REQUIRED if col not in names]
    if missing:
        raise ValueError(f"missing column(s) {', '.join(missing)}")
    out = frame.with_row_index(SOURCE_ROW, offset=1).with_columns(
        pl.lit(str(path)).alias(SOURCE_FILE)
    )
    return Parsed(out, records=None)


def _read_jsonl_slow(path: Path, sink: RejectSink) -> Parsed:
    """Line-by-line fallback: reject lines that are not JSON objects, keep the rest."""
    rows: list[dict[str, str | None]] = []
    names = list(all_columns())
    before = sink.count  # lines (or the whole file) that iter_jsonl rejects
    for lineno, obj in iter_jsonl(path, sink):
        row: dict[str, str | None] = {n: _as_text(obj.get(n)) for n in names}
        row["_row"] = str(lineno)
        rows.append(row)
    frame = pl.DataFrame(rows, schema={**_text_schema(), "_row": pl.String()}, orient="row")
    parsed = _finish(frame.lazy(), pl.format("line {}", pl.col("_row")), path)
    return Parsed(parsed.frame, records=len(rows) + sink.count - before)


def _as_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _finish(frame: pl.LazyFrame, record: pl.Expr, path: Path) -> Parsed:
    schema = frame.collect_schema()
    names = set(schema.names())
    missing = [col for col in REQUIRED if col not in names]
    if missing:
        raise ValueError(f"missing column(s) {', '.join(missing)}")
    casts: list[pl.Expr] = []
    reasons: list[tuple[pl.Expr, str]] = []
    for name, dtype in all_columns().items():
        if name not in names:
            continue
        raw = pl.col(name).cast(pl.String)
        if dtype == pl.Boolean():
            lowered = raw.str.to_lowercase().str.strip_chars()
            value = (
                pl.when(lowered.is_in(["true", "1", "1.0"]))
                .then(True)
                .when(lowered.is_in(["false", "0", "0.0"]))
                .then(False)
                .otherwise(None)
            )
        elif dtype.is_integer():
            value = whole_count(raw.str.strip_chars().cast(pl.Float64, strict=False), dtype)
        elif dtype.is_float():
            value = raw.str.strip_chars().cast(pl.Float64, strict=False)
        elif isinstance(dtype, pl.List):
            if isinstance(schema[name], pl.List):  # Parquet: typed already
                casts.append(pl.col(name).cast(dtype, strict=False).alias(name))
                continue
            value = _int_list(raw)
        else:
            value = raw
        bad = raw.is_not_null() & (raw.str.strip_chars() != "") & value.is_null()
        reasons.append((bad, f"invalid {name}"))
        casts.append(value.alias(name))
    reason: pl.Expr = pl.lit(None, dtype=pl.String)
    for cond, text in reversed(reasons):
        reason = (
            pl.when(cond)
            .then(pl.format("{}: {}", pl.lit(text), pl.col(text.split(" ", 1)[1]).cast(pl.String)))
            .otherwise(reason)
        )
    if RAGGED in names:  # a CSV record of the wrong width: first, its values may be shifted
        reason = pl.coalesce(pl.col(RAGGED), reason)
    out = frame.with_columns(
        reason.alias(REASON),
        record.alias(SOURCE_RECORD),
        pl.lit(str(path)).alias(SOURCE_FILE),
    ).with_columns(casts)
    return Parsed(out.drop(RAGGED, strict=False), records=None)


def _int_list(raw: pl.Expr) -> pl.Expr:
    """A list of whole numbers from text: ``[1, 2, 3]`` (as JSON writes it) or ``1 2 3``;
    null when an item is not a whole number."""
    text = raw.str.replace_all(r"[\[\],]", " ").str.replace_all(r"\s+", " ").str.strip_chars()
    items = text.str.split(" ").list.eval(pl.element().cast(pl.Int64, strict=False))
    ok = ~items.list.eval(pl.element().is_null()).list.any()
    return (
        pl.when(text == "")
        .then(pl.lit([], dtype=pl.List(pl.Int64)))
        .when(ok)
        .then(items)
        .otherwise(None)
    )


READER = CanonicalReader()
