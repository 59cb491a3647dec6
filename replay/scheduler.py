"""vLLM 0.32's v1 scheduler step, over the block pool of :mod:`replay.kv`.

One :meth:`SimScheduler.step` is ``schedule → run → postprocess``:

- schedule (``vllm/v1/core/sched/scheduler.py``): running requests first, each
  asking for its remaining prefill (chunked to the token budget) or one decode
  token; when blocks run out, the tail of the running list is preempted (its
  blocks freed, its progress recomputed later) until the request fits. Then, only
  if nothing was preempted in this step, waiting requests in the policy's order
  while the budget, ``max_num_seqs`` and memory allow; the first that does not
  fit stops admission (head-of-line). Admission reuses the longest cached prefix
  (capped at ``num_tokens − 1``).
- run: the step's duration from the cost model (prefill chunks, decodes, and any
  reload from the offload tier).
- postprocess: each request whose scheduled tokens complete its KV samples one
  token; a request with all its output tokens finishes and its blocks are freed or
  pinned for a TTL.

Pins follow the vLLM plugin's own rules (:class:`ttlctl.engine.retention.Retention`,
through :mod:`replay.pinning`): expiry at each step start and each arrival, the
handover after the admitted call's blocks are allocated, the valve's order, the cap;
a policy only says where τ comes from.

When a step is decode-only and the waiting head cannot be admitted (or nothing
waits), nothing can change until an event arrives, a request finishes or a block
runs short: the following decode steps are taken together (the trick of
splitwise-sim), up to the last one that starts before the next event, including
the one a request finishes in, and short of one whose blocks the pool cannot give.
``fast=False`` takes them one by one and the tests check both give the same
results.

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
from replay.decoders import DecodeSet
from replay.kv import BlockPool, KVPool, RunPool
from replay.offload import OffloadTier
from replay.pinning import Pinning
from replay.request import SimRequest
from ttlctl.engine.pins import PinTable
from ttlctl.engine.source import TauSource
from ttlctl.errors import ConfigError


@dataclass(frozen=True, slots=True)
class SimSchedulerConfig:
    kv_tokens: int = 600_000
    block_size: int = 16
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    max_model_len: int = 131_072
    #: "runs" (fast) or "blocks" (the per-block reference)
    pool: str = "runs"
    #: take runs of decode-only steps in one event
    fast: bool = True
    #: admit a waiting request only if its whole prompt fits (vLLM 0.32's
    #: ``scheduler_reserve_full_isl``, on by default), not just its first chunk
    reserve_full_prompt: bool = True

    def __post_init__(self) -> None:
        if self.kv_tokens < self.block_size or self.block_size <= 0:
            raise ConfigError("--kv-tokens must hold at least one block (--block-size tokens)")
        if self.max_num_batched_tokens <= 0 or self.max_num_seqs <= 0:
            raise ConfigError("--max-num-batched-tokens and --max-num-seqs must be positive")
        if self.pool not in ("runs", "blocks"):
            raise ConfigError("pool must be 'runs' or 'blocks'")

    @property
    def num_blocks(self) -> int:
        return self.kv_tokens // self.block_size


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
class Stats:
    steps: int = 0
    preemptions: int = 0
    prompt_tokens: int = 0
    hit_tokens: int = 0
    loaded_tokens: int = 0
    pinned_block_seconds: float = 0.0
    pins_made: int = 0
    pins_hit: int = 0
    pins_expired: int = 0
    pins_released: int = 0
    busy_s: float = 0.0
    #: the longest single step so far (a call sent during a step reaches the scheduler
    #: at its end: at most this long after it was sent)
    longest_step_s: float = 0.0


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
    #: :meth:`_merge_plan` from the same state takes it instead of planning again)
    _planned: tuple[tuple[float, ...], tuple[int, int, int]] | None = None

    def __post_init__(self) -> None:
        cls = RunPool if self.config.pool == "runs" else BlockPool
        self.pool = cls(self.config.num_blocks, self.config.block_size)
        self.decoders = DecodeSet(self.config.block_size, self.pool)
        source = self.policy.tau_source(self)
        if source is not None:
            self.pinning = Pinning(source, self.pool, self.touch_order)
            self._pins = self.pinning.retention.pins

    def context_tokens(self, req: SimRequest) -> int:
        """The request's computed tokens now (a policy may ask about running requests)."""
        self.decoders.sync(req)
        return req.computed

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
        if self.pinning is not None:  # as the plugin's schedule() does, every step
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
            c = self.pinning.retention.counters
            s = self.stats
            s.pins_made, s.pins_hit, s.pins_expired, s.pins_released = (
                c.made,
                c.hit,
                c.expired,
                c.released,
            )

    # ------------------------------------------------------------ step

    def step(self, now: float, horizon: float) -> tuple[float, list[SimRequest]]:
        """One engine step from ``now`` (plus merged decode steps up to ``horizon``).

        Returns (duration, finished requests). A duration of 0 means nothing could run.
        """
        if not self.config.fast:
            duration, finished, _ = self._step_reference(now)
            return duration, finished
        result = self._step_fast(now, horizon)
        if result is None:  # a step the aggregate cannot take exactly: go request by request
            self.decoders.clear()
            duration, finished, _ = self._step_reference(now)
            for r in self.running:
                if r.computed >= r.prompt and r.num_tokens - r.computed == 1:
                    self.decoders.join(r)
            self._prefilling = [r for r in self.running if not r.dec]
            return duration, finished
        duration, finished, merge = result
        if merge:
            extra_s, finished = self._merge_decodes(now + duration, horizon)
            duration += extra_s
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

    def _step_fast(self, now: float, horizon: float) -> tuple[float, list[SimRequest], bool] | None:
        """The same step with the decoding requests taken together; None when it would
        preempt or when the token budget runs out before the end of the running list
        (the request-by-request path then takes the step). When every running request
        decodes and the waiting head is known not to fit, the step is the first of a
        merged run (:meth:`_merge_decodes`)."""
        self.tick(now)
        self.expire_pins(now)
        dec = self.decoders
        decoding = len(dec.members)
        prefilling = self._prefilling
        if not prefilling and decoding and (not self.waiting or self._head_stays_blocked()):
            run_s, run_finished = self._merge_decodes(now, horizon)
            if run_s > 0:
                return run_s, run_finished, False
        bs = self.config.block_size
        budget = self.config.max_num_batched_tokens
        prefills: list[tuple[SimRequest, int, int, int]] = []
        need_total = 0
        demand = 0
        for r in prefilling:
            demand += r.num_tokens - r.computed
        if decoding + demand <= budget:
            # every running request gets all it asks for: no need to walk the list
            for r in prefilling:
                new = r.num_tokens - r.computed
                need = -(-(r.computed + new) // bs) - r.blocks
                if need < 0:
                    need = 0
                prefills.append((r, new, r.computed, need))
                need_total += need
            budget -= decoding + demand
        else:
            for r in self.running:
                if budget <= 0:
                    return None
                if r.dec:
                    budget -= 1
                    continue
                new = min(r.num_tokens - r.computed, budget)
                need = max(0, -(-(r.computed + new) // bs) - r.blocks)
                prefills.append((r, new, r.computed, need))
                need_total += need
                budget -= new
        due = dec.due()
        preempted = False
        if need_total + len(due) > self.pool.free_blocks:
            prefills, due = self._preempt_until_fits(prefills, due, now)
            preempted = True
        if need_total:
            wants = [(r.program, need) for r, _, _, need in prefills if need]
            if wants:
                self.pool.grow_batch(wants)
                for r, _, _, need in prefills:
                    r.blocks += need
        for r, new, ctx, _ in prefills:
            if r.shared:
                self.pool.cache_full(r.program, (ctx + new) // bs)
        if due:
            self.pool.take(len(due))

        reload_s, blocked_head = 0.0, False
        if not preempted and self.waiting:  # vLLM admits nothing in a step that preempted
            admitted, reload_s, blocked_head = self._admit_waiting(budget, now)
            prefills.extend((r, new, ctx, 0) for r, new, ctx in admitted)

        decoding = len(dec.members)  # fewer if the step preempted some
        if not prefills and not decoding:
            return 0.0, [], False
        chunks: list[tuple[int, int]] = []
        decodes = decoding
        kv = dec.kv_tokens()
        for r, new, ctx, _ in prefills:
            if r.num_tokens - ctx > 1 or ctx < r.prompt:
                chunks.append((ctx, new))
            else:
                decodes += 1
                kv += ctx
        duration = self.cost.step_s(chunks, decodes, kv) + reload_s
        end = now + duration
        if duration > self.stats.longest_step_s:
            self.stats.longest_step_s = duration
        self.stats.busy_s += duration
        self.stats.steps += 1
        self.tick(end)
        dec.D += 1
        finished: list[SimRequest] = []
        for r, new, _, _ in prefills:
            r.computed += new
            if r.computed < r.num_tokens:
                continue
            r.generated += 1
            if r.first_token is None:
                r.first_token = end
            if r.generated >= r.output:
                finished.append(r)
            else:
                r.num_tokens += 1
                dec.join(r)
                self._prefilling.remove(r)
        self._finish_all(finished, end)
        # a merged run needs the admission just tried to hold for its steps: the head it
        # found blocked must still be the head once the queue is in order (the valve or a
        # policy may have re-keyed waiting requests in this step)
        settled = not self._moved and not self._waiting_dirty
        merge = (
            not preempted
            and not finished
            and not chunks
            and (not self.waiting or (blocked_head and settled))
        )
        return duration, finished, merge

    def _preempt_until_fits(
        self,
        prefills: list[tuple[SimRequest, int, int, int]],
        due: list[SimRequest],
        now: float,
    ) -> tuple[list[tuple[SimRequest, int, int, int]], list[SimRequest]]:
        """vLLM's running loop when blocks run short, with the needs known up front.

        Walk the requests that need blocks in running order; while one's need exceeds
        what is free, preempt the tail of the running list (recompute). A request that
        preempts itself ends the walk (everything after it was the tail, already gone).
        The blocks are granted in one batch afterwards: allocations come from the head of
        the free list, a victim's cached blocks go to its tail and its partial block to its
        head, where the request that preempted it takes it first (it needs at least as
        many blocks as the victims freed partial ones), so the same cached blocks are
        evicted as when vLLM interleaves. Returns the prefills and due decoders still
        scheduled.
        """
        dec = self.decoders
        needy: list[tuple[int, SimRequest, int]] = [
            (r.run_seq, r, n) for r, _, _, n in prefills if n
        ]
        needy.extend((r.run_seq, r, 1) for r in due)
        needy.sort(key=lambda item: item[0])
        gone: set[int] = set()
        free = self.pool.free_blocks
        for _, r, need in needy:
            if r.rid in gone:
                continue
            while need > free:
                victim = self.running.pop()
                gone.add(victim.rid)
                if victim.dec:
                    dec.leave(victim)
                free += victim.blocks
                self._preempt(victim, now)
                if victim is r:
                    break
            else:
                free -= need
                continue
            break
        # victims always come from the tail, after the request being served, so none of
        # them had been counted as served; what remains is scheduled as planned
        kept_prefills = [item for item in prefills if item[0].rid not in gone]
        return kept_prefills, [r for r in due if r.rid not in gone]

    def _step_reference(self, now: float) -> tuple[float, list[SimRequest], bool]:
        """One step, request by request, as vLLM's loop runs it (the reference path).

        Returns (duration, finished, preempted).
        """
        self.tick(now)
        self.expire_pins(now)
        bs = self.config.block_size
        budget = self.config.max_num_batched_tokens
        scheduled: list[tuple[SimRequest, int, int]] = []  # (req, new tokens, context before)
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            new = min(req.num_tokens - req.computed, budget)
            need = -(-(req.computed + new) // bs) - req.blocks
            while need > self.pool.free_blocks:
                victim = self.running.pop()
                self._preempt(victim, now)
                preempted = True
                if victim is req:
                    break
            else:
                if need > 0:
                    self.pool.grow(req.program, need)
                    req.blocks += need
                if req.shared:
                    self.pool.cache_full(req.program, (req.computed + new) // bs)
                scheduled.append((req, new, req.computed))
                budget -= new
                i += 1
                continue
            break

        reload_s = 0.0
        if not preempted:
            admitted, reload_s, _ = self._admit_waiting(budget, now)
            scheduled.extend(admitted)

        if not scheduled:
            return 0.0, [], preempted
        chunks = [(ctx, n) for r, n, ctx in scheduled if r.num_tokens - ctx > 1 or ctx < r.prompt]
        decodes = [r for r, n, ctx in scheduled if not (r.num_tokens - ctx > 1 or ctx < r.prompt)]
        kv = sum(r.computed for r in decodes)
        duration = self.cost.step_s(chunks, len(decodes), kv) + reload_s
        end = now + duration
        if duration > self.stats.longest_step_s:
            self.stats.longest_step_s = duration
        self.stats.busy_s += duration
        self.tick(end)
        finished = self._advance(scheduled, end, now)
        self.stats.steps += 1
        return duration, finished, preempted

    def _admit_waiting(
        self, budget: int, now: float
    ) -> tuple[list[tuple[SimRequest, int, int]], float, bool]:
        """Admit waiting requests in the policy's order while budget, seats and memory
        allow; the first that does not fit (after the valve, which releases pins in the
        pin rules' order, retrying after each, when pins hold blocks: with the ``head``
        valve always, with ``stall-only`` only when nothing runs) stops admission.

        Returns ((request, new tokens, context before) admitted, reload seconds, whether
        a waiting head was left blocked).
        """
        admitted: list[tuple[SimRequest, int, int]] = []
        reload_s = 0.0
        waiting = self._sorted_waiting()
        pool = self.pool
        while waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            head = waiting[0]
            if head is self._stuck and pool.changes == self._stuck_changes:
                plan = None  # nothing made room since it last failed: it fails again
            else:
                plan = self._try_admit(head, budget, now)
            pinning = self.pinning
            if (
                plan is None
                and pinning is not None
                and pinning.retention.valve_releases(head.program, not self.running)
            ):
                # the valve: release pins one at a time, retrying after each
                for _ in pinning.valve(head, stalled=not self.running):
                    plan = self._try_admit(head, budget, now)
                    if plan is not None:
                        break
            if plan is None:
                if self.config.reserve_full_prompt:
                    # whether the whole prompt fits depends only on the free blocks (fewer
                    # since: handing blocks out is all that happens without a change) and
                    # the program's pin (the blocks it could share), not on the budget
                    self._stuck, self._stuck_changes = head, pool.changes
                return admitted, reload_s, True
            new, loaded_s = plan
            self._dequeue_head(head)
            self._enter_running(head)
            admitted.append((head, new, head.computed))
            budget -= new
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

    def _plan(self, req: SimRequest, budget: int) -> tuple[int, int, int, int, int]:
        """(hit blocks, tokens loaded from offload, new tokens, new blocks, blocks that must
        be free) to admit ``req``.

        vLLM 0.32 admits a waiting request only if its whole prompt fits
        (``scheduler_reserve_full_isl``, on by default), not just its first chunk.
        """
        bs = self.config.block_size
        reusable = req.num_tokens if req.preemptions else req.reusable
        # full blocks only (a partial one never hits); the shared ones from any program
        hit_blocks = self.pool.prefix_hit(
            req.program, req.shared, reusable // bs, (req.num_tokens - 1) // bs
        )
        hit = hit_blocks * bs
        loaded = 0
        if self.offload is not None:
            loaded = max(0, self.offload.prefix(req.program, reusable, req.num_tokens - 1) - hit)
        new = max(1, min(req.num_tokens - hit - loaded, budget))
        need = -(-(hit + loaded + new) // bs) - hit_blocks
        must_fit = need
        if self.config.reserve_full_prompt:
            must_fit = max(need, -(-req.num_tokens // bs) - hit_blocks)
        return hit_blocks, loaded, new, need, must_fit

    def fits(self, req: SimRequest, budget: int | None = None) -> bool:
        """Whether ``req`` could be admitted now (memory only)."""
        hit_blocks, _, _, _, must_fit = self._plan(
            req, budget or self.config.max_num_batched_tokens
        )
        return self.pool.room_for(req.program, hit_blocks, must_fit, req.shared)

    def _try_admit(self, req: SimRequest, budget: int, now: float) -> tuple[int, float] | None:
        bs = self.config.block_size
        hit_blocks, loaded, new, need, must_fit = self._plan(req, budget)
        hit = hit_blocks * bs
        if not self.pool.room_for(req.program, hit_blocks, must_fit, req.shared):
            return None
        # allocated while the program's pin still holds its blocks; handed over after
        self.pool.admit(req.program, hit_blocks, need, req.shared)
        if req.shared:  # its shared blocks are cached as they are allocated, for all
            self.pool.cache_full(req.program, (hit + loaded + new) // bs)
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
        req.computed = hit + loaded
        req.preempted = False
        loaded_s = self.offload.reload_s(loaded) if (self.offload and loaded) else 0.0
        return new, loaded_s

    def _preempt(self, req: SimRequest, now: float) -> None:
        """Recompute preemption: free the blocks (they stay cached), requeue at the front."""
        bs = self.config.block_size
        if req in self._prefilling:
            self._prefilling.remove(req)
        self.pool.release(req.program, req.computed // bs)
        req.blocks = 0
        req.computed = 0
        req.preempted = True
        req.preemptions += 1
        self._preempt_counter += 1
        req.preempt_seq = self._preempt_counter
        self.stats.preemptions += 1
        self._enqueue(req)

    def _advance(
        self, scheduled: list[tuple[SimRequest, int, int]], end: float, now: float
    ) -> list[SimRequest]:
        finished: list[SimRequest] = []
        for req, new, _ in scheduled:
            req.computed += new
            if req.computed < req.num_tokens:
                continue  # a prefill chunk that did not reach the end
            req.generated += 1
            if req.first_token is None:
                req.first_token = end
            if req.generated >= req.output:
                finished.append(req)
            else:
                req.num_tokens += 1
        for req in finished:
            self._finish(req, end)
        return finished

    def _finish_all(self, finished: list[SimRequest], end: float) -> list[SimRequest]:
        """Finish ``finished`` and the decoding requests whose last token the steps taken
        sampled, in running order, at ``end``; returns them all."""
        dec = self.decoders
        for r in dec.pop_finished():
            dec.leave(r)
            finished.append(r)
        if len(finished) > 1:
            finished.sort(key=_run_seq)
        for r in finished:
            self._finish(r, end)
        return finished

    def _finish(self, req: SimRequest, now: float) -> None:
        req.finish = now
        self.running.remove(req)
        if not req.dec and req in self._prefilling:
            self._prefilling.remove(req)
        full = req.computed // self.config.block_size
        if self.offload is not None:
            self.offload.store(req.program, full * self.config.block_size)
        self.policy.on_finish(req, self, now)
        if self.pinning is not None:
            self.pinning.finish(req, full, now)
        else:
            self.pool.release(req.program, full)
        req.blocks = 0

    def _merge_decodes(self, now: float, horizon: float) -> tuple[float, list[SimRequest]]:
        """Take the coming decode-only steps together; returns (seconds, finished).

        Takes every step that starts before the horizon (the next arrival or pin expiry,
        which the replay sees between steps), up to and including the first step in which
        a request finishes (it finishes at the run's end), and stops before a step whose
        block needs the pool cannot meet. Nothing else can change meanwhile: the waiting
        head was blocked (the pool only shrinks, and the valve had nothing left to
        release) or nothing waits, and no step before the last one finishes anything.
        """
        plan = self._merge_plan(now, horizon)
        if plan is None:
            return 0.0, []
        steps, blocks, first_finish = plan
        dec = self.decoders
        seqs = len(dec.members)
        kv0 = dec.kv_tokens()
        cost = self.cost
        if blocks:
            self.pool.take(blocks)
        total = cost.decode_run_s(seqs, kv0, steps)
        dec.D += steps
        stats = self.stats
        stats.steps += steps
        stats.busy_s += total
        # the longest step of the run is its first or its last (the price is linear in KV)
        longest = max(cost.decode_s(seqs, kv0), cost.decode_s(seqs, kv0 + seqs * (steps - 1)))
        if longest > stats.longest_step_s:
            stats.longest_step_s = longest
        end = now + total
        self.tick(end)
        if first_finish > dec.D:
            return total, []
        return total, self._finish_all([], end)

    def merge_end(self, now: float, horizon: float) -> float | None:
        """When the run of decode steps that :meth:`step` from ``now`` would open with
        ends, before ``horizon`` or where it must stop (None: the step would not open with
        one, or a pin is due at ``now``: the step expires it first, and that may let the
        waiting head in). Changes nothing. A fleet replay waits until then unless a call
        is routed to this engine before (:mod:`replay.fleet.loop`)."""
        if self._prefilling or not self.decoders.members:
            return None
        if self.next_expiry() <= now:
            return None
        if self.waiting and not self._head_stays_blocked():
            return None
        plan = self._merge_plan(now, horizon)
        if plan is None:
            return None
        dec = self.decoders
        self._planned = (self._plan_key(now, horizon), plan)
        return now + self.cost.decode_run_s(len(dec.members), dec.kv_tokens(), plan[0])

    def _plan_key(self, now: float, horizon: float) -> tuple[float, ...]:
        """What a run's plan from ``now`` to ``horizon`` reads (the same key: the same plan)."""
        dec, pool = self.decoders, self.pool
        return (
            now,
            horizon,
            dec.D,
            len(dec.members),
            dec.kv_tokens(),
            pool.free_blocks,
            pool.changes,
            len(self.waiting),
        )

    def _merge_plan(self, now: float, horizon: float) -> tuple[int, int, int] | None:
        """(steps, blocks they need, the D of the first finish) of the merged run from
        ``now`` (None: no step can be merged); changes nothing."""
        dec = self.decoders
        seqs = len(dec.members)
        planned = self._planned
        if planned is not None:  # the one merge_end made, if nothing changed since
            self._planned = None
            if planned[0] == self._plan_key(now, horizon) and seqs == len(self.running):
                return planned[1]
        if horizon <= now or not seqs or seqs != len(self.running):
            return None
        first_finish = dec.next_finish()
        if first_finish is None:
            return None
        steps = first_finish - dec.D
        if steps <= 0:
            return None
        kv0 = dec.kv_tokens()
        cost = self.cost
        # a step that starts before the horizon runs before the event is seen (the replay
        # takes arrivals between steps), so the run takes every step that starts before it
        if now + cost.decode_run_s(seqs, kv0, steps - 1) >= horizon:
            lo, hi = 0, steps - 1
            guess = cost.decode_steps_within(seqs, kv0, horizon - now)
            if guess is not None:
                # a closed form: narrow the search to its neighbourhood (rounding)
                lo, hi = max(0, min(steps - 1, guess) - 2), min(steps - 1, guess + 2)
                if lo and now + cost.decode_run_s(seqs, kv0, lo) > horizon:
                    lo, hi = 0, lo  # the guess was off: search below it
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if now + cost.decode_run_s(seqs, kv0, mid) <= horizon:
                    lo = mid
                else:
                    hi = mid - 1
            # lo steps end by the horizon; one more starts before it unless they end on it
            steps = lo + 1 if now + cost.decode_run_s(seqs, kv0, lo) < horizon else lo
        # the blocks the steps need; stop before a step whose needs the pool cannot meet
        # (that step preempts, request by request in running order: the next step's)
        steps, blocks = dec.blocks_for(steps, self.pool.free_blocks)
        if steps <= 0:
            return None
        return steps, blocks, first_finish
