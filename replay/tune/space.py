"""The search space (a trial's :class:`~fitting.policy_params.PolicyParams`, the paper's defaults
enqueued first) and the objective a trial is scored by (simulated or live)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import optuna

from fitting.eta import clamp
from fitting.policy_params import VALVES, PolicyParams
from replay.fleet.routers import RouterSettings
from replay.fleet.run import FleetSpec
from replay.tune.context import TuneContext, TuneError, continuum, jct_mean, replay_once
from replay.tune.live_trial import live_brief, live_replay
from ttlctl.router_doc import KV_AWARE

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


def suggest_fleet(trial: optuna.trial.BaseTrial, ctx: TuneContext) -> FleetSpec | None:
    """The fleet a trial stands for: the router (searched when several are allowed) and
    the settings of it that matter for retention: cache-aware's balance thresholds (when
    it balances load, calls leave their pins), kv-aware's session-affinity idle TTL (how
    long a program stays with its pin), pin-aware's queue bound, Program scheduling's
    TTL bound, admission gates and queue knobs (:func:`suggest_program_scheduling`).
    None: one engine."""
    if ctx.fleet is None:
        return None
    names = ctx.searched_routers()
    name = trial.suggest_categorical("router", list(names)) if len(names) > 1 else names[0]
    settings: dict[str, float | int] = {}
    if name == "cache-aware":
        settings["balance_abs_threshold"] = trial.suggest_int(
            "balance_abs_threshold", 1, 1024, log=True
        )
        settings["balance_rel_threshold"] = trial.suggest_float("balance_rel_threshold", 1.0, 8.0)
    elif name == KV_AWARE:
        settings["kv_aware_session_affinity_ttl_secs"] = trial.suggest_int(
            "kv_aware_session_affinity_ttl_secs", 1, 3600, log=True
        )
    elif name == "pin-aware":
        settings["pin_queue_bound"] = trial.suggest_int("pin_queue_bound", 0, 256)
    elif name == "program-scheduling":
        config = suggest_program_scheduling(trial, ctx.config.engine.kv_tokens)
        return replace(
            ctx.fleet,
            router=RouterSettings(name, program_scheduling_config_json=json.dumps(config)),
        )
    return replace(ctx.fleet, router=RouterSettings(name, **settings))  # type: ignore[arg-type]


#: Program scheduling's settings searched, with the router's defaults (the first trials)
PROGRAM_SCHEDULING_DEFAULTS: dict[str, Any] = {
    "max_acting_ttl_seconds": 10.0,
    "stats_window_size": 100,
    "admission_waiting_request_threshold": 1,
    "max_active_programs_per_target": 64,
    "force_resume_timeout_seconds": 300.0,
    "resume_order": "mru",
    "token_capacity": False,
}


def suggest_program_scheduling(
    trial: optuna.trial.BaseTrial, kv_tokens_per_replica: int
) -> dict[str, Any]:
    """vllm-router's ``--program-scheduling-config-json`` fields that decide retention
    and admission: the acting TTL's cap and how soon it starts (its interval window),
    the admission gates (waiting requests, active programs, and optionally a token
    capacity as a share of the replica's KV with its low watermark), the force-resume
    deadline and the resume order. The calibration is the replay's profile."""
    config: dict[str, Any] = {
        "max_acting_ttl_seconds": trial.suggest_float(
            "max_acting_ttl_seconds", 0.5, 600.0, log=True
        ),
        "stats_window_size": trial.suggest_int("stats_window_size", 5, 500, log=True),
        "admission_waiting_request_threshold": trial.suggest_int(
            "admission_waiting_request_threshold", 0, 64
        ),
        "max_active_programs_per_target": trial.suggest_int(
            "max_active_programs_per_target", 1, 256, log=True
        ),
        "force_resume_timeout_seconds": trial.suggest_float(
            "force_resume_timeout_seconds", 5.0, 600.0, log=True
        ),
        "resume_order": trial.suggest_categorical("resume_order", ["mru", "fcfs"]),
    }
    if trial.suggest_categorical("token_capacity", [False, True]):
        share = trial.suggest_float("token_capacity_kv_share", 0.25, 2.0)
        config["token_capacity_per_target"] = max(1, round(share * kv_tokens_per_replica))
        config["low_watermark_ratio"] = trial.suggest_float("low_watermark_ratio", 0.5, 1.0)
    return config


def fleet_defaults(ctx: TuneContext) -> dict[str, Any]:
    """The router part of the default trials: the fleet's router with the real router's
    defaults (kv-aware's affinity, off by default, is left to the sampler)."""
    if ctx.fleet is None:
        return {}
    name = ctx.fleet.router.name
    out: dict[str, Any] = {"router": name} if len(ctx.searched_routers()) > 1 else {}
    resolved = ctx.fleet.router.resolved()
    for key in ("balance_abs_threshold", "balance_rel_threshold", "pin_queue_bound"):
        if key in resolved and resolved[key] is not None:
            out[key] = resolved[key]
    if name == "program-scheduling":
        out |= PROGRAM_SCHEDULING_DEFAULTS
    return out


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


def first_trials(eta: float, router: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Enqueued before the sampler's own: the paper's defaults (trial 0), then the same
    with the stall-only valve, because the valve moves results more than τ does (on a
    fleet, both behind its router with the real router's defaults: ``router``)."""
    paper = paper_defaults(eta) | (router or {})
    return [paper, {**paper, "valve": "stall-only"}]


def params_of(values: Mapping[str, Any]) -> PolicyParams:
    return suggest(optuna.trial.FixedTrial(dict(values)))


def fleet_of(values: Mapping[str, Any], ctx: TuneContext) -> FleetSpec | None:
    """The fleet a stored trial's params stand for (None: one engine)."""
    return suggest_fleet(optuna.trial.FixedTrial(dict(values)), ctx)


# ---------------------------------------------------------------- the objective


def objective(trial: optuna.trial.BaseTrial, ctx: TuneContext) -> float:
    """Mean JCT (s) of the trial's policy over every load × seed of ``ctx``; lower is better."""
    if ctx.live is not None:
        return live_objective(trial, ctx)
    spec = continuum(ctx, suggest(trial))
    fleet = suggest_fleet(trial, ctx)
    replays = ctx.replays()
    jcts: list[float] = []
    p95s: list[float | None] = []
    per_seed = len(ctx.loads)
    for i, timing in enumerate(replays):
        result = replay_once(ctx, spec, timing, fleet)
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
