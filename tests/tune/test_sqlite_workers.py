"""Several processes on one SQLite study (the default storage): every enqueued trial is run
by exactly one of them, none crashes, and a study file written before still opens.

Optuna takes an enqueued (waiting) trial by reading it and then marking it running if it is
still waiting. Unless a transaction that reads holds the write lock, two processes both read
it waiting and both run it; the second to finish then fails with "Cannot tell a COMPLETE
trial" (replay/tune/sqlite_lock.py). The stress test starts real worker processes (``spawn``,
as ``ttlctl tune --workers``) together, each opening the storage with :meth:`Storage.open`
and taking trials as fast as it can: without the lock 10 runs of 10 failed.
"""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import warnings
from multiprocessing.synchronize import Barrier
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy import text

from replay.tune import Storage

WORKERS = 4
#: trials each worker takes, all of them enqueued: each is run once or the test fails
ASKS = 5
STUDY = "stress"
#: the tests play trials with ask and tell, not optimize
pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")


def _ask_and_tell(target: str, barrier: Barrier, asks: int, out: Path) -> None:
    """One worker: take ``asks`` trials of the study, finish each, write their numbers."""
    warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(
        study_name=STUDY, storage=Storage(target).open(), sampler=optuna.samplers.RandomSampler()
    )
    barrier.wait()
    numbers = []
    for _ in range(asks):
        trial = study.ask()
        numbers.append(trial.number)
        study.tell(trial, float(trial.number))
    out.write_text(json.dumps(numbers))


def _run_workers(storage: Storage, tmp_path: Path) -> list[int]:
    """Start the workers together on ``storage``'s study: the trial numbers they took."""
    mp = multiprocessing.get_context("spawn")
    barrier = mp.Barrier(WORKERS)
    outs = [tmp_path / f"worker-{i}.json" for i in range(WORKERS)]
    procs = [
        mp.Process(target=_ask_and_tell, args=(storage.target, barrier, ASKS, out)) for out in outs
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
    codes = [proc.exitcode for proc in procs]
    assert codes == [0] * WORKERS, f"workers' exit codes: {codes} (their errors: stderr)"
    return [n for out in outs for n in json.loads(out.read_text())]


def test_workers_on_one_sqlite_file_run_each_enqueued_trial_once(tmp_path: Path) -> None:
    storage = Storage(f"sqlite:///{tmp_path / 'study.db'}")
    study = optuna.create_study(storage=storage.open(), study_name=STUDY)
    for x in range(WORKERS * ASKS):
        study.enqueue_trial({"x": float(x)})

    taken = _run_workers(storage, tmp_path)

    assert sorted(taken) == list(range(WORKERS * ASKS)), "a trial taken twice, or a new one"
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == WORKERS * ASKS
    assert all(t.state == TrialState.COMPLETE and t.value == t.number for t in trials)


def test_a_transaction_that_reads_holds_the_write_lock(tmp_path: Path) -> None:
    """What makes the read-then-write of a waiting trial one step: once a transaction has
    read, another connection cannot begin to write (it would wait; here it may not)."""
    path = tmp_path / "study.db"
    storage = Storage(f"sqlite:///{path}").open()
    assert isinstance(storage, optuna.storages.RDBStorage)
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    with storage.engine.connect() as connection, connection.begin():
        connection.execute(text("SELECT count(*) FROM trials")).one()
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            other.execute("BEGIN IMMEDIATE")
    other.execute("BEGIN IMMEDIATE")  # free again once it committed
    other.execute("ROLLBACK")
    other.close()


def test_a_study_file_written_by_plain_optuna_opens_and_resumes(tmp_path: Path) -> None:
    """A file made before (Optuna's own SQLite setup, as tune's before it took the write
    lock) keeps its schema, its trials and its queue."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    old = optuna.create_study(
        storage=optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}}),
        study_name="old",
    )
    old.tell(old.ask({"x": optuna.distributions.FloatDistribution(0, 1)}), 0.5)
    old.enqueue_trial({"x": 0.25})

    storage = Storage(url).open()
    assert isinstance(storage, optuna.storages.RDBStorage)
    assert storage.get_current_version() == storage.get_head_version()
    study = optuna.load_study(study_name="old", storage=storage)
    trial = study.ask()
    assert (trial.number, trial.suggest_float("x", 0, 1)) == (1, 0.25)
    study.tell(trial, 0.25)
    assert [(t.number, t.state, t.value) for t in study.get_trials()] == [
        (0, TrialState.COMPLETE, 0.5),
        (1, TrialState.COMPLETE, 0.25),
    ]
