"""Workers on one study: two worker processes on a journal file and on a real PostgreSQL
server, a trial that fails alone, and what a worker that exits badly is reported as.

The two-worker checks: the study ends with exactly the trials asked for, numbered 0 … N−1, none
lost (every one finished) and none duplicated (the enqueued defaults ran once), and
both workers ran some. The PostgreSQL test needs TTLCTL_TEST_POSTGRES_URL (.ci/run
installs and starts Debian's PostgreSQL and sets it); without it, it skips.
"""

from __future__ import annotations

import logging
import os
import signal
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest

from replay.fleet.run import FleetSpec
from replay.scheduler_config import SimSchedulerConfig
from replay.tune import (
    IncompleteRun,
    LiveTarget,
    Storage,
    TuneContext,
    TuneError,
    first_trials,
    tune,
)
from replay.tune.opening import open_study
from replay.tune.storage import RUN_ATTR, this_run
from replay.tune.workers import (
    ERROR_ATTR,
    STOPPED_ATTR,
    TRIAL_FAILS,
    TrialError,
    finished_trials,
    one_line_failures,
    pruner,
    run_workers,
    sampler,
    worker_seed,
)
from tests.tune.inputs import KV_TOKENS

#: odd: two workers take shares of 5 and 4 (none of the trials asked for is lost)
TRIALS = 9


def _two_workers(ctx: TuneContext, storage: Storage, name: str) -> dict[str, Any]:
    summary = tune(
        ctx,
        storage=storage,
        study_name=name,
        trials=TRIALS,
        workers=2,
        seed=5,
        holdout_seeds=(100,),
    )
    trials = optuna.load_study(study_name=name, storage=storage.open()).get_trials()
    assert [t.number for t in trials] == list(range(TRIALS))
    assert all(
        t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        for t in trials
    )
    assert len({t._trial_id for t in trials}) == TRIALS
    workers = {t.user_attrs["worker"] for t in trials}
    assert len(workers) == 2, workers
    # every trial names the tune command (this process) that started its worker
    assert {t.user_attrs[RUN_ATTR] for t in trials} == {this_run()}
    for values in first_trials(ctx.eta_fitted):
        assert sum(t.params == values for t in trials) == 1
    assert summary["ran_now"] == TRIALS
    assert summary["counts"]["complete"] + summary["counts"]["pruned"] == TRIALS
    return summary


def test_two_workers_on_a_journal_file(tune_inputs: dict[str, Any], tmp_path: Path) -> None:
    _two_workers(tune_inputs["ctx"], Storage(str(tmp_path / "journal.log")), "journal-study")


def test_two_workers_on_postgresql(tune_inputs: dict[str, Any]) -> None:
    url = os.environ.get("TTLCTL_TEST_POSTGRES_URL")
    if not url:
        pytest.skip(
            "TTLCTL_TEST_POSTGRES_URL is not set: no PostgreSQL server to test against "
            "(.ci/run installs and starts one; see docs/tuning.md, 'Tuning on several machines')"
        )
    storage = Storage(url, heartbeat_s=5)
    name = f"ttlctl-test-{uuid.uuid4().hex[:12]}"
    try:
        _two_workers(tune_inputs["ctx"], storage, name)
    finally:
        optuna.delete_study(study_name=name, storage=storage.open())


def test_a_trial_that_fails_alone_is_one_line_and_the_study_goes_on(
    tmp_path: Path, optuna_log: list[logging.LogRecord]
) -> None:
    """A trial failed by one of TRIAL_FAILS (a live run cut short): Optuna's own line, without
    its traceback and without the "failed with value None" after it; the next trial runs."""
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}")

    def cut_short(trial: optuna.Trial) -> float:
        if trial.number == 0:
            raise IncompleteRun("live run of trial 0: 1 program(s) cut short")
        return 1.0

    with one_line_failures():
        study.optimize(cut_short, n_trials=2, catch=TRIAL_FAILS)
    states = [t.state for t in study.trials]
    assert states == [optuna.trial.TrialState.FAIL, optuna.trial.TrialState.COMPLETE]
    failed = [r for r in optuna_log if r.levelno >= logging.WARNING]
    assert len(failed) == 1 and failed[0].exc_info is None
    assert "Trial 0 failed" in failed[0].getMessage()
    assert "1 program(s) cut short" in failed[0].getMessage()


def test_a_trial_the_user_interrupts_is_not_reported_with_a_traceback(
    tmp_path: Path, optuna_log: list[logging.LogRecord]
) -> None:
    """Ctrl-C in a one-worker study: Optuna logs the trial as failed by KeyboardInterrupt,
    with its traceback, before the command says it was interrupted (a walker's find):
    nothing is logged of it."""
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}")

    def interrupted(trial: optuna.Trial) -> float:
        raise KeyboardInterrupt

    with one_line_failures(), pytest.raises(KeyboardInterrupt):
        study.optimize(interrupted, n_trials=1, catch=TRIAL_FAILS)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL]
    assert [r for r in optuna_log if r.levelno >= logging.WARNING] == []


def test_a_killed_worker_is_not_blamed_on_a_trial_that_failed_alone(
    tune_inputs: dict[str, Any], tmp_path: Path
) -> None:
    """A worker whose trials fail alone (a simulation error: replicas of another block size
    than the replay's) is killed (as by the OOM killer): the report is the worker's exit
    code, not ``trial 0: <its simulation error>``, which did not stop anything."""
    ctx = tune_inputs["ctx"]
    other = SimSchedulerConfig(kv_tokens=KV_TOKENS, block_size=2 * ctx.config.engine.block_size)
    ctx = replace(ctx, fleet=FleetSpec(replicas=2, engines=(other, other)))
    storage = Storage(str(tmp_path / "journal.log"))
    study = open_study(ctx, storage, "killed", seed=0, trials=10_000, inputs={}, provenance={})
    killed: list[optuna.trial.FrozenTrial] = []

    def kill_after_a_failed_trial(_done: int, _total: int) -> None:
        failed = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,))
        if failed and not killed:
            killed.append(failed[0])
            os.kill(int(failed[0].user_attrs["worker"].split(":")[1]), signal.SIGKILL)

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # not a line per failed trial
    try:
        with pytest.raises(TuneError) as caught:
            run_workers(study, ctx, storage, 10_000, 10_000, 1, 0, kill_after_a_failed_trial)
    finally:
        optuna.logging.set_verbosity(verbosity)
    assert killed, "no trial failed before the worker exited"
    assert "block size" in killed[0].user_attrs[ERROR_ATTR]  # kept for the dashboard
    assert STOPPED_ATTR not in killed[0].user_attrs
    assert not isinstance(caught.value, TrialError)
    assert str(caught.value) == (
        f"worker 0 exited with code {-signal.SIGKILL} (its error is printed above)"
    )


def test_sampler_seeds_and_pruner_of_each_worker(tune_inputs: dict[str, Any]) -> None:
    """Worker 0 samples with ``--seed`` itself (one worker: the same trials as a run in
    this process); the others with seeds of their own, distinct across workers and
    machines' ``--seed``s. A trial is pruned after 5 finished trials (docs/tuning.md);
    a live one never. The TPE sampler's random start: a quarter of --trials, 3 … 10."""
    assert worker_seed(7, 0) == 7
    seeds = {worker_seed(s, i) for s in (0, 1) for i in range(1, 9)} | {0, 1}
    assert len(seeds) == 18
    ctx: TuneContext = tune_inputs["ctx"]
    median = pruner(ctx)
    assert isinstance(median, optuna.pruners.MedianPruner)
    assert median._n_startup_trials == 5 and median._n_warmup_steps == 0
    live = replace(ctx, live=LiveTarget("http://localhost:1", Path("b.json")))
    assert isinstance(pruner(live), optuna.pruners.NopPruner)
    startup = {n: sampler(0, n)._n_startup_trials for n in (1, 12, 20, 40, 400)}
    assert startup == {1: 3, 12: 3, 20: 5, 40: 10, 400: 10}


def test_pruned_trials_count_toward_trials() -> None:
    """docs/tuning.md: ``--trials`` counts finished trials, pruned ones too (a resumed
    study runs only the ones still missing)."""
    study = optuna.create_study()
    study.tell(study.ask({"x": optuna.distributions.FloatDistribution(0, 1)}), 1.0)
    study.tell(study.ask(), state=optuna.trial.TrialState.PRUNED)
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)
    study.ask()  # running
    assert finished_trials(study) == 2
