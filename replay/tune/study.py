"""The whole run: :func:`tune` runs or resumes the study (simulated, or live against one
server whose bundle it puts back on failure), then judges its best policy on held-back
seeds and returns the summary (:mod:`~replay.tune.summary`, ``tune.json``)."""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from replay.tune.context import LiveTarget, TuneContext, TuneError
from replay.tune.opening import open_study
from replay.tune.storage import Storage, removed_if_unused
from replay.tune.summary import summary_doc
from replay.tune.workers import finished_trials, run_trials, run_workers, worker_name
from ttlctl.errors import os_reason
from ttlctl.jsonio import write_atomic
from ttlctl.nouns import counted
from ttlctl.server import signals
from ttlctl.server.client import ServerError
from ttlctl.server.facts import ServerInfo, probe


def tune(
    ctx: TuneContext,
    *,
    storage: Storage,
    study_name: str,
    trials: int,
    workers: int = 1,
    seed: int = 0,
    holdout_seeds: Sequence[int] = (1000, 1001, 1002),
    force: bool = False,
    min_gain: float = 1.0,
    inputs: Mapping[str, str] | None = None,
    provenance: Mapping[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
    stage: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run (or resume) the study to ``trials`` finished trials, then judge its best
    policy on held-back seeds (the guard: it must beat the baseline by ``min_gain``).
    Returns the summary (see :func:`~replay.tune.summary.summary_doc`); the policy to ship is
    ``summary["shipped"]["policy"]``."""
    if trials < 1 or workers < 1:
        raise TuneError("trials and workers must be at least 1")
    if set(holdout_seeds) & set(ctx.seeds) or not holdout_seeds:
        raise TuneError("held-back seeds must be given and differ from the tuning seeds")
    run: dict[str, Any] = {
        "storage": storage,
        "study_name": study_name,
        "trials": trials,
        "seed": seed,
        "holdout": tuple(holdout_seeds),
        "force": force,
        "min_gain": min_gain,
        "inputs": inputs or {},
        "provenance": provenance or {},
        "progress": progress,
        "stage": stage,
    }
    if ctx.live is None:
        with removed_if_unused(storage):  # a failed first run leaves no empty study behind
            return _tune(ctx, workers=workers, server=None, **run)
    if workers != 1:
        raise TuneError("a live study runs one trial at a time on its server: use one worker")
    live = ctx.live
    held = live.held_back()
    if not held.subset(ctx.workload).programs:
        raise TuneError(
            f"the trace has {counted(len(ctx.workload.programs), 'program')}: a live study "
            f"needs more than --live-programs ({live.programs}), so that the held-back comparison "
            "replays programs no trial saw"
        )
    try:
        original = live.bundle.read_bytes()
    except OSError as exc:
        raise TuneError(
            f"{live.bundle}: cannot read the server's bundle ({os_reason(exc)}); "
            "give --live-bundle the file the server was started with"
        ) from None
    try:
        info = probe(live.url)
    except ServerError as exc:
        raise TuneError(str(exc)) from None
    if not info.ttl_metrics:
        _say(
            live,
            f"{info.url}: no ttlctl:pins_* on /metrics: make sure this server runs the TTL "
            "scheduler (ttlctl serve) with --live-bundle as its bundle",
        )
    ctx = replace(ctx, live=replace(live, url=info.url, model=info.model))
    try:
        # SIGTERM and SIGHUP unwind too, so the bundle is put back
        with signals.held(), removed_if_unused(storage):
            return _tune(ctx, workers=1, server=info, **run)
    except BaseException:
        _put_back(live.bundle, original)  # the server goes back to what it served before
        raise


def _say(live: LiveTarget, message: str) -> None:
    if live.warn is not None:
        live.warn(message)
    else:
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _put_back(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a failed study leaves the server's bundle)."""
    with contextlib.suppress(OSError):
        write_atomic(data, path)


def _tune(
    ctx: TuneContext,
    *,
    storage: Storage,
    study_name: str,
    trials: int,
    workers: int,
    seed: int,
    holdout: tuple[int, ...],
    force: bool,
    min_gain: float,
    inputs: Mapping[str, str],
    provenance: Mapping[str, Any],
    progress: Callable[[int, int], None] | None,
    stage: Callable[[str], None] | None,
    server: ServerInfo | None,
) -> dict[str, Any]:
    study = open_study(
        ctx,
        storage,
        study_name,
        seed=seed,
        trials=trials,
        inputs=inputs,
        provenance=provenance,
    )
    todo = max(0, trials - finished_trials(study))
    started = time.perf_counter()
    if todo and workers == 1:
        done = [finished_trials(study)]

        def tick() -> None:
            done[0] += 1
            if progress is not None:
                progress(done[0], trials)

        if progress is not None:
            progress(done[0], trials)
        run_trials(study, ctx, todo, trials, worker_name(0), tick)
    elif todo:
        run_workers(study, ctx, storage, todo, trials, workers, seed, progress)
    if progress is not None:
        progress(finished_trials(study), trials)
    elapsed = time.perf_counter() - started
    if stage is not None:
        stage("replaying held-back programs live" if ctx.live else "replaying held-back seeds")
    return summary_doc(
        study, ctx, storage, holdout, force, seed, todo, elapsed, server=server, min_gain=min_gain
    )
