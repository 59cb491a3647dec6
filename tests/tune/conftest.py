"""A small agent workload made here (no shared traces): 20 programs, two tools, a fit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from fitting.fit import FitConfig, fit_trace
from profiles.shipped import resolve
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.tune import TuneContext
from replay.workload import load
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


@pytest.fixture(scope="session")
def tune_inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """trace.parquet, fit.json and the context a study replays (built once per session)."""
    import json

    root = tmp_path_factory.mktemp("tune")
    trace = write_trace(root / "trace.parquet")
    fit_doc = fit_trace(trace_io.scan(trace), FitConfig(min_samples=10, bootstrap=50))
    fit_path = root / "fit.json"
    fit_path.write_text(json.dumps(fit_doc))
    profile, _ = resolve(PROFILE)
    ctx = TuneContext(
        workload=load(trace),
        fit=fit_doc,
        profile=profile.to_json(),
        config=ReplayConfig(engine=SimSchedulerConfig(kv_tokens=KV_TOKENS)),
        loads=(Load(concurrency=6), Load(concurrency=12)),
        seeds=(0, 1),
    )
    return {"root": root, "trace": trace, "fit": fit_path, "ctx": ctx}
