"""Async scheduling: step N+1 is scheduled before step N's output is applied.

A port of vLLM 0.32's ``AsyncScheduler`` (``vllm/v1/core/sched/async_scheduler.py``)
as the engine core drives it (``EngineCore.step_with_batch_queue``, a batch queue
of two), over the same block pool and pin rules as :class:`SimScheduler`:

- the engine schedules a step while the previous one runs: step N+1 is decided at
  the moment step N−1's output was applied (when step N starts), so a call sent
  during step N reaches step N+2, and the outputs of step N (tokens sampled,
  requests finished, their blocks freed or pinned) are seen from step N+2 on;
- scheduling a step advances each scheduled request's computed tokens at once, and
  a request whose tokens the step completes gets a placeholder for the token it
  will sample (``num_output_placeholders``), so it decodes again in the next step
  before that token is known; a request whose in-flight step samples its last
  token is skipped (it holds its blocks and its seat until the output arrives);
- a decoder's placeholder token is not yet cached: a preempted request leaves
  cached only the blocks full of tokens already known (vLLM caches up to
  ``num_computed_tokens − num_output_placeholders`` on each output);
- a request preempted while its step runs still receives that step's token when
  the output arrives (vLLM's stale output); readmission waits for it, which the
  batch queue of two guarantees (nothing is admitted in the step that preempts);
- a step that schedules nothing costs nothing; an engine whose steps schedule
  nothing waits for the next send or pin expiry, as the vLLM backend's harness.

As vLLM's ``AsyncScheduler`` subclasses its ``Scheduler``, :class:`AsyncSimScheduler`
changes only what async changes: the decision is the synchronous one
(:meth:`~replay.sched_reference.ReferencePath._schedule_requests`, which skips a request
whose last token is in flight) and so is the price (:func:`~replay.step_price.price_step`);
what differs is when the decision's effects land
(:meth:`~AsyncSimScheduler._update_after_schedule` at once,
:meth:`~AsyncSimScheduler._update_from_output` two steps on) and what a preemption keeps
cached.

Deliberate differences from vLLM: a request preempted while its last token is in
flight finishes when that token arrives, from the waiting queue, with no blocks
(vLLM stops it there too, through its own bookkeeping). No merged decode runs:
every step is taken one by one (the fast path's merging assumes outputs are
applied in the step that computed them).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from replay.request import SimRequest
from replay.scheduler import SimScheduler
from replay.step_plan import StepPlan
from replay.step_price import price_step


@dataclass(slots=True)
class _InFlight:
    """A scheduled step whose output is not applied yet."""

    #: requests that sample a token at the end of the step
    sampled: list[SimRequest]
    seconds: float
    #: the step's index among the steps that computed something (-1: an empty step)
    index: int
    preempted: bool
    end: float = 0.0


@dataclass(slots=True)
class AsyncSimScheduler(SimScheduler):
    """:class:`SimScheduler` with vLLM's async scheduling (a batch queue of two)."""

    #: scheduled steps, newest first
    _queue: deque[_InFlight] = field(default_factory=deque)
    _busy_until: float = 0.0
    #: rid -> tokens its steps in flight will sample
    _pending: dict[int, int] = field(default_factory=dict)
    #: rid -> tokens of its KV that vLLM's prefix cache holds (known tokens only)
    _cached: dict[int, int] = field(default_factory=dict)
    #: the index of the step whose output was applied last
    _applied: int = -1

    def applied_step(self) -> int:
        return self._applied

    def merge_end(self, now: float) -> float | None:
        return None  # no merged decode runs: every step is taken one by one

    def step(self, now: float, horizon: float) -> tuple[float, list[SimRequest]]:
        """Schedule steps and apply the oldest one's output, as the engine core's loop
        with a batch queue does, until a step that computed something is applied (or
        nothing can happen before the next send or pin expiry: returns 0 seconds).

        Returns (seconds from ``now`` to that step's end, requests it finished)."""
        start = now
        queue = self._queue
        while True:
            if not self.idle:
                begin = max(now, self._busy_until)
                step = self._schedule(now, begin)
                step.end = self._busy_until = begin + step.seconds
                queue.appendleft(step)
                if len(queue) < 2 and (step.index >= 0 or not self.idle):
                    continue  # the batch queue has room: schedule the next step first
            elif not queue:
                return now - start, []
            done = queue.pop()
            if done.end > now:
                now = done.end
            finished = self._update_from_output(done, now)
            if done.index >= 0:
                return now - start, finished
            # a step that scheduled nothing and preempted nothing changed nothing: wait
            # for what can (one that only preempted is followed by another at once, as
            # vLLM's engine core schedules again; here that step is only ever an empty
            # one at the same instant: a step that only preempted left nothing running
            # but requests whose last token was in flight, applied before the next step,
            # which so preempts nothing, and schedules nothing twice on one state)
            if not done.preempted and not self.idle and all(q.index < 0 for q in queue):
                return now - start, []

    def _schedule(self, now: float, begin: float) -> _InFlight:
        """vLLM's ``schedule()`` with the previous step still in flight: the synchronous
        decision (:meth:`~replay.sched_reference.ReferencePath._schedule_requests`,
        skipping a request whose last token is in flight), priced as it is (with the
        engine's wake when it begins, at ``begin``, after an idle spell), then
        :meth:`_update_after_schedule`."""
        self.tick(now)
        self.expire_pins(now)
        plan = self._schedule_requests(now)
        if not plan.scheduled:
            return _InFlight([], 0.0, -1, plan.preempted)
        seconds, _ = price_step(plan, self.cost)
        seconds += self._on_top(plan, begin)
        self._last_end = begin + seconds
        sampled = self._update_after_schedule(plan)
        self._account(seconds)
        index = self.stats.steps
        self.stats.steps += 1
        return _InFlight(sampled, seconds, index, plan.preempted)

    def _last_token_in_flight(self, req: SimRequest) -> bool:
        return req.generated + self._pending.get(req.rid, 0) >= req.output

    def _update_after_schedule(self, plan: StepPlan) -> list[SimRequest]:
        """vLLM's ``_update_after_schedule``: the scheduled requests' computed tokens
        advance at once; one whose tokens the step completes gets a placeholder for the
        token it will sample (its stream grows by it unless it is the last). Returns the
        requests that sample at the step's end."""
        pending = self._pending
        cached = self._cached
        sampled: list[SimRequest] = []
        for req, num_new_tokens, num_computed_tokens, _ in plan.scheduled:
            req.num_computed_tokens = num_computed_tokens + num_new_tokens
            # allocation caches the blocks of the tokens known now (not a placeholder)
            known = min(req.num_computed_tokens, req.prompt + req.generated)
            if known > cached.get(req.rid, 0):
                cached[req.rid] = known
            if req.num_computed_tokens >= req.num_tokens:
                # it samples: a placeholder for the token, unless it is the last
                n = pending.get(req.rid, 0) + 1
                pending[req.rid] = n
                sampled.append(req)
                if req.generated + n < req.output:
                    req.num_tokens += 1
        return sampled

    def _update_from_output(self, step: _InFlight, end: float) -> list[SimRequest]:
        """vLLM's ``update_from_output()`` at the step's end: sampled tokens, finishes."""
        self.tick(end)
        if step.index >= 0:
            self._applied = step.index
        pending = self._pending
        finished: list[SimRequest] = []
        for req in step.sampled:
            n = pending[req.rid] - 1
            if n:
                pending[req.rid] = n
            else:
                del pending[req.rid]
            if req.finish is not None:
                continue  # finished meanwhile (cannot happen with a queue of two)
            req.generated += 1
            if not req.preempted:  # an output caches up to the tokens not in flight
                known = req.num_computed_tokens - pending.get(req.rid, 0)
                if known > self._cached.get(req.rid, 0):
                    self._cached[req.rid] = known
            if req.first_token is None:
                req.first_token = end
            if req.generated >= req.output:
                finished.append(req)
        for req in finished:
            self._cached.pop(req.rid, None)
            if req.preempted:
                self._finish_waiting(req, end)
            else:
                self._finish(req, end)
        return finished

    def _cached_tokens_at_preempt(self, req: SimRequest) -> int:
        """Only blocks of known tokens stay cached (not a placeholder's)."""
        return self._cached.pop(req.rid, 0)

    def _finish_waiting(self, req: SimRequest, now: float) -> None:
        """A preempted request whose last token arrived as stale output: it stops in the
        waiting queue, holding nothing."""
        req.finish = now
        self.waiting.remove(req)
        self._moved.pop(req.rid, None)
        del self.waiting_programs[req.program]
        if self.pinning is not None:
            self.pinning.retention.unpark(req.program)
        self.policy.on_finish(req, self, now)
        if self.pinning is not None:
            self.pinning.finish(req, 0, now)
