"""Small agent traces for the live tests: token-id programs that fit the tiny model."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl

from ttlctl.trace import io as trace_io


def agent_trace(
    path: Path,
    *,
    programs: int = 6,
    calls: int = 4,
    first: int = 300,
    growth: int = 100,
    output: int = 16,
    pause_s: tuple[float, float] = (0.2, 1.0),
    stagger_s: float = 0.1,
    seed: int = 0,
) -> Path:
    """A canonical trace: each call repeats the previous prompt + output and adds ``growth``."""
    rng = random.Random(seed)
    rows = []
    for p in range(programs):
        inp, prev = first, 0
        for t in range(calls):
            last = t == calls - 1
            rows.append(
                {
                    "program_id": f"prog-{p}",
                    "turn": t,
                    "arrival_s": p * stagger_s if t == 0 else None,
                    "input_tokens": inp,
                    "output_tokens": output,
                    "reused_tokens": prev,
                    "tool": None if last else rng.choice(["bash", "view", "edit"]),
                    "tool_s": None if last else rng.uniform(*pause_s),
                    "gap_s": None,
                    "llm_s": None,
                    "is_last": last,
                }
            )
            prev = inp + output
            inp = prev + growth
    trace_io.write(pl.DataFrame(rows).lazy(), path)
    return path
