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
from ttlctl.jsonio import replacing
from ttlctl.trace.columns import ENGINES_KEY, PARQUET_METADATA, REQUIRED, conform


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


def scan(path: Path) -> pl.LazyFrame:
    """A canonical trace written by :func:`write` (or any Parquet with its columns)."""
    if path.is_dir():
        raise TraceError(
            f"{path}: is a directory, not a Parquet trace (make one from the logs in it with "
            f"`ttlctl ingest {path} -o trace.parquet`)"
        )
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    with path.open("rb") as fh:
        magic = fh.read(4)
    if magic != b"PAR1":
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
    damage = unreadable(path)
    if damage is not None:
        raise TraceError(f"{path}: damaged Parquet, truncated or corrupted ({damage})")
    return conform(pl.scan_parquet(path), keep_source=False)


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


def read(path: Path) -> pl.DataFrame:
    return scan(path).collect()
