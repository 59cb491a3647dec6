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
``schedule()`` and ``update_from_output()`` take, when asked (``timed``:
:class:`~replay.vllmsim.step_timer.StepTimer`). Each call sent is built and kept as
:mod:`replay.vllmsim.sent_call` says.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.request import RequestStatus

from profiles.cost import CostModel
from replay.progress import CallsDone, CallTally
from replay.sim import ReplayConfig, fits_engine
from replay.sim_error import SimulationError
from replay.sim_outcome import ProgramRun
from replay.vllmsim.batch_queue import BatchQueue, Queued
from replay.vllmsim.build import Built
from replay.vllmsim.executor import book_step, execute
from replay.vllmsim.outcome import EngineFigures, Outcome, VllmCall
from replay.vllmsim.sends import ABORT, ARRIVAL, Sends
from replay.vllmsim.sent_call import SentCall, call_request
from replay.vllmsim.step_timer import StepTimer
from replay.vllmsim.tokens import FIRST_ID, Streams
from replay.workload import Workload

#: the token id of a position past a call's output (vLLM stops before keeping it)
FILLER = FIRST_ID - 1


class Observer(Protocol):
    """Called after each ``schedule()`` and each ``update_from_output()`` (tests, probes)."""

    def scheduled(self, harness: Harness, output: SchedulerOutput) -> None: ...

    def updated(self, harness: Harness) -> None: ...


class Harness:
    """One engine: vLLM's scheduler (or the plugin's) stepped on a virtual clock, fed by
    :class:`~replay.vllmsim.sends.Sends`; a call given to the scheduler is in :attr:`calls`
    from then until it finishes or is aborted."""

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
        progress: CallsDone | None = None,
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
        #: measures vLLM's scheduler calls (None: not asked for)
        self.timer = StepTimer(self.scheduler) if timed else None
        self.timings = None if self.timer is None else self.timer.timings
        self.depth = 2 if async_scheduling else 1
        self.now = 0.0
        self.figures = EngineFigures(config.engine)
        self.stats = self.figures.stats
        self.streams = Streams()
        #: the step sizes the engine has run (None: every size; ``sizes_run``)
        self.sizes = None if config.engine.sizes_run is None else set(config.engine.sizes_run)
        self.calls: dict[str, SentCall] = {}
        self.records: list[VllmCall] = []
        self.rejected = self.truncated = self.aborted = 0
        self.sends = Sends()
        #: the calls of aborted programs after the aborted call, never sent (done at the abort)
        self.unsent = 0
        #: when to tell ``progress`` the calls done (finished, refused or aborted)
        self.tally = CallTally(progress, workload.calls)
        self._rid = 0
        self._pinned = 0
        self._pins_clock = 0.0
        if plugin:
            # the plugin reads its clock through this attribute; give it the virtual one
            self.scheduler.ttl_clock = self.clock

    def clock(self) -> float:
        return self.now

    # ------------------------------------------------------------ events

    def abort(self, request_id: str) -> None:
        """Abort a call at the next step boundary (as a client disconnecting); its program
        stops there."""
        self.sends.push(self.now, ABORT, request_id)

    def _deliver(self) -> None:
        while (event := self.sends.due(self.now)) is not None:
            sent, kind, payload = event
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

    def _end_program(self, run: ProgramRun) -> None:
        run.done = True
        self.streams.forget(run.program.program_id)
        self.sends.next_program(self.now)

    def _arrive(self, run: ProgramRun, sent: float) -> None:
        turn = run.next_turn
        program = run.program
        call, clipped = fits_engine(program.calls[turn], self.config)
        if call is None:
            # its prompt reaches the model's length, or it is longer than the KV cache: the
            # frontend refuses it, the agent stops
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
        prompt = self.streams.call_prompt(pid, turn, call, self.config.engine.block_size)
        request_id = str(self._rid)
        self._rid += 1
        request = call_request(
            request_id,
            prompt,
            call,
            pid,
            is_last=turn == len(program.calls) - 1,
            untagged_last=pid in self.untagged_last,
            tags=self.config.client_tags,
            sent=sent,
            hasher=self.hasher,
        )
        self.calls[request_id] = SentCall(
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
        # its program stops: the calls after it are never sent, so they are done now
        self.unsent += len(entry.run.program.calls) - entry.turn - 1
        entry.run.cut_short = True
        self._end_program(entry.run)

    # ------------------------------------------------------------ the steps

    def has_requests(self) -> bool:
        return bool(self.scheduler.has_requests())

    def schedule_step(self, last_end: float, start: float) -> Queued:
        timer = self.timer
        output = self.scheduler.schedule() if timer is None else timer.schedule()
        self._observe_pins()
        step = execute(output, self.scheduler.requests, self.calls, FILLER)
        seconds, index = book_step(step, output, self.cost, self.stats, last_end, start, self.sizes)
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
        if timer is not None:
            timer.timings.step_s.append(seconds)
        if self.observer is not None:
            self.observer.scheduled(self, output)
        return Queued(output, step, seconds, index)

    def apply_step(self, queued: Queued) -> None:
        if self.timer is None:
            outputs = self.scheduler.update_from_output(queued.output, queued.step.output)
        else:
            outputs = self.timer.update(queued.output, queued.step.output)
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

    def _finished(self, request_id: str, entry: SentCall, step: int) -> None:
        del self.calls[request_id]
        request = entry.request
        run = entry.run
        program = run.program
        self.records.append(entry.record(request_id, self.now, step))
        self.streams.finished(program.program_id, list(request.all_token_ids))
        run.last_finish = self.now
        run.next_turn += 1
        if run.next_turn < len(program.calls):
            self.sends.push(self.now + program.calls[entry.turn].pause_s, ARRIVAL, run)
        else:
            self._end_program(run)
        if len(self.records) >= self.tally.next_at:
            self.tally.told_at(len(self.records), self._done())

    def _done(self) -> int:
        """The calls done: finished, refused (with their programs' later calls) or aborted
        (with theirs)."""
        return len(self.records) + self.rejected + self.aborted + self.unsent

    def _wait(self) -> None:
        """Nothing could be scheduled and nothing is in flight: move to the next thing
        that can change that (a send, an abort, a pin expiry)."""
        wake = self.sends.next_at()
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
        self.sends.start(self.workload, self.config.concurrency)
        batch = BatchQueue(self.depth)
        sched = self.scheduler
        while True:
            self._deliver()
            done = batch.turn(self, self._deliver)
            if done is None:
                if not self.sends.events:
                    break
                self.now = max(self.now, self.sends.next_at())  # idle: the next send
                continue
            if batch.stalled(done, self):
                self._wait()
        self._observe_pins()
        if self.plugin:
            self.figures.take_plugin_counters(dict(sched.ttl_stats()))
        self.tally.end(self._done())
        return Outcome(
            calls=self.records,
            programs=self.sends.runs,
            rejected_calls=self.rejected,
            truncated_calls=self.truncated,
            engine=self.figures,
            end=self.now,
            aborted_calls=self.aborted,
            async_scheduling=self.async_scheduling,
            scheduler=type(sched).__name__,
            timings=self.timings,
        )
