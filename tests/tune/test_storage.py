"""A failed first run's study file: removed when nobody used it, kept when a trial finished
(complete or pruned) or another tune command has a trial in it. Real Optuna storages
(SQLite and journal files) in tmp_path."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from replay.tune import Storage
from replay.tune.storage import RUN_ATTR, removed_if_unused, this_run

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
