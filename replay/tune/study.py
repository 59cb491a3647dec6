"""The whole run: :func:`tune` (run or resume the study, then judge its best policy on
held-back seeds), the summary it returns (``tune.json``) and where that summary goes."""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances
from optuna.trial import TrialState

from replay.tune.caveats import caveats
from replay.tune.context import (
    LIVE_BASELINE_NOTE,
    LIVE_RELOAD_RULE,
    LiveTarget,
    TuneContext,
    TuneError,
)
from replay.tune.judge import guard, held_back, held_back_live
from replay.tune.opening import open_study
from replay.tune.space import fleet_defaults, fleet_of, paper_defaults, params_of
from replay.tune.storage import Storage, removed_if_unused
from replay.tune.workers import (
    METRIC,
    finished_trials,
    run_trials,
    run_workers,
    worker_name,
)
from ttlctl.jsonio import write_atomic
from ttlctl.nouns import counted
from ttlctl.server import signals
from ttlctl.server.client import ServerError
from ttlctl.server.facts import ServerInfo, probe

SUMMARY_SCHEMA = "ttlctl.tune/1"
#: the parameters' importances are Optuna's PED-ANOVA evaluator's (Optuna 5's default), which
#: asks what the top ``target_quantile`` of the completed trials have in common; Optuna's
#: documentation of that evaluator advises at least 5 trials in that top quantile for a
#: stable answer. The evaluator keeps the best ceil(quantile × n) of n completed trials, so
#: tune asks for Optuna's default quantile (10%) when that holds 5 trials (n ≥ 50) and for
#: 5/n below: always 5 trials in the top. Below :data:`MIN_TRIALS_FOR_IMPORTANCE` that
#: quantile would pass one half (the "top" would be most of the trials, and the contrast
#: with the rest that the evaluator measures fades), so tune says so instead of computing.
IMPORTANCE_TARGET_QUANTILE = 0.1
IMPORTANCE_TOP_TRIALS = 5
IMPORTANCE_MAX_QUANTILE = 0.5
MIN_TRIALS_FOR_IMPORTANCE = math.ceil(IMPORTANCE_TOP_TRIALS / IMPORTANCE_MAX_QUANTILE)


def importance_quantile(complete: int) -> float | None:
    """The evaluator's top quantile for ``complete`` completed trials: the smallest, from
    Optuna's default (10%) up, whose top holds :data:`IMPORTANCE_TOP_TRIALS` trials
    (max(10%, 5/n)); None below :data:`MIN_TRIALS_FOR_IMPORTANCE` trials."""
    if complete < MIN_TRIALS_FOR_IMPORTANCE:
        return None
    return max(IMPORTANCE_TARGET_QUANTILE, IMPORTANCE_TOP_TRIALS / complete)


# ---------------------------------------------------------------- the whole run


def tune(
    ctx: TuneContext,
    *,
    storage: Storage,
    study_name: str,
    trials: int,
    workers: int = 1,
    seed: int = 0,
    holdout_seeds: Sequence[int] = (1000, 1001, 1002),
    force: bool = False,
    min_gain: float = 1.0,
    inputs: Mapping[str, str] | None = None,
    provenance: Mapping[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
    stage: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run (or resume) the study to ``trials`` finished trials, then judge its best
    policy on held-back seeds (the guard: it must beat the baseline by ``min_gain``).
    Returns the summary (see :func:`summary_doc`); the policy to ship is
    ``summary["shipped"]["policy"]``."""
    if trials < 1 or workers < 1:
        raise TuneError("trials and workers must be at least 1")
    if set(holdout_seeds) & set(ctx.seeds) or not holdout_seeds:
        raise TuneError("held-back seeds must be given and differ from the tuning seeds")
    run: dict[str, Any] = {
        "storage": storage,
        "study_name": study_name,
        "trials": trials,
        "seed": seed,
        "holdout": tuple(holdout_seeds),
        "force": force,
        "min_gain": min_gain,
        "inputs": inputs or {},
        "provenance": provenance or {},
        "progress": progress,
        "stage": stage,
    }
    if ctx.live is None:
        with removed_if_unused(storage):  # a failed first run leaves no empty study behind
            return _tune(ctx, workers=workers, server=None, **run)
    if workers != 1:
        raise TuneError("a live study runs one trial at a time on its server: use one worker")
    live = ctx.live
    held = live.held_back()
    if not held.subset(ctx.workload).programs:
        raise TuneError(
            f"the trace has {counted(len(ctx.workload.programs), 'program')}: a live study "
            f"needs more than --live-programs ({live.programs}), so that the held-back comparison "
            "replays programs no trial saw"
        )
    try:
        original = live.bundle.read_bytes()
    except OSError as exc:
        raise TuneError(
            f"{live.bundle}: cannot read the server's bundle ({exc.strerror or exc}); "
            "give --live-bundle the file the server was started with"
        ) from None
    try:
        info = probe(live.url)
    except ServerError as exc:
        raise TuneError(str(exc)) from None
    if not info.ttl_metrics:
        _say(
            live,
            f"{info.url}: no ttlctl:pins_* on /metrics: make sure this server runs the TTL "
            "scheduler (ttlctl serve) with --live-bundle as its bundle",
        )
    ctx = replace(ctx, live=replace(live, url=info.url, model=info.model))
    try:
        # SIGTERM and SIGHUP unwind too, so the bundle is put back
        with signals.held(), removed_if_unused(storage):
            return _tune(ctx, workers=1, server=info, **run)
    except BaseException:
        _put_back(live.bundle, original)  # the server goes back to what it served before
        raise


def _say(live: LiveTarget, message: str) -> None:
    if live.warn is not None:
        live.warn(message)
    else:
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _put_back(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a failed study leaves the server's bundle)."""
    with contextlib.suppress(OSError):
        write_atomic(data, path)


def _tune(
    ctx: TuneContext,
    *,
    storage: Storage,
    study_name: str,
    trials: int,
    workers: int,
    seed: int,
    holdout: tuple[int, ...],
    force: bool,
    min_gain: float,
    inputs: Mapping[str, str],
    provenance: Mapping[str, Any],
    progress: Callable[[int, int], None] | None,
    stage: Callable[[str], None] | None,
    server: ServerInfo | None,
) -> dict[str, Any]:
    study = open_study(
        ctx,
        storage,
        study_name,
        seed=seed,
        trials=trials,
        inputs=inputs,
        provenance=provenance,
    )
    todo = max(0, trials - finished_trials(study))
    started = time.perf_counter()
    if todo and workers == 1:
        done = [finished_trials(study)]

        def tick() -> None:
            done[0] += 1
            if progress is not None:
                progress(done[0], trials)

        if progress is not None:
            progress(done[0], trials)
        run_trials(study, ctx, todo, trials, worker_name(0), tick)
    elif todo:
        run_workers(study, ctx, storage, todo, trials, workers, seed, progress)
    if progress is not None:
        progress(finished_trials(study), trials)
    elapsed = time.perf_counter() - started
    if stage is not None:
        stage("replaying held-back programs live" if ctx.live else "replaying held-back seeds")
    return summary_doc(
        study, ctx, storage, holdout, force, seed, todo, elapsed, server=server, min_gain=min_gain
    )


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
    shipped_fleet = tuned_fleet if verdict["shipped"] == "tuned" else ctx.fleet
    verdict["caveats"] = caveats(held, verdict, shipped, ctx.fit, ctx.profile)
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
        "objective": ctx.fingerprint() | {"eta_fitted": ctx.eta_fitted},
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


def importance_record(study: optuna.Study, complete: int) -> dict[str, Any]:
    """tune.json's ``importance`` (the parameters' importances, or None),
    ``importance_quantile`` (the evaluator's top quantile, :func:`importance_quantile`;
    None when not computed) and ``importance_note`` (why there are none, one line; None
    when there are), from ``complete`` completed trials."""
    quantile = importance_quantile(complete)
    if quantile is None:
        return {
            "importance": None,
            "importance_quantile": None,
            "importance_note": (
                f"not computed from {complete} completed trial(s): Optuna's PED-ANOVA "
                f"evaluator needs {IMPORTANCE_TOP_TRIALS} in its top quantile, and that "
                f"quantile stays at most {IMPORTANCE_MAX_QUANTILE:.0%}, so at least "
                f"{MIN_TRIALS_FOR_IMPORTANCE} (run more --trials; a resumed study keeps the "
                "ones it has)"
            ),
        }
    found = importances(study, quantile)
    return {
        "importance": found or None,
        "importance_quantile": quantile if found else None,
        "importance_note": None if found else "not computed: Optuna's evaluator gave none",
    }


def importances(study: optuna.Study, quantile: float) -> dict[str, float] | None:
    """Optuna's PED-ANOVA evaluator (its default: deterministic, no scikit-learn), over
    the top ``quantile`` of the completed trials; None when it fails.
    :func:`importance_record` calls it only on enough trials."""
    evaluator = PedAnovaImportanceEvaluator(target_quantile=quantile)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "few trials in some regimes" and the like
            found = get_param_importances(study, evaluator=evaluator)
    except (ValueError, RuntimeError, ImportError):
        return None
    return {k: float(v) for k, v in found.items() if math.isfinite(v)}


# ---------------------------------------------------------------- outputs


def summary_path(output: Path) -> Path:
    """Where the study summary goes by default: ``tune.json`` next to the bundle."""
    return output.parent / "tune.json"


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
