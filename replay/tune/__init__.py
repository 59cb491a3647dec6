"""The tuner behind ``ttlctl tune``: an Optuna study over the TTL policy's knobs, by replay.

One trial = one :class:`~fitting.policy_params.PolicyParams` (η, K, T window, valve, pin cap,
a cold-start override), scored by replaying the trace under it at every load and
seed of a :class:`TuneContext`; the objective is the mean of the replays' mean JCT
(optionally with a p95 constraint). The running mean is reported after each seed's
pass over the loads, so a median pruner stops trials already worse than most others.

Optuna habits (docs/tuning.md): seeded TPE, the paper's defaults (η from the
fit, K = 100, T window 100, head valve, no cap, τ = ln B in cold start) enqueued as
the first trial (the same with the stall-only valve second: docs/method.md), :func:`objective`
pure enough for ``optuna.trial.FixedTrial``,
parallel trials in processes (``spawn``) that share one storage: any Optuna URL
(SQLite, PostgreSQL, ...) or a journal-file path. RDB storages get heartbeats and a
:class:`~optuna.storages.RetryHeartbeatStaleTrialCallback` (Optuna 5's name for
``RetryFailedTrialCallback``), so a trial whose worker died is failed and retried.

After the study, the best trial, the paper's defaults, a never-pin policy (program
FCFS only) and stock vLLM are replayed on held-back seeds that no trial saw. The
guard: when the tuned policy does not beat vLLM there, the bundle written is the
never-pin one unless the caller insists (``force``).

A seed draws the order in which programs start (and, with ``jps``, their Poisson
arrivals), so seeds are distinct samples of the same workload.

Live mode (``ttlctl tune --live URL``, :class:`LiveTarget`): the trials run against a
vLLM server that runs the TTL scheduler instead of the simulator. Each replay (one
load × one seed = one live run) writes the candidate bundle over the file the server
was started with (``TTLCTL_BUNDLE``), waits until the plugin must have reloaded it
(:func:`swap`), and replays a bounded subset of the trace's programs
(:func:`replay.live.run_live`, which resets the prefix cache first). One server runs
one trial at a time (one worker, no pruning). The held-back comparison replays the
tuned policy, the paper's defaults and the never-pin bundle on the next programs of
the trace (none of which a trial saw); the never-pin bundle is the baseline the
guard compares with, because the server runs the TTL scheduler and stock vLLM is not
measured there.

The package, one concept a file: :mod:`~replay.tune.context` (errors, the live target,
:class:`TuneContext` and one simulated replay), :mod:`~replay.tune.live_trial` (live replays and
the bundle swap), :mod:`~replay.tune.space` (the search space and the objective),
:mod:`~replay.tune.storage` (the study's storage and name), :mod:`~replay.tune.workers`
(running trials, worker processes), :mod:`~replay.tune.opening` (creating or resuming the
study, refusing one made for other settings), :mod:`~replay.tune.failures` (what
stopped a study, as one line: a trial's error, the workers that failed), :mod:`~replay.tune.judge`
(held-back judgement), :mod:`~replay.tune.guard` (the guard: which policy ships),
:mod:`~replay.tune.importance` (the parameters' importances), :mod:`~replay.tune.summary`
(the study's summary, ``tune.json``; where it goes: :mod:`ttlctl.summary_name`) and
:mod:`~replay.tune.study` (:func:`tune`, the whole run). Everything public is re-exported
here.
"""

from __future__ import annotations

from replay.tune.context import (
    LIVE_BASELINE_NOTE,
    LIVE_RELOAD_RULE,
    SEARCH_SPACE,
    IncompleteRun,
    LiveTarget,
    TuneContext,
    TuneError,
    continuum,
    load_json,
    replay_once,
    shuffled,
)
from replay.tune.guard import beats, guard
from replay.tune.importance import (
    MIN_TRIALS_FOR_IMPORTANCE,
    importance_quantile,
    importance_record,
    importances,
)
from replay.tune.judge import (
    held_back,
    held_back_live,
    held_figures,
    paired,
    replay_held_back,
)
from replay.tune.live_trial import candidate_bundle, live_replay, probe_request, swap
from replay.tune.opening import open_study
from replay.tune.space import (
    COLD_START,
    PAPER_K,
    PAPER_T_WINDOW,
    first_trials,
    live_objective,
    objective,
    paper_defaults,
    params_of,
    suggest,
)
from replay.tune.storage import Storage, default_storage, default_study_name
from replay.tune.study import tune
from replay.tune.summary import live_doc, provenance_of, summary_doc
from replay.tune.workers import (
    DONE,
    METRIC,
    WorkerJob,
    pruner,
    run_trials,
    run_workers,
    sampler,
    worker_main,
    worker_seed,
)
from ttlctl.summary_name import SUMMARY_SCHEMA

__all__ = [
    "COLD_START",
    "DONE",
    "LIVE_BASELINE_NOTE",
    "LIVE_RELOAD_RULE",
    "METRIC",
    "MIN_TRIALS_FOR_IMPORTANCE",
    "PAPER_K",
    "PAPER_T_WINDOW",
    "SEARCH_SPACE",
    "SUMMARY_SCHEMA",
    "IncompleteRun",
    "LiveTarget",
    "Storage",
    "TuneContext",
    "TuneError",
    "WorkerJob",
    "beats",
    "candidate_bundle",
    "continuum",
    "default_storage",
    "default_study_name",
    "first_trials",
    "guard",
    "held_back",
    "held_back_live",
    "held_figures",
    "importance_quantile",
    "importance_record",
    "importances",
    "live_doc",
    "live_objective",
    "live_replay",
    "load_json",
    "objective",
    "open_study",
    "paired",
    "paper_defaults",
    "params_of",
    "probe_request",
    "provenance_of",
    "pruner",
    "replay_held_back",
    "replay_once",
    "run_trials",
    "run_workers",
    "sampler",
    "shuffled",
    "suggest",
    "summary_doc",
    "swap",
    "tune",
    "worker_main",
    "worker_seed",
]
