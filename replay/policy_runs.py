"""Replay one workload under several policies: the library behind ``ttlctl replay``."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from profiles.cost import CostModel, rebuild_pricer
from replay import figures
from replay.figures import PolicyResult
from replay.policies import BOUNDS, NAMES, PolicySpec, make
from replay.progress import CallsDone
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig, simulate
from replay.sim_outcome import Outcome
from replay.workload import Workload, poisson_starts, retimed
from ttlctl.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Load:
    """How programs start: the trace's arrivals, Poisson ``jps``, or ``concurrency``."""

    jps: float | None = None
    concurrency: int | None = None
    seed: int = 0


def prepare(workload: Workload, timing: Load) -> Workload:
    if timing.jps is not None:
        return retimed(workload, poisson_starts(len(workload.programs), timing.jps, timing.seed))
    return workload


def unlimited_kv_tokens(workload: Workload, config: ReplayConfig) -> int:
    """Memory for every program's largest context at once (nothing is ever evicted)."""
    need = sum(max(c.input_tokens + c.output_tokens for c in p.calls) for p in workload.programs)
    bs = config.engine.block_size
    return (need // bs + 2 * len(workload.programs) + 16) * bs


def sized_engine(
    spec: PolicySpec, work: Workload, cfg: ReplayConfig, engine: SimSchedulerConfig
) -> SimSchedulerConfig:
    """``engine`` as ``spec`` runs on it: ``unlimited-kv`` widened to hold every program of
    ``work`` at once (never narrowed), any other policy as it is. Every backend, one engine
    or a fleet's replicas, sizes its engines here."""
    if spec.name != "unlimited-kv":
        return engine
    return replace(engine, kv_tokens=max(engine.kv_tokens, unlimited_kv_tokens(work, cfg)))


def simulate_one(
    workload: Workload,
    spec: PolicySpec,
    cost: CostModel,
    config: ReplayConfig,
    timing: Load,
    *,
    progress: CallsDone | None = None,
) -> tuple[Outcome, float]:
    """The fast backend's outcome of one policy (per-call records included) and the wall
    seconds ``simulate`` took; ``progress``: told the calls done now and then."""
    work = prepare(workload, timing)
    pauses = work.pauses()
    cfg = replace(config, concurrency=timing.concurrency)
    cfg = replace(cfg, engine=sized_engine(spec, work, cfg, cfg.engine))

    budget = cfg.engine.max_num_batched_tokens
    policy = make(spec, pauses, rebuild_pricer(cost, budget), budget)
    start = time.perf_counter()
    outcome = simulate(work, policy, cost, cfg, progress=progress)
    return outcome, time.perf_counter() - start


def run_one(
    workload: Workload,
    spec: PolicySpec,
    cost: CostModel,
    config: ReplayConfig,
    timing: Load,
    *,
    timed: bool = True,
    progress: CallsDone | None = None,
) -> PolicyResult:
    """One policy's replay on the fast backend, as ``replay --json`` reports it."""
    outcome, wall = simulate_one(workload, spec, cost, config, timing, progress=progress)
    return figures.summarize(
        outcome, spec.name, evaluation_only=spec.name in BOUNDS, wall_s=wall if timed else None
    )


def run_all(
    workload: Workload,
    specs: Sequence[PolicySpec],
    cost: CostModel,
    config: ReplayConfig,
    timing: Load,
    *,
    timed: bool = True,
    progress: Callable[[str, int, int], None] | None = None,
    calls_done: CallsDone | None = None,
    runner: Callable[..., PolicyResult] | None = None,
) -> list[PolicyResult]:
    """Every policy on the same workload; adds ``gap_closed`` when both bounds ran.

    ``progress``: told (policy, its index, policies) as each starts, and ("done", n, n);
    ``calls_done``: told (calls done, calls) within each policy's replay
    (:mod:`replay.progress`); ``runner``: replays one policy (default :func:`run_one`,
    the fast backend; see ``replay.vllmsim.backend.runner``)."""
    one = runner or run_one
    results = []
    for i, spec in enumerate(specs):
        if progress is not None:
            progress(spec.name, i, len(specs))
        results.append(one(workload, spec, cost, config, timing, timed=timed, progress=calls_done))
    by_name = {r["policy"]: r for r in results}
    if "vllm" in by_name and "unlimited-kv" in by_name:
        for r in results:
            r["gap_closed"] = figures.gap_closed(r, by_name["vllm"], by_name["unlimited-kv"])
    if progress is not None:
        progress("done", len(specs), len(specs))
    return results


def expand(names: Sequence[str]) -> list[str]:
    if list(names) == ["all"]:
        return list(NAMES)
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise ConfigError(f"unknown policy {unknown[0]!r}; choose from {', '.join(NAMES)} or all")
    return list(names)
