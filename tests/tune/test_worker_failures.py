"""Several tune workers failing: one line that says how many failed, names the first to exit
and says where the others' errors are; one failure is told as itself, as before."""

from __future__ import annotations

import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest

from replay.scheduler_config import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.tune import Storage, TuneError
from replay.tune.failures import TrialError, WorkerFailure, WorkersFailed, workers_error
from replay.tune.opening import open_study
from replay.tune.workers import ERROR_ATTR, STOPPED_ATTR, run_workers

NO_PROGRAM = "no program finished in the replay"


def test_every_worker_stopped_by_its_trial(tune_inputs: dict[str, Any], tmp_path: Path) -> None:
    """A KV cache smaller than every call (real inputs, no --truncate): each worker's first
    trial stops it with the same error; the line counts them all and names one trial."""
    ctx = tune_inputs["ctx"]
    ctx = replace(ctx, config=ReplayConfig(engine=SimSchedulerConfig(kv_tokens=1_000)))
    storage = Storage(str(tmp_path / "journal.log"))
    study = open_study(ctx, storage, "too-small", seed=0, trials=3, inputs={}, provenance={})
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        with pytest.raises(WorkersFailed) as caught:
            run_workers(study, ctx, storage, 3, 3, 3, 0)
    finally:
        optuna.logging.set_verbosity(verbosity)
    failed = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,))
    assert len(failed) == 3 and all(t.user_attrs[STOPPED_ATTR] for t in failed)
    error = caught.value
    assert isinstance(error, TuneError) and (error.workers, len(error.failures)) == (3, 3)
    first = error.failures[0]
    assert first.trial in {t.number for t in failed}
    assert str(error) == (
        f"3 of 3 tune workers failed; the first: trial {first.trial}: "
        f"{failed[0].user_attrs[ERROR_ATTR]}; the other 2 alike"
    )
    assert NO_PROGRAM in str(error) and "\n" not in str(error)


def _trial(index: int, number: int, cause: str = f"{NO_PROGRAM} (seed 0)") -> WorkerFailure:
    return WorkerFailure(index, cause, number)


def test_one_failure_is_told_as_before() -> None:
    trial = workers_error([_trial(2, 7)], 4)
    assert isinstance(trial, TrialError) and trial.number == 7
    assert str(trial) == f"trial 7: {NO_PROGRAM} (seed 0)"
    killed = workers_error([WorkerFailure.exited(0, -signal.SIGKILL)], 1)
    assert not isinstance(killed, TrialError)
    assert (
        str(killed) == f"worker 0 exited with code {-signal.SIGKILL} (its error is printed above)"
    )


@pytest.mark.parametrize(
    ("failures", "workers", "expected"),
    [
        (
            [_trial(1, 0), _trial(0, 1)],
            4,
            f"2 of 4 tune workers failed; the first: trial 0: {NO_PROGRAM} (seed 0); "
            "the other alike",
        ),
        (  # a crash first: its own words are on stderr; the trial's in the study
            [WorkerFailure.exited(3, 1), _trial(0, 5), _trial(1, 6)],
            4,
            "3 of 4 tune workers failed; the first: worker 3 exited with code 1 (its error is "
            "printed above); the others' errors: in the study (each trial's `error` attribute)",
        ),
        (  # same exit code is not the same error: each printed its own
            [_trial(0, 2), WorkerFailure.exited(1, 1), WorkerFailure.exited(2, 1)],
            4,
            f"3 of 4 tune workers failed; the first: trial 2: {NO_PROGRAM} (seed 0); the "
            "others' errors: on stderr above",
        ),
        (
            [
                _trial(0, 2),
                _trial(1, 3, "a p95 limit needs 20 programs"),
                WorkerFailure.exited(2, 1),
            ],
            4,
            f"3 of 4 tune workers failed; the first: trial 2: {NO_PROGRAM} (seed 0); the "
            "others' errors: on stderr above, in the study (each trial's `error` attribute)",
        ),
        (  # trials stopped by different errors are not alike
            [_trial(0, 2), _trial(1, 3, "a p95 limit needs 20 programs")],
            4,
            f"2 of 4 tune workers failed; the first: trial 2: {NO_PROGRAM} (seed 0); the "
            "other's error: in the study (each trial's `error` attribute)",
        ),
        (
            [WorkerFailure.exited(0, 1), WorkerFailure.exited(1, 1)],
            2,
            "2 of 2 tune workers failed; the first: worker 0 exited with code 1 (its error is "
            "printed above); the other's error: on stderr above",
        ),
    ],
)
def test_several_failures_are_one_line(
    failures: list[WorkerFailure], workers: int, expected: str
) -> None:
    error = workers_error(failures, workers)
    assert isinstance(error, WorkersFailed) and str(error) == expected


def test_no_failure_is_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="at least one failure"):
        workers_error([], 2)
