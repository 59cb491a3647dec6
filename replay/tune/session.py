"""One ``ttlctl tune`` run from its settings: prepared, run, its files written.

:func:`prepare` checks a :class:`~replay.tune.request.TuneRequest`
(:func:`~replay.tune.request.check`), reads the trace, fit and profile, picks the loads
(:func:`default_loads`) and the engine's size (:func:`engine_size`), the study's name and
storage; :func:`run` runs the study (:func:`replay.tune.study.tune`), assembles the bundle it
ships (:func:`~replay.tune.shipped_bundle.tuned_bundle`) and writes it and the summary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fitting.fit_doc import FitDoc
from profiles.router_calibration import calibrate
from profiles.schema import ProfileDoc
from profiles.shipped import resolve
from replay.fleet.asked import credit_note, default_urls_note, fleet_for
from replay.fleet.routers import AS_LOGGED, RouterSettings, router_name
from replay.live import cap_pauses
from replay.policy_runs import Load
from replay.refit_sizing import replicas, size
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.tune.context import LiveTarget, TuneContext, TuneError
from replay.tune.opening import check_study
from replay.tune.request import TuneRequest, check, live_run
from replay.tune.shipped_bundle import tuned_bundle
from replay.tune.storage import Storage, default_storage, default_study_name
from replay.tune.study import tune
from replay.vllmsim.backend import check_request
from replay.workload import load
from ttlctl import __version__, bundle_doc, bundle_history
from ttlctl import bundle as bundle_mod
from ttlctl.jsonio import file_sha256, names_file, write_json
from ttlctl.summary_name import summary_path
from ttlctl.trace import io as trace_io

#: held-back seeds start here (tuning seeds are 0 … seeds − 1)
HOLDOUT_BASE = 1000
#: the most programs a default load keeps live
DEFAULT_LOAD_CAP = 64


@dataclass(frozen=True, slots=True)
class TuneSession:
    """A checked request with what it read: the study's context, name and storage."""

    request: TuneRequest
    context: TuneContext
    fit: FitDoc
    profile: ProfileDoc
    study_name: str
    storage: Storage
    #: the inputs' SHA-256 (trace, fit, profile)
    inputs: dict[str, str]
    sources: bundle_doc.Provenance
    #: where the engine's size came from, when the trace's engine log stated it (one line)
    sizing: str | None = None


@dataclass(frozen=True, slots=True)
class TuneOutcome:
    """The study's summary, the bundle written, where the summary went, and where the
    bundle it replaced at -o was kept (None: -o was new)."""

    result: dict[str, Any]
    bundle: bundle_doc.Bundle
    summary_file: Path
    previous_kept: Path | None = None


def default_loads(programs: int, live_programs: int | None = None) -> tuple[Load, ...]:
    """The loads tuned on when none is given: live, half a run's programs kept live;
    else a quarter and a half of the trace's programs (at most 64) kept live."""
    if live_programs is not None:
        return (Load(concurrency=max(1, min(live_programs, programs) // 2)),)
    levels = sorted(
        {max(1, min(DEFAULT_LOAD_CAP, programs // 4)), max(1, min(DEFAULT_LOAD_CAP, programs // 2))}
    )
    return tuple(Load(concurrency=c) for c in levels)


def prepare(req: TuneRequest, *, warn: Callable[[str], None] | None = None) -> TuneSession:
    """Check ``req``, read its inputs and name its study, refusing a study of that name
    made for other settings (nothing is run or written)."""
    check(req)
    check_request(
        req.backend,
        ("vllm", "program-fcfs", "continuum"),
        async_scheduling=req.async_scheduling,
        offload_tokens=req.offload_tokens,
        fast_only={"--live": req.live is not None},
    )
    for name in req.routers:
        RouterSettings(name)  # an unknown one: refused, one line
    fleet = fleet_for(
        req.trace,
        req.replicas,
        RouterSettings(req.routers[0]) if req.routers else None,
        backend=req.backend,
        live=req.live is not None,
        async_scheduling=req.async_scheduling,
        worker_urls=req.worker_urls,
        prefix_credit=req.prefix_credit,
        searched=req.routers,
    )
    names = {router_name(r) for r in req.routers}
    if AS_LOGGED in names and len(names) > 1:
        raise TuneError(
            "--router as-logged replays the placement the trace recorded, not a router to "
            "choose: tune it alone (stock vLLM is then judged on the same placement), or the "
            "routers without it"
        )
    fit_doc = bundle_mod.read_fit(req.fit)
    prof, prof_path = resolve(req.profile)
    if "program-scheduling" in names:
        # a profile the router cannot take: refused here, naming its file, not by trial 0
        calibrate(prof, source=prof_path)
    workload = cap_pauses(load(req.trace), req.idle_gap_cap_s)
    if not workload.programs:
        raise TuneError(f"{req.trace}: no programs to replay")
    live_programs, check_s, timeout_s = live_run(req)
    loads = req.loads or default_loads(
        len(workload.programs), live_programs if req.live is not None else None
    )
    target = None
    if req.live is not None:
        assert req.live_bundle is not None  # check_live
        target = LiveTarget(
            url=req.live,
            bundle=req.live_bundle,
            programs=live_programs,
            check_s=check_s,
            timeout_s=timeout_s,
            warn=warn,
        )
    engine, sizing = engine_size(req, trace_io.engines(req.trace), warn)
    # one name per router: vllm-router's spelling (kv_aware) and ttlctl's (kv-aware) are one
    # router, not two choices of the study; a router given twice is searched once, said so
    named = [router_name(r) for r in req.routers]
    routers = tuple(dict.fromkeys(named))
    twice = [r for r in routers if named.count(r) > 1]
    if twice and warn is not None:
        warn(
            f"--router {', '.join(twice)} given more than once (in either spelling): the "
            "study searches each router once"
        )
    ctx = TuneContext(
        workload=workload,
        fit=fit_doc,
        profile=prof.to_json(),
        config=ReplayConfig(
            engine=engine,
            offload_tokens=req.offload_tokens,
            truncate=req.truncate,
            client_tags=req.client_tags,
        ),
        loads=tuple(loads),
        seeds=tuple(range(req.seeds)),
        p95_max_s=req.p95_max_s,
        live=target,
        idle_gap_cap_s=req.idle_gap_cap_s,
        backend=req.backend,
        async_scheduling=req.async_scheduling,
        fleet=fleet,
        routers=routers,
    )
    inputs = {
        "trace": file_sha256(req.trace),
        "fit": file_sha256(req.fit),
        "profile": file_sha256(prof_path),
    }
    sources: bundle_doc.Provenance = {
        "trace": {"path": str(req.trace), "sha256": inputs["trace"]},
        "fit": {"path": str(req.fit), "sha256": inputs["fit"]},
        "profile": {"path": str(prof_path), "sha256": inputs["profile"]},
    }
    study_name = req.study or default_study_name(ctx, inputs)
    storage = Storage(req.storage or default_storage(req.output), heartbeat_s=req.heartbeat_s)
    # a study made for other settings is refused now, before tune says what it will run
    check_study(ctx, storage, study_name, inputs)
    elsewhere = fitted_elsewhere(req, fit_doc, inputs["trace"])
    if elsewhere is not None and warn is not None:  # legitimate (fit on one split, tune on
        warn(elsewhere)  # another), but said: the report flags it too
    if fleet is not None and warn is not None:  # said once here, not by each trial
        searched = [RouterSettings(r) for r in req.routers] or [fleet.router]
        for note in (
            default_urls_note(searched, fleet.replicas, fleet.worker_urls),
            credit_note(searched, fleet),
        ):
            if note is not None:
                warn(note)
    return TuneSession(
        request=req,
        context=ctx,
        fit=fit_doc,
        profile=prof.to_json(),
        study_name=study_name,
        storage=storage,
        inputs=inputs,
        sources=sources,
        sizing=sizing,
    )


def fitted_elsewhere(req: TuneRequest, fit: FitDoc, trace_sha256: str) -> str | None:
    """The line saying that ``--fit`` was made from another trace than the one tuned on
    (None when it was, or when the fit names no trace)."""
    if names_file(fit.get("input"), trace_sha256) is not False:
        return None
    made_from = fit["input"]
    return (
        f"--fit {req.fit} was fitted on {made_from.get('path') or 'another trace'} (sha256 "
        f"{str(made_from['sha256'])[:12]}…), not on {req.trace} (sha256 {trace_sha256[:12]}…): "
        "the bundle's pauses come from that trace, the replays that tune it from this one"
    )


def engine_size(
    req: TuneRequest,
    engines: Sequence[Mapping[str, Any]],
    warn: Callable[[str], None] | None = None,
) -> tuple[SimSchedulerConfig, str | None]:
    """The simulated engine: the flags given, else (a trace made from the engine log of one
    replica) the size the log states, else the simulator's defaults; and the line that
    says where it came from (None: the trace states no size)."""
    given: dict[str, float | None] = {
        "kv_tokens": req.kv_tokens,
        "block_size": req.block_size,
        "max_num_seqs": req.max_num_seqs,
        "max_num_batched_tokens": req.max_num_batched_tokens,
        "max_model_len": req.max_model_len,
        "long_prefill_token_threshold": req.long_prefill_token_threshold,
        "long_prefill_token_threshold_adaptive": req.long_prefill_token_threshold_adaptive,
        "watermark": req.watermark,
    }
    base = SimSchedulerConfig()
    by_replica = replicas(engines)
    if len(by_replica) != 1:
        if len(by_replica) > 1 and warn is not None:
            replayed = (
                "one engine"
                if req.replicas is None
                else f"{req.replicas} replica(s) of one size (--replicas)"
            )
            warn(
                f"the trace's calls ran on {len(by_replica)} replicas: tune replays {replayed}, "
                "sized by the flags (else the defaults), not by the logs"
            )
        chosen: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        return replace(base, **chosen), None
    sized = size(given, next(iter(by_replica.values())), base, "the simulator's defaults")
    for note in sized.notes:
        if warn is not None:
            warn(note)
    return sized.engine, sized.line


def run(
    session: TuneSession,
    *,
    progress: Callable[[int, int], None] | None = None,
    stage: Callable[[str], None] | None = None,
) -> TuneOutcome:
    """Run the study, then write the bundle (-o, and the live server's file) and the summary."""
    req = session.request
    holdout: Sequence[int] = tuple(range(HOLDOUT_BASE, HOLDOUT_BASE + req.holdout_seeds))
    # what the server served before the trials wrote theirs over it: kept when replaced
    served = req.live_bundle.read_bytes() if req.live_bundle is not None else None
    result = tune(
        session.context,
        storage=session.storage,
        study_name=session.study_name,
        trials=req.trials,
        workers=req.workers,
        seed=req.seed,
        holdout_seeds=holdout,
        force=req.force,
        min_gain=req.min_gain,
        inputs=session.inputs,
        provenance={"inputs": session.sources, "ttlctl_version": __version__},
        progress=progress,
        stage=stage,
    )
    doc = tuned_bundle(session.fit, session.profile, result, session.sources)
    # each file replaced is kept in its history (ttlctl bundle rollback); the live bundle
    # holds the last trial's bundle now, so what it served before the study is kept
    live = req.live_bundle
    live_is_output = live is not None and live.resolve() == req.output.resolve()
    kept = bundle_history.replace(doc, req.output, served if live_is_output else None)
    if live is not None and not live_is_output:
        bundle_history.replace(doc, live, served)  # served from the server's next request on
    summary_file = req.summary or summary_path(req.output)
    write_json(
        {
            **result,
            "bundle": {"path": str(req.output), "sha256": doc["sha256"]},
            "inputs": session.sources,
        },
        summary_file,
    )
    return TuneOutcome(result=result, bundle=doc, summary_file=summary_file, previous_kept=kept)
