"""A fleet of vLLM schedulers behind a router: ``replay --replicas N --backend vllm``.

The fast fleet's loop (:func:`replay.fleet.loop.drive`: one clock, the router models,
their view, the books and the metrics) with vLLM's scheduler under every replica
(:class:`replay.vllmsim.engine.VllmEngine`): ``vllm`` and ``unlimited-kv`` on vLLM's
``Scheduler``, ``program-fcfs``, ``static-ttl`` and ``continuum`` on ttlctl's
``TTLScheduler``, each replica with its own plugin built from the same bundle
(:mod:`replay.vllmsim.bundles`), as each server loads its own. With
``--async-scheduling`` every replica runs vLLM's ``AsyncScheduler`` with the engine
core's batch queue of two (:mod:`replay.vllmsim.batch_queue`). Replicas of different
sizes (``FleetSpec.engines``, one block size) each build vLLM's scheduler of their own size;
a call reaches each as that engine takes it (refused or truncated there,
:mod:`replay.vllmsim.prompts`).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from profiles.cost import CostModel
from replay.figures import PolicyResult
from replay.fleet.engine import Engine
from replay.fleet.loop import FleetOutcome, drive
from replay.fleet.metrics import fleet_result
from replay.fleet.run import FleetSpec, fleet_router, replica_engines
from replay.policies import BOUNDS, PolicySpec
from replay.policy_runs import Load, prepare
from replay.progress import CallsDone
from replay.sim import ReplayConfig
from replay.vllmsim.backend import BackendError, check, check_outputs
from replay.vllmsim.build import build, quiet_vllm
from replay.vllmsim.bundles import bundle_for
from replay.vllmsim.engine import VllmEngine
from replay.vllmsim.prompts import TokenBook
from replay.workload import Workload
from ttlctl import bundle_make


@dataclass(slots=True)
class VllmFleetOutcome:
    outcome: FleetOutcome
    #: the workload as replayed (the load's starts and order)
    workload: Workload
    engines: list[VllmEngine]
    #: wall seconds of the loop (vLLM's setup excluded)
    wall_s: float


def simulate(
    workload: Workload,
    spec: PolicySpec,
    cost: CostModel,
    config: ReplayConfig,
    timing: Load,
    fleet: FleetSpec,
    *,
    progress: CallsDone | None = None,
) -> VllmFleetOutcome:
    """Replay ``workload`` under ``spec`` on ``fleet.replicas`` vLLM schedulers
    (``progress``: told the calls done now and then, :mod:`replay.progress`)."""
    async_scheduling = config.async_scheduling or fleet.async_scheduling
    check(
        "vllm",
        [spec.name],
        async_scheduling=async_scheduling,
        offload_tokens=config.offload_tokens,
    )
    check_outputs(workload)
    work = prepare(workload, timing)
    cfg = replace(config, concurrency=timing.concurrency, async_scheduling=async_scheduling)
    sizes, cfg = replica_engines(fleet, spec, work, cfg)
    if cfg.truncate and len(set(sizes)) > 1:
        # a call truncated on a small replica, the program's next call on a big one: the
        # fast fleet counts the untruncated history as held there, vLLM's streams go on
        # from the tokens the small engine took (docs/replay.md)
        raise BackendError(
            "--backend vllm with replicas of different sizes does not take --truncate "
            "(its calls truncated on one replica would not be checked against the fast fleet)"
        )
    lengths = {size.max_model_len for size in sizes}
    if len(lengths) > 1 and any(
        c.input_tokens + c.output_tokens > min(lengths) for p in work.programs for c in p.calls
    ):
        # the same parting without --truncate: an output cut at a short replica's model
        # length, the program's next call on a replica that takes longer calls
        raise BackendError(
            "--backend vllm with replicas of different --max-model-len does not take calls "
            f"longer than the shortest ({min(lengths):,} tokens: their outputs cut on one "
            "replica would not be checked against the fast fleet)"
        )
    # one bundle for every replica, as each server loads the same file (each plugin prices
    # a miss in steps of its own engine's budget)
    doc = bundle_for(spec, cost)
    router = fleet_router(fleet, cost, seed=timing.seed, block_size=cfg.engine.block_size)
    with tempfile.TemporaryDirectory(prefix="ttlctl-vllmfleet-") as folder, quiet_vllm():
        path = None
        if doc is not None:
            path = Path(folder) / "bundle.json"
            bundle_make.write(doc, path)
        built = [build(e, async_scheduling=async_scheduling, bundle=path) for e in sizes]
        book = TokenBook(work, cfg, built[0].hasher)
        engines = [
            VllmEngine(b, e, cost, book, doc is not None, async_scheduling, cfg.client_tags)
            for b, e in zip(built, sizes, strict=True)
        ]
        schedulers: list[Engine] = list(engines)
        start = time.perf_counter()
        outcome = drive(
            work, schedulers, cfg, router, logged_replicas=fleet.logged, progress=progress
        )
        wall = time.perf_counter() - start
    return VllmFleetOutcome(outcome, work, engines, wall)


@dataclass(frozen=True, slots=True)
class VllmFleetRunner:
    """``run_one`` for ``--backend vllm --replicas N``: the fleet's result record."""

    fleet: FleetSpec

    def __call__(
        self,
        workload: Workload,
        spec: PolicySpec,
        cost: CostModel,
        config: ReplayConfig,
        timing: Load,
        *,
        timed: bool = True,
        progress: CallsDone | None = None,
    ) -> PolicyResult:
        ran = simulate(workload, spec, cost, config, timing, self.fleet, progress=progress)
        return record(ran, spec.name, self.fleet, timed=timed)


def record(
    ran: VllmFleetOutcome, policy: str, fleet: FleetSpec, *, timed: bool = True
) -> PolicyResult:
    """The fast fleet's record of ``ran``, plus what names the backend (the plugin's
    counters summed over the replicas)."""
    result = fleet_result(
        ran.outcome,
        ran.workload,
        policy,
        evaluation_only=policy in BOUNDS,
        wall_s=ran.wall_s if timed else None,
        router=fleet.describe(),
    )
    counters: dict[str, int] = {}
    for engine in ran.engines:
        for name, n in engine.plugin_counters.items():
            counters[name] = counters.get(name, 0) + n
    result["backend"] = "vllm"
    result["async_scheduling"] = ran.engines[0].async_scheduling
    result["scheduler"] = ran.engines[0].scheduler_name
    result["aborted_calls"] = 0
    result["plugin_counters"] = counters
    return result
