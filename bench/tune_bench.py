"""``ttlctl tune``: trials per minute of the demo-size study, one worker against two.

The demo-size study: 100 SWE-like synthetic programs (``replay.synth``, the paper's
SWE-bench statistics), the shipped Llama-3.1-8B/H100 profile, 600k KV tokens, two
loads (16 and 32 programs live) × two seeds per trial, the default SQLite storage.
The same study (same seed, a fresh storage each) runs once with one worker and once
with two worker processes (``spawn``); the figure is trials finished per minute of
the study itself (process start-up included, the held-back comparison excluded), and
the two-worker figure is read against the one-worker one from the same run (best of
``--repeat`` fresh studies each: the machine is shared and noisy). Nothing here asserts
on speed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

from fitting.fit import FitConfig, fit_trace
from profiles.shipped import resolve
from replay import tune as tuner
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.synth import synth
from replay.workload import load
from ttlctl.trace import io as trace_io


def demo_context(root: Path, programs: int, seed: int) -> tuner.TuneContext:
    trace = root / "trace.parquet"
    trace_io.write(synth("swe-bench", programs, seed).lazy(), trace)
    profile, _ = resolve("llama-3.1-8b-h100")
    return tuner.TuneContext(
        workload=load(trace),
        fit=fit_trace(trace_io.scan(trace), FitConfig(bootstrap=200, seed=seed)),
        profile=profile.to_json(),
        config=ReplayConfig(engine=SimSchedulerConfig(kv_tokens=600_000)),
        loads=(Load(concurrency=16), Load(concurrency=32)),
        seeds=(0, 1),
    )


def study_rate(
    ctx: tuner.TuneContext, root: Path, trials: int, workers: int, seed: int, kind: str
) -> tuple[float, dict[str, int], float]:
    """(trials per minute, trial counts, best value) of one fresh study."""
    name = f"{kind}-w{workers}-{time.monotonic_ns()}"
    target = f"sqlite:///{root / name}.db" if kind == "sqlite" else str(root / f"{name}.log")
    storage = tuner.Storage(target)
    study = tuner.open_study(
        ctx, storage, "bench", seed=seed, trials=trials, inputs={}, provenance={}
    )
    start = time.perf_counter()
    if workers == 1:
        tuner.run_trials(study, ctx, trials, trials, "bench:0")
    else:
        tuner.run_workers(study, ctx, storage, trials, trials, workers, seed)
    elapsed = time.perf_counter() - start
    done = study.get_trials(deepcopy=False)
    counts = {s.name.lower(): sum(t.state == s for t in done) for s in TrialState}
    return 60.0 * trials / elapsed, counts, study.best_value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--programs", type=int, default=100, help="SWE-like programs")
    parser.add_argument("--trials", type=int, default=24, help="trials per study")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=2, help="studies per setting (best of)")
    parser.add_argument(
        "--storage", choices=("sqlite", "journal"), default="sqlite", help="storage kind"
    )
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ctx = demo_context(root, args.programs, args.seed)
        print(
            f"tune: {args.programs} SWE-like programs, loads concurrency 16 and 32 × 2 seeds "
            f"per trial, {args.trials} trials, {args.storage} storage, {os.cpu_count()} CPUs"
        )
        runs = {
            w: max(
                (study_rate(ctx, root, args.trials, w, args.seed, args.storage)
                 for _ in range(args.repeat)),
                key=lambda r: r[0],
            )
            for w in (1, 2)
        }  # fmt: skip
        (one, c1, b1), (two, c2, b2) = runs[1], runs[2]
        for label, rate, c, best, note in (
            ("1 worker ", one, c1, b1, "(baseline)"),
            ("2 workers", two, c2, b2, f"{two / one:.2f}x"),
        ):
            print(
                f"  {label} {rate:7.1f} trials/min  {note:10s} ({c['complete']} complete, "
                f"{c['pruned']} pruned; best mean JCT {best:.1f} s)"
            )


if __name__ == "__main__":
    main()
