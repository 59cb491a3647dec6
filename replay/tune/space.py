"""The search space (a trial's :class:`~fitting.policy.PolicyParams`, the paper's defaults
enqueued first) and the objective a trial is scored by (simulated or live)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import optuna

from fitting.eta import clamp
from fitting.policy import VALVES, PolicyParams
from replay.tune.context import TuneContext, TuneError, continuum, jct_mean, replay_once
from replay.tune.live_trial import live_brief, live_replay

PAPER_K = 100
PAPER_T_WINDOW = 100
COLD_START = ("ln-b", "fixed")


# ---------------------------------------------------------------- the search space


def suggest(trial: optuna.trial.BaseTrial) -> PolicyParams:
    """The policy a trial stands for. Also maps a trial's stored params back."""
    eta = trial.suggest_float("eta", -1.0, 1.0)
    k = trial.suggest_int("k", 10, 1000, log=True)
    t_window = trial.suggest_int("t_window", 10, 1000, log=True)
    valve = trial.suggest_categorical("valve", list(VALVES))
    pin_cap = trial.suggest_float("pin_cap", 0.05, 1.0)
    cold = trial.suggest_categorical("cold_start", list(COLD_START))
    cold_ttl = trial.suggest_float("cold_start_ttl_s", 0.0, 30.0) if cold == "fixed" else None
    return PolicyParams(
        eta=eta, k=k, t_window=t_window, valve=valve, pin_cap=pin_cap, cold_start_ttl_s=cold_ttl
    )


def paper_defaults(eta: float) -> dict[str, Any]:
    """The first trial: the paper's policy with the fit's η."""
    return {
        "eta": clamp(eta),
        "k": PAPER_K,
        "t_window": PAPER_T_WINDOW,
        "valve": "head",
        "pin_cap": 1.0,
        "cold_start": "ln-b",
    }


def first_trials(eta: float) -> list[dict[str, Any]]:
    """Enqueued before the sampler's own: the paper's defaults (trial 0), then the same
    with the stall-only valve, because the valve moves results more than τ does."""
    paper = paper_defaults(eta)
    return [paper, {**paper, "valve": "stall-only"}]


def params_of(values: Mapping[str, Any]) -> PolicyParams:
    return suggest(optuna.trial.FixedTrial(dict(values)))


# ---------------------------------------------------------------- the objective


def objective(trial: optuna.trial.BaseTrial, ctx: TuneContext) -> float:
    """Mean JCT (s) of the trial's policy over every load × seed of ``ctx``; lower is better."""
    if ctx.live is not None:
        return live_objective(trial, ctx)
    spec = continuum(ctx, suggest(trial))
    replays = ctx.replays()
    jcts: list[float] = []
    p95s: list[float | None] = []
    per_seed = len(ctx.loads)
    for i, timing in enumerate(replays):
        result = replay_once(ctx, spec, timing)
        jcts.append(jct_mean(result))
        p95s.append(result["jct_p95_s"])
        if (i + 1) % per_seed:
            continue
        # after each full pass over the loads: every step's value mixes the same loads
        step = (i + 1) // per_seed - 1
        trial.report(float(np.mean(jcts)), step)
        if step < len(ctx.seeds) - 1 and trial.should_prune():
            raise optuna.TrialPruned(f"pruned after {step + 1} of {len(ctx.seeds)} seeds")
    trial.set_user_attr("jct_mean_s_by_replay", jcts)
    return _score(trial, ctx, jcts, p95s)


def live_objective(trial: optuna.trial.BaseTrial, ctx: TuneContext) -> float:
    """The objective against the server: one live run per load × seed, each after its own
    bundle swap (so every run starts from the bundle, not from what the last one learned).
    The running mean is reported after each seed (no pruning: see :func:`pruner`)."""
    params = suggest(trial)
    number = getattr(trial, "number", None)
    label = "trial" if number is None else f"trial {number}"
    jcts: list[float] = []
    p95s: list[float | None] = []
    runs: list[dict[str, Any]] = []
    per_seed = len(ctx.loads)
    for i, timing in enumerate(ctx.replays()):
        result = live_replay(ctx, params, timing, label)
        jcts.append(float(result["jct_mean_s"]))
        p95s.append(result["jct_p95_s"])
        runs.append(live_brief(result))
        if not (i + 1) % per_seed:
            trial.report(float(np.mean(jcts)), (i + 1) // per_seed - 1)
    trial.set_user_attr("jct_mean_s_by_replay", jcts)
    trial.set_user_attr("live_runs", runs)
    return _score(trial, ctx, jcts, p95s)


def _score(
    trial: optuna.trial.BaseTrial,
    ctx: TuneContext,
    jcts: list[float],
    p95s: list[float | None],
) -> float:
    """The trial's value (mean of the replays' mean JCT), its p95 JCT as a user
    attribute, and the p95 constraint when one is set."""
    if all(p is not None for p in p95s):
        p95 = float(np.mean([p for p in p95s if p is not None]))
        trial.set_user_attr("jct_p95_s", p95)
        if ctx.p95_max_s is not None:
            trial.set_constraint("jct_p95_s", p95 - ctx.p95_max_s)
    elif ctx.p95_max_s is not None:
        raise TuneError("too few programs finished for a p95 JCT (needs 20)")
    return float(np.mean(jcts))
