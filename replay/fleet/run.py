"""One policy's replay on a fleet: the runner ``replay``, ``tune`` and the benches call.

:class:`FleetSpec` is the fleet (replicas, router and its settings, the trace's logged
replicas for ``as-logged``, each replica's engine when they differ in size);
:func:`runner` gives the callable that :func:`replay.policy_runs.run_all` replays each
policy with.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from profiles.cost import CostModel, ProfileCostModel, rebuild_pricer
from profiles.router_calibration import RouterCalibration, calibrate
from replay.figures import PolicyResult
from replay.fleet.loop import FleetOutcome, check_block_size, simulate_fleet
from replay.fleet.metrics import fleet_result
from replay.fleet.records import FleetRouter
from replay.fleet.routers import AS_LOGGED, RouterSettings, make_router, replica_order
from replay.fleet.routers.as_logged import fitted_order
from replay.fleet.routers.base import Router
from replay.fleet.routers.consistent_hash import worker_urls
from replay.policies import BOUNDS, PolicySpec, make
from replay.policy_runs import Load, prepare, sized_engine
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.workload import Workload
from ttlctl.errors import ConfigError
from ttlctl.nouns import counted
from ttlctl.trace import io as trace_io

#: the trace column naming the replica that served a call (engine logs from a fleet)
REPLICA_COLUMN = "replica"


@dataclass(frozen=True, slots=True)
class FleetSpec:
    replicas: int
    router: RouterSettings = field(default_factory=RouterSettings)
    #: (program, turn) -> the logged replica (``as-logged``)
    logged: Mapping[tuple[str, int], str] | None = None
    #: each replica's engine, in replica order (None: every replica is the replay's
    #: engine); ``refit`` sizes each from its own engine log
    engines: tuple[SimSchedulerConfig, ...] | None = None
    #: the engine under each replica: ``fast`` (the fast backend's) or ``vllm`` (vLLM's own
    #: scheduler, :mod:`replay.vllmsim.fleet`)
    backend: str = "fast"
    #: vLLM's ``--async-scheduling`` on every replica (the fast backend's
    #: :class:`~replay.async_sched.AsyncSimScheduler`; vLLM's ``AsyncScheduler``)
    async_scheduling: bool = False
    #: each replica's URL as the real router is given it (``--worker-urls``), in replica
    #: order: the hashing routers place sessions by them (None: ``http://replica-I``)
    worker_urls: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ConfigError(f"--replicas must be at least 1, got {self.replicas}")
        if self.engines is not None and len(self.engines) != self.replicas:
            raise ConfigError(
                f"{counted(len(self.engines), 'engine size')} given for "
                f"{counted(self.replicas, 'replica')}"
            )
        if self.router.name == AS_LOGGED:
            if self.worker_urls is not None:
                raise ConfigError("--worker-urls: the as-logged router does not take it")
            if self.logged is None:
                raise ConfigError("--router as-logged needs the trace's replica column")
            # the router checks it too: here, before any warning about the trace's sizes
            fitted_order(self.logged.values(), self.replicas)
        if self.worker_urls is not None:
            worker_urls(self.replicas, self.worker_urls)  # one per replica, no repeats

    def describe(self) -> FleetRouter:
        """The router, its settings (defaults filled in) and the replicas, for the JSON;
        ``as-logged``: each replica's name in the trace, in replica order (None: a replica
        beyond the names, left idle)."""
        out: FleetRouter = {
            "name": self.router.name,
            "settings": self.router.resolved(),
            "replicas": self.replicas,
        }
        if self.worker_urls is not None:
            out["worker_urls"] = list(self.worker_urls)
        if self.router.name == AS_LOGGED and self.logged is not None:
            names = replica_order(self.logged.values())
            out["replica_names"] = [
                names[i] if i < len(names) else None for i in range(self.replicas)
            ]
        return out


def logged_replicas(trace: Path) -> dict[tuple[str, int], str]:
    """The trace's ``replica`` column by (program, turn); a one-line error without one."""
    frame = trace_io.read(trace)  # conformed: a column the file lacks is read as nulls
    if REPLICA_COLUMN not in pl.read_parquet_schema(trace):
        raise ConfigError(
            f"--router as-logged: {trace} has no {REPLICA_COLUMN!r} column (engine logs "
            "from a fleet carry one)"
        )
    if frame[REPLICA_COLUMN].null_count() == len(frame):
        raise ConfigError(
            f"--router as-logged: {trace}'s {REPLICA_COLUMN!r} column names no replica "
            "(every call's is null)"
        )
    return replicas_of(frame)


def replicas_of(frame: pl.DataFrame) -> dict[tuple[str, int], str]:
    """A trace's ``replica`` column by (program, turn) (calls without one left out)."""
    if REPLICA_COLUMN not in frame.columns:
        return {}
    return {
        (str(pid), int(turn)): str(rep)
        for pid, turn, rep in frame.select("program_id", "turn", REPLICA_COLUMN).iter_rows()
        if rep is not None
    }


def simulate_fleet_one(
    workload: Workload,
    spec: PolicySpec,
    cost: CostModel,
    config: ReplayConfig,
    timing: Load,
    fleet: FleetSpec,
) -> tuple[FleetOutcome, Workload, float]:
    """The fleet's outcome of one policy, the workload as replayed and the wall seconds."""
    work = prepare(workload, timing)
    pauses = {(p.program_id, i): c.pause_s for p in work.programs for i, c in enumerate(p.calls)}
    cfg = replace(
        config,
        concurrency=timing.concurrency,
        async_scheduling=config.async_scheduling or fleet.async_scheduling,
    )
    engines, cfg = replica_engines(fleet, spec, work, cfg)
    pricers = {n: rebuild_pricer(cost, n) for n in {e.max_num_batched_tokens for e in engines}}
    policies = [
        make(spec, pauses, pricers[e.max_num_batched_tokens], e.max_num_batched_tokens)
        for e in engines
    ]
    router = fleet_router(fleet, cost, seed=timing.seed, block_size=cfg.engine.block_size)
    start = time.perf_counter()
    outcome = simulate_fleet(
        work,
        policies,
        cost,
        cfg,
        router,
        logged_replicas=fleet.logged,
        engines=None if fleet.engines is None else engines,
    )
    return outcome, work, time.perf_counter() - start


def replica_engines(
    fleet: FleetSpec, spec: PolicySpec, work: Workload, cfg: ReplayConfig
) -> tuple[tuple[SimSchedulerConfig, ...], ReplayConfig]:
    """Each replica's engine for ``spec`` (``fleet.engines``, else ``cfg.engine`` on
    every replica; one block size for all), ``unlimited-kv``'s each widened to hold every
    program of ``work`` at once, and ``cfg`` with the first replica's engine then. Both
    backends' fleets size their replicas here."""
    engines = fleet.engines or (cfg.engine,) * fleet.replicas
    check_block_size(engines, cfg)
    if spec.name == "unlimited-kv":
        engines = tuple(sized_engine(spec, work, cfg, e) for e in engines)
        cfg = replace(cfg, engine=engines[0])
    return engines, cfg


def fleet_router(fleet: FleetSpec, cost: CostModel, *, seed: int, block_size: int) -> Router:
    """The fleet's router model, as a replay builds it (both backends)."""
    return make_router(
        fleet.router,
        fleet.replicas,
        seed=seed,
        block_size=block_size,
        logged_replicas=replica_order(fleet.logged.values()) if fleet.logged else (),
        calibration=router_calibration(fleet.router, cost),
        worker_urls=fleet.worker_urls,
    )


def router_calibration(settings: RouterSettings, cost: CostModel) -> RouterCalibration | None:
    """Program scheduling's calibration from the replay's profile (None: another router,
    or the router's reference coefficients asked for)."""
    if settings.name != "program-scheduling":
        return None
    if settings.resolved()["calibration"] == "reference":
        return None
    if not isinstance(cost, ProfileCostModel):
        raise ConfigError(
            "--router program-scheduling: calibrating it needs a profile's cost model; "
            "give --program-scheduling-calibration reference to run on the router's own"
        )
    return calibrate(cost.profile)


def runner(fleet: FleetSpec) -> Callable[..., PolicyResult]:
    """Replays one policy on ``fleet`` (the signature of :func:`replay.policy_runs.run_one`)."""
    if fleet.backend == "vllm":
        # lazy: the vLLM backend imports vLLM (and torch); the fast path must not
        from replay.vllmsim.fleet import VllmFleetRunner

        return VllmFleetRunner(fleet)

    def run(
        workload: Workload,
        spec: PolicySpec,
        cost: CostModel,
        config: ReplayConfig,
        timing: Load,
        *,
        timed: bool = True,
    ) -> PolicyResult:
        outcome, work, wall = simulate_fleet_one(workload, spec, cost, config, timing, fleet)
        return fleet_result(
            outcome,
            work,
            spec.name,
            evaluation_only=spec.name in BOUNDS,
            wall_s=wall if timed else None,
            router=fleet.describe(),
        )

    return run


def router_settings(
    name: str | None,
    *,
    replicas: int | None,
    cache_threshold: float | None = None,
    balance_abs_threshold: int | None = None,
    balance_rel_threshold: float | None = None,
    kv_aware_session_affinity_ttl_secs: int | None = None,
    router_temperature: float | None = None,
    pin_queue_bound: int | None = None,
    program_scheduling_config_json: str | None = None,
    program_scheduling_calibration: str | None = None,
    trace: Path | None = None,
) -> RouterSettings | None:
    """The router asked for on the command line (None: none named, no router flag given;
    router flags without ``--router``: vllm-router's default, ``cache-aware``). A router or
    its flags without ``--replicas`` are refused before the flags are checked against the
    router, so that the message names what is missing (:func:`needs_replicas`)."""
    flags = {
        "cache_threshold": cache_threshold,
        "balance_abs_threshold": balance_abs_threshold,
        "balance_rel_threshold": balance_rel_threshold,
        "kv_aware_session_affinity_ttl_secs": kv_aware_session_affinity_ttl_secs,
        "router_temperature": router_temperature,
        "pin_queue_bound": pin_queue_bound,
        "program_scheduling_config_json": program_scheduling_config_json,
        "program_scheduling_calibration": program_scheduling_calibration,
    }
    if name is None and all(v is None for v in flags.values()):
        return None
    if replicas is None:
        given = [k for k, v in flags.items() if v is not None]
        raise needs_replicas(name, given[0] if given else None, trace)
    # an empty --router is a name the router refuses, not the default
    return RouterSettings("cache-aware" if name is None else name, **flags)  # type: ignore[arg-type]


def needs_replicas(router: str | None, setting: str | None, trace: Path | None) -> ConfigError:
    """The one-line error for a router (``--router NAME``) or a router setting (a
    :class:`RouterSettings` field name) given without ``--replicas``: it names the flag
    given, and for ``as-logged`` how many replicas the trace names (``--replicas K``)."""
    if router == AS_LOGGED and trace is not None:
        k = len(replica_order(logged_replicas(trace).values()))
        return ConfigError(
            f"--router as-logged: the trace's replica column names {counted(k, 'replica')}; "
            f"give --replicas {k}"
        )
    if router is not None:
        return ConfigError(f"--router {router} needs --replicas N")
    flag = "--" + (setting or "router").replace("_", "-")
    return ConfigError(f"{flag} is a router setting: it needs --replicas N")


def fleet_for(
    trace: Path,
    replicas: int | None,
    router: RouterSettings | None,
    *,
    backend: str = "fast",
    live: bool = False,
    async_scheduling: bool = False,
    worker_urls: tuple[str, ...] | None = None,
) -> FleetSpec | None:
    """The fleet a command was asked for (None: one engine, no router), checked."""
    if replicas is None:
        if router is not None:
            raise needs_replicas(router.name, None, trace)
        if worker_urls is not None:
            raise ConfigError("--worker-urls needs --replicas N")
        return None
    if replicas < 1:
        raise ConfigError(f"--replicas must be at least 1, got {replicas}")
    if live:
        raise ConfigError(
            "--replicas with --live is not supported: start the servers and the router, "
            "and point --live at the router"
        )
    router = router or RouterSettings()
    logged = logged_replicas(trace) if router.name == AS_LOGGED else None
    return FleetSpec(
        replicas,
        router,
        logged,
        backend=backend,
        async_scheduling=async_scheduling,
        worker_urls=worker_urls,
    )
