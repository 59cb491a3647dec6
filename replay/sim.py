"""The replay: agent programs in closed loop against the simulated engine.

Events are ordered by (time, kind, sequence): a program's next call is sent at
its previous call's simulated finish plus the recorded pause. The engine steps
whenever it has work; a call sent during a step reaches the scheduler at the
step's end, as vLLM's engine core takes new requests between steps. The call's
latencies (TTFT, queueing, JCT) count from when it was sent, as a client and
vLLM's own ``arrival_time`` do; the scheduler and the policy see it when it
reaches them. Deterministic for a seed; reads no clock
(``wall_s`` is measured by the caller, outside the simulation).

What a replay returns is :mod:`replay.sim_outcome`'s; with ``check`` set, every step is
held to :func:`replay.invariants.check_invariants`.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace
from typing import Any

from profiles.cost import CostModel
from replay.async_sched import AsyncSimScheduler
from replay.client_tags import FULL, tagged
from replay.client_tags import check as check_tags
from replay.clip import clip
from replay.collector import freeze_built, replay_collector
from replay.invariants import check_invariants
from replay.offload import OffloadTier
from replay.progress import CallsDone, CallTally
from replay.request import SimRequest
from replay.scheduler import Policy, SimScheduler, SimSchedulerConfig
from replay.sim_error import SimulationError
from replay.sim_outcome import Outcome, ProgramRun, SimCallRecord
from replay.workload import Call, Workload

ARRIVAL = 0


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    engine: SimSchedulerConfig = field(default_factory=SimSchedulerConfig)
    #: closed population: keep this many programs running (None: trace or jps starts)
    concurrency: int | None = None
    offload_tokens: int = 0
    #: clip a call's prompt to fit the model length and the KV cache instead of rejecting it
    truncate: bool = False
    #: check invariants after every step (slower; :mod:`replay.invariants`)
    check: bool = False
    #: vLLM's ``--async-scheduling``: step N+1 is scheduled before step N's output is
    #: applied (:class:`replay.async_sched.AsyncSimScheduler`)
    async_scheduling: bool = False
    #: what the clients tag each call with (``--client-tags``: :mod:`replay.client_tags`)
    client_tags: str = FULL

    def __post_init__(self) -> None:
        check_tags(self.client_tags)


def fits_engine(call: Call, config: ReplayConfig) -> tuple[Call | None, bool]:
    """The call as the engine will see it: as is, truncated, or None (rejected).

    As vLLM 0.32 takes it: a prompt of ``max_model_len`` tokens or more is refused
    (``InputProcessor._validate_prompt_len``); a shorter one whose output would run past
    ``max_model_len`` is served with its output cut there (the OpenAI server lowers
    ``max_tokens`` to ``max_model_len`` − prompt: ``get_max_tokens``). A call longer than
    the whole cache, which vLLM never meets (it refuses to start with a ``max_model_len``
    its cache cannot hold), is refused. With ``truncate`` the call is clipped to fit
    instead, as a live run's client clips it (:func:`replay.clip.clip`: the prompt
    shortened, an output that alone does not fit halved): never refused."""
    e = config.engine
    cache = e.num_blocks * e.block_size
    limit = min(e.max_model_len, cache)
    if call.input_tokens + call.output_tokens <= limit:
        return call, False
    if config.truncate:
        return clip(call, limit)
    if call.input_tokens < e.max_model_len <= cache:
        cut = replace(call, output_tokens=e.max_model_len - call.input_tokens)
        return cut, True
    return None, False


def arriving(
    run: ProgramRun,
    call: Call,
    rid: int,
    at: float,
    sent: float,
    reusable: int,
    block_size: int,
    tags: str,
) -> SimRequest:
    """The program's next call (``call``: as the engine takes it, :func:`fits_engine`), sent
    at ``sent``, as request ``rid`` reaching the scheduler at ``at`` with ``reusable``
    tokens of its prompt repeating the program's stream there, tagged as a client tagging
    as ``tags`` tags it (:func:`replay.client_tags.tagged`); a program's first call
    stamps its start (the single-engine replay and a fleet's replicas alike)."""
    turn = run.next_turn
    tool, is_last = tagged(call.tool, turn == len(run.program.calls) - 1, tags)
    if run.program_start is None:
        run.first_arrival = sent
        run.program_start = at
        run.first_rid = rid
    return SimRequest(
        rid=rid,
        program=run.program.program_id,
        turn=turn,
        arrival=at,
        program_start=run.program_start,
        prompt=call.input_tokens,
        output=call.output_tokens,
        reusable=reusable,
        tool=tool,
        is_last=is_last,
        program_seq=run.first_rid,
        sent=sent,
        shared=call.shared_keys(block_size),
    )


def simulate(
    workload: Workload,
    policy: Policy,
    cost: CostModel,
    config: ReplayConfig,
    *,
    progress: CallsDone | None = None,
) -> Outcome:
    """Replay ``workload`` on one engine under ``policy`` (the collector's regime:
    :mod:`replay.collector`); ``progress``: told the calls done now and then
    (:mod:`replay.progress`)."""
    with replay_collector():
        return _simulate(workload, policy, cost, config, CallTally(progress, workload.calls))


def _simulate(
    workload: Workload, policy: Policy, cost: CostModel, config: ReplayConfig, tally: CallTally
) -> Outcome:
    offload = (
        OffloadTier(config.offload_tokens, cost, config.engine.block_size)
        if config.offload_tokens > 0
        else None
    )
    kind = AsyncSimScheduler if config.async_scheduling else SimScheduler
    engine = kind(config.engine, cost, policy, offload)
    events: list[tuple[float, int, int, Any]] = []
    seq = 0

    def push(time: float, kind: int, payload: Any) -> None:
        nonlocal seq
        heapq.heappush(events, (time, kind, seq, payload))
        seq += 1

    runs: list[ProgramRun] = [ProgramRun(p, p.start_s) for p in workload.programs]
    pending = list(runs)
    if config.concurrency is not None:
        for run in pending[: config.concurrency]:
            run.start = 0.0
            push(0.0, ARRIVAL, run)
        pending = pending[config.concurrency :]
    else:
        for run in runs:
            push(run.start, ARRIVAL, run)
        pending = []

    freeze_built()  # the engine and the runs: built, they live as long as the loop
    records: list[SimCallRecord] = []
    rejected = truncated = 0
    rid = 0
    now = 0.0
    requests: dict[int, tuple[ProgramRun, SimRequest]] = {}

    def arrive(run: ProgramRun, at: float, sent: float) -> None:
        nonlocal rid, rejected, truncated
        turn = run.next_turn
        call, clipped = fits_engine(run.program.calls[turn], config)
        if call is None:
            # the engine refuses it (its prompt reaches the model's length, or it is longer
            # than the cache): the agent stops
            rejected += len(run.program.calls) - turn
            run.cut_short = True
            end_program(run, at)
            return
        truncated += clipped
        reusable = call.reused_tokens if turn else 0
        req = arriving(
            run, call, rid, at, sent, reusable, config.engine.block_size, config.client_tags
        )
        requests[rid] = (run, req)
        rid += 1
        engine.add(req, at)

    def end_program(run: ProgramRun, at: float) -> None:
        run.done = True
        if pending:
            nxt = pending.pop(0)
            nxt.start = at
            push(at, ARRIVAL, nxt)

    step, next_expiry, stats = engine.step, engine.next_expiry, engine.stats
    # the async scheduler takes a step that only preempted itself, and returns nothing
    # only when nothing can happen before the next send or pin expiry
    is_async = config.async_scheduling
    unreported = False  # the last step finished calls (vLLM's engine core reports them)
    tell_at = tally.next_at  # the finished calls at which to tell the progress next
    while True:
        while events and events[0][0] <= now:
            sent, _, _, payload = heapq.heappop(events)
            engine.tick(now)
            arrive(payload, now, sent)  # pins expire first, as vLLM's add_request does
        if engine.idle:
            if unreported:
                # vLLM's engine core schedules once more to report the calls that finished;
                # the pins that fell due during their step expire then
                engine.expire_pins(now)
                engine.tick(now)  # the change is on the timeline at once
                unreported = False
            # an idle engine does not step: pins due later stay until the next arrival
            if not events:
                break
            now = max(now, events[0][0])
            continue
        horizon = next_expiry()
        if events and events[0][0] < horizon:
            horizon = events[0][0]
        preempted = stats.preemptions
        duration, finished = step(now, horizon)
        if duration <= 0 and stats.preemptions > preempted and not is_async:
            continue  # a step that only preempted: vLLM's engine core schedules again at once
        if duration <= 0:
            # nothing could run (the head does not fit): vLLM's engine core keeps stepping,
            # so the next thing that can change that is a send or a pin's expiry
            wake = min(events[0][0] if events else math.inf, engine.next_expiry())
            if wake <= now or wake == math.inf:
                head = engine.waiting[0] if engine.waiting else None
                raise SimulationError(
                    f"engine stalled at t={now:.3f} s: {len(engine.waiting)} waiting "
                    f"(head {head.program if head else '-'} turn {head.turn if head else '-'}), "
                    "nothing running and nothing left to happen"
                )
            now = wake
            engine.tick(now)
            continue
        now += duration
        unreported = bool(finished)
        if finished:
            finish_step = engine.applied_step()
            for req in finished:
                run, _ = requests.pop(req.rid)
                records.append(SimCallRecord.of(req, now, finish_step))
                run.last_finish = now
                run.next_turn += 1
                if run.next_turn < len(run.program.calls):
                    push(now + run.program.calls[req.turn].pause_s, ARRIVAL, run)
                else:
                    end_program(run, now)
            if len(records) >= tell_at:
                tell_at = tally.told_at(len(records), len(records) + rejected)
        if config.check:
            check_invariants(engine, now)
    engine.tick(now)
    engine.pin_counters()
    tally.end(len(records) + rejected)
    return Outcome(records, runs, rejected, truncated, engine, now)
