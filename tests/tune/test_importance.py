"""The parameters' importances (replay/tune/study.py): Optuna's PED-ANOVA evaluator, run only
on enough completed trials and said instead below that, in tune.json, the console and the
report. Studies on a real SQLite storage, built from trials added whole
(``optuna.trial.create_trial``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from replay.tune import MIN_TRIALS_FOR_IMPORTANCE, importance_record
from ttlctl.report import build_report

DISTRIBUTIONS = {
    "eta": FloatDistribution(0.0, 1.0),
    "pin_cap": FloatDistribution(0.1, 1.0),
    "valve": CategoricalDistribution(["head", "stall"]),
}


def _study(path: Path, complete: int, pruned: int = 0) -> optuna.Study:
    """A study of ``complete`` completed trials whose value follows ``eta`` (``pin_cap``
    barely matters), and ``pruned`` pruned ones, read back from its SQLite storage."""
    storage = f"sqlite:///{path}"
    study = optuna.create_study(storage=storage, study_name="s", direction="minimize")
    rng = np.random.default_rng(7)
    for i in range(complete + pruned):
        params = {
            "eta": float(rng.uniform(0.0, 1.0)),
            "pin_cap": float(rng.uniform(0.1, 1.0)),
            "valve": ("head", "stall")[i % 2],
        }
        if i < complete:
            value = 100.0 * params["eta"] + 0.01 * params["pin_cap"]
            study.add_trial(create_trial(params=params, distributions=DISTRIBUTIONS, value=value))
        else:
            study.add_trial(
                create_trial(
                    state=TrialState.PRUNED,
                    params=params,
                    distributions=DISTRIBUTIONS,
                    intermediate_values={0: 1e6},
                )
            )
    return optuna.load_study(study_name="s", storage=storage)


def test_the_minimum_is_five_trials_in_the_evaluators_top_ten_percent() -> None:
    """docs/tuning.md states the minimum and why: Optuna advises at least 5 trials in the
    PED-ANOVA evaluator's top quantile (its default, 10%), of which it keeps the best
    ceil(10% × n): 41 trials are the fewest that hold 5."""
    assert math.ceil(0.1 * MIN_TRIALS_FOR_IMPORTANCE) == 5
    assert math.ceil(0.1 * (MIN_TRIALS_FOR_IMPORTANCE - 1)) == 4
    assert MIN_TRIALS_FOR_IMPORTANCE == 41
    doc = (Path(__file__).resolve().parents[2] / "docs" / "tuning.md").read_text()
    assert "41 completed trials" in doc


def test_too_few_completed_trials_give_no_importance_but_a_reason(tmp_path: Path) -> None:
    # pruned trials do not count: the evaluator reads the completed ones only
    study = _study(tmp_path / "few.db", complete=MIN_TRIALS_FOR_IMPORTANCE - 1, pruned=20)
    complete = len(study.get_trials(states=(TrialState.COMPLETE,)))
    record = importance_record(study, complete)
    assert record["importance"] is None
    assert record["importance_note"] == (
        "not computed from 40 completed trial(s): Optuna's PED-ANOVA evaluator needs 5 in "
        "its top 10%, so at least 41 (run more --trials; a resumed study keeps the ones it has)"
    )
    for tiny in (2, 1, 0):  # what used to be reported from two trials
        assert importance_record(_study(tmp_path / f"{tiny}.db", tiny), tiny)["importance"] is None


def test_enough_completed_trials_give_the_importances(tmp_path: Path) -> None:
    path = tmp_path / "enough.db"
    study = _study(path, complete=MIN_TRIALS_FOR_IMPORTANCE)
    record = importance_record(study, MIN_TRIALS_FOR_IMPORTANCE)
    found = record["importance"]
    assert record["importance_note"] is None and found is not None
    assert set(found) == set(DISTRIBUTIONS)
    assert abs(sum(found.values()) - 1.0) < 1e-6
    # the value follows eta: it comes first, well ahead of the others
    assert max(found, key=found.__getitem__) == "eta"
    assert found["eta"] > 2 * max(found["pin_cap"], found["valve"])
    # deterministic: the same study read again gives the same figures
    again = optuna.load_study(study_name="s", storage=f"sqlite:///{path}")
    assert importance_record(again, MIN_TRIALS_FOR_IMPORTANCE) == record


def test_the_report_says_why_there_are_none(tmp_path: Path) -> None:
    study = _study(tmp_path / "few.db", complete=3)
    record = importance_record(study, 3)
    run = tmp_path / "run"
    run.mkdir()
    trials = [{"number": t.number, "value": t.value, "state": "COMPLETE"} for t in study.trials]
    (run / "tune.json").write_text(json.dumps({"trials": trials, **record}), encoding="utf-8")
    page = build_report(run)
    assert "Parameter importance: not computed from 3 completed trial(s)" in page
    assert "at least 41" in page and 'alt="parameter importance"' not in page
    # enough trials: the chart, no note
    study = _study(tmp_path / "enough.db", complete=MIN_TRIALS_FOR_IMPORTANCE)
    record = importance_record(study, MIN_TRIALS_FOR_IMPORTANCE)
    (run / "tune.json").write_text(json.dumps({"trials": trials, **record}), encoding="utf-8")
    page = build_report(run)
    assert "Parameter importance: not" not in page and 'alt="parameter importance"' in page
