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
    LiveTarget,
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
from replay.tune.judge import held_figures
from replay.tune.space import _score
from replay.workload import Workload


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


def test_a_trial_is_not_pruned_after_its_last_seed(tune_inputs: dict[str, Any]) -> None:
    """Pruning saves the seeds still to replay: after the last one the trial has its value
    and completes, whatever the pruner would say."""
    ctx = replace(_ctx(tune_inputs), seeds=(0,))
    trial = _Pruned(paper_defaults(ctx.eta_fitted))
    value = objective(trial, ctx)
    assert [s for s, _ in trial.reported] == [0]
    assert trial.reported[0][1] == pytest.approx(value)


def test_a_p95_limit_is_not_met_by_a_replay_without_a_p95(tune_inputs: dict[str, Any]) -> None:
    """docs/tuning.md: a trial is infeasible when its mean p95 JCT exceeds the limit, "it
    needs at least 20 finished programs per replay to have a p95": a replay without one
    fails the trial rather than leave it unconstrained (feasible)."""
    ctx = replace(_ctx(tune_inputs), p95_max_s=60.0)
    with pytest.raises(TuneError, match="too few programs finished for a p95"):
        _score(FixedTrial({}), ctx, [10.0, 11.0], [12.0, None])
    free = FixedTrial({})
    assert _score(free, _ctx(tune_inputs), [10.0, 11.0], [12.0, None]) == 10.5
    assert "jct_p95_s" not in free.user_attrs


def test_trial_zeros_eta_is_the_fits_kept_in_the_search_space() -> None:
    """Trial 0 runs the fit's η, clamped to the searched −1 … 1 (a correlation's rounding)."""
    assert paper_defaults(1.0 + 1e-9)["eta"] == 1.0
    assert paper_defaults(-1.5)["eta"] == -1.0
    assert paper_defaults(0.25)["eta"] == 0.25


def test_within_noise_is_two_standard_errors_of_the_paired_difference() -> None:
    """docs/tuning.md: a win within noise is one within two standard errors of the paired
    per-replay difference (the sample's: n − 1)."""
    p = paired([11.0, 13.2], [10.0, 10.0])  # differences 1 and 3.2: mean 2.1, sem 1.1
    assert p["diff_s"] == pytest.approx(2.1)
    assert p["diff_sem_s"] == pytest.approx(1.1)
    assert p["within_noise"] is True  # 2.1 ≤ 2 × 1.1
    assert paired([12.0, 15.0], [10.0, 10.0])["within_noise"] is False  # 3.5 > 2 × 1.5
    assert paired([11.0], [10.0])["within_noise"] is None  # one replay: its noise unknown


def test_held_back_p95_is_none_unless_every_replay_has_one(tune_inputs: dict[str, Any]) -> None:
    """A policy's held-back p95 is the mean of its replays' p95s only when each has one
    (20 finished programs); otherwise None, not the mean of the replays that had one."""
    ctx = _ctx(tune_inputs)
    by = {"tuned": [10.0, 12.0, 14.0, 16.0], "vllm": [20.0, 20.0, 20.0, 20.0]}
    p95: dict[str, list[float | None]] = {
        "tuned": [30.0, 32.0, 34.0, 36.0],
        "vllm": [40.0, None, 40.0, 40.0],
    }
    out = held_figures(ctx, by, p95, ("vllm",), "vllm")
    assert out["tuned_jct_p95_s"] == 33.0 and out["vllm_jct_p95_s"] is None
    assert out["tuned_jct_mean_s"] == 13.0 and out["gain_vs_vllm"] == pytest.approx(20 / 13)


def test_a_p95_limit_needs_twenty_programs_and_live_waits_for_the_bundle(
    tune_inputs: dict[str, Any],
) -> None:
    """docs/tuning.md: a p95 limit needs at least 20 programs (the trace here has 20); a
    live study waits max(2 × check_s, 2 s) after writing a bundle (LIVE_RELOAD_RULE)."""
    ctx = _ctx(tune_inputs)
    assert len(ctx.workload.programs) == 20
    assert replace(ctx, p95_max_s=60.0).p95_max_s == 60.0
    fewer = Workload(ctx.workload.programs[:19])
    with pytest.raises(TuneError, match="at least 20 programs"):
        replace(ctx, workload=fewer, p95_max_s=60.0)
    waits = {c: LiveTarget("http://h:1", Path("b.json"), check_s=c).wait_s for c in (0, 0.5, 3)}
    assert waits == {0: 2.0, 0.5: 2.0, 3: 6.0}
