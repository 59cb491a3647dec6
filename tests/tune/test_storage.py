"""A failed first run's study file: removed when nobody used it, kept when a trial finished
(complete or pruned) or another tune command has a trial in it. Real Optuna storages
(SQLite and journal files) in tmp_path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from replay.tune import Storage
from replay.tune.storage import RUN_ATTR, removed_if_unused, this_run
from tests.cli.refusal import refused
from tests.tune.inputs import PROFILE

OTHER_RUN = "another-host:4242"
#: the tests play a run's trials with ask and tell, not optimize
pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")


@pytest.fixture(params=["sqlite", "journal"])
def new_file(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Storage, Path]:
    """A storage whose file (in a folder) does not exist yet."""
    path = tmp_path / "made" / "study.db"
    if request.param == "sqlite":
        return Storage(f"sqlite:///{path}"), path
    return Storage(str(path)), path


def _failed_run(storage: Storage, *trials: tuple[TrialState, str | None]) -> None:
    """A run that opens the study, leaves ``trials`` (state, the command that ran it) and
    fails."""
    with pytest.raises(RuntimeError, match="the run failed"), removed_if_unused(storage):
        study = optuna.create_study(storage=storage.open(), study_name="s")
        study.enqueue_trial({"x": 1.0})  # a default trial that never ran: nobody's
        for state, run in trials:
            if state == TrialState.WAITING:  # as a stale trial retried: its user attributes
                study.enqueue_trial({"x": 2.0}, user_attrs={RUN_ATTR: run})
                continue
            trial = study.ask()
            if run is not None:
                trial.set_user_attr(RUN_ATTR, run)
            if state == TrialState.COMPLETE:
                study.tell(trial, 1.0)
            elif state != TrialState.RUNNING:
                study.tell(trial, state=state)
        raise RuntimeError("the run failed")


def test_a_failed_first_run_removes_its_own_study_file(new_file: tuple[Storage, Path]) -> None:
    storage, path = new_file
    _failed_run(storage, (TrialState.FAIL, this_run()), (TrialState.RUNNING, this_run()))
    assert not path.parent.exists()  # the file, what was written beside it, its folder


@pytest.mark.parametrize("state", [TrialState.PRUNED, TrialState.COMPLETE])
def test_a_failed_first_run_keeps_a_study_with_a_finished_trial(
    new_file: tuple[Storage, Path], state: TrialState
) -> None:
    """Pruned trials count toward --trials: a run whose only finished trials were pruned
    did work that a rerun resumes."""
    storage, path = new_file
    _failed_run(storage, (TrialState.FAIL, this_run()), (state, this_run()))
    assert path.is_file()
    study = optuna.load_study(study_name="s", storage=storage.open())
    assert [t.state for t in study.get_trials(states=(state,))] == [state]


@pytest.mark.parametrize("state", [TrialState.RUNNING, TrialState.FAIL, TrialState.WAITING])
def test_a_failed_first_run_keeps_a_file_another_tune_command_uses(
    new_file: tuple[Storage, Path], state: TrialState
) -> None:
    """Two tune commands started together on one new --storage file both found it
    missing: the one that fails leaves the file to the other, which has a trial in it
    (running, failed alone, or a stale one retried)."""
    storage, path = new_file
    _failed_run(storage, (TrialState.FAIL, this_run()), (state, OTHER_RUN))
    assert path.is_file()
    assert optuna.get_all_study_names(storage.open()) == ["s"]


@pytest.mark.parametrize(
    ("content", "url", "why"),
    [
        (
            b'{\n "schema": 1\n}\n',
            False,
            "not an Optuna journal file (line 1 is no journal record)",
        ),
        (b"a,b\n1,2\n", False, "not an Optuna journal file (line 1 is no journal record)"),
        (b"PAR1\x15\x04", False, "a Parquet file (a trace?), not an Optuna journal file"),
        (b'{"a": 1}\n', True, "not a SQLite database"),
        (
            '{"op_code": 0}\n'.encode("utf-16"),
            False,
            "UTF-16 text (byte-order mark FF FE): convert it to UTF-8",
        ),
    ],
    ids=["json", "csv", "parquet", "json as sqlite", "utf-16"],
)
def test_a_storage_file_that_is_no_study_is_refused_untouched(
    tune_inputs: dict[str, Any], tmp_path: Path, content: bytes, url: bool, why: str
) -> None:
    """Regression: an existing JSON or CSV file given as --storage stopped tune with a
    72-line traceback (Optuna's journal reader's JSONDecodeError); a JSON file as a SQLite
    URL named no file ('file is not a database'). Now one line naming the file and
    --storage, exit 2, the file as it was and nothing written."""
    given = tmp_path / "mine.json"
    given.write_bytes(content)
    out = tmp_path / "out" / "bundle.json"
    storage = f"sqlite:///{given}" if url else str(given)
    args = ["tune", str(tune_inputs["trace"]), "--fit", str(tune_inputs["fit"]), "--profile",
            PROFILE, "--trials", "1", "--seeds", "1", "--holdout-seeds", "1",
            "--concurrency", "6", "--storage", storage, "-o", str(out)]  # fmt: skip
    line = refused(args, out, f"error: {given}: ")
    assert why in line and f"--storage {storage if url else ''}" in line, line
    assert given.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.json"]


def test_an_empty_file_or_a_journal_is_a_storage(tmp_path: Path) -> None:
    """An empty file is a new journal; a journal Optuna wrote is opened as before."""
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert optuna.get_all_study_names(Storage(str(empty)).open()) == []
    journal = tmp_path / "study.log"
    optuna.create_study(storage=Storage(str(journal)).open(), study_name="s")
    assert optuna.get_all_study_names(Storage(str(journal)).open()) == ["s"]


def test_a_sqlite_study_beats_hearts_retries_twice_and_waits_60_s_for_its_turn(
    tmp_path: Path,
) -> None:
    """docs/tuning.md: workers send heartbeats every ``--heartbeat-seconds`` (60), a dead
    worker's trial is failed after twice that and run again (twice at most); on SQLite a
    worker waits up to 60 s for the others' turn, sqlite3 beginning no transaction itself
    (``BEGIN IMMEDIATE`` is begun for it: replay/tune/sqlite_lock.py)."""
    opened = Storage(f"sqlite:///{tmp_path / 's.db'}").open()
    assert isinstance(opened, optuna.storages.RDBStorage)
    assert opened.heartbeat_interval == 60 and opened.grace_period is None  # Optuna: 2 × 60
    retry = opened.heartbeat_stale_trial_callback
    assert isinstance(retry, optuna.storages.RetryHeartbeatStaleTrialCallback)
    assert retry._max_retry == 2
    connection = opened.engine.raw_connection()
    try:
        assert connection.execute("PRAGMA busy_timeout").fetchone() == (60_000,)
        assert connection.isolation_level is None
    finally:
        connection.close()
    assert Storage(":memory:").file == Path(":memory:")  # a path: a journal file
    assert Storage("sqlite:///:memory:").file is None  # nothing on disk to remove or keep


def test_a_failed_run_keeps_a_study_file_that_was_there_before(
    new_file: tuple[Storage, Path],
) -> None:
    """A file that existed (a user's storage, a resumed study) is never removed, even with
    nothing of anyone's in it."""
    storage, path = new_file
    optuna.create_study(storage=storage.open(), study_name="before")
    _failed_run(storage, (TrialState.FAIL, this_run()))
    assert path.is_file()
    assert sorted(optuna.get_all_study_names(storage.open())) == ["before", "s"]


def test_a_started_trial_that_names_no_command_is_someone_elses(
    new_file: tuple[Storage, Path],
) -> None:
    """Only an enqueued trial that never started is nobody's: a trial that ran without
    naming its command (another tool, an older ttlctl) keeps the file."""
    storage, path = new_file
    _failed_run(storage, (TrialState.FAIL, this_run()), (TrialState.RUNNING, None))
    assert path.is_file()


def test_a_study_file_that_cannot_be_read_is_kept(new_file: tuple[Storage, Path]) -> None:
    """Whether anyone uses a file that cannot be read back is unknown: it is kept."""
    storage, path = new_file
    with pytest.raises(RuntimeError, match="the run failed"), removed_if_unused(storage):
        path.parent.mkdir(parents=True)
        path.write_bytes(b"a,b\n1,2\n")  # neither a journal nor a SQLite database
        raise RuntimeError("the run failed")
    assert path.read_bytes() == b"a,b\n1,2\n"
