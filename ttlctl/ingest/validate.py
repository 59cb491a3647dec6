"""Check every row an ingest read against the common rules and write the canonical trace.

All files' rows are combined into one frame (wall clocks rebased to the earliest absolute
arrival), checked by :mod:`ttlctl.trace.rules`, the bad rows reported (strict: the first,
closest to the root cause, raises; lenient: each is rejected), and the good ones written.
Above the streaming threshold the rows are checked out of core: hash-partitioned by program
into buckets that each fit in memory (TTLCTL_BUCKET_BYTES), so every program is checked
whole and memory is bounded by the largest bucket, not by the input.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from ttlctl.ingest.limits import env_bytes
from ttlctl.ingest.reader import Parsed
from ttlctl.ingest.rejects import IngestError, RejectSink
from ttlctl.trace import io as trace_io
from ttlctl.trace import rules, verdicts
from ttlctl.trace.columns import SOURCE_COLUMNS, SOURCE_FILE, SOURCE_RECORD, conform

#: Rows of input checked in memory at once when streaming (override TTLCTL_BUCKET_BYTES).
DEFAULT_BUCKET_BYTES = 256 * 1024**2
#: Rough in-memory size of a row over its compressed Parquet size.
PARQUET_EXPANSION = 6


def combine(parsed: list[tuple[Parsed, bool]]) -> pl.LazyFrame:
    """All files' rows in one frame, wall clocks rebased to the earliest absolute arrival,
    each tool's and replica's name without the blanks around it (as the log readers and
    the engine read a name: ``bash `` is ``bash``; a blank one is then empty, which the
    rules refuse)."""
    relative = [_named(p.frame) for p, absolute in parsed if not absolute and has_rows(p)]
    absolute = [_named(p.frame) for p, absolute in parsed if absolute and has_rows(p)]
    if absolute:
        origin = pl.concat([f.select(pl.col("arrival_s").min()) for f in absolute]).min()
        start = origin.collect().item()
        shift = pl.col("arrival_s") - (start if start is not None else 0.0)
        absolute = [f.with_columns(shift.alias("arrival_s")) for f in absolute]
    frames = relative + absolute
    if not frames:
        return conform(pl.LazyFrame()).clear()
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical")


def _named(frame: pl.LazyFrame) -> pl.LazyFrame:
    return conform(frame).with_columns(
        pl.col("tool").str.strip_chars(), pl.col("replica").str.strip_chars()
    )


def has_rows(one: Parsed) -> bool:
    return bool(one.frame.collect_schema().names())


def validate_and_write(
    parsed: list[tuple[Parsed, bool]],
    output: Path,
    sink: RejectSink,
    *,
    streaming: bool,
    engines: list[dict[str, Any]],
    refuse_empty: Callable[[int], None] | None = None,
) -> tuple[int, int]:
    """Check all rows, send the bad ones to ``sink``, write the rest: (written, rejected).
    With no row to write, ``refuse_empty`` (if given) is called before anything is."""
    frame = combine(parsed)
    if streaming:
        return _validate_in_buckets(frame, output, sink, engines, refuse_empty)
    good, bad = verdicts.split(rules.check(frame.collect()).collect().lazy())
    _report(bad, sink)
    if refuse_empty is not None and not good.select(pl.len()).collect().item():
        refuse_empty(bad.height)
    written = trace_io.write(good.drop(*SOURCE_COLUMNS), output, engines=engines)
    return written, bad.height


def _report(bad: pl.DataFrame, sink: RejectSink) -> None:
    """Strict: raise on the bad row closest to the root cause. Lenient: reject each."""
    if not bad.height:
        return
    head = bad.sort(rules.RANK, maintain_order=True).row(0, named=True)
    if not sink.skip_bad:
        raise IngestError(head[SOURCE_FILE], head[SOURCE_RECORD], head["reason"])
    for row in bad.iter_rows(named=True):
        sink.reject(row[SOURCE_FILE], row[SOURCE_RECORD], row["reason"])


def _validate_in_buckets(
    frame: pl.LazyFrame,
    output: Path,
    sink: RejectSink,
    engines: list[dict[str, Any]],
    refuse_empty: Callable[[int], None] | None = None,
) -> tuple[int, int]:
    """Out-of-core check: hash-partition rows by program, check each bucket in memory.

    Every program lands whole in one bucket, so the program rules hold per bucket;
    memory is bounded by the largest bucket, not by the input.
    """
    budget = env_bytes("TTLCTL_BUCKET_BYTES", DEFAULT_BUCKET_BYTES, least=1)
    with tempfile.TemporaryDirectory(prefix=".ttlctl-ingest-", dir=output.parent) as tmp:
        root = Path(tmp)
        spilled = root / "rows.parquet"
        frame.sink_parquet(spilled, engine="streaming")
        size = spilled.stat().st_size * PARQUET_EXPANSION
        buckets = max(1, -(-size // budget))
        parts = root / "parts"
        parts.mkdir()
        rejected = 0
        source = pl.scan_parquet(spilled)
        key = pl.col("program_id").hash(seed=0) % buckets
        for bucket in range(buckets):
            rows = source.filter(key == bucket).collect(engine="streaming")
            good, bad = verdicts.split(rules.check(rows).collect().lazy())
            _report(bad, sink)
            rejected += bad.height
            good.drop(*SOURCE_COLUMNS).collect().write_parquet(parts / f"{bucket:05d}.parquet")
        every = pl.scan_parquet(parts / "*.parquet")
        if refuse_empty is not None and not every.select(pl.len()).collect().item():
            refuse_empty(rejected)
        written = trace_io.write(every, output, streaming=True, engines=engines)
    return written, rejected
