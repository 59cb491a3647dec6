"""Reading and writing canonical trace files (Parquet; CSV and JSONL accepted on input)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import polars as pl

from ttlctl.errors import TtlctlError
from ttlctl.filekind import document_kind, unmarked
from ttlctl.jsonio import replacing
from ttlctl.trace import verdicts
from ttlctl.trace.columns import (
    ENGINES_KEY,
    PARQUET_METADATA,
    REQUIRED,
    TRACE_VERSION,
    VERSION_KEY,
    all_columns,
    conform,
    whole_count,
)


def write(
    frame: pl.LazyFrame,
    output: Path,
    *,
    streaming: bool = False,
    engines: Sequence[Mapping[str, Any]] = (),
) -> int:
    """Write ``frame`` (canonical columns) to ``output`` atomically; return the row count.

    ``engines``: the facts of the engines that served the calls (engine logs), kept in
    the file's metadata (:data:`ENGINES_KEY`; :func:`engines` reads them back). The file
    appears complete or not at all: it is written beside the target and renamed into
    place.
    """
    frame = conform(frame, keep_source=False)
    metadata = dict(PARQUET_METADATA)
    if engines:
        metadata[ENGINES_KEY] = json.dumps(list(engines), sort_keys=True)
    with replacing(output) as tmp:
        if streaming:
            frame.sink_parquet(tmp, metadata=metadata, engine="streaming")
            rows = pl.scan_parquet(tmp).select(pl.len()).collect().item()
        else:
            data = frame.collect()
            data.write_parquet(tmp, metadata=metadata)
            rows = data.height
    return int(rows)


def engines(path: Path) -> list[dict[str, Any]]:
    """The engines' facts a trace keeps (:func:`write`'s ``engines``); [] when it keeps
    none (a trace not made from engine logs, or from logs of an older plugin)."""
    try:
        text = pl.read_parquet_metadata(path).get(ENGINES_KEY)
    except (OSError, pl.exceptions.PolarsError):
        return []
    if not text:
        return []
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        raise TraceError(f"{path}: unreadable {ENGINES_KEY} metadata") from None
    if not isinstance(doc, list) or not all(isinstance(x, dict) for x in doc):
        raise TraceError(f"{path}: {ENGINES_KEY} metadata is not a list of objects")
    return doc


class TraceError(TtlctlError, ValueError):
    """A file that is not a readable canonical trace; the message names it."""


def scan(path: Path, *, checked: bool = True) -> pl.LazyFrame:
    """A canonical trace written by :func:`write` (or any Parquet with its columns).

    The file is checked first, and a :class:`TraceError` names what is wrong: not a
    Parquet file, a missing column, a damaged page, a trace version this ttlctl does not
    read, and (``checked``, the default) a row that breaks the trace's rules
    (:func:`check_rows`, on the columns the rules read: the rows are not kept, so memory
    stays that of the check and of what the caller collects). ``checked=False`` is for a
    trace just written by ingest, which applied the same rules to every row it wrote.
    """
    _check_file(path)
    raw = pl.scan_parquet(path)
    frame = conform(raw, keep_source=False)
    if checked:
        check_whole_counts(path, raw)
        check_rows(path, frame)
    return frame


def read(path: Path) -> pl.DataFrame:
    """The whole trace in memory, checked as :func:`scan` checks it."""
    _check_file(path, pages=False)
    raw = pl.scan_parquet(path)
    check_whole_counts(path, raw)  # before the cast, which cuts or refuses them
    frame = _decoded(path, conform(raw, keep_source=False))
    check_rows(path, frame)
    return frame


def _decoded(path: Path, frame: pl.LazyFrame) -> pl.DataFrame:
    """``frame`` collected. Collecting decodes every page it reads, so a damaged one shows
    here and :func:`unreadable`'s pass over the file is needed only when it fails (it
    then says why); otherwise the failure is a value of the wrong type (:func:`_collected`)."""
    try:
        with _stderr_silenced():  # a damaged page's panic, as in unreadable()
            return frame.collect()
    except (pl.exceptions.PanicException, pl.exceptions.PolarsError, OSError):
        pass
    damage = unreadable(path)
    if damage is not None:
        raise TraceError(f"{path}: damaged Parquet, truncated or corrupted ({damage})")
    return _collected(path, frame)


def check_rows(path: Path, frame: pl.LazyFrame | pl.DataFrame) -> None:
    """A :class:`TraceError` naming the first row of ``frame`` (the trace at ``path``) that
    breaks the rules ingest applies to what it writes (:mod:`ttlctl.trace.rules`): a null
    where a value is required, a token count or a time out of range, reuse beyond the
    prompt, turns that repeat or skip. ``row N`` counts from 1 in file order, as ingest's
    reject of a Parquet record does. Vectorised: a few columnar passes over the rows."""
    try:
        broken = verdicts.first_broken(frame)
    except (pl.exceptions.InvalidOperationError, pl.exceptions.ComputeError) as exc:
        raise _not_of_its_type(path, exc) from None
    if broken is not None:
        row, reason = broken
        raise TraceError(f"{path}: row {row}: {reason}")


def check_whole_counts(path: Path, raw: pl.LazyFrame) -> None:
    """A :class:`TraceError` naming the first row of the Parquet trace at ``path`` (``raw``:
    its columns as stored) with a count, stored as a float, that is no whole number a count
    holds: the cast to the canonical integer type would cut 12228.7 to 12228 (or fail on
    1e30) where ingest refuses it, in the same words (``row N: invalid input_tokens:
    12228.7``; the row's first such column in the canonical order)."""
    schema = raw.collect_schema()
    columns = all_columns()
    floats = [
        name
        for name, dtype in columns.items()
        if dtype.is_integer() and name in schema and schema[name].is_float()
    ]
    if not floats:
        return

    def broken(name: str) -> pl.Expr:  # a value, but no count of its column's type
        return pl.col(name).is_not_null() & whole_count(pl.col(name), columns[name]).is_null()

    bad = pl.any_horizontal([broken(name) for name in floats])
    try:
        with _stderr_silenced():  # a damaged page's panic, as in unreadable()
            first = raw.select(floats).with_row_index("row", offset=1).filter(bad).head(1).collect()
    except (pl.exceptions.PanicException, pl.exceptions.PolarsError, OSError):
        return  # a damaged file: the read that follows says so
    if not first.height:
        return
    row = first.row(0, named=True)
    name = next(n for n in floats if first.select(broken(n)).item())
    raise TraceError(f"{path}: row {row['row']}: invalid {name}: {row[name]!r}")


def _collected(path: Path, frame: pl.LazyFrame) -> pl.DataFrame:
    """``frame`` collected; a column whose values do not cast to its canonical type (text
    where a count belongs) is a :class:`TraceError` naming the file."""
    try:
        return frame.collect()
    except (pl.exceptions.InvalidOperationError, pl.exceptions.ComputeError) as exc:
        raise _not_of_its_type(path, exc) from None


def _not_of_its_type(path: Path, exc: Exception) -> TraceError:
    """The error for a column whose values do not cast to its canonical type: naming the
    first such row and value (:func:`first_uncast`), else what polars said."""
    found = first_uncast(path)
    if found is not None:
        row, name, value = found
        return TraceError(
            f"{path}: row {row}: invalid {name}: {value!r} (not {all_columns()[name]})"
        )
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    return TraceError(
        f"{path}: not a canonical trace: a column's values are not of its type ({lines[0][:200]})"
    )


def first_uncast(path: Path) -> tuple[int, str, Any] | None:
    """(row, column, value) of the Parquet trace at ``path``'s first row (from 1, in file
    order) holding a value that does not cast to its column's canonical type (text where a
    count belongs), the row's first such column in the canonical order; None when there is
    none that a cast can point at (a column of a type that never converts, a list's
    items, a file that cannot be read so: the caller then says what polars said)."""
    raw = pl.scan_parquet(path)
    columns = all_columns()
    try:
        schema = raw.collect_schema()
    except (pl.exceptions.PolarsError, OSError):
        return None
    found: tuple[int, str, Any] | None = None
    for name, dtype in columns.items():
        if name not in schema or schema[name] == dtype:
            continue
        value = pl.col(name)
        broken = value.is_not_null() & value.cast(dtype, strict=False).is_null()
        try:
            with _stderr_silenced():  # a damaged page's panic, as in unreadable()
                first = raw.select(name).with_row_index("row", offset=1).filter(broken).head(1)
                hit = first.collect()
        except (pl.exceptions.PanicException, pl.exceptions.PolarsError, OSError):
            continue  # no value of this type converts: polars' own words name the column
        if hit.height and (found is None or hit["row"][0] < found[0]):
            found = (int(hit["row"][0]), name, hit[name][0])
    return found


def _check_file(path: Path, *, pages: bool = True) -> None:
    """What :func:`scan` checks before reading rows: a Parquet file, the required
    columns, a trace version this ttlctl reads, and (``pages``) every page readable."""
    if path.is_dir():
        raise TraceError(
            f"{path}: is a directory, not a Parquet trace (make one from the logs in it with "
            f"`ttlctl ingest {path} -o trace.parquet`)"
        )
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    with path.open("rb") as fh:
        head = fh.read(BLANK_BYTES + 1)
    if not head.startswith(b"PAR1"):
        if len(head) <= BLANK_BYTES and not unmarked(head).strip():
            # as ingest and the JSON readers say it: the ingest hint would lead nowhere
            raise TraceError(f"{path}: empty file")
        kind = _ttlctl_document(path)
        if kind is not None:  # not a log to ingest: the hint below would lead nowhere
            raise TraceError(
                f"{path}: not a Parquet trace but {kind}; give the trace that `ttlctl "
                "ingest` or `ttlctl synth` writes"
            )
        raise TraceError(
            f"{path}: not a Parquet trace (make one with `ttlctl ingest {path} -o trace.parquet`)"
        )
    try:
        names = set(pl.read_parquet_schema(path))
    except pl.exceptions.PolarsError as exc:
        raise TraceError(f"{path}: unreadable Parquet ({str(exc).splitlines()[0]})") from None
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise TraceError(f"{path}: not a canonical trace: missing column(s) {', '.join(missing)}")
    version = unknown_version(path)
    if version is not None:
        raise TraceError(f"{path}: {version}")
    damage = unreadable(path) if pages else None
    if damage is not None:
        raise TraceError(f"{path}: damaged Parquet, truncated or corrupted ({damage})")


#: the largest file that may be blank (spaces, newlines, a byte-order mark): an empty file
BLANK_BYTES = 4096
#: the largest file read whole to tell whether it is one of ttlctl's JSON documents
DOCUMENT_BYTES = 64 << 20


def _ttlctl_document(path: Path) -> str | None:
    """Which of ttlctl's JSON documents (a fit, a bundle, a profile …) the file at
    ``path`` is (:func:`ttlctl.filekind.document_kind`), or None: not JSON, too large to
    be one, unreadable, or another JSON document (a log, which ingest reads)."""
    try:
        if path.stat().st_size > DOCUMENT_BYTES:
            return None
        return document_kind(json.loads(path.read_bytes()))
    except (OSError, ValueError, RecursionError):
        return None


def unknown_version(source: Path | IO[bytes]) -> str | None:
    """Why this ttlctl does not read the Parquet trace at ``source`` (a path, or a buffer),
    by the trace version in its metadata (:data:`VERSION_KEY`); None when it does. A file
    without one (Parquet another tool wrote with the canonical columns) is read as the
    current version, as is one whose metadata cannot be read (:func:`unreadable` says why)."""
    try:
        version = pl.read_parquet_metadata(source).get(VERSION_KEY)
    except (OSError, pl.exceptions.PolarsError):
        return None
    if version is None or version.strip() == str(TRACE_VERSION):
        return None
    if version.strip().isdigit() and int(version) > TRACE_VERSION:
        return (
            f"trace version {int(version)}, newer than this ttlctl reads "
            f"(version {TRACE_VERSION}): read it with the ttlctl that wrote it, or ingest its "
            "logs again with this one"
        )
    return (
        f"unknown trace version {version[:40]!r} (its {VERSION_KEY} metadata): this ttlctl "
        f"reads version {TRACE_VERSION}"
    )


def unreadable(path: Path | IO[bytes]) -> str | None:
    """Why the Parquet file at ``path`` (or in a buffer) cannot be read whole (None: it
    can): a damaged footer or page, a truncated file. Every page is decoded once, down to
    null counts (cheap next to any use of the trace). A page so damaged that the Parquet
    reader panics says so on stderr in Rust's words; that is silenced here."""
    try:
        with _stderr_silenced():
            pl.scan_parquet(path).select(pl.all().null_count()).collect()
    except pl.exceptions.PanicException:
        return "the Parquet reader stopped on a damaged page"
    except (pl.exceptions.PolarsError, OSError) as exc:
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        return lines[0][:200]
    return None


@contextmanager
def _stderr_silenced() -> Iterator[None]:
    """File descriptor 2 sent to /dev/null for the block (Rust's panic hook writes there)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
