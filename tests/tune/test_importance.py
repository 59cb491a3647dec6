"""The parameters' importances (replay/tune/importance.py): Optuna's PED-ANOVA evaluator, run only
on enough completed trials and said instead below that, in tune.json, the console and the
report. Studies on a real SQLite storage, built from trials added whole
(``optuna.trial.create_trial``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from replay.tune import MIN_TRIALS_FOR_IMPORTANCE, importance_quantile, importance_record
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


def test_the_top_quantile_always_holds_five_trials() -> None:
    """docs/tuning.md states the rule and why: Optuna advises at least 5 trials in the
    PED-ANOVA evaluator's top quantile, of which it keeps the best ceil(quantile × n) of n;
    tune asks for max(10%, 5/n), which stays at most 50% from 10 completed trials on."""
    assert MIN_TRIALS_FOR_IMPORTANCE == 10
    assert importance_quantile(MIN_TRIALS_FOR_IMPORTANCE - 1) is None
    for n in range(MIN_TRIALS_FOR_IMPORTANCE, 500):  # brute force, as the evaluator counts
        quantile = importance_quantile(n)
        assert quantile is not None and 0.1 <= quantile <= 0.5
        assert math.ceil(quantile * n) == (5 if n <= 50 else math.ceil(0.1 * n)), n
    assert importance_quantile(40) == 0.125  # the default --trials, all completed
    assert importance_quantile(50) == importance_quantile(400) == 0.1  # Optuna's default
    doc = (Path(__file__).resolve().parents[2] / "docs" / "tuning.md").read_text()
    assert "10 completed trials" in doc and "max(10%, 5/n)" in doc


def test_too_few_completed_trials_give_no_importance_but_a_reason(tmp_path: Path) -> None:
    # pruned trials do not count: the evaluator reads the completed ones only
    study = _study(tmp_path / "few.db", complete=MIN_TRIALS_FOR_IMPORTANCE - 1, pruned=20)
    complete = len(study.get_trials(states=(TrialState.COMPLETE,)))
    record = importance_record(study, complete)
    assert record["importance"] is None and record["importance_quantile"] is None
    assert record["importance_note"] == (
        "not computed from 9 completed trial(s): Optuna's PED-ANOVA evaluator needs 5 in "
        "its top quantile, and that quantile stays at most 50%, so at least 10 (run more "
        "--trials; a resumed study keeps the ones it has)"
    )
    for tiny in (2, 1, 0):  # what used to be reported from two trials
        assert importance_record(_study(tmp_path / f"{tiny}.db", tiny), tiny)["importance"] is None


@pytest.mark.parametrize("complete", [MIN_TRIALS_FOR_IMPORTANCE, 40, 60])
def test_enough_completed_trials_give_the_importances(tmp_path: Path, complete: int) -> None:
    """From 10 completed trials on (the default --trials 40 among them), with the quantile
    used recorded next to them."""
    path = tmp_path / "enough.db"
    study = _study(path, complete=complete, pruned=5)
    record = importance_record(study, complete)
    found = record["importance"]
    assert record["importance_note"] is None and found is not None
    assert record["importance_quantile"] == max(0.1, 5 / complete)
    assert set(found) == set(DISTRIBUTIONS)
    assert abs(sum(found.values()) - 1.0) < 1e-6
    # the value follows eta: it comes first, well ahead of the others
    assert max(found, key=found.__getitem__) == "eta"
    assert found["eta"] > 2 * max(found["pin_cap"], found["valve"])
    # deterministic: the same study read again gives the same figures
    again = optuna.load_study(study_name="s", storage=f"sqlite:///{path}")
    assert importance_record(again, complete) == record


def test_the_report_says_why_there_are_none(tmp_path: Path) -> None:
    study = _study(tmp_path / "few.db", complete=3)
    record = importance_record(study, 3)
    run = tmp_path / "run"
    run.mkdir()
    trials = [{"number": t.number, "value": t.value, "state": "COMPLETE"} for t in study.trials]
    (run / "tune.json").write_text(json.dumps({"trials": trials, **record}), encoding="utf-8")
    page = build_report(run)
    assert "Parameter importance: not computed from 3 completed trial(s)" in page
    assert "at least 10" in page and 'alt="parameter importance"' not in page
    # enough trials: the chart, no note
    study = _study(tmp_path / "enough.db", complete=20)
    record = importance_record(study, 20)
    (run / "tune.json").write_text(json.dumps({"trials": trials, **record}), encoding="utf-8")
    page = build_report(run)
    assert "Parameter importance: not" not in page and 'alt="parameter importance"' in page
    assert "what the top 25% of the completed trials share" in page
