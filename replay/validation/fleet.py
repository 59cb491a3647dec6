"""``ttlctl validate --replicas N --router R``: the trace live through vLLM's router.

For each policy (the replicas' scheduler: stock ``vllm``, or ``continuum``, the TTL
scheduler with its bundle) and each router policy asked
(:mod:`~replay.validation.fleet_routers`), a fresh fleet is started
(:func:`~replay.validation.servers.policy_fleet`: N replicas and ``vllm-router`` in
front, placed by :mod:`~replay.validation.fleet_placement`, all stopped after the run
and on any exit), the replicas' prefix caches are emptied, and the programs are replayed
through the router's URL (:func:`replay.live.run_live`): one such run is
:func:`~replay.validation.fleet_live.live_run`. Each row gives the mean JCT and TTFT,
the prefix-hit rate (the cached prompt tokens the replicas reported per call, over all
prompt tokens: the router's ``/metrics`` is not the fleet's) and the share of calls that
returned to the replica their program's previous call ran on — read from each replica's
arrivals file (:mod:`ttlctl.server.arrivals`), not from the router's log, which names
the chosen worker only for some policies.

Beside each live row, the simulated fleet (:mod:`replay.validation.fleet_sim`): the same
programs on as many simulated replicas, each sized like the live ones (their
``/metrics``) and priced by the profile given, or else by one measured here (below), behind
ttlctl's model of the same router, given the live replicas' URLs in the live router's own
worker order (read from its log: :func:`~ttlctl.server.router.worker_order`). Each row
gets its errors, and each policy the routers' ranking by mean JCT, simulated against
live, and issue 19's goal (every router within 10%, the same ranking).

``repeats`` K > 1: each (policy, router) runs live K times, each on a fresh fleet, run k
of every router before run k + 1 of any; each run is simulated with its own fleet's URLs
and order, and :mod:`replay.validation.fleet_runs` makes the K rows one (the live mean
and range, the simulated mean's errors against the live mean, every run kept); the goal
is judged on the means and on each single run.

Each run's simulated figures are their mean over ``timing_draws`` seeded perturbations of
the arrival timing (:mod:`replay.validation.timings`: where a router places by load or by
what is cached, one simulation is one draw of a spread wider than the goal, and the live
side is a mean over runs); the trace's own timing is kept beside it
(``compare_one_timing``). ``timing_draws`` 0: none is drawn, and the figures compared are
the one simulation on the trace's own timing.

The profile, when none is given, is measured in every repeat
(:mod:`replay.validation.fleet_profile`); each repeat's runs are priced by that repeat's
own measurement, and by the K measurements pooled into one beside it
(:mod:`replay.validation.fleet_rows`; the goal is judged on both, the first counting).
The document keeps each measurement (its source, time, own fit and timings).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from profiles.router_calibration import RouterCalibration
from profiles.schema import Profile
from replay.client_tags import FULL
from replay.live import cap_pauses, first_programs
from replay.policy_runs import Load
from replay.progress import RunsDone, each_told
from replay.scheduler_config import MAX_NUM_BATCHED_TOKENS, MAX_NUM_SEQS
from replay.validation import work_dir as work_dirs
from replay.validation.error import ValidateError
from replay.validation.fleet_doc import fleet_document
from replay.validation.fleet_live import LiveFleets, live_run
from replay.validation.fleet_placement import check_placement, replica_cpus, replica_gpus
from replay.validation.fleet_profile import Measured, by_repeat, pooled
from replay.validation.fleet_routers import (
    BUNDLE,
    bundle_router,
    check_router,
    router_setup,
    sim_settings,
)
from replay.validation.fleet_rows import LiveRun
from replay.validation.kv_memory import check_kv_memory
from replay.validation.servers import LIVE_POLICIES, Sources, check_events_flag
from replay.validation.sim_side import SimSide
from replay.validation.sizing import check_kv_tokens, sim_engine_config
from replay.validation.timings import DRAWS, Timings
from replay.validation.warmup import warmed_engine
from replay.workload import Workload
from ttlctl import bundle as bundle_mod
from ttlctl.nouns import counted
from ttlctl.server.client import ServerError
from ttlctl.server.facts import ServerInfo

#: perturbed arrival timings each live run is simulated on unless told
#: (:mod:`replay.validation.timings`; ``validate --timing-draws``)
TIMING_DRAWS = DRAWS


def fleet_runs(
    repeats: int, policies: Sequence[str], routers: Sequence[str]
) -> list[tuple[int, str, str]]:
    """The live runs ``(repeat, policy, router)`` in the order they are made: run k of
    every (policy, router) before run k + 1 of any, so that a drift in the machine's speed
    falls on every router alike."""
    return [(rep, name, r) for rep in range(repeats) for name in policies for r in routers]


def validate_fleet(
    workload: Workload,
    sources: Sources,
    *,
    replicas: int,
    routers: Sequence[str],
    policies: Sequence[str] = ("vllm",),
    bundle: Path | None = None,
    program_scheduling_json: str | None = None,
    calibration: RouterCalibration | None = None,
    profile: Profile | None = None,
    model_config: dict[str, Any] | None = None,
    kv_tokens: int | None = None,
    max_num_seqs: int = MAX_NUM_SEQS,
    max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS,
    prefill_cap: tuple[int, bool] = (0, False),
    watermark: float = 0.0,
    router_extra: Sequence[str] = (),
    cpus_per_replica: int | None = None,
    gpus_per_replica: int | None = None,
    async_scheduling: bool = False,
    client_tags: str = FULL,
    timing: Load | None = None,
    seed: int = 0,
    repeats: int = 1,
    timing_draws: int = TIMING_DRAWS,
    max_programs: int | None = 8,
    idle_gap_cap_s: float | None = None,
    timeout_s: float = 1800.0,
    work_dir: Path | None = None,
    vocab_size: int | None = None,
    progress: Callable[[str], None] | None = None,
    runs_done: RunsDone | None = None,
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Replay ``workload`` live through a fresh fleet per (policy, router) and repeat
    (:func:`fleet_runs`); ``progress`` is told each step as it starts, ``runs_done`` the
    live runs done of all.

    ``program_scheduling_json`` turns the router's Program scheduling on for every router;
    the router :data:`~replay.validation.fleet_routers.PROGRAM_SCHEDULING` turns it on for
    its calls (``calibration``: the profile's coefficients, else the router's reference
    ones). The simulated side is priced by ``profile`` (else each repeat's runs by that
    repeat's own measurement, and beside it by one pooled over them:
    :mod:`~replay.validation.fleet_profile`, :mod:`~replay.validation.fleet_rows`) and sized
    like the replicas (``kv_tokens`` overrides their KV size; ``max_num_seqs`` and
    ``max_num_batched_tokens``: the replicas' own, unless told ``validate``'s defaults,
    vLLM's GPU ones: the caller starts the replicas with them). ``cpus_per_replica``: each
    replica on that many CPUs of its own (:mod:`ttlctl.server.cpus`); a profile measured
    here is then measured on a first replica, pinned, while the others serve a steady load
    (:func:`~replay.validation.neighbours.kept_busy`), as they will compute beside it.
    ``gpus_per_replica``: each replica on that many GPUs of its own
    (:mod:`ttlctl.server.gpus`; vLLM's parallel sizes after ``--`` must use them all),
    measured the same way. ``async_scheduling``: the simulated replicas schedule as vLLM's
    async scheduling does (the caller starts the servers with it). ``client_tags``: what
    the live client and the simulated ones tag each call with (:mod:`replay.client_tags`).

    Raises :class:`ValidateError` (bad arguments), a
    :class:`~ttlctl.server.router.RouterError` (no ``vllm-router``, or a policy it
    lacks) or a :class:`~ttlctl.server.client.ServerError` (a replica or the router
    that does not start, or exits, in the first repeat: nothing is left running). A
    fleet that fails so in a later repeat stops the validation there, and the document
    holds the whole repeats before it (``repeats``) and says what stopped it
    (``stopped``: the run, its error and the repeats asked).
    """
    say = progress or (lambda message: None)
    names = list(dict.fromkeys(policies))
    unknown = [p for p in names if p not in LIVE_POLICIES]
    if unknown or not names:
        raise ValidateError(f"a fleet runs {' or '.join(LIVE_POLICIES)}; got {unknown or 'none'}")
    if sources.base_cmd is None or sources.urls:
        raise ValidateError(
            "--replicas starts the fleet itself: give --model or --engine-cmd, not --url"
        )
    if not routers:
        raise ValidateError("--replicas needs at least one --router")
    if repeats < 1:
        raise ValidateError(f"--repeats must be at least 1, not {repeats}")
    check_placement(cpus_per_replica, gpus_per_replica)
    check_kv_tokens(kv_tokens, sources.vllm_args())  # the replicas' block size, if given
    check_kv_memory(sources.vllm_args(), model_config)
    timings = Timings(draws=timing_draws, seed=seed)  # refused here, before any fleet
    for policy in routers:  # every one, before the first fleet's minutes of work
        check_router(policy)
    sets = replica_cpus(replicas, cpus_per_replica)
    gpu_sets = replica_gpus(sources, replicas, gpus_per_replica)
    work = cap_pauses(first_programs(workload, max_programs), idle_gap_cap_s)
    if not work.programs:
        raise ValidateError("no programs to validate with")
    # continuum without --bundle: a cold-start bundle (no fit), as on one server; it
    # carries a profile, which a fleet measures only after its runs
    cold = "continuum" in names and bundle is None
    if cold and profile is None:
        raise ValidateError(
            "continuum in a fleet needs --bundle or --profile (a cold-start bundle carries "
            "a profile; a fleet's is measured after its runs)"
        )
    # a damaged bundle: refused before anything starts
    bundle_doc = bundle_mod.read(bundle) if bundle is not None else None
    tuned = None
    if BUNDLE in routers:  # the router the bundle was tuned behind, and its settings
        if bundle is None or bundle_doc is None:
            raise ValidateError(
                "--router bundle is the router --bundle was tuned behind: give --bundle"
            )
        tuned = bundle_router(bundle_doc, bundle)
        tuned_on = int(bundle_doc["router"].get("replicas", replicas))
        if warn is not None and tuned_on != replicas:
            warn(
                f"--router bundle: {bundle} was tuned for {counted(tuned_on, 'replica')}; "
                f"this fleet has {replicas}"
            )
    check_events_flag(
        [router_setup(r, calibration, program_scheduling_json, tuned)[0] for r in routers],
        sources.vllm_args(),
    )
    profile_source = "given" if profile is not None else None
    info: ServerInfo | None = None
    # made only once the arguments are known good: bad input leaves no folder behind, nor
    # does a refusal in the runs before anything is written there; absolute: the document
    # names its files (each replica's arrivals, the router's log) wherever it is read from
    # (``validate --resimulate``)
    with work_dirs.work_dir(work_dir, "ttlctl-validate-fleet-") as work_dir:
        work_dir.mkdir(parents=True, exist_ok=True)
        if cold:
            assert profile is not None
            bundle, bundle_doc = work_dirs.cold_start_bundle(work_dir, profile.to_json())
        runs: list[LiveRun] = []
        measured: list[Measured] = []
        fleets = LiveFleets(
            sources=sources,
            bundle=bundle,
            work_dir=work_dir,
            replicas=replicas,
            repeats=repeats,
            calibration=calibration,
            program_scheduling_json=program_scheduling_json,
            router_extra=router_extra,
            cpu_sets=sets,
            gpu_sets=gpu_sets,
            work=work,
            timing=timing,
            seed=seed,
            timeout_s=timeout_s,
            vocab_size=vocab_size,
            model_config=model_config,
            measuring=profile is None,
            kv_tokens=kv_tokens,
            warn=warn,
            client_tags=client_tags,
            tuned=tuned,
        )
        stopped: dict[str, Any] | None = None
        for rep, name, policy in each_told(fleet_runs(repeats, names, routers), runs_done):
            # on the repeat's last fleet: no fleet's live run follows a measurement's
            # warm-up, so every run starts alike
            last = (name, policy) == (names[-1], routers[-1])
            try:
                run, info, measurement = live_run(
                    fleets,
                    rep,
                    name,
                    policy,
                    info=info,
                    measure=profile is None and last,
                    say=say,
                )
            except ServerError as exc:
                if rep == 0:
                    raise  # no whole repeat to keep
                # a replica or the router died, or did not start, in a later repeat: the
                # repeats before it are whole (runs and measurement); they are kept
                stopped = stopped_at(exc, rep, repeats, f"{name} behind {policy}")
                say(
                    f"{name} behind {policy} (run {rep + 1}) failed: keeping the "
                    f"{counted(rep, 'whole repeat')} before it"
                )
                # the failed repeat's runs that ended go; it has no measurement (a repeat's
                # comes with its last run, and by_repeat checks there is one a repeat kept)
                runs = [r for r in runs if r.repeat < rep]
                repeats = rep
                break
            runs.append(run)
            if measurement is not None:
                measured.append(measurement)
    assert info is not None  # set in the first fleet
    #: each repeat's own measurement, which prices that repeat's runs (none: given)
    own = by_repeat(measured, repeats)
    if profile is None:  # measured: one measurement a repeat, and all of them pooled
        profile, profile_source = pooled(measured)
    engine = sim_engine_config(
        info,
        kv_tokens=kv_tokens,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        prefill_cap=prefill_cap,
        watermark=watermark,
    )
    # every live fleet is started fresh and warmed: its engines have run the warm-up's sizes
    engine = warmed_engine(engine, info.max_model_len)
    say(
        f"simulating {len(runs)} fleets"
        + (", each on its repeat's profile and on the pooled one" if len(own) > 1 else "")
    )
    side = SimSide(
        replicas=replicas,
        profile=profile,
        engine=engine,
        timing=timing or Load(seed=seed),
        bundle=bundle_doc,
        settings=sim_settings(routers, calibration, program_scheduling_json, tuned),
        async_scheduling=async_scheduling,
        client_tags=client_tags,
    )
    doc = fleet_document(
        runs,
        work,
        side,
        own,
        timings,
        policies=names,
        routers=routers,
        repeats=repeats,
        profile_source=profile_source,
        measured=measured,
        server_info=info.to_json(),
        bundle=bundle,
        cpu_sets=sets,
        gpu_sets=gpu_sets,
        work_dir=work_dir,
        idle_gap_cap_s=idle_gap_cap_s,
    )
    return doc if stopped is None else {**doc, "stopped": stopped}


def stopped_at(exc: ServerError, rep: int, asked: int, which: str) -> dict[str, Any]:
    """The document's record of a fleet validation that a failed fleet stopped in repeat
    ``rep`` (0-based) of ``asked``: the run, its error, and the whole repeats kept."""
    return {"run": f"{which}, run {rep + 1}", "error": str(exc), "repeats_asked": asked}
