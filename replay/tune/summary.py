"""The study's summary (``tune.json``): what :func:`~replay.tune.study.tune` returns, built
from the finished study and the held-back judgement, and the part of it that goes into the
bundle's provenance (where it goes by default: :mod:`ttlctl.summary_name`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import optuna
from optuna.trial import TrialState

from replay.fleet.run import FleetSpec
from replay.tune.caveats import caveats
from replay.tune.context import LIVE_BASELINE_NOTE, LIVE_RELOAD_RULE, TuneContext, TuneError
from replay.tune.guard import guard
from replay.tune.importance import importance_record
from replay.tune.judge import held_back, held_back_live, stock_fleet
from replay.tune.space import fleet_defaults, fleet_of, paper_defaults, params_of
from replay.tune.storage import Storage
from replay.tune.workers import METRIC
from ttlctl.server.facts import ServerInfo
from ttlctl.summary_name import SUMMARY_SCHEMA


def summary_doc(
    study: optuna.Study,
    ctx: TuneContext,
    storage: Storage,
    holdout: tuple[int, ...],
    force: bool,
    seed: int,
    ran: int,
    elapsed_s: float,
    *,
    server: ServerInfo | None = None,
    min_gain: float = 1.0,
) -> dict[str, Any]:
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    if not complete:
        raise TuneError(f"study {study.study_name!r}: no trial completed")
    try:
        best = study.best_trial
    except ValueError:
        raise TuneError(
            f"no trial kept the mean p95 JCT at or under {ctx.p95_max_s} s; "
            "raise --p95-max-seconds or run more trials"
        ) from None
    defaults = paper_defaults(ctx.eta_fitted) | fleet_defaults(ctx)
    default_trial = next((t for t in trials if t.params == defaults), None)
    tuned = params_of(best.params)
    paper = params_of(defaults)
    never = replace(paper, pins=False)
    policies = {"tuned": tuned, "default": paper, "never-pin": never}
    tuned_fleet = fleet_of(best.params, ctx)
    fleets = {"tuned": tuned_fleet, "default": ctx.fleet, "never-pin": ctx.fleet}
    if ctx.live is None:
        held, by_replay = held_back(replace(ctx, seeds=holdout), policies, fleets)
        verdict = guard(held, force, min_gain=min_gain)
    else:
        held_ctx = replace(ctx, seeds=holdout, live=ctx.live.held_back())
        held, by_replay = held_back_live(held_ctx, policies)
        verdict = guard(held, force, baseline="never-pin", min_gain=min_gain)
    shipped = tuned if verdict["shipped"] == "tuned" else never
    shipped_fleet = shipped_router(verdict, ctx, tuned_fleet)
    if shipped_fleet is not None and shipped_fleet not in (ctx.fleet, tuned_fleet):
        verdict["message"] += (
            f"; the bundle's router is the stock stack's ({shipped_fleet.router.name} with "
            "vllm-router's defaults)"
        )
    verdict["caveats"] = caveats(
        held,
        verdict,
        shipped,
        ctx.fit,
        ctx.profile,
        calls=ctx.replayed().calls,
    )
    return {
        "schema": SUMMARY_SCHEMA,
        "mode": "simulator" if ctx.live is None else "live",
        "live": None if ctx.live is None else live_doc(ctx, server),
        "study": {
            "name": study.study_name,
            "storage": storage.shown(),
            "direction": "minimize",
            "metric": METRIC,
            "sampler": "TPESampler",
            "pruner": type(study.pruner).__name__,
            "seed": seed,
        },
        "direction": "minimize",
        "objective": ctx.fingerprint()
        | {"client_tags": ctx.config.client_tags, "eta_fitted": ctx.eta_fitted},
        "counts": {s.name.lower(): sum(t.state == s for t in trials) for s in TrialState},
        "ran_now": ran,
        "elapsed_s": elapsed_s,
        "trials": [_trial_json(t) for t in trials],
        "default": {
            "number": None if default_trial is None else default_trial.number,
            "params": defaults,
            "value": None if default_trial is None else default_trial.value,
        },
        "best": {
            "number": best.number,
            "params": best.params,
            "value": best.value,
            "jct_p95_s": best.user_attrs.get("jct_p95_s"),
            "policy": tuned.to_json(),
            **({"router": tuned_fleet.describe()} if tuned_fleet is not None else {}),
        },
        **importance_record(study, len(complete)),
        "held_back": held,
        "held_back_jct_mean_s_by_replay": by_replay,
        "guard": verdict,
        "shipped": {
            "which": verdict["shipped"],
            "policy": shipped.to_json(),
            **({"router": shipped_fleet.describe()} if shipped_fleet is not None else {}),
        },
        "commands": storage.commands(study.study_name),
    }


def _trial_json(t: optuna.trial.FrozenTrial) -> dict[str, Any]:
    out = {
        "number": t.number,
        "state": t.state.name,
        "params": t.params,
        "value": t.value,
        "jct_p95_s": t.user_attrs.get("jct_p95_s"),
        "worker": t.user_attrs.get("worker"),
        "steps": len(t.intermediate_values),
    }
    if "live_runs" in t.user_attrs:
        out["jct_mean_s_by_replay"] = t.user_attrs.get("jct_mean_s_by_replay")
        out["live_runs"] = t.user_attrs["live_runs"]
    return out


def shipped_router(
    verdict: Mapping[str, Any], ctx: TuneContext, tuned: FleetSpec | None
) -> FleetSpec | None:
    """The router the shipped bundle records (None: one engine): the tuned one with the
    tuned policy; with the never-pin fallback, the study's router it was judged behind,
    unless it lost to stock vLLM too (the verdict then says to serve without a bundle):
    the stock stack's router, so that the bundle never starts a router that lost."""
    if verdict["shipped"] == "tuned":
        return tuned
    if verdict.get("never_pin_beats_vllm") is False:
        return stock_fleet(ctx)
    return ctx.fleet


def live_doc(ctx: TuneContext, server: ServerInfo | None) -> dict[str, Any]:
    """What a live study ran against (tune.json's ``live``)."""
    live = ctx.live
    assert live is not None
    tuning = live.subset(ctx.workload)
    held = live.held_back().subset(ctx.workload)
    return {
        "url": live.url,
        "bundle": str(live.bundle),
        "model": live.model,
        "server": None if server is None else server.to_json(),
        "programs": [p.program_id for p in tuning.programs],
        "held_back_programs": [p.program_id for p in held.programs],
        "idle_gap_cap_s": ctx.idle_gap_cap_s,
        "check_s": live.check_s,
        "wait_s": live.wait_s,
        "reload_rule": LIVE_RELOAD_RULE,
        "baseline": "never-pin",
        "baseline_note": LIVE_BASELINE_NOTE,
    }


# ---------------------------------------------------------------- outputs


def provenance_of(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The study summary that goes into the bundle's provenance (no trial list)."""
    keep = (
        "mode",
        "live",
        "study",
        "objective",
        "counts",
        "default",
        "best",
        "importance",
        "importance_quantile",
        "importance_note",
        "held_back",
        "guard",
        "shipped",
    )
    return {k: summary[k] for k in keep if k in summary}
