"""vLLM 0.32's v1 scheduler (``vllm/v1/core/sched/scheduler.py``) over :mod:`replay.kv`.

One :meth:`SimScheduler.step` decides, prices and applies, as vLLM's ``schedule()``,
model run and ``update_from_output()`` (:mod:`replay.step_plan`):

- decide (:meth:`~replay.sched_reference.ReferencePath._schedule_requests`;
  :meth:`~replay.sched_fast.FastPath._schedule_fast` with the decode set in aggregate):
  running requests first, each asking for its remaining prefill (chunked to the token
  budget) or one decode token; when blocks run out, the tail of the running list is
  preempted (its blocks freed, its progress recomputed later; :mod:`replay.sched_leave`,
  :mod:`replay.preemption`) until the request fits. Then, only if nothing was
  preempted, waiting requests in the policy's order while the budget, ``max_num_seqs``
  and memory allow (:mod:`replay.sched_admit`, :mod:`replay.admission`); the first that
  does not fit stops admission (head-of-line). The decision is a
  :class:`~replay.step_plan.StepPlan`.
- price (:func:`~replay.step_price.price_step`): prefill chunks, decodes, reloads.
- apply (:func:`~replay.step_apply.advance`): each request whose scheduled tokens
  complete its KV samples one token; one with all its output tokens finishes here, its
  blocks freed or pinned for a TTL (:mod:`replay.sched_leave`).

Pins follow the vLLM plugin's own rules (:class:`ttlctl.engine.retention.Retention`,
through :mod:`replay.pinning`): expiry at each step start and each arrival
(:mod:`replay.sched_pins`), the handover after the admitted call's blocks are allocated,
the valve's order, the cap; a policy only says where τ comes from.

When a step is decode-only and the waiting head cannot be admitted (or nothing
waits), nothing can change until an event arrives, a request finishes or a block
runs short: the following decode steps are taken together (:mod:`replay.sched_runs`,
:mod:`replay.decode_run`). ``fast=False`` takes them one by one and the tests check both
give the same results.

:class:`SimScheduler` is one slotted dataclass: its fields, the queue and the step are
here; the rest of its methods come from its parts, one concept per module (listed in
:mod:`replay.sched_state`, which declares what they share), as plain methods of the
class.

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
from replay.decode_run import DecodeRun
from replay.decoders import DecodeSet
from replay.kv import BlockPool, KVPool, RunPool
from replay.offload import OffloadTier
from replay.pinning import Pinning
from replay.request import SimRequest
from replay.sched_admit import Admission
from replay.sched_fast import FastPath
from replay.sched_leave import Leaving
from replay.sched_pins import PinClock
from replay.sched_reference import ReferencePath
from replay.sched_runs import DecodeRuns
from replay.scheduler_config import SimSchedulerConfig
from replay.scheduler_stats import Stats
from replay.step_plan import StepPlan
from replay.step_price import new_size_extra, step_tokens, wake_after
from ttlctl.engine.pins import PinTable
from ttlctl.engine.source import TauSource

#: the engine's settings and counters live in their own modules; imported from here too
__all__ = ["Policy", "SimScheduler", "SimSchedulerConfig", "Stats"]

#: the waiting queue's sort key, read in C
_qkey = attrgetter("qkey")


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
class SimScheduler(FastPath, ReferencePath, Admission, DecodeRuns, Leaving, PinClock):
    """vLLM's scheduler over the block pool, for one replay.

    Invariants (checked after every step of a ``--check`` replay, ``replay.invariants``):
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
    #: (time, pinned blocks) at each change seen by :meth:`~replay.sched_pins.PinClock.tick`
    timeline: list[tuple[float, int]] = field(default_factory=list)
    _last_sampled: int = 0
    decoders: DecodeSet = field(init=False)
    #: running requests not in the decode set, in running order
    _prefilling: list[SimRequest] = field(default_factory=list)
    _run_counter: int = 0
    #: the waiting head that last failed to fit, and the pool's ``changes`` then: until
    #: the pool frees blocks or hands a pin over, it cannot fit (see
    #: :meth:`~replay.sched_admit.Admission._admit_waiting`)
    _stuck: SimRequest | None = None
    _stuck_changes: int = -1
    #: it failed while the watermark applied (something ran): once nothing runs, it may fit
    _stuck_kept: bool = False
    #: the blocks admission keeps free while a request runs (vLLM's ``--watermark``)
    _kept_free: int = field(init=False, default=0)
    #: the run of decode steps :meth:`~replay.sched_runs.DecodeRuns.merge_end` planned: from
    #: when, up to which horizon, and the run (:meth:`~replay.sched_runs.DecodeRuns.take_run`
    #: takes it; a step drops it)
    _planned: tuple[float, float, DecodeRun] | None = None

    def __post_init__(self) -> None:
        cls = RunPool if self.config.pool == "runs" else BlockPool
        self.pool = cls(self.config.num_blocks, self.config.block_size)
        self.decoders = DecodeSet(self.config.block_size, self.pool)
        self._kept_free = self.config.watermark_blocks
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
        """A call reaches the scheduler (call :meth:`~replay.sched_pins.PinClock.tick` first);
        a run of decode steps planned before it is dropped (the step after it decides)."""
        self._planned = None
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

    def _prefill_cap(self) -> int:
        """This step's cap on a prefill's tokens (0: none), counted as the step starts
        (:meth:`~replay.scheduler_config.SimSchedulerConfig.prefill_cap`); no count is
        taken without a threshold."""
        if not self.config.long_prefill_token_threshold:
            return 0
        return self.config.prefill_cap(len(self.running) + len(self.waiting))

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    # ------------------------------------------------------------ step

    def step(self, now: float, horizon: float) -> tuple[float, list[SimRequest]]:
        """One engine step from ``now`` (plus merged decode steps up to ``horizon``).
        Returns (duration, finished requests); a duration of 0: nothing could run."""
        self._planned = None  # a run planned from the state before this step is stale
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

    def _on_top(self, plan: StepPlan, start: float) -> float:
        """What the step of ``plan``, starting at ``start``, pays on top of its price: the
        wake after an idle spell (:func:`~replay.step_price.wake_after`) and, on an engine
        that keeps the sizes it has run, a new size's cost
        (:func:`~replay.step_price.new_size_extra`). Read before the step is applied."""
        extra = wake_after(self.cost, self._last_end, start) if start > self._last_end else 0.0
        if self._sizes is not None:
            extra += new_size_extra(self.cost, self._sizes, step_tokens(plan))
        return extra
