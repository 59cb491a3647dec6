"""Running trials: the sampler and pruner, trials in this process or in worker processes
(``spawn``) that share one storage (the study they run: :mod:`replay.tune.opening`)."""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.process import BaseProcess

import numpy as np
import optuna
from optuna.trial import TrialState

from replay.sim_error import SimulationError
from replay.tune.context import IncompleteRun, TuneContext
from replay.tune.failures import TrialError, WorkerFailure, workers_error
from replay.tune.space import objective
from replay.tune.storage import RUN_ATTR, Storage, this_run
from ttlctl.errors import TtlctlError

METRIC = "jct_mean_s"
#: trials that end (pruned ones too) count toward ``--trials``
DONE = (TrialState.COMPLETE, TrialState.PRUNED)
#: a trial that fails with one of these fails alone and the study goes on (a replay the
#: simulator could not finish, a live run cut short); any other error stops the study
TRIAL_FAILS = (SimulationError, IncompleteRun)
#: the trial's user attribute that holds its error (one line), for the dashboard: every
#: ttlctl or simulation error, the ones that fail their trial alone too
ERROR_ATTR = "error"
#: set (True) on the trial whose error stopped the study (not one of :data:`TRIAL_FAILS`):
#: the one :func:`run_workers` reports for a worker that exited with :data:`STOPPED_EXIT`
STOPPED_ATTR = "ttlctl.stopped_study"
#: the exit code of a worker stopped by its trial's error (:func:`worker_main`)
STOPPED_EXIT = 2
#: the logger Optuna reports a failed trial on (optuna/study/_optimize.py)
_OPTUNA_TRIAL_LOG = "optuna.study._optimize"


def worker_seed(seed: int, index: int) -> int:
    """Worker 0 samples with ``seed`` itself; the others with seeds drawn from
    (seed, index), so no two workers of any machines with distinct seeds share one."""
    if index == 0:
        return seed
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def sampler(seed: int, trials: int) -> optuna.samplers.TPESampler:
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(3, min(10, trials // 4)))


def pruner(ctx: TuneContext) -> optuna.pruners.BasePruner:
    """Steps are seeds: a trial is stopped after a seed's pass over every load when its
    mean so far is worse than the median of finished trials' at the same point.
    Live trials are never pruned (a live run is one noisy sample; they are few)."""
    if ctx.live is not None:
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=0)


def run_trials(
    study: optuna.Study,
    ctx: TuneContext,
    n: int,
    total: int,
    worker: str,
    on_trial: Callable[[], None] | None = None,
    run: str | None = None,
) -> None:
    """Run up to ``n`` trials here; stop early once the study has ``total`` finished ones.
    Each trial names ``worker`` and the tune command ``run`` (default: this process, see
    :func:`~replay.tune.storage.this_run`) that ran it.

    A trial's own error (a :class:`~ttlctl.errors.TtlctlError`, a simulation error) is
    one line, never Optuna's traceback: one of :data:`TRIAL_FAILS` fails that trial and the
    study goes on; any other stops it as a :class:`TrialError` naming the trial."""
    running: list[int] = []
    command = this_run() if run is None else run

    def one(trial: optuna.Trial) -> float:
        running[:] = [trial.number]
        trial.set_user_attr("worker", worker)
        trial.set_user_attr(RUN_ATTR, command)
        try:
            return objective(trial, ctx)
        except (TtlctlError, SimulationError) as exc:
            trial.set_user_attr(ERROR_ATTR, str(exc))
            if not isinstance(exc, TRIAL_FAILS):
                trial.set_user_attr(STOPPED_ATTR, True)
            raise

    callbacks: list[Callable[[optuna.Study, optuna.trial.FrozenTrial], None]] = [
        optuna.study.MaxTrialsCallback(total, states=DONE)
    ]
    if on_trial is not None:
        callbacks.append(lambda _s, _t: on_trial())
    try:
        with one_line_failures():
            study.optimize(one, n_trials=n, catch=TRIAL_FAILS, callbacks=callbacks)
    except TtlctlError as exc:
        if not running:  # not a trial's (none had started)
            raise
        raise TrialError(running[0], str(exc)) from None


class _OneLineFailures(logging.Filter):
    """Optuna's report of a trial failed by one of ttlctl's errors, without its traceback:
    one line when the study goes on (:data:`TRIAL_FAILS`), nothing when the error stops it
    (the :class:`TrialError` says it); and no "failed with value None" after either. A
    trial the user's Ctrl-C stopped is not reported (the command says it was interrupted)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None:
            return not record.getMessage().endswith("failed with value None.")
        if isinstance(exc, KeyboardInterrupt):
            return False
        if not isinstance(exc, (TtlctlError, SimulationError)):
            return True  # a bug: its traceback stays
        record.exc_info, record.exc_text = None, None
        return isinstance(exc, TRIAL_FAILS)


@contextmanager
def one_line_failures() -> Iterator[None]:
    """:class:`_OneLineFailures` on Optuna's trial logger while the block runs."""
    logger = logging.getLogger(_OPTUNA_TRIAL_LOG)
    one_line = _OneLineFailures()
    logger.addFilter(one_line)
    try:
        yield
    finally:
        logger.removeFilter(one_line)


@dataclass(frozen=True, slots=True)
class WorkerJob:
    ctx: TuneContext
    storage: Storage
    study: str
    index: int
    trials: int
    total: int
    seed: int
    verbosity: int
    #: the tune command that started the worker (its trials name it)
    run: str


def worker_main(job: WorkerJob) -> None:
    """One worker process: open the shared study and run its share of trials. A trial's
    error that stops the study is in the trial (:data:`ERROR_ATTR`, marked with
    :data:`STOPPED_ATTR`): the worker exits with :data:`STOPPED_EXIT` without printing
    it, and :func:`run_workers` reports it."""
    optuna.logging.set_verbosity(job.verbosity)
    study = optuna.load_study(
        study_name=job.study,
        storage=job.storage.open(),
        sampler=sampler(worker_seed(job.seed, job.index), job.total),
        pruner=pruner(job.ctx),
    )
    try:
        run_trials(study, job.ctx, job.trials, job.total, worker_name(job.index), run=job.run)
    except TrialError:
        sys.exit(STOPPED_EXIT)


def worker_name(index: int, pid: int | None = None) -> str:
    """A worker's name in the study: host, process (default: this one) and index."""
    return f"{socket.gethostname()}:{os.getpid() if pid is None else pid}:{index}"


def finished_trials(study: optuna.Study) -> int:
    """Trials of the study that count toward ``--trials`` (complete or pruned)."""
    return len(study.get_trials(deepcopy=False, states=DONE))


def run_workers(
    study: optuna.Study,
    ctx: TuneContext,
    storage: Storage,
    n: int,
    total: int,
    workers: int,
    seed: int,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Run ``n`` trials of ``study`` in ``workers`` processes (``spawn``), each opening
    the storage itself and running its share; ``progress`` is polled meanwhile.

    A worker that exited with :data:`STOPPED_EXIT` is reported as the trial whose error
    stopped it (:class:`TrialError`); any other failed exit (a bug's traceback, a kill)
    as the worker's exit code, never as a trial that failed alone before it. When several
    failed, one line says how many and names the first to exit
    (:func:`~replay.tune.failures.workers_error`)."""
    shares = [n // workers + (i < n % workers) for i in range(workers)]
    verbosity = optuna.logging.get_verbosity()
    run = this_run()
    jobs = [
        WorkerJob(ctx, storage, study.study_name, i, k, total, seed, verbosity, run)
        for i, k in enumerate(shares)
        if k > 0
    ]
    mp = multiprocessing.get_context("spawn")
    procs = [
        mp.Process(target=worker_main, args=(job,), name=f"ttlctl-tune-{job.index}") for job in jobs
    ]
    started = []
    exited: list[int] = []  # the workers' places in ``jobs``, in the order they exited
    try:
        for proc in procs:
            proc.start()
            started.append(proc)
        while len(exited) < len(started):
            if progress is not None:
                progress(finished_trials(study), total)
            waiting = {procs[i].sentinel: i for i in range(len(started)) if i not in exited}
            ready = set(multiprocessing.connection.wait(list(waiting), timeout=0.5))
            for i in sorted(i for sentinel, i in waiting.items() if sentinel in ready):
                procs[i].join()
                exited.append(i)
    except BaseException:
        for proc in started:
            if proc.is_alive():
                proc.terminate()
        for proc in started:
            proc.join()
        raise
    failures = [_failure(study, jobs[i].index, procs[i]) for i in exited if procs[i].exitcode != 0]
    if failures:
        raise workers_error(failures, len(jobs))


def _failure(study: optuna.Study, index: int, proc: BaseProcess) -> WorkerFailure:
    """How worker ``index`` failed: the trial whose error stopped it, else its exit code."""
    if proc.exitcode == STOPPED_EXIT:
        trial = _stopping_trial(study, worker_name(index, proc.pid))
        if trial is not None:
            return WorkerFailure(index, trial.user_attrs[ERROR_ATTR], trial.number)
    return WorkerFailure.exited(index, proc.exitcode)


def _stopping_trial(study: optuna.Study, worker: str) -> optuna.trial.FrozenTrial | None:
    """The last trial that ``worker`` failed with an error that stopped the study."""
    failed = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
        if t.user_attrs.get("worker") == worker
        and t.user_attrs.get(STOPPED_ATTR) is True
        and ERROR_ATTR in t.user_attrs
    ]
    return failed[-1] if failed else None
