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
from replay.progress import CallsDone
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.workload import Workload
from ttlctl.errors import ConfigError
from ttlctl.nouns import counted
from ttlctl.router_doc import KV_AWARE
from ttlctl.trace import io as trace_io

#: the trace column naming the replica that served a call (engine logs from a fleet)
REPLICA_COLUMN = "replica"
#: the most replicas one replay takes (one process holds every replica's engine: 100,000
#: replay in seconds on a small trace; far more run out of memory)
MAX_REPLICAS = 100_000


def check_replicas(replicas: int) -> None:
    """``--replicas`` in range (a one-line error otherwise)."""
    if replicas < 1:
        raise ConfigError(f"--replicas must be at least 1, got {replicas}")
    if replicas > MAX_REPLICAS:
        raise ConfigError(
            f"--replicas must be at most {MAX_REPLICAS:,} (one process replays them all), "
            f"got {replicas:,}"
        )


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
    #: whether ``kv-aware`` credits the calls with their cached prefix: off where the
    #: clients' requests carry fields the real router does not credit
    #: (:mod:`replay.fleet.routers.kv_credit`: ``validate``'s live client's do)
    prefix_credit: bool = True

    def __post_init__(self) -> None:
        check_replicas(self.replicas)
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
        if not self.prefix_credit and self.router.name == KV_AWARE:
            out["prefix_credit"] = False
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


def replicas_named(trace: Path) -> int:
    """How many replicas the trace's ``replica`` column names (0 without the column): one
    column scanned, so a replay of one engine can say that its trace came from a fleet
    without reading the trace twice."""
    if REPLICA_COLUMN not in pl.read_parquet_schema(trace):
        return 0
    names = pl.scan_parquet(trace).select(pl.col(REPLICA_COLUMN).drop_nulls().n_unique())
    return int(names.collect().item())


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
    *,
    progress: CallsDone | None = None,
) -> tuple[FleetOutcome, Workload, float]:
    """The fleet's outcome of one policy, the workload as replayed and the wall seconds;
    ``progress``: told the calls done now and then."""
    work = prepare(workload, timing)
    pauses = work.pauses()
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
        progress=progress,
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
        prefix_credit=fleet.prefix_credit,
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
        progress: CallsDone | None = None,
    ) -> PolicyResult:
        outcome, work, wall = simulate_fleet_one(
            workload, spec, cost, config, timing, fleet, progress=progress
        )
        return fleet_result(
            outcome,
            work,
            spec.name,
            evaluation_only=spec.name in BOUNDS,
            wall_s=wall if timed else None,
            router=fleet.describe(),
        )

    return run
