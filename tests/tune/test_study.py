"""Whole studies in one process: reproducible for a seed, resumable, judged on held-back seeds."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest
from rich.console import Console

from replay.tune import (
    MIN_TRIALS_FOR_IMPORTANCE,
    Storage,
    TuneContext,
    TuneError,
    first_trials,
    tune,
)
from replay.tune.summary import provenance_of
from ttlctl.cli.render import tune_table

TRIALS = 8
#: trials enough for MIN_TRIALS_FOR_IMPORTANCE completed ones (some are pruned): seed 3
#: completes 18 of 30 (53 of 100), past Optuna's 10 random start-up trials into TPE's; the
#: quantile's other branch (0.1 from 50 completed on) is tests/tune/test_importance.py's
ENOUGH = 30


def _run(ctx: TuneContext, target: Path, seed: int, trials: int = TRIALS) -> dict[str, Any]:
    return tune(
        ctx,
        storage=Storage(str(target)),
        study_name="study",
        trials=trials,
        seed=seed,
        holdout_seeds=(100, 101),
    )


def _trace(summary: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(t["number"], t["state"], t["params"], t["value"]) for t in summary["trials"]]


def test_seeded_study_is_reproducible(tune_inputs: dict[str, Any], tmp_path: Path) -> None:
    ctx: TuneContext = tune_inputs["ctx"]
    # enough trials for the parameters' importances (MIN_TRIALS_FOR_IMPORTANCE completed)
    a = _run(ctx, tmp_path / "a.log", seed=3, trials=ENOUGH)
    b = _run(ctx, tmp_path / "b.log", seed=3, trials=ENOUGH)
    c = _run(ctx, tmp_path / "c.log", seed=4)
    assert _trace(a) == _trace(b)
    assert a["best"] == b["best"] and a["held_back"] == b["held_back"]
    assert a["counts"]["complete"] >= MIN_TRIALS_FOR_IMPORTANCE
    assert a["importance"] and a["importance"] == b["importance"]
    assert abs(sum(a["importance"].values()) - 1.0) < 1e-6 and a["importance_note"] is None
    assert a["importance_quantile"] == max(0.1, 5 / a["counts"]["complete"])
    console = Console(record=True, width=400)
    tune_table(console, a)
    share = f"importance (what the top {a['importance_quantile'] * 100:.3g}% of "
    share += f"{a['counts']['complete']} completed trials share): "
    assert share in console.export_text()
    # another seed samples other policies (the two enqueued first trials aside)
    assert [t["params"] for t in a["trials"][2:]] != [t["params"] for t in c["trials"][2:]]


def test_summary(tune_inputs: dict[str, Any], tmp_path: Path) -> None:
    ctx: TuneContext = tune_inputs["ctx"]
    s = _run(ctx, tmp_path / "s.log", seed=0)
    trials = s["trials"]
    assert len(trials) == TRIALS == s["ran_now"]
    assert [t["number"] for t in trials] == list(range(TRIALS))
    assert [t["params"] for t in trials[:2]] == first_trials(ctx.eta_fitted)
    assert s["default"]["number"] == 0 and s["default"]["value"] == trials[0]["value"]
    # a trial's steps are the seeds it reported after (all of them, unless pruned)
    assert all(t["steps"] == len(ctx.seeds) for t in trials if t["state"] == "COMPLETE")
    assert {t["steps"] for t in trials if t["state"] == "PRUNED"} <= {1}
    assert s["best"]["value"] <= s["default"]["value"]
    assert s["counts"]["complete"] + s["counts"]["pruned"] == TRIALS
    held = s["held_back"]
    assert held["seeds"] == [100, 101] and held["replays"] == len(ctx.loads) * 2
    for name in ("tuned", "default", "never_pin", "vllm"):
        assert held[f"{name}_jct_mean_s"] > 0
    by_replay = s["held_back_jct_mean_s_by_replay"]
    assert set(by_replay) == {"tuned", "default", "never-pin", "vllm"}
    assert all(len(v) == held["replays"] for v in by_replay.values())
    assert held["gain_vs_vllm"] > 1.0  # pins pay on this workload
    assert held["diff_vs_default_s"] == pytest.approx(
        held["tuned_jct_mean_s"] - held["default_jct_mean_s"]
    )
    assert s["guard"]["beats_vllm"] and s["shipped"]["which"] == "tuned"
    assert s["shipped"]["policy"] == s["best"]["policy"]
    # 8 trials are far too few for importances: none, and the reason, one line
    assert s["importance"] is None
    # the bundle's provenance keeps the judgement, not the trial list
    kept = provenance_of(s)
    assert kept["held_back"] == held and kept["guard"] == s["guard"] and "trials" not in kept
    complete = s["counts"]["complete"]
    assert s["importance_note"].startswith(f"not computed from {complete} completed trial(s)")


def test_resume_and_refuse_other_settings(tune_inputs: dict[str, Any], tmp_path: Path) -> None:
    ctx: TuneContext = tune_inputs["ctx"]
    target = tmp_path / "r.log"
    first = _run(ctx, target, seed=0, trials=5)
    again = _run(ctx, target, seed=0, trials=5)
    more = _run(ctx, target, seed=0, trials=7)
    assert first["ran_now"] == 5 and again["ran_now"] == 0 and more["ran_now"] == 2
    assert _trace(more)[:5] == _trace(first)
    # the enqueued defaults ran once, not once per call
    defaults = first_trials(ctx.eta_fitted)
    assert sum(t["params"] == defaults[0] for t in more["trials"]) == 1
    with pytest.raises(TuneError, match="made for other inputs or settings"):
        _run(replace(ctx, seeds=(0, 1, 2)), target, seed=0)


def test_p95_limit_nobody_meets(tune_inputs: dict[str, Any], tmp_path: Path) -> None:
    ctx = replace(tune_inputs["ctx"], p95_max_s=1.0)
    with pytest.raises(TuneError, match="p95"):
        _run(ctx, tmp_path / "p.log", seed=0, trials=3)


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_stale_trial_of_a_dead_worker_is_retried(
    tune_inputs: dict[str, Any], tmp_path: Path
) -> None:
    """A worker that died mid-trial stops beating; the next worker fails its trial and
    runs it again (heartbeat + RetryHeartbeatStaleTrialCallback)."""
    ctx: TuneContext = tune_inputs["ctx"]
    storage = Storage(f"sqlite:///{tmp_path / 'h.db'}", heartbeat_s=1, grace_s=1)
    study = optuna.create_study(storage=storage.open(), study_name="study")
    dead = study.ask({"eta": optuna.distributions.FloatDistribution(-1, 1)})
    study._storage.record_heartbeat(dead._trial_id)  # type: ignore[attr-defined]
    time.sleep(2.2)  # then the worker "dies": no more heartbeats
    s = tune(ctx, storage=storage, study_name="study", trials=3, holdout_seeds=(100,))
    states = {t["number"]: t["state"] for t in s["trials"]}
    assert states[dead.number] == "FAIL"
    retried = optuna.load_study(study_name="study", storage=storage.open()).get_trials()
    copies = [t for t in retried if t.system_attrs.get("failed_trial") == dead.number]
    assert len(copies) == 1 and copies[0].state == optuna.trial.TrialState.COMPLETE


def test_held_back_seeds_are_never_tuning_seeds(
    tune_inputs: dict[str, Any], tmp_path: Path
) -> None:
    """The held-back comparison is on seeds no trial saw: seeds shared with the tuning's,
    none at all, or no trials or workers are refused before a study is made."""
    ctx: TuneContext = tune_inputs["ctx"]  # tuning seeds 0 and 1
    target = tmp_path / "refused.log"
    for holdout in [(1, 100), ()]:
        with pytest.raises(TuneError, match="held-back seeds must be given and differ"):
            tune(ctx, storage=Storage(str(target)), study_name="s", trials=1, holdout_seeds=holdout)
    for trials, workers in [(0, 1), (1, 0)]:
        with pytest.raises(TuneError, match="trials and workers must be at least 1"):
            tune(ctx, storage=Storage(str(target)), study_name="s", trials=trials, workers=workers)
    assert not target.exists()
