"""The closed loop around vLLM's scheduler: the engine core's step loop on a virtual clock.

Order of calls, as ``EngineCoreProc``'s busy loop and ``EngineCore`` make them
(``vllm/v1/engine/core.py``):

- between steps, the input queue: requests sent up to now reach the scheduler
  (``Scheduler.add_request``), aborts too (``finish_requests(..., ABORTED)``);
- the steps, through the engine core's batch queue
  (:class:`replay.vllmsim.batch_queue.BatchQueue`, shared with the vLLM fleet's
  replicas): synchronous (``EngineCore.step``), ``schedule()``, the executor runs the
  step (the clock advances by its price), ``update_from_output()``; async
  (``EngineCore.step_with_batch_queue``, a batch queue of 2), ``schedule()`` of step
  N+1 while step N runs, before N's output is applied. Output of a request that
  finished (aborted) meanwhile is dropped by vLLM; output of one that was preempted
  meanwhile is delivered as stale output, as vLLM does.
- an engine with no requests does not step (``has_requests()`` is false): the
  clock jumps to the next send. An engine whose step scheduled nothing, with
  nothing in flight, would spin; the clock jumps to the next send or the next pin
  expiry, the only things that can change what it schedules. A step that scheduled
  nothing but preempted a request (the only running one, preempting itself) did
  change it: the next step follows at once.

Latencies count from the send (vLLM's ``arrival_time``); the scheduler (and the
plugin) see a call when it reaches them. The plugin's clock (``ttl_clock``) is
this virtual clock; nothing here reads a wall clock except to measure how long
``schedule()`` and ``update_from_output()`` take, when asked (``timed``).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.request import Request, RequestStatus

from profiles.cost import CostModel
from replay.sim import ProgramRun, ReplayConfig, SimulationError, fits_engine
from replay.vllmsim.batch_queue import BatchQueue, Queued
from replay.vllmsim.build import Built
from replay.vllmsim.executor import execute
from replay.vllmsim.outcome import EngineFigures, Outcome, Timings, VllmCall
from replay.vllmsim.tokens import FIRST_ID, Streams
from replay.workload import Workload

ARRIVAL = 0
ABORT = 1
#: the token id of a position past a call's output (vLLM stops before keeping it)
FILLER = FIRST_ID - 1


class Observer(Protocol):
    """Called after each ``schedule()`` and each ``update_from_output()`` (tests, probes)."""

    def scheduled(self, harness: Harness, output: SchedulerOutput) -> None: ...

    def updated(self, harness: Harness) -> None: ...


@dataclass(slots=True)
class _Call:
    run: ProgramRun
    turn: int
    request: Request
    sent: float
    reached: float
    outputs: list[int]
    admitted: float | None = None
    admitted_step: int = -1
    first_token: float | None = None
    hit_tokens: int = 0


class Harness:
    def __init__(
        self,
        built: Built,
        workload: Workload,
        cost: CostModel,
        config: ReplayConfig,
        *,
        async_scheduling: bool,
        plugin: bool,
        untagged_last: frozenset[str] = frozenset(),
        observer: Observer | None = None,
        timed: bool = False,
    ) -> None:
        self.scheduler: Any = built.scheduler
        self.hasher = built.hasher
        self.workload = workload
        self.cost = cost
        self.config = config
        self.async_scheduling = async_scheduling
        self.plugin = plugin
        #: programs whose last call is sent without ``is_last`` (a client that does not say)
        self.untagged_last = untagged_last
        self.observer = observer
        self.timings = Timings() if timed else None
        self._lookup_s = 0.0
        if timed:
            self._time_lookups()
        self.depth = 2 if async_scheduling else 1
        self.now = 0.0
        self.figures = EngineFigures(config.engine)
        self.stats = self.figures.stats
        self.streams = Streams()
        self.calls: dict[str, _Call] = {}
        self.records: list[VllmCall] = []
        self.rejected = self.truncated = self.aborted = 0
        self._events: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._rid = 0
        self._pending: deque[ProgramRun] = deque()
        self._runs: list[ProgramRun] = []
        self._pinned = 0
        self._pins_clock = 0.0
        if plugin:
            # the plugin reads its clock through this attribute; give it the virtual one
            self.scheduler.ttl_clock = self.clock

    def clock(self) -> float:
        return self.now

    def _time_lookups(self) -> None:
        """Measure vLLM's prefix-cache lookups (wrapped on the instance, as the plugin wraps
        ``allocate_slots``); only when timing is asked for."""
        manager = self.scheduler.kv_cache_manager
        lookup = manager.get_computed_blocks

        def timed_lookup(request: Request) -> Any:
            t0 = time.perf_counter()
            try:
                return lookup(request)
            finally:
                self._lookup_s += time.perf_counter() - t0

        manager.get_computed_blocks = timed_lookup

    # ------------------------------------------------------------ events

    def _push(self, at: float, kind: int, payload: Any) -> None:
        heapq.heappush(self._events, (at, kind, self._seq, payload))
        self._seq += 1

    def abort(self, request_id: str) -> None:
        """Abort a call at the next step boundary (as a client disconnecting); its program
        stops there."""
        self._push(self.now, ABORT, request_id)

    def _deliver(self) -> None:
        while self._events and self._events[0][0] <= self.now:
            sent, kind, _, payload = heapq.heappop(self._events)
            if kind == ARRIVAL:
                self._arrive(payload, sent)
            else:
                self._abort(payload)

    def _observe_pins(self) -> None:
        """Integrate pinned memory up to now, then take the plugin's current figure."""
        if self.now > self._pins_clock:
            self.stats.pinned_block_seconds += self._pinned * (self.now - self._pins_clock)
            self._pins_clock = self.now
        pinned = int(self.scheduler.ttl.pins.blocks) if self.plugin else 0
        if pinned != self._pinned:
            self.figures.timeline.append((self.now, pinned))
            self._pinned = pinned

    # ------------------------------------------------------------ programs

    def _start(self) -> None:
        runs = [ProgramRun(p, p.start_s) for p in self.workload.programs]
        self._runs = runs
        concurrency = self.config.concurrency
        if concurrency is not None:
            for run in runs[:concurrency]:
                run.start = 0.0
                self._push(0.0, ARRIVAL, run)
            self._pending = deque(runs[concurrency:])
        else:
            for run in runs:
                self._push(run.start, ARRIVAL, run)

    def _end_program(self, run: ProgramRun) -> None:
        run.done = True
        self.streams.forget(run.program.program_id)
        if self._pending:
            nxt = self._pending.popleft()
            nxt.start = self.now
            self._push(self.now, ARRIVAL, nxt)

    def _arrive(self, run: ProgramRun, sent: float) -> None:
        turn = run.next_turn
        program = run.program
        call, clipped = fits_engine(program.calls[turn], self.config)
        if call is None:
            # longer than the model or the KV cache: the frontend refuses it, the agent stops
            self.rejected += len(program.calls) - turn
            run.cut_short = True
            self._end_program(run)
            return
        self.truncated += clipped
        if run.program_start is None:
            run.first_arrival = sent
            run.program_start = self.now
            run.first_rid = self._rid
        pid = program.program_id
        is_last = turn == len(program.calls) - 1
        xargs: dict[str, Any] = {"program_id": pid, "is_last": int(is_last)}
        tool = call.tool
        if is_last and pid in self.untagged_last:
            xargs["is_last"] = 0
            tool = tool or "unknown"
        if tool and not xargs["is_last"]:
            xargs["tool"] = tool
        prompt = self.streams.call_prompt(pid, turn, call, self.config.engine.block_size)
        request_id = str(self._rid)
        self._rid += 1
        request = Request(
            request_id=request_id,
            prompt_token_ids=prompt,
            sampling_params=SamplingParams(
                max_tokens=call.output_tokens, ignore_eos=True, temperature=0.0, extra_args=xargs
            ),
            pooling_params=None,
            arrival_time=sent,
            block_hasher=self.hasher,
        )
        self.calls[request_id] = _Call(
            run, turn, request, sent, self.now, self.streams.fresh(call.output_tokens)
        )
        self.scheduler.add_request(request)
        self._observe_pins()

    def _abort(self, request_id: str) -> None:
        entry = self.calls.pop(request_id, None)
        if entry is None:
            return  # finished meanwhile
        self.scheduler.finish_requests([request_id], RequestStatus.FINISHED_ABORTED)
        self._observe_pins()
        self.aborted += 1
        entry.run.cut_short = True
        self._end_program(entry.run)

    # ------------------------------------------------------------ the steps

    def has_requests(self) -> bool:
        return bool(self.scheduler.has_requests())

    def schedule_step(self) -> Queued:
        timings = self.timings
        if timings is not None:
            self._lookup_s = 0.0
            c0, t0 = time.thread_time(), time.perf_counter()
            output = self.scheduler.schedule()
            timings.schedule_s.append(time.perf_counter() - t0)
            timings.schedule_cpu_s.append(time.thread_time() - c0)
            timings.lookup_s.append(self._lookup_s)
        else:
            output = self.scheduler.schedule()
        self._observe_pins()
        step = execute(output, self.scheduler.requests, self.calls, FILLER)
        seconds = step.seconds(self.cost)
        index = -1
        if output.total_num_scheduled_tokens > 0:
            index = self.stats.steps
            self.stats.steps += 1
            self.stats.busy_s += seconds
        self.stats.preemptions += len(output.preempted_req_ids)
        for request_id in output.num_scheduled_tokens:
            entry = self.calls[request_id]
            if entry.admitted is None:
                entry.admitted = self.now
                entry.admitted_step = index
                stats = entry.request.prefill_stats
                entry.hit_tokens = int(stats.num_cached_tokens) if stats is not None else 0
                prompt = int(entry.request.num_prompt_tokens)
                self.stats.prompt_tokens += prompt
                self.stats.hit_tokens += min(entry.hit_tokens, prompt)
        if timings is not None:
            timings.step_s.append(seconds)
        if self.observer is not None:
            self.observer.scheduled(self, output)
        return Queued(output, step, seconds, index)

    def apply_step(self, queued: Queued) -> None:
        timings = self.timings
        if timings is not None:
            c0, t0 = time.thread_time(), time.perf_counter()
            outputs = self.scheduler.update_from_output(queued.output, queued.step.output)
            timings.update_s.append(time.perf_counter() - t0)
            timings.update_cpu_s.append(time.thread_time() - c0)
        else:
            outputs = self.scheduler.update_from_output(queued.output, queued.step.output)
        self._observe_pins()
        for client in outputs.values():
            for out in client.outputs:
                entry = self.calls.get(out.request_id)
                if entry is None:
                    continue
                if out.new_token_ids and entry.first_token is None:
                    entry.first_token = self.now
                if out.finish_reason is not None:
                    self._finished(out.request_id, entry, queued.index)
        if self.observer is not None:
            self.observer.updated(self)

    def _finished(self, request_id: str, entry: _Call, step: int) -> None:
        del self.calls[request_id]
        request = entry.request
        run = entry.run
        program = run.program
        assert entry.admitted is not None
        self.records.append(
            VllmCall(
                program=program.program_id,
                turn=entry.turn,
                arrival=entry.sent,
                admitted=entry.admitted,
                first_token=entry.first_token if entry.first_token is not None else self.now,
                finish=self.now,
                prompt=int(request.num_prompt_tokens),
                output=int(request.num_output_tokens),
                hit_tokens=entry.hit_tokens,
                preemptions=int(request.num_preemptions),
                request_id=request_id,
                reached=entry.reached,
                admitted_step=entry.admitted_step,
                finish_step=step,
            )
        )
        self.streams.finished(program.program_id, list(request.all_token_ids))
        run.last_finish = self.now
        run.next_turn += 1
        if run.next_turn < len(program.calls):
            self._push(self.now + program.calls[entry.turn].pause_s, ARRIVAL, run)
        else:
            self._end_program(run)

    def _wait(self) -> None:
        """Nothing could be scheduled and nothing is in flight: move to the next thing
        that can change that (a send, an abort, a pin expiry)."""
        wake = self._events[0][0] if self._events else math.inf
        if self.plugin:
            for pin in self.scheduler.ttl.pins.pins.values():
                if self.now < pin.expiry < wake:
                    wake = pin.expiry
        if wake == math.inf:
            waiting = len(self.scheduler.waiting)
            raise SimulationError(
                f"vLLM's scheduler stalled at t={self.now:.3f} s: {waiting} waiting, "
                f"{len(self.scheduler.running)} running, nothing scheduled and nothing left "
                "to happen"
            )
        self.now = wake

    def run(self) -> Outcome:
        self._start()
        batch = BatchQueue(self.depth)
        sched = self.scheduler
        while True:
            self._deliver()
            done = batch.turn(self, self._deliver)
            if done is None:
                if not self._events:
                    break
                self.now = max(self.now, self._events[0][0])  # idle: the next send
                continue
            if batch.stalled(done, self):
                self._wait()
        self._observe_pins()
        if self.plugin:
            counters = dict(sched.ttl_stats())
            self.figures.plugin_counters = counters
            self.stats.pins_made = counters["made"]
            self.stats.pins_hit = counters["hit"]
            self.stats.pins_expired = counters["expired"]
            self.stats.pins_released = counters["released"]
            self.stats.pins_dropped = counters["dropped"]
            self.stats.pins_held = counters["pinned_programs"]
            self.stats.pins_refused = counters["refused"]
        return Outcome(
            calls=self.records,
            programs=self._runs,
            rejected_calls=self.rejected,
            truncated_calls=self.truncated,
            engine=self.figures,
            end=self.now,
            aborted_calls=self.aborted,
            async_scheduling=self.async_scheduling,
            scheduler=type(sched).__name__,
            timings=self.timings,
        )
