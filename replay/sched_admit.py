"""Admission: vLLM's waiting loop in ``schedule()`` (``vllm/v1/core/sched/scheduler.py``,
"Next, schedule the WAITING requests"), run only in a step that preempted nothing.

Waiting requests are taken in the policy's order while the token budget,
``max_num_seqs`` and memory allow; each gets its prefix hit and the blocks it needs
(:func:`~replay.admission.admission_plan`, vLLM's ``_get_local_prefix_cache_hit`` and
``allocate_slots``), allocated while its program's pin still holds the hit's blocks and
handed over after (the plugin's wrapper of ``allocate_slots``, :mod:`replay.pinning`).
The first request that does not fit, after the pin rules' valve released what it may,
stops admission (head-of-line). With ``--watermark`` (:attr:`~replay.scheduler_config.
SimSchedulerConfig.watermark_blocks`), a request fits only if that many blocks stay free
after it while another request runs (this step's admissions included), as vLLM's
``allocate_slots`` asks of a waiting or preempted request when ``self.running`` is not
empty. With the whole prompt reserved (``reserve_full_prompt``), a head that failed is
remembered with the pool's ``changes`` then: until the pool frees blocks or hands a pin
over (or, when the watermark applied, nothing runs), it fails again without being planned
(:meth:`~Admission._head_stays_blocked`, which a merged decode run relies on).
"""

from __future__ import annotations

from replay.admission import admission_plan
from replay.request import SimRequest
from replay.sched_state import SchedulerState
from replay.step_plan import ScheduledRequest


class Admission(SchedulerState):
    """Admission of waiting requests (a part of :class:`~replay.scheduler.SimScheduler`)."""

    __slots__ = ()

    def _admit_waiting(
        self, budget: int, now: float, cap: int = 0
    ) -> tuple[list[ScheduledRequest], float, bool]:
        """Admit waiting requests in the policy's order while budget, seats and memory
        allow, each computing at most ``cap`` tokens of its prompt in this step (0: no
        cap); the first that does not fit (after the valve, which releases pins in the pin
        rules' order, retrying after each, when pins hold blocks: with the ``head`` valve
        always, with ``stall-only`` only when nothing runs) stops admission.

        Returns (the requests admitted, reload seconds, whether a waiting head was left
        blocked).
        """
        admitted: list[ScheduledRequest] = []
        reload_s = 0.0
        waiting = self._sorted_waiting()
        pool = self.pool
        while waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            head = waiting[0]
            # nothing made room since it last failed: it fails again
            stuck = head is self._stuck and self._still_stuck(head)
            admit = None if stuck else self._try_admit(head, budget, now, cap)
            pinning = self.pinning
            if (
                admit is None
                and pinning is not None
                and pinning.retention.valve_releases(head.program, not self.running)
            ):
                # the valve: release pins one at a time, retrying after each
                for _ in pinning.valve(head, stalled=not self.running):
                    admit = self._try_admit(head, budget, now, cap)
                    if admit is not None:
                        break
            if admit is None:
                if self.config.reserve_full_prompt:
                    # whether the whole prompt fits depends only on the free blocks (fewer
                    # since: handing blocks out is all that happens without a change) and
                    # the program's pin (the blocks it could share), not on the budget;
                    # under the watermark, also on whether anything runs
                    self._stuck, self._stuck_changes = head, pool.changes
                    self._stuck_kept = bool(self._kept_free and self.running)
                return admitted, reload_s, True
            num_new_tokens, loaded_s = admit
            self._dequeue_head(head)
            self._enter_running(head)
            admitted.append((head, num_new_tokens, head.num_computed_tokens, 0))
            budget -= num_new_tokens
            reload_s += loaded_s
        return admitted, reload_s, bool(waiting)

    def _head_stays_blocked(self) -> bool:
        """Whether admission would stop at once: the queue's head (once in order) failed
        to fit and nothing made room since, and the valve (something runs) has no pin to
        release."""
        if self.pool.changes != self._stuck_changes:
            return False
        head = self._sorted_waiting()[0]  # as admission would order the queue first
        if not self._still_stuck(head):
            return False
        pinning = self.pinning
        return pinning is None or not pinning.retention.valve_releases(head.program, False)

    def _still_stuck(self, head: SimRequest) -> bool:
        """Whether ``head`` is the head that last failed and nothing changed since that
        could let it in: the pool's blocks, or (it failed under the watermark) that
        something runs."""
        return (
            head is self._stuck
            and self.pool.changes == self._stuck_changes
            and (not self._stuck_kept or bool(self.running))
        )

    def _kept(self) -> int:
        """The blocks an admission must leave free now: the watermark's while a request
        runs, else none."""
        return self._kept_free if self.running else 0

    def fits(self, req: SimRequest, budget: int | None = None) -> bool:
        """Whether ``req`` could be admitted now (memory only)."""
        budget = budget or self.config.max_num_batched_tokens
        plan = admission_plan(req, self.pool, self.offload, self.config, budget)
        return self.pool.room_for(
            req.program, plan.hit_blocks, plan.must_fit + self._kept(), req.shared
        )

    def _try_admit(
        self, req: SimRequest, budget: int, now: float, cap: int = 0
    ) -> tuple[int, float] | None:
        """Admit ``req`` if its blocks fit; returns (tokens its first step computes,
        seconds to reload its prefix from the offload tier), or None."""
        bs = self.config.block_size
        plan = admission_plan(req, self.pool, self.offload, self.config, budget, cap)
        hit_blocks, loaded, num_new_tokens, need, must_fit = plan
        hit = hit_blocks * bs
        if not self.pool.room_for(req.program, hit_blocks, must_fit + self._kept(), req.shared):
            return None
        # allocated while the program's pin still holds its blocks; handed over after
        self.pool.admit(req.program, hit_blocks, need, req.shared)
        if req.shared:  # its shared blocks are cached as they are allocated, for all
            self.pool.cache_full(req.program, (hit + loaded + num_new_tokens) // bs)
        req.blocks = hit_blocks + need
        if self.pinning is not None:
            self.pinning.admitted(req, now)
        if req.admitted is None:
            req.admitted = now
            req.admitted_step = self.stats.steps
            req.hit_tokens = hit
            req.loaded_tokens = loaded
            self.stats.prompt_tokens += req.prompt
            self.stats.hit_tokens += min(hit, req.prompt)
            self.stats.loaded_tokens += loaded
            self.policy.on_admit(req, self, now)
        req.num_computed_tokens = hit + loaded
        req.preempted = False
        loaded_s = self.offload.reload_s(loaded) if (self.offload and loaded) else 0.0
        return num_new_tokens, loaded_s
