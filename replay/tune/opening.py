"""Opening a study: create or resume it (:func:`open_study`), and refuse one of that name
made for other inputs or settings, before anything runs (:func:`check_study`) and as it is
opened. A study keeps what it was made for (its fingerprint: the inputs' hashes and the
objective's settings) and where it came from as user attributes."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import optuna

from replay.tune.context import TuneContext, TuneError
from replay.tune.space import first_trials, fleet_defaults
from replay.tune.storage import Storage, differing, digest
from replay.tune.workers import METRIC, pruner, sampler

_OBJECTIVE_ATTR = "ttlctl.objective"
_PROVENANCE_ATTR = "ttlctl.provenance"


def open_study(
    ctx: TuneContext,
    storage: Storage,
    name: str,
    *,
    seed: int,
    trials: int,
    inputs: Mapping[str, str],
    provenance: Mapping[str, Any],
) -> optuna.Study:
    """Create or resume the named study; refuse one made for other inputs or settings."""
    fingerprint = _fingerprint(ctx, inputs)
    study = optuna.create_study(
        storage=storage.open(),
        study_name=name,
        direction="minimize",
        load_if_exists=True,
        sampler=sampler(seed, trials),
        pruner=pruner(ctx),
    )
    stored = study.user_attrs.get(_OBJECTIVE_ATTR)
    if stored is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([METRIC])
        study.set_user_attr(_OBJECTIVE_ATTR, fingerprint)
        study.set_user_attr(_PROVENANCE_ATTR, dict(provenance))
    else:
        _refuse_other(stored, fingerprint, name, storage)
    for values in first_trials(ctx.eta_fitted, fleet_defaults(ctx)):
        study.enqueue_trial(values, skip_if_exists=True)
    return study


def check_study(ctx: TuneContext, storage: Storage, name: str, inputs: Mapping[str, str]) -> None:
    """Refuse, before anything runs or is announced, a study ``name`` already in
    ``storage`` that was made for other inputs or settings (as :func:`open_study` would,
    later). Nothing is created: a storage file that is not there holds no study."""
    path = storage.file
    if path is not None and not path.exists():
        return
    opened = storage.open()
    try:
        study_id = opened.get_study_id_from_name(name)
    except KeyError:  # no such study yet: it will be made
        return
    stored = opened.get_study_user_attrs(study_id).get(_OBJECTIVE_ATTR)
    if stored is not None:
        _refuse_other(stored, _fingerprint(ctx, inputs), name, storage)


def _fingerprint(ctx: TuneContext, inputs: Mapping[str, str]) -> dict[str, Any]:
    """What a study is made for: the inputs' hashes and the objective's settings."""
    return {"inputs": dict(inputs), **ctx.fingerprint()}


def _refuse_other(stored: Any, fingerprint: Mapping[str, Any], name: str, storage: Storage) -> None:
    if digest(stored) != digest(fingerprint):
        raise TuneError(
            f"study {name!r} in {storage.shown()} was made for other inputs or settings "
            "(trace, fit, profile, loads, seeds, KV size, p95 limit or fleet; here: "
            f"{', '.join(differing(stored, fingerprint))}); pick another --study"
        )
