"""The step with the decode set taken together (the fast path): vLLM's ``schedule()`` and
``update_from_output()`` (``vllm/v1/core/sched/scheduler.py``) with the running requests
past their prompt, which each ask for one token, counted as one group
(:class:`~replay.decoders.DecodeSet`) instead of walked one by one.

The decision is vLLM's: the running requests first (the prefilling ones chunked to the
token budget, each decoder one token), blocks allocated and, when they run short, the
running list's tail preempted (:func:`~replay.preemption.preempt_until_fits`); then,
unless the step preempted, the waiting requests (:mod:`replay.sched_admit`). A step the
aggregate cannot take exactly (the token budget runs out inside the running list) is
left to the request-by-request path (:mod:`replay.sched_reference`), and the tests check
that both give the same results. A decode-only step whose waiting head cannot be
admitted opens a merged run of decode steps (:mod:`replay.sched_runs`).
"""

from __future__ import annotations

from replay.math_utils import cdiv
from replay.preemption import preempt_until_fits
from replay.request import SimRequest
from replay.sched_state import SchedulerState
from replay.step_apply import advance
from replay.step_plan import ScheduledRequest, StepPlan
from replay.step_price import price_step


class FastPath(SchedulerState):
    """The fast path's step (a part of :class:`~replay.scheduler.SimScheduler`)."""

    __slots__ = ()

    def _step_fast(self, now: float, horizon: float) -> tuple[float, list[SimRequest], bool] | None:
        """The step with the decoding requests taken together: decide
        (:meth:`_schedule_fast`), price (:func:`price_step`), apply
        (:meth:`_update_fast`). None when the decision cannot be taken in aggregate (the
        request-by-request path then takes the step). When every running request
        decodes and the waiting head is known not to fit, the step is the first of a
        merged run (:meth:`~replay.sched_runs.DecodeRuns._merge_decodes`)."""
        self.tick(now)
        self.expire_pins(now)
        if (
            horizon > now  # else no decode step can be merged (a fleet's replicas step so)
            and not self._prefilling
            and self.decoders.members
            and (not self.waiting or self._head_stays_blocked())
            and self._size_run(len(self.decoders.members))
        ):
            run_s, run_finished = self._merge_decodes(now, horizon)
            if run_s > 0:
                return run_s, run_finished, False
        plan = self._schedule_fast(now)
        if plan is None:
            return None
        if not plan.scheduled and not plan.num_decodes_in_set:
            return 0.0, [], False  # nothing runs
        duration, decode_only = price_step(plan, self.cost)
        duration += self._on_top(plan, now)
        end = now + duration
        self._account(duration)
        self.stats.steps += 1
        self.tick(end)
        finished = self._update_fast(plan, end)
        # a merged run needs the admission just tried to hold for its steps: the head it
        # found blocked must still be the head once the queue is in order (the valve or a
        # policy may have re-keyed waiting requests in this step)
        settled = not self._moved and not self._waiting_dirty
        merge = (
            decode_only
            and not plan.preempted
            and not finished
            and (not self.waiting or (plan.blocked_head and settled))
        )
        return duration, finished, merge

    def _schedule_fast(self, now: float) -> StepPlan | None:
        """vLLM's ``schedule()`` with the decode set's members taken together: each
        prefilling request asks for its remaining prompt (chunked to the token budget),
        each member for one token; blocks are allocated (preempting from the running
        list's tail when they run short); then, unless the step preempted, waiting
        requests are admitted. None when the token budget runs out before the end of the
        running list (changing nothing)."""
        decoders = self.decoders
        num_decodes = len(decoders.members)
        prefilling = self._prefilling
        bs = self.config.block_size
        budget = self.config.max_num_batched_tokens
        scheduled: list[ScheduledRequest] = []
        num_new_blocks = 0
        demand = 0
        # a prefill's chunk cap (0: none), set as the step starts
        cap = self._prefill_cap()
        for r in prefilling:
            rest = r.num_tokens - r.num_computed_tokens
            demand += cap if 0 < cap < rest else rest
        if num_decodes + demand <= budget:
            # every running request gets all it asks for: no need to walk the list
            for r in prefilling:
                num_new_tokens = r.num_tokens - r.num_computed_tokens
                if 0 < cap < num_new_tokens:
                    num_new_tokens = cap
                need = cdiv(r.num_computed_tokens + num_new_tokens, bs) - r.blocks
                if need < 0:
                    need = 0
                scheduled.append((r, num_new_tokens, r.num_computed_tokens, need))
                num_new_blocks += need
            budget -= num_decodes + demand
        else:
            for r in self.running:
                if budget <= 0:
                    return None
                if r.decoding:
                    budget -= 1
                    continue
                num_new_tokens = r.num_tokens - r.num_computed_tokens
                if 0 < cap < num_new_tokens:
                    num_new_tokens = cap
                num_new_tokens = min(num_new_tokens, budget)
                need = max(0, cdiv(r.num_computed_tokens + num_new_tokens, bs) - r.blocks)
                scheduled.append((r, num_new_tokens, r.num_computed_tokens, need))
                num_new_blocks += need
                budget -= num_new_tokens
        due = decoders.due()
        preempted = False
        if num_new_blocks + len(due) > self.pool.free_blocks:
            scheduled, due = preempt_until_fits(
                scheduled,
                due,
                self.running,
                self.pool.free_blocks,
                lambda victim: self._preempt_victim(victim, now),
            )
            preempted = True
        if num_new_blocks:
            wants = [(r.program, need) for r, _, _, need in scheduled if need]
            if wants:
                self.pool.grow_batch(wants)
                for r, _, _, need in scheduled:
                    r.blocks += need
        for r, num_new_tokens, num_computed_tokens, _ in scheduled:
            if r.shared:
                self.pool.cache_full(r.program, (num_computed_tokens + num_new_tokens) // bs)
        if due:
            self.pool.take(len(due))

        reload_s, blocked_head = 0.0, False
        if not preempted and self.waiting:  # vLLM admits nothing in a step that preempted
            admitted, reload_s, blocked_head = self._admit_waiting(budget, now, cap)
            scheduled.extend(admitted)
        # the decode set's members: fewer if the step preempted some
        num_decodes, kv_tokens = len(decoders.members), decoders.kv_tokens()
        return StepPlan(scheduled, num_decodes, kv_tokens, reload_s, preempted, blocked_head)

    def _update_fast(self, plan: StepPlan, end: float) -> list[SimRequest]:
        """vLLM's ``update_from_output()`` for a step of :meth:`_schedule_fast`: the
        decode set's members each sample a token (one more decode step), the others are
        applied one by one (:func:`advance`); a request that sampled its first token
        joins the decode set. Returns the requests finished, in running order."""
        decoders = self.decoders
        decoders.decode_steps += 1
        finished, sampled = advance(plan.scheduled, end)
        for r in sampled:
            decoders.join(r)
            self._prefilling.remove(r)
        return self._finish_all(finished, end)
