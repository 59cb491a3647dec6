"""One live run of ``validate --replicas N --router R``: a fresh fleet for one (policy,
router, repeat) (:func:`~replay.validation.servers.policy_fleet`: N replicas and
``vllm-router`` in front, all stopped after the run and on any exit), its replicas warmed
up and their prefix caches emptied, the programs replayed through the router's URL
(:func:`replay.live.run_live`), each replica's own ``/metrics`` read before and after,
and, when asked, a replica's profile measured on the fleet
(:func:`~replay.validation.fleet_profile.measure_replica`) before it stops.

What the run records (:class:`~replay.validation.fleet_rows.LiveRun`): its result, each
replica's arrivals (:mod:`ttlctl.server.arrivals`) and the fleet it ran on, with the live
router's own worker order read from its log (:func:`live_worker_order`).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiles.router_calibration import RouterCalibration
from replay.client_tags import FULL, in_body
from replay.live import run_live
from replay.policy_runs import Load
from replay.validation.engine_metrics import ScrapeFailed, engine_delta, scrape
from replay.validation.error import ValidateError
from replay.validation.fleet_profile import Measured, measurable, measure_replica
from replay.validation.fleet_routers import BundleRouter, router_setup
from replay.validation.fleet_rows import LiveRun
from replay.validation.servers import Sources, policy_fleet
from replay.validation.sizing import kv_tokens_of
from replay.validation.warmup import warmed
from replay.workload import Workload
from ttlctl.nouns import counted
from ttlctl.server import arrivals, router
from ttlctl.server.cache import reset_prefix_cache
from ttlctl.server.client import ServerError
from ttlctl.server.cpu_time import cpu_used
from ttlctl.server.facts import ServerInfo, probe


@dataclass(frozen=True, slots=True)
class LiveFleets:
    """What every live run of one fleet validation shares
    (:func:`~replay.validation.fleet.validate_fleet`'s checked arguments)."""

    sources: Sources
    bundle: Path | None
    #: where each fleet writes its arrivals and the router's log
    work_dir: Path
    replicas: int
    repeats: int
    calibration: RouterCalibration | None
    program_scheduling_json: str | None
    router_extra: Sequence[str]
    #: each replica's CPUs (None: unpinned; :mod:`~replay.validation.fleet_placement`)
    cpu_sets: tuple[tuple[int, ...], ...] | None
    #: each replica's GPUs (None: the environment's)
    gpu_sets: tuple[tuple[str, ...], ...] | None
    #: the programs replayed (the first ones, pauses capped)
    work: Workload
    timing: Load | None
    seed: int
    timeout_s: float
    vocab_size: int | None
    model_config: dict[str, Any] | None
    #: no profile was given: one is measured on the fleets (asked on the first)
    measuring: bool
    #: ``--kv-tokens`` (None: the replicas' own)
    kv_tokens: int | None
    warn: Callable[[str], None] | None
    #: what the live client tags each call with (``--client-tags``)
    client_tags: str = FULL
    #: the bundle's router (``--router bundle``; None: not asked)
    tuned: BundleRouter | None = None


#: how long a failed call's fleet is watched for a process that is still dying
DYING_S = 2.0


def live_run(
    fleets: LiveFleets,
    rep: int,
    name: str,
    policy: str,
    *,
    info: ServerInfo | None,
    measure: bool,
    say: Callable[[str], None],
) -> tuple[LiveRun, ServerInfo, Measured | None]:
    """Run ``name`` (the replicas' scheduler) live behind the router ``policy`` in repeat
    ``rep`` (0-based) on a fresh fleet, stopped before this returns.

    ``info``: the first fleet's server facts (None: this is the first fleet; they are
    read from it, and returned). ``measure``: a replica's profile is measured on this
    fleet after its live run (the repeat's last), and returned (else None).
    """
    measurement: Measured | None = None
    which = f"{name} behind {policy}" + (
        f" (run {rep + 1} of {fleets.repeats})" if fleets.repeats > 1 else ""
    )
    tag = f"-{policy}" + (f"-{rep + 1}" if fleets.repeats > 1 else "")
    request_policy, scheduling, flags = router_setup(
        policy, fleets.calibration, fleets.program_scheduling_json, fleets.tuned
    )
    made = policy_fleet(
        fleets.sources,
        name,
        fleets.bundle,
        fleets.work_dir,
        tag,
        replicas=fleets.replicas,
        router_policy=request_policy,
        program_scheduling_json=scheduling,
        router_extra=(*fleets.router_extra, *flags),
        cpu_sets=fleets.cpu_sets,
        gpu_sets=fleets.gpu_sets,
    )
    fleet = made.fleet
    say(f"{which}: starting {counted(fleets.replicas, 'replica')} and vllm-router")
    with fleet:
        try:
            groups = [s.pid for s in (*fleet.replicas, fleet.router) if s.pid is not None]
            if info is None:
                info = probe(next(iter(made.urls.values())))
                kv_tokens_of(info, fleets.kv_tokens)  # a KV that holds no block: refused now
                if fleets.measuring:  # measured after the runs: asked now
                    measurable(info.url, "a replica", fleets.model_config)
            say(f"{which}: warming the replicas up")
            warm = warmed(
                list(made.urls.values()),
                info.model,
                max_model_len=info.max_model_len,
                vocab_size=fleets.vocab_size,
                seed=fleets.seed,
                logprobs=not in_body(fleets.client_tags),
            )
            for url in made.urls.values():
                reset_prefix_cache(url)
            fleet.check_running()  # the warm-up went to the replicas, not through the router
            say(f"{which}: live replay of {counted(len(fleets.work.programs), 'program')}")
            before = {r: _scraped(u, fleets.warn) for r, u in made.urls.items()}
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
                    fleets.work,
                    name,
                    timing=fleets.timing,
                    seed=fleets.seed,
                    timeout_s=fleets.timeout_s,
                    vocab_size=fleets.vocab_size,
                    warn=fleets.warn,
                    client_tags=fleets.client_tags,
                    # no gauges read through the router during the run: vllm-router forwards
                    # GET /metrics to a worker by the routing policy, so a poll every half
                    # second moved round_robin's placement (its counter is shared with the
                    # calls); each replica's own figures are read directly, before and after
                    sample_every_s=0.0,
                )
            fleet.check_running()  # a run that did not go through the router measured nothing
            engines = {
                r: engine_delta(before[r], _scraped(u, fleets.warn)) for r, u in made.urls.items()
            }
            if measure:
                say(f"{which}: measuring a replica's profile")
                measurement = measure_replica(
                    list(made.urls.values()),
                    model=info.model,
                    policy=name,
                    repeat=rep + 1,
                    cpu_sets=fleets.cpu_sets,
                    gpu_sets=fleets.gpu_sets,
                    model_config=fleets.model_config,
                    vocab_size=fleets.vocab_size,
                )
            say(f"{which}: stopping the fleet")
        except (ValidateError, ServerError):
            # a warm-up, a live run or a measurement that failed because a replica or the
            # router died (a refused connection, say): told as that process's exit (a
            # ServerError naming it and its log), which a later repeat survives
            fleet.check_running(wait_s=DYING_S)
            raise
    order = arrivals.read(made.arrivals)
    logged = live_worker_order(fleet.router.log_path, list(made.urls.values()))
    run = LiveRun(
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
    return run, info, measurement


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
