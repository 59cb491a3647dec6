"""Run directories for the report tests: the samples' pipeline, a tune.json, and a trace
whose tool names, program id, policy name, parameter names and directory name are
HTML/JS/mathtext injections."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
from typer.testing import CliRunner

from ttlctl.cli import app
from ttlctl.trace import io as trace_io

REPO = Path(__file__).resolve().parents[2]
EVIL_TOOL = "<script>alert(1)</script>"
EVIL_PROGRAM = '"><img src=x onerror=alert(1)>'
MATH_TOOL = r"$\frac{x}{0}$ & <b>bold</b>"
EVIL_POLICY = "<script>alert('policy')</script>"
EVIL_PARAM = "<img src=x onerror=alert(2)>"
EVIL_DIR = '<i>run"&dir'


def _cli(*args: str) -> None:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output


def pipeline(run: Path, trace: Path | None = None) -> None:
    """fit → bundle → replay (all policies) into ``run``, from ``trace`` or the samples."""
    if trace is None:
        _cli("ingest", str(REPO / "samples"), "-o", str(run / "trace.parquet"))
    _cli("fit", str(run / "trace.parquet"), "-o", str(run / "fit.json"), "--bootstrap", "50")
    _cli(
        "bundle", "build", "--fit", str(run / "fit.json"),
        "--profile", "llama-3.1-8b-h100", "-o", str(run / "bundle.json"),
    )  # fmt: skip
    _cli(
        "replay", str(run / "trace.parquet"), "--policy", "all",
        "--no-timing", "--json", str(run / "replay.json"),
    )  # fmt: skip


def tune_doc(params: tuple[str, ...] = ("eta", "pin_cap", "valve")) -> dict[str, Any]:
    trials: list[dict[str, Any]] = []
    for i in range(20):
        p: dict[str, Any] = {params[0]: round(-1 + i / 10, 2), params[1]: 0.5, params[2]: "head"}
        state = "FAIL" if i == 7 else "COMPLETE"
        value = None if state == "FAIL" else 170.0 + (i * 37 % 11)
        trials.append({"number": i, "params": p, "value": value, "state": state})
    best = min((t for t in trials if t["value"] is not None), key=lambda t: t["value"])
    return {
        "trials": trials,
        "best": best,
        "importance": {params[0]: 0.7, params[1]: 0.2, params[2]: 0.1},
        "held_back": {"programs": 40, "vllm_jct_mean_s": 180.0, "best_jct_mean_s": 171.5},
    }


def evil_trace(path: Path) -> None:
    rows = []
    for p in range(40):
        pid = EVIL_PROGRAM if p == 0 else f"p{p}"
        n = 14 if p == 0 else 6
        for turn in range(n):
            last = turn == n - 1
            tool = None if last else (EVIL_TOOL, EVIL_TOOL, MATH_TOOL, "grep")[(p + turn) % 4]
            pause = None if last else 0.2 + ((p * 7 + turn * 3) % 13) * 0.4
            rows.append(
                {
                    "program_id": pid,
                    "turn": turn,
                    "arrival_s": float(p * 5) if turn == 0 else None,
                    "input_tokens": 1500 + 900 * turn,
                    "output_tokens": 80,
                    "tool": tool,
                    "tool_s": pause,
                    "gap_s": None if pause is None else pause + 0.01,
                    "llm_s": 0.4,
                    "is_last": last,
                }
            )
    trace_io.write(pl.DataFrame(rows).lazy(), path)


def skewed_replay() -> dict[str, Any]:
    """A replay.json whose JCT tails are long: each policy's p99 is 20 times its mean
    (a few programs run for an hour while most take a few minutes)."""
    means = {
        "vllm": 196.4,
        "program-fcfs": 195.0,
        "static-ttl": 194.8,
        "continuum": 171.2,
        "infercept": 190.3,
        "autellix": 188.9,
        "oracle": 160.5,
        "unlimited-kv": 150.1,
    }
    results = []
    for name, mean in means.items():
        results.append(
            {
                "policy": name,
                "evaluation_only": name in ("oracle", "unlimited-kv"),
                "jct_mean_s": mean,
                "jct_p50_s": 0.55 * mean,
                "jct_p95_s": 6.0 * mean,
                "jct_p99_s": 20.0 * mean,
                "prefix_hit_rate": 0.8,
                "preemptions": 12,
                "pinned_token_seconds": 1.0e6,
                "gap_closed": (means["vllm"] - mean) / (means["vllm"] - means["unlimited-kv"]),
            }
        )
    return {"results": results, "config": {"concurrency": 64}}
