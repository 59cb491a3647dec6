"""A small agent workload made here (no shared traces): 20 programs, two tools."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ttlctl.trace import io as trace_io

PROFILE = "llama-3.1-70b-a100"
#: small enough that pins compete with waiting work at these loads
KV_TOKENS = 30_000
TOOLS = {"bash": (0.6, 0.8), "pytest": (4.0, 0.6)}  # median s, lognormal sigma


def write_trace(path: Path, programs: int = 20, seed: int = 7) -> Path:
    """Agent programs whose context grows each turn; a tool call between turns."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for p in range(programs):
        turns = int(rng.integers(4, 9))
        prompt = int(rng.integers(1_500, 3_000))
        for t in range(turns):
            last = t == turns - 1
            output = int(rng.integers(60, 200))
            tool = None if last else str(rng.choice(list(TOOLS), p=[0.7, 0.3]))
            pause = None
            if tool is not None:
                median, sigma = TOOLS[tool]
                pause = round(float(median * np.exp(sigma * rng.standard_normal())), 3)
            rows.append(
                {
                    "program_id": f"p{p:03d}",
                    "turn": t,
                    "arrival_s": 0.0 if t == 0 else None,
                    "input_tokens": prompt,
                    "output_tokens": output,
                    "tool": tool,
                    "tool_s": pause,
                    "gap_s": pause,
                    "is_last": last,
                }
            )
            prompt += output + int(rng.integers(200, 900))
    trace_io.write(pl.DataFrame(rows).lazy(), path)
    return path


def fleet_study(inputs: dict[str, Any], out: Path, *extra: str) -> list[str]:
    """``tune``'s arguments for a small study of ``inputs`` (the ``tune_inputs`` fixture's)
    on two replicas, one seed and one held-back seed, its SQLite storage beside ``out``
    (the bundle), then ``extra``."""
    return [
        "tune", str(inputs["trace"]), "--fit", str(inputs["fit"]), "--profile", PROFILE,
        "--concurrency", "8", "--kv-tokens", str(KV_TOKENS), "--seeds", "1",
        "--holdout-seeds", "1", "--replicas", "2",
        "--storage", f"sqlite:///{out.parent / 'study.db'}", "-o", str(out), *extra,
    ]  # fmt: skip
