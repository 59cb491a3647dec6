"""The parameters' importances in tune.json: Optuna's PED-ANOVA evaluator over the top
quantile of the completed trials, or one line saying why there are none."""

from __future__ import annotations

import math
import warnings
from typing import Any

import optuna
from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

#: the parameters' importances are Optuna's PED-ANOVA evaluator's (Optuna 5's default), which
#: asks what the top ``target_quantile`` of the completed trials have in common; Optuna's
#: documentation of that evaluator advises at least 5 trials in that top quantile for a
#: stable answer. The evaluator keeps the best ceil(quantile × n) of n completed trials, so
#: tune asks for Optuna's default quantile (10%) when that holds 5 trials (n ≥ 50) and for
#: 5/n below: always 5 trials in the top. Below :data:`MIN_TRIALS_FOR_IMPORTANCE` that
#: quantile would pass one half (the "top" would be most of the trials, and the contrast
#: with the rest that the evaluator measures fades), so tune says so instead of computing.
IMPORTANCE_TARGET_QUANTILE = 0.1
IMPORTANCE_TOP_TRIALS = 5
IMPORTANCE_MAX_QUANTILE = 0.5
MIN_TRIALS_FOR_IMPORTANCE = math.ceil(IMPORTANCE_TOP_TRIALS / IMPORTANCE_MAX_QUANTILE)


def importance_quantile(complete: int) -> float | None:
    """The evaluator's top quantile for ``complete`` completed trials: the smallest, from
    Optuna's default (10%) up, whose top holds :data:`IMPORTANCE_TOP_TRIALS` trials
    (max(10%, 5/n)); None below :data:`MIN_TRIALS_FOR_IMPORTANCE` trials."""
    if complete < MIN_TRIALS_FOR_IMPORTANCE:
        return None
    return max(IMPORTANCE_TARGET_QUANTILE, IMPORTANCE_TOP_TRIALS / complete)


def importance_record(study: optuna.Study, complete: int) -> dict[str, Any]:
    """tune.json's ``importance`` (the parameters' importances, or None),
    ``importance_quantile`` (the evaluator's top quantile, :func:`importance_quantile`;
    None when not computed) and ``importance_note`` (why there are none, one line; None
    when there are), from ``complete`` completed trials."""
    quantile = importance_quantile(complete)
    if quantile is None:
        return {
            "importance": None,
            "importance_quantile": None,
            "importance_note": (
                f"not computed from {complete} completed trial(s): Optuna's PED-ANOVA "
                f"evaluator needs {IMPORTANCE_TOP_TRIALS} in its top quantile, and that "
                f"quantile stays at most {IMPORTANCE_MAX_QUANTILE:.0%}, so at least "
                f"{MIN_TRIALS_FOR_IMPORTANCE} (run more --trials; a resumed study keeps the "
                "ones it has)"
            ),
        }
    found = importances(study, quantile)
    return {
        "importance": found or None,
        "importance_quantile": quantile if found else None,
        "importance_note": None if found else "not computed: Optuna's evaluator gave none",
    }


def importances(study: optuna.Study, quantile: float) -> dict[str, float] | None:
    """Optuna's PED-ANOVA evaluator (its default: deterministic, no scikit-learn), over
    the top ``quantile`` of the completed trials; None when it fails.
    :func:`importance_record` calls it only on enough trials."""
    evaluator = PedAnovaImportanceEvaluator(target_quantile=quantile)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "few trials in some regimes" and the like
            found = get_param_importances(study, evaluator=evaluator)
    except (ValueError, RuntimeError, ImportError):
        return None
    return {k: float(v) for k, v in found.items() if math.isfinite(v)}
