"""A fleet: N simulated engines behind a router, in one event loop with one clock.

Each replica is the single-engine replay's :class:`~replay.scheduler.SimScheduler` with
its own policy object (each server runs its own plugin). Events are ordered by (time,
kind, sequence), sends before engine steps:

- a *send* (a program's call leaves the client) is routed at once, at its send time, by
  the router model, which sees the fleet as the real router does
  (:class:`FleetState` is its :class:`~replay.fleet.routers.base.FleetView`); the call
  reaches its replica's scheduler at the replica's next step boundary (at once if the
  replica is idle), as in the single-engine replay;
- a replica's *step* event at a boundary takes the calls that reached it and runs one
  engine step; the requests the step finishes finish at its *end* event (the router sees
  a response end when it ends, never before);
- a replica that has only decode steps to take and nothing it can admit waits: its run of
  decode steps (:meth:`~replay.scheduler.SimScheduler.merge_end`) is taken when a call is
  routed to it (every step that starts before the call, as one engine's run stops before
  its next arrival) or at the run's end. With one replica a normal step may also run into
  decode steps up to the next send, as one engine's step does (every send is known then).

So with one replica the fleet is the single-engine replay, event for event (the tests
compare every figure). A call that lands on a replica other than the one that served its
program's previous call finds there only what that replica kept of the program's older
stream: its reusable prefix is the part of its prompt that replica last saw
(:mod:`replay.fleet.prompts`). Deterministic for a seed; reads no clock.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from itertools import count

from profiles.cost import CostModel
from replay.fleet.prompts import ProgramPrompts, common_prefix, program_prompts
from replay.fleet.routers.base import HOLD, HoldingRouter, RoutedCall, Router
from replay.offload import OffloadTier
from replay.request import SimRequest
from replay.scheduler import Policy, SimScheduler
from replay.sim import (
    ProgramRun,
    ReplayConfig,
    SimCallRecord,
    SimulationError,
    _check,
    fits_engine,
)
from replay.workload import Workload

SEND = 0
STEP = 1


@dataclass(slots=True)
class CallRoute:
    """Where one call went, and what had become of its program's previous call's pin
    (the miss reasons and the wasted pins are read from these)."""

    replica: int
    #: the replica of the program's previous call (None: a first call)
    previous: int | None
    #: the previous call's pin expiry (None: the engine did not pin it)
    previous_pin_expiry: float | None
    #: that pin was still held once this call reached the same replica's scheduler
    #: (after the pins due then expired)
    pin_held: bool = False
    #: when the call reached its replica's scheduler
    delivered: float | None = None


@dataclass(slots=True)
class Replica:
    index: int
    engine: SimScheduler
    #: the end of its last step (or when it last woke)
    now: float = 0.0
    #: a step event is queued for it (the time, and its generation: older ones are stale)
    wake: float | None = None
    generation: int = 0
    #: True while a step runs (calls routed to it wait for its end)
    busy: bool = False
    inbox: list[tuple[ProgramRun, float]] = field(default_factory=list)
    #: the requests the running step finishes at its end (applied then, not before: the
    #: router sees a response end when it ends)
    pending: list[SimRequest] = field(default_factory=list)
    #: a run of decode steps waits from this time (None: none): it is taken when a call
    #: is routed here (up to the call) or at its natural end, whichever comes first
    deferred_from: float | None = None
    #: that run's horizon (the next pin expiry)
    deferred_horizon: float = math.inf


@dataclass(slots=True)
class FleetOutcome:
    """What a fleet replay leaves: the calls (in finish order) and their replicas."""

    calls: list[SimCallRecord]
    call_replicas: list[int]
    programs: list[ProgramRun]
    rejected_calls: int
    truncated_calls: int
    engines: list[SimScheduler]
    end: float
    #: (program, turn) -> where it went
    routes: dict[tuple[str, int], CallRoute]
    #: pins whose program's next call went to another replica
    pins_wasted: int


class FleetState:
    """The router's view of the fleet (:class:`replay.fleet.routers.base.FleetView`)."""

    __slots__ = (
        "_engines",
        "_load",
        "_load_tokens",
        "_previous",
        "_reusable",
        "_shared",
        "replicas",
    )

    def __init__(
        self,
        engines: list[SimScheduler],
        reusable: Callable[[int, RoutedCall], int],
        shared: Callable[[RoutedCall], tuple[Hashable, ...]],
    ) -> None:
        self._engines = engines
        self.replicas = len(engines)
        self._load = [0] * len(engines)
        self._load_tokens = [0] * len(engines)
        self._previous: dict[str, int] = {}
        self._reusable = reusable
        self._shared = shared

    def load(self, replica: int) -> int:
        return self._load[replica]

    def loads(self) -> list[int]:
        return self._load

    def load_tokens(self, replica: int) -> int:
        return self._load_tokens[replica]

    def cached_tokens(self, replica: int, call: RoutedCall) -> int:
        engine = self._engines[replica]
        bs = engine.config.block_size
        hit = engine.pool.prefix_hit(
            call.program,
            self._shared(call),
            self._reusable(replica, call) // bs,
            (call.prompt_tokens - 1) // bs,
        )
        return hit * bs

    def previous_replica(self, program: str) -> int | None:
        return self._previous.get(program)

    def waiting_requests(self, replica: int) -> int:
        return len(self._engines[replica].waiting)

    def sent(self, replica: int, call: RoutedCall) -> None:
        self._load[replica] += 1
        self._load_tokens[replica] += call.prompt_tokens
        self._previous[call.program] = replica

    def done(self, replica: int, call: RoutedCall) -> None:
        self._load[replica] -= 1
        self._load_tokens[replica] -= call.prompt_tokens


def simulate_fleet(
    workload: Workload,
    policies: list[Policy],
    cost: CostModel,
    config: ReplayConfig,
    router: Router,
    *,
    logged_replicas: Mapping[tuple[str, int], str] | None = None,
) -> FleetOutcome:
    """Replay ``workload`` on ``len(policies)`` replicas (one policy object each)."""
    replicas = [
        Replica(
            i,
            SimScheduler(
                config.engine,
                cost,
                policy,
                OffloadTier(config.offload_tokens, cost, config.engine.block_size)
                if config.offload_tokens > 0
                else None,
            ),
        )
        for i, policy in enumerate(policies)
    ]
    engines = [r.engine for r in replicas]
    ids = count()
    prompts: dict[str, ProgramPrompts] = {
        p.program_id: program_prompts(p, ids, config.engine.block_size) for p in workload.programs
    }
    #: (program, replica) -> the turn whose stream that replica last held
    last_turn: dict[tuple[str, int], int] = {}

    def reusable(replica: int, call: RoutedCall) -> int:
        """Prompt tokens of ``call`` that repeat what ``replica`` last held of its program."""
        turn = last_turn.get((call.program, replica))
        if turn is None or call.turn == 0:
            return 0
        if turn == call.turn - 1:
            return runs_by_program[call.program].calls[call.turn].reused_tokens
        return common_prefix(call.prompt, prompts[call.program].streams[turn])

    runs_by_program = {p.program_id: p for p in workload.programs}

    def shared(call: RoutedCall) -> tuple[Hashable, ...]:
        """The keys of the call's blocks shared with other programs."""
        return runs_by_program[call.program].calls[call.turn].shared_keys(config.engine.block_size)

    view = FleetState(engines, reusable, shared)
    #: sends, and the router's own wakes (run None: a router that retains calls)
    sends: list[tuple[float, int, int, ProgramRun | None]] = []
    steps: list[tuple[float, int, int, int, int]] = []
    seq = 0

    def push_send(time: float, run: ProgramRun | None) -> None:
        nonlocal seq
        heapq.heappush(sends, (time, SEND, seq, run))
        seq += 1

    def wake(rep: Replica, time: float) -> None:
        nonlocal seq
        rep.generation += 1
        rep.wake = time
        heapq.heappush(steps, (time, STEP, seq, rep.index, rep.generation))
        seq += 1

    runs: list[ProgramRun] = [ProgramRun(p, p.start_s) for p in workload.programs]
    pending = list(runs)
    if config.concurrency is not None:
        for run in pending[: config.concurrency]:
            run.start = 0.0
            push_send(0.0, run)
        pending = pending[config.concurrency :]
    else:
        for run in runs:
            push_send(run.start, run)
        pending = []

    records: list[SimCallRecord] = []
    call_replicas: list[int] = []
    routes: dict[tuple[str, int], CallRoute] = {}
    routed: dict[int, tuple[ProgramRun, RoutedCall]] = {}  # rid -> run, its call
    #: program -> the expiry of the pin its last finished call got
    last_pin: dict[str, float] = {}
    in_flight: dict[str, RoutedCall] = {}
    pins_wasted = 0
    rejected = truncated = 0
    holding = router if isinstance(router, HoldingRouter) else None
    #: session -> a call the router retains: its run, send time and routed call
    held: dict[str, tuple[ProgramRun, float, RoutedCall]] = {}
    router_wake: float | None = None
    rid = 0

    def end_program(run: ProgramRun, at: float) -> None:
        run.done = True
        if pending:
            nxt = pending.pop(0)
            nxt.start = at
            push_send(at, nxt)

    def pin_expiry(engine: SimScheduler, program: str) -> float | None:
        if engine.pinning is None:
            return None
        pin = engine.pinning.retention.pins.pins.get(program)
        return None if pin is None else pin.expiry

    def route(run: ProgramRun, sent: float) -> None:
        pid = run.program.program_id
        turn = run.next_turn
        book = prompts[pid]
        call = RoutedCall(
            pid,
            turn,
            book.prompts[turn],
            book.sizes[turn],
            None if logged_replicas is None else logged_replicas.get((pid, turn)),
        )
        target = router.route(call, view, sent)
        if target == HOLD and holding is not None:
            held[pid] = (run, sent, call)
        else:
            dispatch(run, sent, call, target, sent)
        release(sent)

    def release(now: float) -> None:
        """The calls a retaining router sends now, and its next wake."""
        nonlocal router_wake
        if holding is None:
            return
        for session, target in holding.released():
            run, sent, call = held.pop(session)
            dispatch(run, sent, call, target, now)
        wake_at = holding.next_wake(now)
        if wake_at is not None and (router_wake is None or wake_at < router_wake):
            router_wake = wake_at
            push_send(wake_at, None)

    def dispatch(run: ProgramRun, sent: float, call: RoutedCall, target: int, now: float) -> None:
        nonlocal pins_wasted
        pid = call.program
        turn = call.turn
        if not 0 <= target < len(replicas):
            raise SimulationError(f"router {router.name} chose replica {target}")
        previous = view.previous_replica(pid)
        expiry = last_pin.pop(pid, None)
        if expiry is not None and previous != target:
            pins_wasted += 1
        routes[(pid, turn)] = CallRoute(target, previous, expiry)
        view.sent(target, call)
        in_flight[pid] = call
        rep = replicas[target]
        if rep.deferred_from is not None:
            # its waiting run of decode steps stops before this call (as one engine's
            # stops before its next arrival)
            run_deferred(rep, min(rep.deferred_horizon, now))
        rep.inbox.append((run, sent))
        if not rep.busy and (rep.wake is None or rep.wake > now):
            wake(rep, now)

    def arrive(rep: Replica, run: ProgramRun, at: float, sent: float) -> None:
        nonlocal rid, rejected, truncated
        engine = rep.engine
        pid = run.program.program_id
        turn = run.next_turn
        info = routes[(pid, turn)]
        info.delivered = at
        routed_call = in_flight[pid]
        call, clipped = fits_engine(run.program.calls[turn], config)
        if call is None:
            # the engine refuses it (longer than the model or the cache): the agent stops
            rejected += len(run.program.calls) - turn
            run.cut_short = True
            del in_flight[pid]
            view.done(rep.index, routed_call)
            router.completed(rep.index, routed_call, at)
            release(at)
            end_program(run, at)
            return
        truncated += clipped
        if run.program_start is None:
            run.first_arrival = sent
            run.program_start = at
            run.first_rid = rid
        reuse = min(reusable(rep.index, routed_call), call.reused_tokens) if turn else 0
        req = SimRequest(
            rid=rid,
            program=pid,
            turn=turn,
            arrival=at,
            program_start=run.program_start,
            prompt=call.input_tokens,
            output=call.output_tokens,
            reusable=reuse,
            tool=call.tool,
            is_last=turn == len(run.program.calls) - 1,
            program_seq=run.first_rid,
            sent=sent,
            shared=call.shared_keys(config.engine.block_size),
        )
        routed[rid] = (run, routed_call)
        last_turn[(pid, rep.index)] = turn
        rid += 1
        engine.add(req, at)  # expires due pins first, then parks the program's own
        if info.previous_pin_expiry is not None and info.previous == rep.index:
            info.pin_held = pin_expiry(engine, pid) is not None

    def finish(rep: Replica, req: SimRequest, now: float) -> None:
        run, call = routed.pop(req.rid)
        assert req.admitted is not None and req.first_token is not None
        records.append(
            SimCallRecord(
                req.program,
                req.turn,
                req.arrival if req.sent is None else req.sent,
                req.admitted,
                req.first_token,
                now,
                req.prompt,
                req.output,
                req.hit_tokens,
                req.preemptions,
                req.admitted_step,
                rep.engine.stats.steps - 1,
            )
        )
        call_replicas.append(rep.index)
        expiry = pin_expiry(rep.engine, req.program)
        if expiry is not None:
            last_pin[req.program] = expiry
        del in_flight[req.program]
        view.done(rep.index, call)
        router.completed(rep.index, call, now)
        release(now)
        run.last_finish = now
        run.next_turn += 1
        if run.next_turn < len(run.program.calls):
            push_send(now + run.program.calls[req.turn].pause_s, run)
        else:
            end_program(run, now)

    def took(rep: Replica, start: float, duration: float, finished: list[SimRequest]) -> None:
        """A step (or a run of decode steps) from ``start`` was taken: its requests finish
        at its end, when its end event comes."""
        end = start + duration
        rep.now = end
        if config.check:
            _check(rep.engine, end)
        rep.pending = finished
        rep.busy = True
        wake(rep, end)

    def run_deferred(rep: Replica, horizon: float) -> None:
        """Take the waiting run of decode steps: every step that starts before ``horizon``."""
        start = rep.deferred_from
        assert start is not None
        rep.deferred_from = None
        duration, finished = rep.engine.step(start, horizon)
        if duration <= 0:
            raise SimulationError(f"replica {rep.index}: a planned run of decode steps did not run")
        took(rep, start, duration, finished)

    def step(rep: Replica, t: float) -> None:
        """The replica's step event at ``t``."""
        engine = rep.engine
        if rep.deferred_from is not None:  # its run of decode steps ends undisturbed
            run_deferred(rep, rep.deferred_horizon)
            if rep.wake != t:
                raise SimulationError(f"replica {rep.index}: a run of decode steps moved its end")
            # it ends now: its calls finish at once (the end event it queued is this one)
            rep.generation += 1
        if rep.pending:
            # the step ended: its calls finish now; the replica steps again once the calls
            # sent at this instant are routed (sends come before steps)
            finished, rep.pending = rep.pending, []
            for req in finished:
                finish(rep, req, t)
            if sends and sends[0][0] <= t:
                wake(rep, t)
                return
        rep.busy = False
        rep.now = max(rep.now, t)
        now = rep.now
        rep.wake = None
        for run, sent in rep.inbox:
            engine.tick(now)
            arrive(rep, run, now, sent)  # pins expire first, as vLLM's add_request does
        rep.inbox.clear()
        if sends and sends[0][0] <= now:
            # a call refused on arrival ended its program and started the next one now:
            # route it first (one engine's replay takes it before stepping too)
            wake(rep, now)
            return
        while True:
            if engine.idle:
                return  # an idle engine does not step: its pins stay until the next call
            horizon = engine.next_expiry()
            end = engine.merge_end(now, horizon)
            if end is not None:
                # decode steps only, and nothing can be admitted: wait for a call routed
                # here (the run then stops before it) or the run's end
                rep.deferred_from, rep.deferred_horizon = now, horizon
                wake(rep, end)
                return
            # a step, and the decode steps it may run into up to the next call that can
            # reach this replica. With one replica that is the next send: every send is
            # known, as sends are made at this replica's own step ends (one engine's replay
            # stops there too). With several, a call can come from a finish on another
            # replica that is not known yet: no run of decode steps is taken here; the
            # next boundary plans one that waits for the next call routed here.
            if len(replicas) > 1:
                horizon = now
            elif sends and sends[0][0] < horizon:
                horizon = sends[0][0]
            preempted = engine.stats.preemptions
            duration, finished = engine.step(now, horizon)
            if duration <= 0 and engine.stats.preemptions > preempted:
                continue  # a step that only preempted: vLLM's engine core schedules again
            if duration <= 0:
                # nothing could run: wait for a call routed here or a pin's expiry
                expiry = engine.next_expiry()
                if expiry < math.inf and expiry > now:
                    wake(rep, expiry)
                return
            took(rep, now, duration, finished)
            return

    while sends or steps:
        if sends and (not steps or sends[0][0] <= steps[0][0]):
            sent, _, _, sending = heapq.heappop(sends)
            if sending is None:  # the router's own wake
                if holding is not None and router_wake == sent:
                    router_wake = None
                    holding.tick(sent, view)
                    release(sent)
                continue
            route(sending, sent)
            continue
        t, _, _, index, generation = heapq.heappop(steps)
        rep = replicas[index]
        if generation != rep.generation:
            continue  # superseded: a call woke it earlier
        step(rep, t)

    if held:
        raise SimulationError(f"router {router.name} still holds {len(held)} calls at the end")
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
    end = max((rep.now for rep in replicas), default=0.0)
    return FleetOutcome(
        records,
        call_replicas,
        runs,
        rejected,
        truncated,
        engines,
        end,
        routes,
        pins_wasted,
    )
