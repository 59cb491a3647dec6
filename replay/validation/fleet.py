"""``ttlctl validate --replicas N --router R``: the trace live through vLLM's router.

For each policy (the replicas' scheduler: stock ``vllm``, or ``continuum``, the TTL
scheduler with its bundle) and each router policy asked, a fresh fleet is started
(:func:`~replay.validation.servers.policy_fleet`: N replicas and ``vllm-router`` in
front, all stopped after the run and on any exit), the replicas' prefix caches are
emptied, and the programs are replayed through the router's URL
(:func:`replay.live.run_live`). Each row gives the mean JCT and TTFT, the prefix-hit
rate (the cached prompt tokens the replicas reported per call, over all prompt
tokens: the router's ``/metrics`` is not the fleet's) and the share of calls that
returned to the replica their program's previous call ran on — read from each
replica's arrivals file (:mod:`ttlctl.server.arrivals`), not from the router's log,
which names the chosen worker only for some policies.

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

import json
import os
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from profiles.router_calibration import RouterCalibration
from profiles.schema import Profile
from replay.fleet.routers import RouterSettings
from replay.live import cap_pauses, first_programs, run_live
from replay.policy_runs import Load
from replay.scheduler_config import MAX_NUM_BATCHED_TOKENS, MAX_NUM_SEQS
from replay.validation import work_dir as work_dirs
from replay.validation.engine_metrics import ScrapeFailed, engine_delta, scrape
from replay.validation.error import ValidateError
from replay.validation.fleet_doc import fleet_document
from replay.validation.fleet_profile import (
    Measured,
    by_repeat,
    measurable,
    measure_replica,
    pooled,
)
from replay.validation.fleet_rows import LiveRun
from replay.validation.servers import LIVE_POLICIES, Sources, policy_fleet
from replay.validation.sim_side import SimSide
from replay.validation.sizing import sim_engine_config
from replay.validation.timings import DRAWS, Timings
from replay.validation.warmup import warmed
from replay.workload import Workload
from ttlctl import bundle as bundle_mod
from ttlctl.nouns import counted
from ttlctl.server import arrivals, command, cpus, gpus, router
from ttlctl.server.cache import reset_prefix_cache
from ttlctl.server.cpu_time import cpu_used
from ttlctl.server.facts import ServerInfo, probe

#: ``--router`` for vllm-router's own Program scheduling: ``consistent_hash`` underneath
#: (its documented pairing), Program scheduling on for every call with an ``X-Session-ID``
#: (``program_scheduling_enable_key: auto``), calibrated from the profile when one is given
PROGRAM_SCHEDULING = router.PROGRAM_SCHEDULING
#: the request-level policy under Program scheduling
PROGRAM_SCHEDULING_POLICY = "consistent_hash"
#: what ``validate --router`` takes: vllm-router's ``--policy`` values and Program scheduling
ROUTERS = router.LIVE_ROUTERS
#: perturbed arrival timings each live run is simulated on unless told
#: (:mod:`replay.validation.timings`; ``validate --timing-draws``)
TIMING_DRAWS = DRAWS


def check_router(name: str) -> str:
    """``name`` if ``validate --router`` takes it, else a
    :class:`~ttlctl.server.router.RouterError` naming every one it takes (and vllm-router's
    spelling of a name written as ``replay --router`` writes it). Not
    :func:`~ttlctl.server.router.check_policy`'s list: that one is the ``--policy`` the
    router is started with, which ``program_scheduling`` is not (:func:`router_setup`
    starts it as ``consistent_hash`` with Program scheduling on)."""
    if name in ROUTERS:
        return name
    spelled = name.replace("-", "_")
    hint = f" (vllm-router's spelling: {spelled})" if spelled in ROUTERS else ""
    raise router.RouterError(f"--router takes {', '.join(ROUTERS)}; not {name!r}{hint}")


def router_setup(
    router: str, calibration: RouterCalibration | None, program_scheduling_json: str | None
) -> tuple[str, str | None]:
    """The router's ``--policy`` and ``--program-scheduling-config-json`` for ``router``."""
    if router != PROGRAM_SCHEDULING:
        return router, program_scheduling_json
    auto = {"program_scheduling_enable_key": "auto"}
    value = calibration.flag_value(auto) if calibration is not None else json.dumps(auto)
    return PROGRAM_SCHEDULING_POLICY, value


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
    router_extra: Sequence[str] = (),
    cpus_per_replica: int | None = None,
    gpus_per_replica: int | None = None,
    async_scheduling: bool = False,
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
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Replay ``workload`` live through a fresh fleet per (policy, router).

    ``program_scheduling_json`` turns the router's Program scheduling on for every router;
    the router :data:`PROGRAM_SCHEDULING` turns it on for its calls (``calibration``: the
    profile's coefficients, else the router's reference ones). The simulated side is
    priced by ``profile`` (else each repeat's runs by that repeat's own measurement, and
    beside it by one pooled over them: :mod:`~replay.validation.fleet_profile`,
    :mod:`~replay.validation.fleet_rows`) and sized like the replicas (``kv_tokens``
    overrides their KV size; ``max_num_seqs`` and ``max_num_batched_tokens``: the
    replicas' own, unless told ``validate``'s defaults, vLLM's GPU ones: the caller
    starts the replicas with them). ``cpus_per_replica``: each replica
    on that many CPUs of its own (:mod:`ttlctl.server.cpus`); a profile measured here is
    then measured on a first replica, pinned, while the others serve a steady load
    (:func:`~replay.validation.neighbours.kept_busy`), as they will compute beside it.
    ``gpus_per_replica``: each replica on that many GPUs of its own
    (:mod:`ttlctl.server.gpus`; vLLM's parallel sizes after ``--`` must use them all),
    measured the same way. ``async_scheduling``: the simulated replicas schedule as
    vLLM's async scheduling does (the caller starts the servers with it).

    Raises :class:`ValidateError` (bad arguments), a
    :class:`~ttlctl.server.router.RouterError` (no ``vllm-router``, or a policy it
    lacks) or a :class:`~ttlctl.server.client.ServerError` (a replica or the router
    that does not start: nothing is left running).
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
    timings = Timings(draws=timing_draws, seed=seed)  # refused here, before any fleet
    for policy in routers:  # every one, before the first fleet's minutes of work
        check_router(policy)
    sets = None if cpus_per_replica is None else cpus.cpu_sets(replicas, cpus_per_replica)
    gpu_sets = _gpu_sets(sources, replicas, gpus_per_replica)
    work = cap_pauses(first_programs(workload, max_programs), idle_gap_cap_s)
    if not work.programs:
        raise ValidateError("no programs to validate with")
    if "continuum" in names and bundle is None:
        raise ValidateError("continuum in a fleet needs --bundle")
    # a damaged bundle: refused before anything starts
    bundle_doc = bundle_mod.read(bundle) if bundle is not None else None
    profile_source = "given" if profile is not None else None
    info: ServerInfo | None = None
    # made only once the arguments are known good: bad input leaves no folder behind, nor
    # does a refusal in the runs before anything is written there; absolute: the document
    # names its files (each replica's arrivals, the router's log) wherever it is read from
    # (``validate --resimulate``)
    with work_dirs.work_dir(work_dir, "ttlctl-validate-fleet-") as work_dir:
        work_dir.mkdir(parents=True, exist_ok=True)
        runs: list[LiveRun] = []
        measured: list[Measured] = []
        # run k of every (policy, router) before run k + 1 of any: a drift in the machine's
        # speed then falls on every router alike
        for rep in range(repeats):
            for name in names:
                for policy in routers:
                    which = f"{name} behind {policy}" + (
                        f" (run {rep + 1} of {repeats})" if repeats > 1 else ""
                    )
                    tag = f"-{policy}" + (f"-{rep + 1}" if repeats > 1 else "")
                    request_policy, scheduling = router_setup(
                        policy, calibration, program_scheduling_json
                    )
                    made = policy_fleet(
                        sources,
                        name,
                        bundle,
                        work_dir,
                        tag,
                        replicas=replicas,
                        router_policy=request_policy,
                        program_scheduling_json=scheduling,
                        router_extra=router_extra,
                        cpu_sets=sets,
                        gpu_sets=gpu_sets,
                    )
                    fleet = made.fleet
                    say(f"{which}: starting {counted(replicas, 'replica')} and vllm-router")
                    with fleet:
                        groups = [
                            s.pid for s in (*fleet.replicas, fleet.router) if s.pid is not None
                        ]
                        if info is None:
                            info = probe(next(iter(made.urls.values())))
                            if profile is None:  # measured after the runs: asked now
                                measurable(info.url, "a replica", model_config)
                        say(f"{which}: warming the replicas up")
                        warm = warmed(
                            list(made.urls.values()),
                            info.model,
                            max_model_len=info.max_model_len,
                            vocab_size=vocab_size,
                            seed=seed,
                        )
                        for url in made.urls.values():
                            reset_prefix_cache(url)
                        say(f"{which}: live replay of {counted(len(work.programs), 'program')}")
                        before = {r: _scraped(u, warn) for r, u in made.urls.items()}
                        # each server leads a process group of its own (its pid is its id)
                        cpu_groups: dict[str, int | None] = {
                            r: server.pid
                            for r, u in made.urls.items()
                            for server in fleet.replicas
                            if server.url == u
                        }
                        cpu_groups["router"] = fleet.router.pid
                        with cpu_used(cpu_groups) as cpu_s:
                            result = run_live(
                                fleet.url,
                                work,
                                name,
                                timing=timing,
                                seed=seed,
                                timeout_s=timeout_s,
                                vocab_size=vocab_size,
                                warn=warn,
                                # no gauges read through the router during the run: vllm-router
                                # forwards GET /metrics to a worker by the routing policy, so a
                                # poll every half second moved round_robin's placement (its
                                # counter is shared with the calls); each replica's own
                                # figures are read directly, before and after
                                sample_every_s=0.0,
                            )
                        engines = {
                            r: engine_delta(before[r], _scraped(u, warn))
                            for r, u in made.urls.items()
                        }
                        # after the repeat's last live run, on its fleet: no fleet's live
                        # run follows a measurement's warm-up, so every run starts alike
                        if profile is None and (name, policy) == (names[-1], routers[-1]):
                            say(f"{which}: measuring a replica's profile")
                            measured.append(
                                measure_replica(
                                    list(made.urls.values()),
                                    model=info.model,
                                    policy=name,
                                    repeat=rep + 1,
                                    cpu_sets=sets,
                                    gpu_sets=gpu_sets,
                                    model_config=model_config,
                                    vocab_size=vocab_size,
                                )
                            )
                        say(f"{which}: stopping the fleet")
                    order = arrivals.read(made.arrivals)
                    logged = live_worker_order(fleet.router.log_path, list(made.urls.values()))
                    runs.append(
                        LiveRun(
                            rep,
                            name,
                            policy,
                            result,
                            order,
                            {
                                "url": fleet.url,
                                "router_command": shlex.join(fleet.router.command),
                                "router_log": str(fleet.router.log_path),
                                #: CPU seconds each replica (its API server and engine
                                #: core), the router and the client used during the live run
                                "cpu_s": cpu_s,
                                #: router starts that found their port taken meanwhile
                                "router_port_retries": fleet.port_retries,
                                #: the process groups it ran (each one's leader pid), all
                                #: stopped now
                                "process_groups": groups,
                                #: what each replica served before the live run, so that it
                                #: starts warm (replay.validation.warmup)
                                "warmup": warm.to_json(),
                                "replicas": {
                                    r: {
                                        "url": made.urls[r],
                                        "arrivals": str(made.arrivals[r]),
                                        #: its steps, requests and engine TTFT in the live
                                        #: run, from its /metrics (None: not read)
                                        "engine": engines[r],
                                    }
                                    for r in made.urls
                                },
                                #: the workers' URLs in the router's own order, from its log
                                #: (None: not logged; the simulated side then takes the
                                #: --worker-urls order)
                                "worker_order": logged,
                            },
                        )
                    )
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
    )
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
        settings=sim_settings(routers, calibration, program_scheduling_json),
        async_scheduling=async_scheduling,
    )
    return fleet_document(
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


def check_placement(cpus_per_replica: int | None, gpus_per_replica: int | None) -> None:
    """:class:`ValidateError` (one line) for a replica given fewer than one CPU or GPU.
    Checked before the machine is asked what it has, so a bad value is named as such.
    Both may be given: GPU replicas whose host threads are pinned to CPUs of their own."""
    for flag, per_replica in (
        ("--cpus-per-replica", cpus_per_replica),
        ("--gpus-per-replica", gpus_per_replica),
    ):
        if per_replica is not None and per_replica < 1:
            raise ValidateError(f"{flag} must be at least 1, not {per_replica}")


def _gpu_sets(
    sources: Sources, replicas: int, per_replica: int | None
) -> tuple[tuple[str, ...], ...] | None:
    """Each replica's GPUs (None: not placed), refused before any fleet starts when
    there are too few, one of them is in MIG mode but named whole, or the replicas' vLLM
    would not use them all."""
    if per_replica is None:
        return None
    assert sources.base_cmd is not None
    placed = gpus.gpu_sets(replicas, per_replica, gpus.visible_gpus(sources.env or os.environ))
    gpus.check_whole([g for gpu_set in placed for g in gpu_set])
    gpus.check_parallel(command.vllm_arguments(sources.base_cmd), per_replica)
    return placed


def _scraped(url: str, warn: Callable[[str], None] | None) -> dict[str, float] | None:
    """A replica's series (:func:`~replay.validation.engine_metrics.scrape`); None, said
    through ``warn``, when they cannot be read: its engines are then not compared."""
    try:
        return scrape(url)
    except ScrapeFailed as exc:
        if warn is not None:
            warn(f"the replica's own figures are not compared: {exc}")
        return None


def live_worker_order(log_path: Path, urls: Sequence[str]) -> list[str] | None:
    """The replicas' URLs in the live router's own order, read from its log (None: the
    log has no such order, or one that is not these replicas')."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return None
    order = router.worker_order(text)
    return order if order is not None and sorted(order) == sorted(urls) else None


def sim_settings(
    routers: Sequence[str],
    calibration: RouterCalibration | None,
    program_scheduling_json: str | None,
) -> dict[str, RouterSettings]:
    """The simulated Program scheduling set as the live router is: the same config JSON,
    on the profile's calibration when the live one is calibrated, else the reference one."""
    if PROGRAM_SCHEDULING not in routers:
        return {}
    value = router_setup(PROGRAM_SCHEDULING, calibration, program_scheduling_json)[1]
    return {
        PROGRAM_SCHEDULING: RouterSettings(
            "program-scheduling",
            program_scheduling_config_json=value,
            program_scheduling_calibration="reference" if calibration is None else "profile",
        )
    }
