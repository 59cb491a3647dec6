"""The mooncake sample as a canonical trace written in each format ingest scans (Parquet,
JSONL, CSV): what the gzip tests compress and compare against."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl

from ttlctl.ingest.pipeline import ingest
from ttlctl.trace import io as trace_io

MOONCAKE = (
    Path(__file__).resolve().parents[2] / "samples" / "mooncake" / "synthetic_trace_head.jsonl"
)


def canonical_trace_file(tmp_path: Path, kind: str) -> Path:
    """The mooncake sample ingested, then written as ``tmp_path/plain/trace.{kind}``
    (``kind``: parquet, jsonl or csv; CSV without the list columns it cannot hold)."""
    ingest([MOONCAKE], tmp_path / "src.parquet")
    trace = trace_io.read(tmp_path / "src.parquet")
    plain = tmp_path / "plain" / f"trace.{kind}"
    plain.parent.mkdir()
    if kind == "parquet":
        shutil.copy(tmp_path / "src.parquet", plain)
    elif kind == "jsonl":
        trace.write_ndjson(plain)
    else:
        trace.select(pl.exclude(pl.List(pl.Int64), pl.List(pl.Int32))).write_csv(plain)
    return plain
