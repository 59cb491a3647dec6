"""Ingest throughput: canonical JSONL of N calls, against a bare ``polars.read_ndjson``.

Both are measured in the same run on the same file, so the ratio is what to read:
the machine is shared and noisy. Goal: 1M calls in under 10 s, within 2x
of the bare read.

Memory: the peak anonymous RSS of an ingest in a fresh process at N and 4N calls
(``--calls``), on the in-memory path and on the out-of-core (streaming) one; each
path's growth (4N over N) is the figure, the in-memory path's the baseline: the
streaming path's should stay near 1x (at most ``STREAMING_GROWTH_GOAL``) while the input
grows 4x. The verdict is printed only where the baseline shows the input's weight (its
growth at least ``BASELINE_GROWTH_MIN``): at a small ``--calls`` the interpreter's own
memory dominates both paths, and the streaming one holds the whole input in its buckets.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from ttlctl.ingest.pipeline import ingest

#: the streaming path's growth from N to 4N calls that reads as bounded memory
STREAMING_GROWTH_GOAL = 1.5
#: the in-memory path's growth below which the input is too small to judge by
BASELINE_GROWTH_MIN = 2.0


def make_trace(path: Path, calls: int, seed: int = 0) -> None:
    """A canonical JSONL with ``calls`` rows in programs of 1..40 calls."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 41, size=calls // 10 + 1)
    ends = np.cumsum(lengths)
    lengths = lengths[: np.searchsorted(ends, calls) + 1]
    lengths[-1] -= int(lengths.sum() - calls)
    lengths = lengths[lengths > 0]
    program = np.repeat(np.arange(len(lengths)), lengths)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    turn = np.arange(calls) - starts
    last = turn == np.repeat(lengths - 1, lengths)
    tools = np.array(["bash", "grep", "pytest", "read_file", "edit", "search"])
    start = rng.uniform(0, 3600, len(lengths))
    frame = (
        pl.DataFrame(
            {
                "program_id": pl.Series([f"prog-{p}" for p in program]),
                "turn": turn.astype(np.int32),
                "input_tokens": rng.integers(1_000, 100_000, calls),
                "output_tokens": rng.integers(10, 2_000, calls),
                "tool": tools[rng.integers(0, len(tools), calls)],
                "tool_s": np.round(rng.lognormal(0.0, 1.2, calls), 3),
                "llm_s": np.round(rng.lognormal(0.0, 0.5, calls), 3),
                "start": np.repeat(start, lengths),
                "is_last": last,
            }
        )
        .with_columns(gap_s=(pl.col("tool_s") + pl.lit(rng.exponential(0.2, calls))).round(3))
        .with_columns(
            arrival_s=(
                pl.col("start")
                + (pl.col("llm_s") + pl.col("gap_s")).cum_sum().over("program_id")
                - (pl.col("llm_s") + pl.col("gap_s"))
            ).round(3),
            tool=pl.when(pl.col("is_last")).then(None).otherwise(pl.col("tool")),
            tool_s=pl.when(pl.col("is_last")).then(None).otherwise(pl.col("tool_s")),
            gap_s=pl.when(pl.col("is_last")).then(None).otherwise(pl.col("gap_s")),
        )
        .select(
            "program_id",
            "turn",
            "arrival_s",
            "input_tokens",
            "output_tokens",
            "tool",
            "tool_s",
            "gap_s",
            "llm_s",
            "is_last",
        )
    )
    frame.write_ndjson(path)


def timed(fn: object) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> int:
    """The throughput figures; returns ``--calls``, which the memory figures use too."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=1_000_000, help="N (memory: N and 4N)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "trace.jsonl"
        make_trace(src, args.calls)
        size_mb = src.stat().st_size / 1e6
        base, ours = [], []
        for _ in range(args.repeat):
            base.append(timed(lambda: pl.read_ndjson(src)))
            report = None

            def run() -> None:
                nonlocal report
                report = ingest([src], Path(tmp) / "out.parquet")

            ours.append(timed(run))
        assert report is not None and report.rows == args.calls, report
        b, o = min(base), min(ours)
        print(
            f"ingest: {args.calls:,} calls, {size_mb:.0f} MB canonical JSONL "
            f"(best of {args.repeat})"
        )
        print(f"  polars.read_ndjson   {b:6.2f} s  {args.calls / b:12,.0f} calls/s  (baseline)")
        print(f"  ttlctl ingest        {o:6.2f} s  {args.calls / o:12,.0f} calls/s")
        print(
            f"  ratio ingest/read    {o / b:6.2f}x   (goal <= 2x: {'yes' if o / b <= 2 else 'no'};"
            f" 1M calls < 10 s: {'yes' if o * 1_000_000 / args.calls < 10 else 'no'})"
        )
    return int(args.calls)


PEAK_SCRIPT = r"""
import re, sys, threading, time
from pathlib import Path
peak = [0]
def poll():
    while True:
        text = open('/proc/self/status').read()
        peak[0] = max(peak[0], int(re.search(r'RssAnon:\s+(\d+)', text).group(1)))
        time.sleep(0.005)
threading.Thread(target=poll, daemon=True).start()
from ttlctl.ingest.pipeline import ingest
ingest([Path(sys.argv[1])], Path(sys.argv[2]))
time.sleep(0.02)
print(peak[0] // 1024)
"""


def peak_anon_mb(src: Path, out: Path, env: dict[str, str]) -> int:
    """Peak anonymous memory (MiB) of an ingest in a fresh process (file pages excluded)."""
    import os
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, str(src), str(out)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return int(res.stdout.strip().splitlines()[-1])


def memory(calls: int) -> None:
    """Out-of-core path: peak memory at N and 4N calls (bounded: ratio near 1)."""
    if not Path("/proc/self/status").exists():
        print("memory: skipped (no /proc on this system)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        small, large = Path(tmp) / "n.jsonl", Path(tmp) / "4n.jsonl"
        make_trace(small, calls)
        make_trace(large, 4 * calls, seed=1)
        stream = {"TTLCTL_STREAMING_BYTES": "1", "TTLCTL_BUCKET_BYTES": str(32 * 1024**2)}
        rows = []
        for label, env in (("in memory", {}), ("streaming", stream)):
            a = peak_anon_mb(small, Path(tmp) / "a.parquet", env)
            b = peak_anon_mb(large, Path(tmp) / "b.parquet", env)
            rows.append((label, a, b))
        print(f"memory: peak anonymous RSS at {calls:,} and {4 * calls:,} calls")
        for label, a, b in rows:
            print(f"  {label:10s} {a:6d} MiB  {b:6d} MiB   growth {b / a:4.2f}x")
        print(f"  {growth_verdict(rows[0][2] / rows[0][1], rows[1][2] / rows[1][1])}")


def growth_verdict(in_memory: float, streaming: float) -> str:
    """What the two paths' growth from N to 4N calls says of the streaming path's memory."""
    if in_memory < BASELINE_GROWTH_MIN:
        return (
            f"(the in-memory peak grew only {in_memory:.2f}x: at this size the interpreter's "
            "own memory dominates both paths, so this run cannot judge bounded memory; give a "
            "larger --calls, by default 1,000,000)"
        )
    verdict = "met" if streaming <= STREAMING_GROWTH_GOAL else "NOT met"
    return (
        f"(bounded memory: streaming growth {streaming:.2f}x, goal <= "
        f"{STREAMING_GROWTH_GOAL}x, while the input grows 4x and the in-memory peak "
        f"{in_memory:.2f}x: {verdict})"
    )


if __name__ == "__main__":
    memory(main())
