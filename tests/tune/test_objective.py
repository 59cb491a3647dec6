"""The objective and the pieces around it, with optuna.trial.FixedTrial (no study)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.trial import FixedTrial

from fitting.policy_params import PolicyParams
from replay.policy_runs import Load, run_one
from replay.tune import (
    Storage,
    TuneContext,
    TuneError,
    continuum,
    first_trials,
    guard,
    objective,
    paired,
    paper_defaults,
    params_of,
    shuffled,
)


def _ctx(inputs: dict[str, Any]) -> TuneContext:
    ctx: TuneContext = inputs["ctx"]
    return ctx


def test_paper_defaults_are_the_papers_policy(tune_inputs: dict[str, Any]) -> None:
    ctx = _ctx(tune_inputs)
    params = params_of(paper_defaults(ctx.eta_fitted))
    assert params == PolicyParams(eta=ctx.eta_fitted, k=100, t_window=100, valve="head")
    assert ctx.eta_fitted == pytest.approx(ctx.fit["eta"]["value"])
    first, second = first_trials(ctx.eta_fitted)
    assert first == paper_defaults(ctx.eta_fitted)
    assert second == {**first, "valve": "stall-only"}


def test_objective_is_the_mean_jct_over_loads_and_seeds(tune_inputs: dict[str, Any]) -> None:
    ctx = _ctx(tune_inputs)
    values = paper_defaults(ctx.eta_fitted)
    got = objective(FixedTrial(values), ctx)
    # the same replays, by hand
    spec = continuum(ctx, params_of(values))
    jcts = [
        run_one(
            shuffled(ctx.workload, seed), spec, ctx.cost(), ctx.config, replace(load, seed=seed)
        )["jct_mean_s"]
        for seed in ctx.seeds
        for load in ctx.loads
    ]
    assert len(jcts) == len(ctx.loads) * len(ctx.seeds) == 4
    assert got == pytest.approx(float(np.mean(jcts)), rel=1e-12)
    assert objective(FixedTrial(values), ctx) == got  # deterministic


def test_objective_sees_each_knob(tune_inputs: dict[str, Any]) -> None:
    ctx = _ctx(tune_inputs)
    base = paper_defaults(ctx.eta_fitted)
    head = objective(FixedTrial(base), ctx)
    stall = objective(FixedTrial({**base, "valve": "stall-only"}), ctx)
    capped = objective(FixedTrial({**base, "pin_cap": 0.1}), ctx)
    never = objective(FixedTrial({**base, "eta": -1.0, "t_window": 10}), ctx)
    # on this workload pins compete with queued work: the valve matters most
    assert stall < head
    assert capped != head
    assert never != head


def test_cold_start_override_is_conditional(tune_inputs: dict[str, Any]) -> None:
    ctx = _ctx(tune_inputs)
    base = paper_defaults(ctx.eta_fitted)
    fixed = {**base, "cold_start": "fixed", "cold_start_ttl_s": 3.5}
    assert params_of(fixed).cold_start_ttl_s == 3.5
    assert params_of(base).cold_start_ttl_s is None
    with pytest.raises(ValueError, match="cold_start_ttl_s"):
        params_of({**base, "cold_start": "fixed"})
    # K above the fit's records: the cold-start τ decides, so the override changes the result
    cold = {**base, "k": 1000}
    assert objective(FixedTrial(cold), ctx) != objective(
        FixedTrial({**cold, "cold_start": "fixed", "cold_start_ttl_s": 0.0}), ctx
    )


def test_p95_constraint_and_attrs(tune_inputs: dict[str, Any]) -> None:
    ctx = replace(_ctx(tune_inputs), p95_max_s=1.0)
    trial = FixedTrial(paper_defaults(ctx.eta_fitted))
    objective(trial, ctx)
    p95 = trial.user_attrs["jct_p95_s"]
    assert p95 > 1.0
    assert trial.constraints == {"jct_p95_s": pytest.approx(p95 - 1.0)}
    assert len(trial.user_attrs["jct_mean_s_by_replay"]) == 4


class _Pruned(FixedTrial):
    """A trial the pruner stops at its first chance; records what was reported."""

    def __init__(self, params: dict[str, Any]) -> None:
        super().__init__(params)
        self.reported: list[tuple[int, float]] = []

    def report(self, value: float, step: int) -> None:
        self.reported.append((step, value))

    def should_prune(self) -> bool:
        return True


def test_reports_after_each_seed_and_can_be_pruned(tune_inputs: dict[str, Any]) -> None:
    ctx = _ctx(tune_inputs)
    trial = _Pruned(paper_defaults(ctx.eta_fitted))
    with pytest.raises(optuna.TrialPruned, match="after 1 of 2 seeds"):
        objective(trial, ctx)
    # one report, after the first seed's pass over both loads, on the objective's scale
    assert [s for s, _ in trial.reported] == [0]
    assert trial.reported[0][1] == pytest.approx(
        objective(FixedTrial(paper_defaults(ctx.eta_fitted)), replace(ctx, seeds=(0,)))
    )


def test_context_checks(tune_inputs: dict[str, Any]) -> None:
    ctx = _ctx(tune_inputs)
    with pytest.raises(TuneError, match="at least one load"):
        replace(ctx, loads=())
    with pytest.raises(TuneError, match="exactly one"):
        replace(ctx, loads=(Load(jps=1.0, concurrency=2),))
    with pytest.raises(TuneError, match="exactly one"):
        replace(ctx, loads=(Load(),))
    with pytest.raises(TuneError, match="repeats"):
        replace(ctx, seeds=(1, 1))
    with pytest.raises(TuneError, match="positive"):
        replace(ctx, p95_max_s=0.0)
    assert [t.seed for t in ctx.replays()] == [0, 0, 1, 1]


def _held(tuned: float, default: float, vllm: float, never: float) -> dict[str, Any]:
    return {
        "tuned_jct_mean_s": tuned,
        "default_jct_mean_s": default,
        "vllm_jct_mean_s": vllm,
        "never_pin_jct_mean_s": never,
    }


def test_guard() -> None:
    ok = guard(_held(80.0, 90.0, 100.0, 95.0), force=False)
    assert ok["shipped"] == "tuned" and ok["beats_vllm"] and not ok["forced"]
    lost = guard(_held(101.0, 90.0, 100.0, 95.0), force=False)
    assert lost["shipped"] == "never-pin" and not lost["beats_vllm"]
    assert "does NOT beat stock vLLM" in lost["message"] and "--force" in lost["message"]
    tie = guard(_held(100.0, 100.0, 100.0, 100.0), force=False)
    assert tie["shipped"] == "never-pin"  # a tie is not a win
    # nor the same schedule priced in another order (the last bits of a sum)
    rounding = guard(_held(100.0 * (1 - 1e-12), 100.0, 100.0, 100.0), force=False)
    assert rounding["shipped"] == "never-pin" and not rounding["beats_vllm"]
    assert guard(_held(100.0 * (1 - 1e-6), 100.0, 100.0, 100.0), force=False)["beats_vllm"]
    assert "without a bundle" in tie["message"]  # program FCFS does not win either
    forced = guard(_held(101.0, 90.0, 100.0, 95.0), force=True)
    assert forced["shipped"] == "tuned" and forced["forced"]


def test_paired() -> None:
    p = paired([9.0, 10.0, 11.0], [10.0, 11.0, 12.0])
    assert p["gain"] == pytest.approx(11.0 / 10.0)
    assert p["diff_s"] == pytest.approx(-1.0)
    assert p["diff_sem_s"] == pytest.approx(0.0)
    noisy = paired([9.0, 12.0, 10.0], [10.0, 11.0, 10.5])
    assert noisy["within_noise"] is True


def test_storage_targets(tmp_path: Path) -> None:
    url = Storage("postgresql+psycopg2://me:secret@db.example:5432/optuna")
    assert "secret" not in url.shown() and "***" in url.shown()
    cmds = url.commands("s1")
    assert cmds["dashboard"].startswith("optuna-dashboard postgresql+psycopg2://me:***@")
    assert "--study-name s1" in cmds["best_trial"] and cmds["best_trial"].endswith("-f json")
    journal = Storage(str(tmp_path / "new" / "study.log"))
    assert "--storage-class JournalFileBackend" in journal.commands("s1")["best_trial"]
    journal.open()  # a new path is fine: the folder is made
    db = tmp_path / "study.db"
    optuna.create_study(storage=f"sqlite:///{db}")
    with pytest.raises(TuneError, match="is a SQLite database"):
        Storage(str(db)).open()
    with pytest.raises(TuneError, match="cannot open"):
        Storage("nosuchdialect://x/y").open()
