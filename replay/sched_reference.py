"""The step request by request (the reference path): vLLM's ``schedule()`` loop over the
running requests as vLLM runs it (``vllm/v1/core/sched/scheduler.py``, "First, schedule
the RUNNING requests"), then its waiting loop (:mod:`replay.sched_admit`), priced and
applied (:func:`~replay.step_apply.advance`).

Each running request in running order asks for its remaining tokens (chunked to the token
budget, and to ``--long-prefill-token-threshold`` where set:
:meth:`~replay.scheduler_config.SimSchedulerConfig.prefill_cap`); when the blocks it needs
are not free, the tail of the running list is preempted (vLLM's ``self.running.pop()`` and
``_preempt_request``) until it fits or is itself preempted. It is the path ``fast=False``
takes for every step, the one the fast path (:mod:`replay.sched_fast`) falls back on for a
step it cannot take in aggregate, and the decision async scheduling reuses
(:class:`~replay.async_sched.AsyncSimScheduler` skips a request whose last token a step in
flight samples, as vLLM's loop does).
"""

from __future__ import annotations

from replay.math_utils import cdiv
from replay.request import SimRequest
from replay.sched_state import SchedulerState
from replay.step_apply import advance
from replay.step_plan import ScheduledRequest, StepPlan
from replay.step_price import price_step


class ReferencePath(SchedulerState):
    """The request-by-request step (a part of :class:`~replay.scheduler.SimScheduler`)."""

    __slots__ = ()

    def _step_reference(self, now: float) -> tuple[float, list[SimRequest], bool]:
        """One step, request by request, as vLLM's loop runs it (the reference path):
        decide (:meth:`_schedule_requests`), price, apply (:func:`advance`). Returns
        (duration, finished, preempted)."""
        self.tick(now)
        self.expire_pins(now)
        plan = self._schedule_requests(now)
        if not plan.scheduled:
            return 0.0, [], plan.preempted
        duration, _ = price_step(plan, self.cost)
        duration += self._on_top(plan, now)
        end = now + duration
        self._account(duration)
        self.tick(end)
        finished, _ = advance(plan.scheduled, end)
        for req in finished:
            self._finish(req, end)
        self.stats.steps += 1
        return duration, finished, plan.preempted

    def _schedule_requests(self, now: float) -> StepPlan:
        """vLLM's ``schedule()`` request by request: running requests in running order,
        each asking for its remaining tokens (chunked to the token budget); when blocks
        run short the tail of the running list is preempted until the request fits (or
        is itself preempted, which ends the loop); then, only if nothing was preempted,
        waiting requests are admitted. A request whose last token a step in flight
        samples is skipped (async scheduling only)."""
        bs = self.config.block_size
        budget = self.config.max_num_batched_tokens
        scheduled: list[ScheduledRequest] = []
        preempted = False
        running = self.running
        pool = self.pool
        # a prefill's chunk cap (0: none), set as the step starts
        cap = self._prefill_cap()
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            num_new_tokens = req.num_tokens - req.num_computed_tokens
            if 0 < cap < num_new_tokens:
                num_new_tokens = cap
            num_new_tokens = min(num_new_tokens, budget)
            if num_new_tokens <= 0 or self._last_token_in_flight(req):
                i += 1  # nothing to compute before its last token arrives
                continue
            need = cdiv(req.num_computed_tokens + num_new_tokens, bs) - req.blocks
            while need > pool.free_blocks:
                victim = running.pop()
                self._preempt(victim, now)
                preempted = True
                if victim is req:
                    break
            else:
                if need > 0:
                    pool.grow(req.program, need)
                    req.blocks += need
                if req.shared:
                    pool.cache_full(req.program, (req.num_computed_tokens + num_new_tokens) // bs)
                scheduled.append((req, num_new_tokens, req.num_computed_tokens, max(0, need)))
                budget -= num_new_tokens
                i += 1
                continue
            break
        reload_s, blocked_head = 0.0, False
        if not preempted:
            admitted, reload_s, blocked_head = self._admit_waiting(budget, now, cap)
            scheduled.extend(admitted)
        return StepPlan(scheduled, 0, 0, reload_s, preempted, blocked_head)

    def _last_token_in_flight(self, req: SimRequest) -> bool:
        """Whether a step not yet applied samples ``req``'s last token (never here: a
        synchronous step's output is applied at its end; see :mod:`replay.async_sched`)."""
        return False
