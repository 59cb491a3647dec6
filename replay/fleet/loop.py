"""A fleet: N simulated engines behind a router, in one event loop with one clock.

Each replica is the single-engine replay's :class:`~replay.scheduler.SimScheduler` (with
``async_scheduling``, :class:`~replay.async_sched.AsyncSimScheduler`) with its own policy
object (each server runs its own plugin). The stages, one module each:

- :mod:`replay.fleet.events`: the clock (sends before engine steps at one instant);
- :mod:`replay.fleet.routing`: a *send* is routed at once, at its send time, by the
  router model, which sees the fleet as the real router does
  (:class:`~replay.fleet.view.FleetState`); the call reaches its replica's scheduler at
  the replica's next step boundary (at once if the replica is idle), as in the
  single-engine replay (:mod:`replay.fleet.arrival`);
- :mod:`replay.fleet.stepping`: a replica's *step* event takes the calls that reached it
  and runs one engine step, or waits with a run of decode steps;
- :mod:`replay.fleet.finishing`: the requests a step finishes finish at its end event;
- :mod:`replay.fleet.streams`: what each replica holds of each program's stream;
- :mod:`replay.fleet.clients`: when programs start and send their next calls.

So with one replica the fleet is the single-engine replay, event for event (the tests
compare every figure). Deterministic for a seed; reads no clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from profiles.cost import CostModel
from replay.async_sched import AsyncSimScheduler
from replay.collector import freeze_built, replay_collector
from replay.fleet.books import Books, CallRoute
from replay.fleet.clients import Clients
from replay.fleet.engine import Engine
from replay.fleet.events import EventQueue
from replay.fleet.parts import Fleet
from replay.fleet.replica import Replica
from replay.fleet.routers.base import HoldingRouter, Router, Stateless
from replay.fleet.routing import route, router_due
from replay.fleet.stepping import step
from replay.fleet.streams import Streams
from replay.fleet.view import FleetState
from replay.offload import OffloadTier
from replay.progress import CallsDone, CallTally
from replay.scheduler import Policy, SimScheduler, SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.sim_error import SimulationError
from replay.sim_outcome import ProgramRun, SimCallRecord
from replay.workload import Workload

__all__ = ["CallRoute", "FleetOutcome", "FleetState", "drive", "simulate_fleet"]


@dataclass(slots=True)
class FleetOutcome:
    """What a fleet replay leaves: the calls (in finish order) and their replicas."""

    calls: list[SimCallRecord]
    call_replicas: list[int]
    programs: list[ProgramRun]
    rejected_calls: int
    truncated_calls: int
    engines: list[Engine]
    end: float
    #: (program, turn) -> where it went
    routes: dict[tuple[str, int], CallRoute]
    #: pins whose program's next call went to another replica
    pins_wasted: int


def simulate_fleet(
    workload: Workload,
    policies: list[Policy],
    cost: CostModel,
    config: ReplayConfig,
    router: Router,
    *,
    logged_replicas: Mapping[tuple[str, int], str] | None = None,
    engines: Sequence[SimSchedulerConfig] | None = None,
    progress: CallsDone | None = None,
) -> FleetOutcome:
    """Replay ``workload`` on ``len(policies)`` replicas (one policy object each), each
    an engine of ``config.engine``'s size or, given ``engines``, of its own (one block
    size for all); ``progress``: told the calls done now and then (:mod:`replay.progress`)."""
    sizes = [config.engine] * len(policies) if engines is None else list(engines)
    if len(sizes) != len(policies):
        raise SimulationError(f"{len(sizes)} engine sizes for {len(policies)} replicas")
    check_block_size(sizes, config)
    kind = AsyncSimScheduler if config.async_scheduling else SimScheduler
    schedulers: list[Engine] = [
        kind(
            engine,
            cost,
            policy,
            OffloadTier(config.offload_tokens, cost, engine.block_size)
            if config.offload_tokens > 0
            else None,
        )
        for policy, engine in zip(policies, sizes, strict=True)
    ]
    return drive(
        workload, schedulers, config, router, logged_replicas=logged_replicas, progress=progress
    )


def check_block_size(sizes: Sequence[SimSchedulerConfig], config: ReplayConfig) -> None:
    """The replicas' engines share the replay's block size (the fleet's prompts, the
    router's keys and the token streams are cut in its blocks)."""
    if any(e.block_size != config.engine.block_size for e in sizes):
        raise SimulationError("the replicas' engines must share the replay's block size")


def drive(
    workload: Workload,
    schedulers: list[Engine],
    config: ReplayConfig,
    router: Router,
    *,
    logged_replicas: Mapping[tuple[str, int], str] | None = None,
    progress: CallsDone | None = None,
) -> FleetOutcome:
    """Replay ``workload`` on ``schedulers``, one replica each (built by the caller: the
    fast backend's engines, or vLLM's schedulers), behind ``router`` (the collector's
    regime: :mod:`replay.collector`, as one engine's replay); ``progress``: told the
    calls done now and then (:mod:`replay.progress`)."""
    tally = CallTally(progress, workload.calls)
    with replay_collector():
        return _drive(workload, schedulers, config, router, logged_replicas, tally)


def _drive(
    workload: Workload,
    schedulers: list[Engine],
    config: ReplayConfig,
    router: Router,
    logged_replicas: Mapping[tuple[str, int], str] | None,
    tally: CallTally,
) -> FleetOutcome:
    replicas = [
        Replica(
            i,
            engine,
            config if engine.config == config.engine else replace(config, engine=engine.config),
            retakes=isinstance(engine, SimScheduler) and not isinstance(engine, AsyncSimScheduler),
            checked=config.check and isinstance(engine, SimScheduler),
        )
        for i, engine in enumerate(schedulers)
    ]
    streams = Streams(workload, config.engine.block_size)
    queue = EventQueue()
    fleet = Fleet(
        config,
        router,
        replicas,
        queue,
        Clients(workload, config.concurrency, queue),
        streams,
        FleetState(schedulers, streams),
        Books(),
        logged_replicas,
        len(replicas) > 1,
        router if isinstance(router, HoldingRouter) else None,
        # a router whose completion hook is Stateless's keeps no per-request record:
        # nothing to tell it (one that overrides the hook is told)
        completes=None if _stateless(router) else router,
        tally=tally,
    )
    freeze_built()  # the prompts, engines and runs: built, they live as long as the loop
    sends, steps = queue.sends, queue.steps
    pop = heapq.heappop
    while True:
        # the earlier head; a send on a tie (sends before engine steps at one instant)
        if sends and not (steps and steps[0][0] < sends[0][0]):
            sent, _, run = pop(sends)
            if run is None:
                router_due(fleet, sent)
            else:
                route(fleet, run, sent)
            continue
        if not steps:
            break
        t, _, index, generation = pop(steps)
        rep = replicas[index]
        if generation != rep.generation:
            continue  # superseded: a call woke it earlier
        step(fleet, rep, t)

    if fleet.held:
        raise SimulationError(
            f"router {router.name} still holds {len(fleet.held)} calls at the end"
        )
    for rep in replicas:
        if not rep.engine.idle:
            head = rep.engine.waiting[0] if rep.engine.waiting else None
            raise SimulationError(
                f"replica {rep.index} stalled at t={rep.now:.3f} s: "
                f"{len(rep.engine.waiting)} waiting "
                f"(head {head.program if head else '-'} turn {head.turn if head else '-'}), "
                "nothing running and nothing left to happen"
            )
        rep.engine.tick(rep.now)
        rep.engine.pin_counters()
    books = fleet.books
    tally.end(len(books.records) + books.rejected)
    return FleetOutcome(
        books.records,
        books.call_replicas,
        fleet.clients.runs,
        books.rejected,
        books.truncated,
        schedulers,
        max((rep.now for rep in replicas), default=0.0),
        books.routes,
        books.pins_wasted,
    )


def _stateless(router: Router) -> bool:
    """Whether ``router``'s completion hook is :class:`Stateless`'s (it does nothing)."""
    hook: object = getattr(type(router), "completed", None)
    return hook is Stateless.completed
