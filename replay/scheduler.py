"""vLLM 0.32's v1 scheduler (``vllm/v1/core/sched/scheduler.py``) over :mod:`replay.kv`.

One :meth:`SimScheduler.step` decides, prices and applies, as vLLM's ``schedule()``,
model run and ``update_from_output()`` (:mod:`replay.step_plan`):

- decide (:meth:`~SimScheduler._schedule_requests`; :meth:`~SimScheduler._schedule_fast`
  with the decode set in aggregate): running requests first, each asking for its
  remaining prefill (chunked to the token budget) or one decode token; when blocks run
  out, the tail of the running list is preempted (its blocks freed, its progress
  recomputed later; :mod:`replay.preemption`) until the request fits. Then, only if
  nothing was preempted, waiting requests in the policy's order while the budget,
  ``max_num_seqs`` and memory allow (:mod:`replay.admission`); the first that does not
  fit stops admission (head-of-line). The decision is a :class:`~replay.step_plan.StepPlan`.
- price (:func:`~replay.step_price.price_step`): prefill chunks, decodes, reloads.
- apply (:func:`~replay.step_apply.advance`): each request whose scheduled tokens
  complete its KV samples one token; one with all its output tokens finishes here, its
  blocks freed or pinned for a TTL.

Pins follow the vLLM plugin's own rules (:class:`ttlctl.engine.retention.Retention`,
through :mod:`replay.pinning`): expiry at each step start and each arrival, the
handover after the admitted call's blocks are allocated, the valve's order, the cap;
a policy only says where τ comes from.

When a step is decode-only and the waiting head cannot be admitted (or nothing
waits), nothing can change until an event arrives, a request finishes or a block
runs short: the following decode steps are taken together (:mod:`replay.decode_run`).
``fast=False`` takes them one by one and the tests check both give the same results.

Policies (``replay/policies``) see only what an engine sees: requests with their
program id, tool tag and lengths, the queue, the pins. Never a pause's length or
how many calls a program has left.
"""

from __future__ import annotations

import math
from bisect import insort
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Protocol

from profiles.cost import CostModel
from replay.admission import admission_plan
from replay.decode_run import DecodeRun, plan_decode_run, plan_key, run_seconds
from replay.decoders import DecodeSet
from replay.kv import BlockPool, KVPool, RunPool
from replay.math_utils import cdiv
from replay.offload import OffloadTier
from replay.pinning import Pinning
from replay.preemption import preempt_until_fits
from replay.request import SimRequest
from replay.scheduler_config import SimSchedulerConfig
from replay.scheduler_stats import Stats
from replay.step_apply import advance
from replay.step_plan import ScheduledRequest, StepPlan
from replay.step_price import new_size_extra, price_step, step_tokens, wake_after
from ttlctl.engine.pins import PinTable
from ttlctl.engine.source import TauSource

#: the engine's settings and counters live in their own modules; imported from here too
__all__ = ["Policy", "SimScheduler", "SimSchedulerConfig", "Stats"]

#: sort keys, read in C
_qkey = attrgetter("qkey")
_run_seq = attrgetter("run_seq")


class Policy(Protocol):
    """What a scheduling and retention policy answers (see ``replay/policies``)."""

    name: str

    def key(self, req: SimRequest, engine: SimScheduler) -> tuple[float, ...]:
        """Waiting-queue order: smaller first."""
        ...

    def on_arrival(self, req: SimRequest, engine: SimScheduler, now: float) -> None: ...

    def on_admit(self, req: SimRequest, engine: SimScheduler, now: float) -> None: ...

    def on_finish(self, req: SimRequest, engine: SimScheduler, now: float) -> None: ...

    def tau_source(self, engine: SimScheduler) -> TauSource | None:
        """Where the pin rules (:mod:`replay.pinning`) get τ, the valve and the pin cap;
        None: no program book and nothing pinned (the policy orders by itself)."""
        ...


@dataclass(slots=True)
class SimScheduler:
    """vLLM's scheduler over the block pool, for one replay.

    Invariants (checked after every step of a ``--check`` replay, ``replay.sim``):
    blocks are conserved (free + held by running requests + held by pins = the pool's
    blocks); no two waiting requests share a queue key; ``running`` is in ``run_seq``
    order and every running request holds its blocks, a waiting one none;
    ``waiting_programs`` maps each program with a waiting request to it (one per
    program: calls of a program are sequential); the decode set holds the running
    requests past their prompt with one token to compute, except one that got there in
    a chunk of a recomputation (it is still prefilling, and joins after its next
    step); pins are the pin rules' (``pinning``), at most one per program, and a pinned
    program has no running request; ``clock`` never goes back.
    """

    config: SimSchedulerConfig
    cost: CostModel
    policy: Policy
    offload: OffloadTier | None = None
    pool: KVPool = field(init=False)
    running: list[SimRequest] = field(default_factory=list)
    waiting: list[SimRequest] = field(default_factory=list)
    #: the pin rules (None: the policy pins nothing and orders by itself)
    pinning: Pinning | None = field(init=False, default=None)
    #: the pin rules' table (read on every step)
    _pins: PinTable | None = field(init=False, default=None)
    stats: Stats = field(default_factory=Stats)
    #: every waiting request's key changed: sort the queue before its next use
    _waiting_dirty: bool = False
    #: waiting requests added or re-keyed since the queue was last put in order (they
    #: keep their place until then, as vLLM's queue does within one step)
    _moved: dict[int, SimRequest] = field(default_factory=dict)
    _preempt_counter: int = 0
    #: program -> its request in the waiting queue (one at a time per program)
    waiting_programs: dict[str, SimRequest] = field(default_factory=dict)
    #: simulated time up to which pinned memory has been integrated
    clock: float = 0.0
    #: when the last step that computed something ended (-inf: none yet): a step that
    #: starts later pays the engine's wake (:func:`~replay.step_price.wake_after`)
    _last_end: float = -math.inf
    #: the step sizes it has run (None: every size; ``config.sizes_run``): a new one pays
    #: :func:`~replay.step_price.new_size_extra`, and no run of decode steps is merged at a
    #: new batch size (its first step is priced as one step)
    _sizes: set[int] | None = field(init=False, default=None)
    #: (time, pinned blocks) at each change seen by :meth:`tick`
    timeline: list[tuple[float, int]] = field(default_factory=list)
    _last_sampled: int = 0
    decoders: DecodeSet = field(init=False)
    #: running requests not in the decode set, in running order
    _prefilling: list[SimRequest] = field(default_factory=list)
    _run_counter: int = 0
    #: the waiting head that last failed to fit, and the pool's ``changes`` then: until
    #: the pool frees blocks or hands a pin over, it cannot fit (see
    #: :meth:`_admit_waiting`)
    _stuck: SimRequest | None = None
    _stuck_changes: int = -1
    #: the plan :meth:`merge_end` made, keyed by what it read (the next
    #: :meth:`_decode_run` from the same state takes it instead of planning again)
    _planned: tuple[tuple[float, ...], DecodeRun] | None = None

    def __post_init__(self) -> None:
        cls = RunPool if self.config.pool == "runs" else BlockPool
        self.pool = cls(self.config.num_blocks, self.config.block_size)
        self.decoders = DecodeSet(self.config.block_size, self.pool)
        if self.config.sizes_run is not None:
            self._sizes = set(self.config.sizes_run)
        source = self.policy.tau_source(self)
        if source is not None:
            self.pinning = Pinning(source, self.pool, self.touch_order)
            self._pins = self.pinning.retention.pins

    def context_tokens(self, req: SimRequest) -> int:
        """The request's computed tokens now (a policy may ask about running requests)."""
        self.decoders.sync(req)
        return req.num_computed_tokens

    # ------------------------------------------------------------ queue

    def add(self, req: SimRequest, now: float) -> None:
        """A call reaches the scheduler (call :meth:`tick` first)."""
        if self.pinning is not None:
            self.pinning.arrive(req, now, self.waiting_programs.__contains__)
        self.policy.on_arrival(req, self, now)
        self._enqueue(req)

    def _enqueue(self, req: SimRequest) -> None:
        self.waiting.append(req)
        self.waiting_programs[req.program] = req
        req.qkey = self.policy.key(req, self)
        self._moved[req.rid] = req

    def _dequeue_head(self, head: SimRequest) -> None:
        self.waiting.pop(0)
        self._moved.pop(head.rid, None)
        del self.waiting_programs[head.program]
        if self.pinning is not None:
            self.pinning.retention.unpark(head.program)

    def touch_order(self, program: str | None = None) -> None:
        """Something a policy's key depends on changed (for ``program``'s waiting request,
        or for everyone): re-key and re-sort before the next use."""
        if program is None:
            for r in self.waiting:
                r.qkey = self.policy.key(r, self)
            self._waiting_dirty = True
        else:
            req = self.waiting_programs.get(program)
            if req is not None:
                req.qkey = self.policy.key(req, self)
                self._moved[req.rid] = req

    def _sorted_waiting(self) -> list[SimRequest]:
        waiting = self.waiting
        if self._waiting_dirty:
            waiting.sort(key=_qkey)
            self._waiting_dirty = False
            self._moved.clear()
        elif self._moved:
            # the rest is in order: put the new and re-keyed ones in place (keys are
            # unique, each ending in an arrival order: as the stable sort would)
            moved = self._moved.values()
            for r in moved:
                waiting.remove(r)
            for r in moved:
                insort(waiting, r, key=_qkey)
            self._moved.clear()
        return waiting

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    # ------------------------------------------------------------ pins

    @property
    def pinned_blocks(self) -> int:
        return self.pinning.pinned_blocks if self.pinning is not None else 0

    def tick(self, now: float) -> None:
        """Integrate pinned memory up to ``now`` (call before any pin changes)."""
        pins = self._pins
        pinned = pins.blocks if pins is not None else 0
        if now > self.clock:
            self.stats.pinned_block_seconds += pinned * (now - self.clock)
            self.clock = now
        if pinned != self._last_sampled:
            self.timeline.append((now, pinned))
            self._last_sampled = pinned

    def expire_pins(self, now: float) -> None:
        """A step starts: pins whose time is up go, unless their program's call waits."""
        if self.pinning is not None and self._pins is not None and self._pins.any_due(now):
            self.pinning.step_starts(now, self.waiting_programs.__contains__)

    def next_expiry(self) -> float:
        """The next time a pin can expire (pins parked for a waiting call do not count)."""
        pins = self._pins
        if pins is None or not pins.pins:
            return math.inf
        at = pins.next_expiry()
        return math.inf if at is None else at

    def pin_counters(self) -> None:
        """Copy the pin rules' counters into :attr:`stats`."""
        if self.pinning is not None:
            c, s = self.pinning.retention.counters, self.stats
            s.pins_made, s.pins_hit, s.pins_expired = c.made, c.hit, c.expired
            s.pins_released, s.pins_dropped, s.pins_held = c.released, c.dropped, c.pinned_programs
            s.pins_refused = c.refused

    # ------------------------------------------------------------ step

    def step(self, now: float, horizon: float) -> tuple[float, list[SimRequest]]:
        """One engine step from ``now`` (plus merged decode steps up to ``horizon``).
        Returns (duration, finished requests); a duration of 0: nothing could run."""
        if not self.config.fast:
            duration, finished, _ = self._step_reference(now)
            if duration > 0:
                self._last_end = now + duration
            return duration, finished
        result = self._step_fast(now, horizon)
        if result is None:  # a step the aggregate cannot take exactly: go request by request
            self.decoders.clear()
            duration, finished, _ = self._step_reference(now)
            for r in self.running:
                if r.num_computed_tokens >= r.prompt and r.num_tokens - r.num_computed_tokens == 1:
                    self.decoders.join(r)
            self._prefilling = [r for r in self.running if not r.decoding]
            if duration > 0:
                self._last_end = now + duration
            return duration, finished
        duration, finished, merge = result
        if merge:
            extra_s, finished = self._merge_decodes(now + duration, horizon)
            duration += extra_s
        if duration > 0:
            self._last_end = now + duration
        return duration, finished

    def applied_step(self) -> int:
        """The index of the step whose output the last :meth:`step` applied (the last
        one taken: a synchronous step's output is applied at its end)."""
        return self.stats.steps - 1

    def _enter_running(self, req: SimRequest) -> None:
        self._run_counter += 1
        req.run_seq = self._run_counter
        self.running.append(req)
        self._prefilling.append(req)

    def _account(self, seconds: float) -> None:
        """A step of ``seconds`` ran: the busy time and the longest step."""
        stats = self.stats
        if seconds > stats.longest_step_s:
            stats.longest_step_s = seconds
        stats.busy_s += seconds

    # ------------------------------------------------------------ the fast path

    def _step_fast(self, now: float, horizon: float) -> tuple[float, list[SimRequest], bool] | None:
        """The step with the decoding requests taken together: decide
        (:meth:`_schedule_fast`), price (:func:`price_step`), apply
        (:meth:`_update_fast`). None when the decision cannot be taken in aggregate (the
        request-by-request path then takes the step). When every running request
        decodes and the waiting head is known not to fit, the step is the first of a
        merged run (:meth:`_merge_decodes`)."""
        self.tick(now)
        self.expire_pins(now)
        if (
            not self._prefilling
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
        for r in prefilling:
            demand += r.num_tokens - r.num_computed_tokens
        if num_decodes + demand <= budget:
            # every running request gets all it asks for: no need to walk the list
            for r in prefilling:
                num_new_tokens = r.num_tokens - r.num_computed_tokens
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
                num_new_tokens = min(r.num_tokens - r.num_computed_tokens, budget)
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
            admitted, reload_s, blocked_head = self._admit_waiting(budget, now)
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

    def _preempt_victim(self, victim: SimRequest, now: float) -> int:
        """Preempt ``victim``; the blocks that went free (not a shared one still held)."""
        if victim.decoding:
            self.decoders.leave(victim)
        free = self.pool.free_blocks
        self._preempt(victim, now)
        return self.pool.free_blocks - free

    # ------------------------------------------------------------ request by request

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
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            num_new_tokens = min(req.num_tokens - req.num_computed_tokens, budget)
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
            admitted, reload_s, blocked_head = self._admit_waiting(budget, now)
            scheduled.extend(admitted)
        return StepPlan(scheduled, 0, 0, reload_s, preempted, blocked_head)

    def _last_token_in_flight(self, req: SimRequest) -> bool:
        """Whether a step not yet applied samples ``req``'s last token (never here: a
        synchronous step's output is applied at its end; see :mod:`replay.async_sched`)."""
        return False

    # ------------------------------------------------------------ admission

    def _admit_waiting(self, budget: int, now: float) -> tuple[list[ScheduledRequest], float, bool]:
        """Admit waiting requests in the policy's order while budget, seats and memory
        allow; the first that does not fit (after the valve, which releases pins in the
        pin rules' order, retrying after each, when pins hold blocks: with the ``head``
        valve always, with ``stall-only`` only when nothing runs) stops admission.

        Returns (the requests admitted, reload seconds, whether a waiting head was left
        blocked).
        """
        admitted: list[ScheduledRequest] = []
        reload_s = 0.0
        waiting = self._sorted_waiting()
        pool = self.pool
        while waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            head = waiting[0]
            if head is self._stuck and pool.changes == self._stuck_changes:
                admit = None  # nothing made room since it last failed: it fails again
            else:
                admit = self._try_admit(head, budget, now)
            pinning = self.pinning
            if (
                admit is None
                and pinning is not None
                and pinning.retention.valve_releases(head.program, not self.running)
            ):
                # the valve: release pins one at a time, retrying after each
                for _ in pinning.valve(head, stalled=not self.running):
                    admit = self._try_admit(head, budget, now)
                    if admit is not None:
                        break
            if admit is None:
                if self.config.reserve_full_prompt:
                    # whether the whole prompt fits depends only on the free blocks (fewer
                    # since: handing blocks out is all that happens without a change) and
                    # the program's pin (the blocks it could share), not on the budget
                    self._stuck, self._stuck_changes = head, pool.changes
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
        if head is not self._stuck:
            return False
        pinning = self.pinning
        return pinning is None or not pinning.retention.valve_releases(head.program, False)

    def fits(self, req: SimRequest, budget: int | None = None) -> bool:
        """Whether ``req`` could be admitted now (memory only)."""
        budget = budget or self.config.max_num_batched_tokens
        plan = admission_plan(req, self.pool, self.offload, self.config, budget)
        return self.pool.room_for(req.program, plan.hit_blocks, plan.must_fit, req.shared)

    def _try_admit(self, req: SimRequest, budget: int, now: float) -> tuple[int, float] | None:
        """Admit ``req`` if its blocks fit; returns (tokens its first step computes,
        seconds to reload its prefix from the offload tier), or None."""
        bs = self.config.block_size
        plan = admission_plan(req, self.pool, self.offload, self.config, budget)
        hit_blocks, loaded, num_new_tokens, need, must_fit = plan
        hit = hit_blocks * bs
        if not self.pool.room_for(req.program, hit_blocks, must_fit, req.shared):
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

    # ------------------------------------------------------------ preemption and finish

    def _preempt(self, req: SimRequest, now: float) -> None:
        """Recompute preemption: free the blocks (they stay cached), requeue at the front."""
        bs = self.config.block_size
        if req in self._prefilling:
            self._prefilling.remove(req)
        self.pool.release(req.program, self._cached_tokens_at_preempt(req) // bs)
        req.blocks = 0
        req.num_computed_tokens = 0
        req.preempted = True
        req.preemptions += 1
        self._preempt_counter += 1
        req.preempt_seq = self._preempt_counter
        self.stats.preemptions += 1
        self._enqueue(req)

    def _cached_tokens_at_preempt(self, req: SimRequest) -> int:
        """The tokens of a preempted request's KV that stay in the prefix cache (all it
        computed; with async scheduling only the tokens already known)."""
        return req.num_computed_tokens

    def _finish_all(self, finished: list[SimRequest], end: float) -> list[SimRequest]:
        """Finish ``finished`` and the decoding requests whose last token the steps taken
        sampled, in running order, at ``end``; returns them all."""
        decoders = self.decoders
        for r in decoders.pop_finished():
            decoders.leave(r)
            finished.append(r)
        if len(finished) > 1:
            finished.sort(key=_run_seq)
        for r in finished:
            self._finish(r, end)
        return finished

    def _finish(self, req: SimRequest, now: float) -> None:
        req.finish = now
        self.running.remove(req)
        if not req.decoding and req in self._prefilling:
            self._prefilling.remove(req)
        full = req.num_computed_tokens // self.config.block_size
        if self.offload is not None:
            self.offload.store(req.program, full * self.config.block_size, req.shared)
        self.policy.on_finish(req, self, now)
        if self.pinning is not None:
            self.pinning.finish(req, full, now)
        else:
            self.pool.release(req.program, full)
        req.blocks = 0

    # ------------------------------------------------------------ merged decode runs

    def _merge_decodes(self, now: float, horizon: float) -> tuple[float, list[SimRequest]]:
        """Take the coming decode-only steps together (as many as :func:`plan_decode_run`
        says; a request finishing in the last finishes at the run's end); returns
        (seconds, finished). Nothing else can change meanwhile: the waiting head was
        blocked (the pool only shrinks, and the valve had nothing left to release) or
        nothing waits, and no step before the last one finishes anything."""
        run = self._decode_run(now, horizon)
        if run is None:
            return 0.0, []
        decoders = self.decoders
        if run.blocks:
            self.pool.take(run.blocks)
        total, longest = run_seconds(self.cost, run)
        decoders.decode_steps += run.steps
        stats = self.stats
        stats.steps += run.steps
        stats.busy_s += total
        if longest > stats.longest_step_s:
            stats.longest_step_s = longest
        end = now + total
        self.tick(end)
        if run.first_finish > decoders.decode_steps:
            return total, []
        return total, self._finish_all([], end)

    def merge_end(self, now: float, horizon: float) -> float | None:
        """When the run of decode steps that :meth:`step` from ``now`` would open with
        ends, before ``horizon`` (:meth:`next_expiry`, or earlier) or where it must stop
        (None: the step would not open with one, or ``horizon`` is due at ``now``: a pin
        the step expires first may let the waiting head in). Changes nothing. A fleet
        replay waits until then unless a call is routed here before (replay.fleet)."""
        if self._prefilling or not self.decoders.members:
            return None
        if horizon <= now:  # no run (a pin due at ``now`` is at or past the horizon)
            return None
        if self.waiting and not self._head_stays_blocked():
            return None
        if not self._size_run(len(self.decoders.members)):
            return None  # a new batch size: its first step is taken (and priced) alone
        run = self._decode_run(now, horizon)
        if run is None:
            return None
        d, seqs, kv = self.decoders, run.seqs, run.kv_tokens
        self._planned = (plan_key(d, self.pool, len(self.waiting), now, horizon, seqs, kv), run)
        return now + run.seconds

    def _on_top(self, plan: StepPlan, start: float) -> float:
        """What the step of ``plan``, starting at ``start``, pays on top of its price: the
        wake after an idle spell (:func:`~replay.step_price.wake_after`) and, on an engine
        that keeps the sizes it has run, a new size's cost
        (:func:`~replay.step_price.new_size_extra`). Read before the step is applied."""
        extra = wake_after(self.cost, self._last_end, start) if start > self._last_end else 0.0
        if self._sizes is not None:
            extra += new_size_extra(self.cost, self._sizes, step_tokens(plan))
        return extra

    def _size_run(self, tokens: int) -> bool:
        """Whether the engine has run a step of ``tokens`` scheduled tokens (a run of decode
        steps is merged only at a batch size it has run: the first step of a new one pays
        :func:`~replay.step_price.new_size_extra`, taken alone)."""
        return self._sizes is None or tokens in self._sizes

    def _decode_run(self, now: float, horizon: float) -> DecodeRun | None:
        """The merged run from ``now`` (None: none; every running request must decode).
        A plan :meth:`merge_end` made from the same state is taken instead of planning
        again (a fleet replica waits on it)."""
        planned = self._planned
        if planned is not None:
            self._planned = None
            d, seqs = self.decoders, len(self.decoders.members)
            key = plan_key(d, self.pool, len(self.waiting), now, horizon, seqs, d.kv_tokens())
            if planned[0] == key and seqs == len(self.running):
                return planned[1]
        if len(self.decoders.members) != len(self.running):
            return None
        return plan_decode_run(self.decoders, self.cost, self.pool.free_blocks, now, horizon)
