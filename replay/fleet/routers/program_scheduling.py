"""``program-scheduling``: vllm-router 0.1.17's Program scheduling ("Progress-TTL",
``--enable-program-scheduling --program-scheduling-config-json``), rank-local mode.

Ported from vllm-project/router ``src/program_scheduling/scheduler_admission.rs``
(``acquire``, ``schedule_rank_local``, ``local_resume_cmp``, ``rank_admission_plan``,
``commit_admission``, ``pause_idle``; commit 02b9331; ``acquire_synced`` as in the 0.1.17
release, whose every arrival runs ``run_request_arrival_decisions``: the other programs'
TTLs due by then pause and the queues are tried), ``scheduler_lifecycle.rs``
(``complete``, ``run_periodic_decisions``, ``expire_acting_ttls``; commit 02b9331),
``policy.rs`` (:mod:`replay.fleet.routers.progress_ttl`) and ``docs/program_scheduling.md``
(commit 14d6d81); config names and defaults as the 0.1.17 wheel takes them.

The rule, as the router has it. A program (the ``X-Session-ID``) is bound on its first
call to a home rank (``binding_strategy``). It is *active* on its rank while a call runs
and, after the call ends, for an *acting TTL* (Progress-TTL): the TTL is 0 until the rank
has ``stats_window_size`` tool-call intervals, then the log-normal fit of policy.rs
capped by ``max_acting_ttl_seconds`` and the call's cache-miss impact (its prompt priced
by ``prefill_cost_model``). A call of an active program goes straight to its rank. Any
other call is *retained* in the router's queue of its rank and admitted when the rank
passes the gates, in resume order (force-resume deadline passed first, then most recently
finished first — ``mru`` — or first queued — ``fcfs``): the rank's last polled
``vllm:num_requests_waiting`` below ``admission_waiting_request_threshold`` (0: 1, as the
router reads it outside PD mode), fewer than ``max_active_programs_per_target`` active
programs (0: 64, likewise), and, with ``token_capacity_per_target``, the active programs'
private tokens (prompt + ``decode_buffer_tokens``) plus the candidate's within
``low_watermark_ratio`` × capacity. A call waiting past ``force_resume_timeout_seconds``
passes the count and token gates, not the waiting one. Expired TTLs pause their programs
(releasing their tokens) on a call's arrival or end and at each metrics tick (every
``metrics_interval_seconds``), when the queues are tried again too; a program paused for
``paused_retention_ttl_seconds`` is released (its next call is bound afresh, as a new
program's). Bindings count over the workers sorted by URL (``program_round_robin``; ties of
``least_program_count``, which counts a replica's live programs: acting, or with a call
in flight or retained).

It reads what the real router reads: its own records, the request (prompt size, session)
and each engine's waiting count as vLLM's metrics export it. ``binding_only`` binds and
forwards without admission, as the router does (its programs still act for a TTL after a
call, pause when it runs out and are released once paused long enough).

Deliberate differences:

- rank-local only (``global_queue`` false, the router's default); ``true`` is refused;
- the growth reserve, batch-gain admission (the only user of ``decode_throughput_model``),
  capacity repair (``high_watermark_ratio``), segment yield (``max_segment_rounds``),
  privileged hand-off and shared-prefix discounting are not modelled: the reserve is 0
  (as the router's until its request window fills), the miss impact prices the whole
  prompt;
- the force-resume deadline is the fixed ``force_resume_timeout_seconds`` (the router may
  shorten it from measured throughput); ``queue_timeout_seconds`` (600 s from the call's
  arrival) is not modelled: a call the engine's waiting count keeps out that long fails in
  the router, and the model holds it on;
- with ``token_capacity_per_target``, the tokens in use are the router's own count (prompt
  + buffer of each active program); the router, given a fresh poll of the engine's
  ``vllm:kv_cache_usage_perc``, starts from that instead (scaled by its live programs over
  the running requests, plus the acting programs' tokens and its changes since the poll),
  and prices a prompt from its bytes (a learned tokens-per-byte) where the model knows its
  tokens;
- the waiting count a poll reads is the engine's at the router's first event after the
  poll time, not at the poll instant; the model polls from time 0, where the router polls
  once it has had a Program request (its first call passes the waiting gate unread, seen
  behind the real router with an engine reporting 2 waiting) and reads a poll only while
  it is fresh (3 intervals): a replay's engines start with nothing waiting and every tick
  polls them, so no replayed call differs;
- ``consistent_hash`` binding hashes the session as the ``consistent_hash`` policy does
  (:class:`~replay.fleet.routers.consistent_hash.HashRing`: ``fbi_hash``,
  ``hash_virtual_nodes`` nodes per worker, over the workers' URLs when given), the ring
  built over the URLs sorted as the router builds it (``ConsistentHashBinding``: of two
  workers' nodes at one hash the later URL's stays, whatever order the URLs are given
  in; the policy's ring keeps its own worker order's instead);
- the program's last call is not known to the router (no terminate signal), as live;
- PD mode (``--vllm-pd-disaggregation``), where 0 sizes the bounds from the prefill
  permits, is not modelled.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from profiles.router_calibration import DecodeThroughputModel, PrefillCostModel
from replay.fleet.routers.base import HOLD, FleetView, RoutedCall
from replay.fleet.routers.consistent_hash import HashRing, worker_urls
from replay.fleet.routers.progress_ttl import ProgramSchedulingConfig, fitted_acting_ttl
from ttlctl.router_doc import PROGRAM_SCHEDULING


@dataclass(slots=True)
class _Program:
    rank: int
    active: bool = False
    in_flight: bool = False
    #: private tokens counted in its rank's usage while active
    tokens: int = 0
    acting_deadline: float | None = None
    #: when it last paused between calls (its TTL ran out): a program paused that long
    #: (``paused_retention_ttl_seconds``) is released
    paused_at: float | None = None
    last_finished: float | None = None
    queued_at: float | None = None
    force_deadline: float | None = None

    @property
    def live(self) -> bool:
        """Acting, or with a call in flight or retained (the router's Active or Reasoning);
        not a program paused between calls."""
        return self.active or self.in_flight or self.queued_at is not None


@dataclass(slots=True)
class _Rank:
    window: int
    used_tokens: int = 0
    active: int = 0
    queue: list[str] = field(default_factory=list)
    intervals: deque[float] = field(default_factory=deque)
    #: the engine's waiting requests at the last poll
    waiting: int = 0

    def push_interval(self, seconds: float) -> None:
        self.intervals.append(seconds)
        if len(self.intervals) > self.window:
            self.intervals.popleft()


@dataclass(slots=True)
class ProgramScheduling:
    config: ProgramSchedulingConfig
    prefill: PrefillCostModel
    decode: DecodeThroughputModel
    replicas: int
    #: the workers' URLs, in replica order (None: the ring's default names)
    urls: Sequence[str] | None = None
    name: str = PROGRAM_SCHEDULING
    _programs: dict[str, _Program] = field(default_factory=dict)
    _ranks: list[_Rank] = field(default_factory=list)
    _ready: list[tuple[str, int]] = field(default_factory=list)
    _poll: int = -1
    _bound: int = 0
    _ring: HashRing | None = None
    #: the replicas in the order of their workers' URLs (the router sorts the binding's
    #: candidates by them: round robin counts over that order, ties go to the first)
    _by_url: tuple[int, ...] = ()
    #: no program releasable by :meth:`_release_paused` paused before this (inf: none), so
    #: that an arrival passes over the programs only once a pause is that old (a pause
    #: resumed since leaves it early, never late: the next pass sets it again)
    _earliest_paused: float = math.inf

    def __post_init__(self) -> None:
        self._ranks = [_Rank(self.config.stats_window_size) for _ in range(self.replicas)]
        urls = worker_urls(self.replicas, self.urls)
        self._by_url = tuple(sorted(range(self.replicas), key=lambda r: urls[r]))
        # the ring over the URLs sorted, as the router builds it from its sorted candidates:
        # of two workers' nodes at one hash the later URL's stays (its owners index _by_url)
        sorted_urls = tuple(urls[r] for r in self._by_url)
        self._ring = HashRing(sorted_urls, self.config.hash_virtual_nodes)

    # ------------------------------------------------------------ the router's events

    def route(self, call: RoutedCall, view: FleetView, now: float) -> int:
        """The call's rank, or :data:`HOLD` (retained; :meth:`released` gives it later)."""
        cfg = self.config
        self._observe(view, now)
        # the metrics ticks before the call have paused the TTLs due by then and released
        # the programs paused long enough (the model ticks only while calls are retained:
        # the ticks since are caught up here)
        last_tick = self._last_tick(now)
        self._expire(last_tick)
        self._release_paused(last_tick)
        prog = self._programs.get(call.session)
        if prog is None:
            prog = self._programs[call.session] = _Program(self._bind(call.session, view))
        rank = self._ranks[prog.rank]
        if prog.last_finished is not None:
            rank.push_interval(now - prog.last_finished)
        tokens = call.prompt_tokens + cfg.decode_buffer_tokens
        if cfg.binding_only:  # admitted at home at once, charged no tokens
            if not prog.active:
                prog.active = True
                rank.active += 1
            prog.in_flight, prog.acting_deadline = True, None
            return prog.rank
        if prog.active:  # still acting: the call continues its segment on its rank
            if tokens > prog.tokens:
                rank.used_tokens += tokens - prog.tokens
                prog.tokens = tokens
            prog.in_flight, prog.acting_deadline = True, None
            self._arrival_decisions(now)
            return prog.rank
        prog.tokens = tokens
        prog.queued_at = now
        prog.force_deadline = now + cfg.force_resume_timeout_seconds
        rank.queue.append(call.session)
        self._arrival_decisions(now)
        for i, (session, at) in enumerate(self._ready):
            if session == call.session:
                del self._ready[i]
                return at
        return HOLD

    def completed(self, replica: int, call: RoutedCall, now: float) -> None:
        prog = self._programs[call.session]
        prog.in_flight = False
        prog.last_finished = now
        # its acting TTL starts (with binding_only too: such a program still pauses when it
        # runs out, and is released once paused long enough)
        impact = self.cache_miss_impact_s(call.prompt_tokens)
        rank = self._ranks[prog.rank]
        ttl = fitted_acting_ttl(
            rank.intervals, self.config.stats_window_size,
            self.config.max_acting_ttl_seconds, impact,
        )  # fmt: skip
        prog.acting_deadline = now + ttl
        self.tick(now)

    def tick(self, now: float, view: FleetView | None = None) -> None:
        """The periodic decisions (also run on each call's end): expired TTLs pause, the
        queues are tried."""
        if view is not None:
            self._observe(view, now)
        self._expire(now)
        self._release_paused(now)
        self._schedule(now)

    def _arrival_decisions(self, now: float) -> None:
        """What a call's arrival runs once the call is the router's (0.1.17's
        ``run_request_arrival_decisions``): the other programs' TTLs due by ``now`` pause
        (the arriving one is reasoning, not acting: its own does not), the queues are
        tried; the calls admitted go out with the arriving one."""
        self._release_paused(now)
        self._expire(now)
        self._schedule(now)

    def released(self) -> list[tuple[str, int]]:
        """Retained calls admitted since the last ask: (session, rank)."""
        out, self._ready = self._ready, []
        return out

    def next_wake(self, now: float) -> float | None:
        """When the router next looks at its queues on its own (None: nothing retained)."""
        if not any(r.queue for r in self._ranks):
            return None
        tick = (self._tick_index(now) + 1) * self.config.metrics_interval_seconds
        # a call wakes at its force-resume deadline; once past it (the engine's queue still
        # closes the gate) at the metrics ticks, as the others
        force = min(
            (
                deadline
                for r in self._ranks
                for s in r.queue
                if (deadline := self._programs[s].force_deadline) is not None and deadline > now
            ),
            default=math.inf,
        )
        return min(tick, force)

    def retained(self) -> int:
        return sum(len(r.queue) for r in self._ranks)

    # ------------------------------------------------------------ the rule

    def cache_miss_impact_s(self, uncached_tokens: int) -> float:
        return self.prefill.cache_miss_impact_seconds(uncached_tokens)

    def acting_ttl_s(self, replica: int, prompt_tokens: int) -> float:
        """The TTL a call of ``prompt_tokens`` ending on ``replica`` now would get."""
        return fitted_acting_ttl(
            self._ranks[replica].intervals, self.config.stats_window_size,
            self.config.max_acting_ttl_seconds, self.cache_miss_impact_s(prompt_tokens),
        )  # fmt: skip

    def _bind(self, session: str, view: FleetView) -> int:
        """A new program's home (the router sorts the candidates by their URLs first)."""
        strategy = self.config.binding_strategy
        if strategy == "program_round_robin":
            self._bound += 1
            return self._by_url[(self._bound - 1) % self.replicas]
        if strategy == "least_program_count":
            # the live programs; one paused between calls is not counted
            counts = [0] * self.replicas
            for p in self._programs.values():
                if p.live:
                    counts[p.rank] += 1
            return min(self._by_url, key=lambda r: counts[r])  # ties: the first URL
        assert self._ring is not None
        return self._by_url[self._ring.owner(session)]

    def _tick_index(self, now: float) -> int:
        """The last metrics tick at or before ``now``: the largest k with k × interval ≤ now
        (``now / interval`` may round below a tick's own k: 4.3 / 0.1 is 42.99…, and the
        router then asked to wake at 4.3 again, at 4.3, without end)."""
        interval = self.config.metrics_interval_seconds
        k = math.floor(now / interval)
        while (k + 1) * interval <= now:
            k += 1
        while k > 0 and k * interval > now:
            k -= 1
        return k

    def _last_tick(self, now: float) -> float:
        return self._tick_index(now) * self.config.metrics_interval_seconds

    def _observe(self, view: FleetView, now: float) -> None:
        poll = self._tick_index(now)
        if poll > self._poll:
            self._poll = poll
            for r, rank in enumerate(self._ranks):
                rank.waiting = view.waiting_requests(r)

    def _expire(self, upto: float) -> None:
        """Pause the programs whose acting TTL ran out by ``upto``, each at the first
        metrics tick at or past its deadline, or at ``upto`` if sooner."""
        for prog in self._programs.values():
            if (
                prog.active
                and not prog.in_flight
                and prog.acting_deadline is not None
                and prog.acting_deadline <= upto
            ):
                rank = self._ranks[prog.rank]
                prog.paused_at = min(upto, self._tick_at_or_after(prog.acting_deadline))
                if prog.paused_at < self._earliest_paused:
                    self._earliest_paused = prog.paused_at
                prog.active, prog.acting_deadline = False, None
                rank.active -= 1
                rank.used_tokens -= prog.tokens

    def _release_paused(self, upto: float) -> None:
        """Forget the programs paused between calls for ``paused_retention_ttl_seconds``
        by ``upto`` (0.1.17's ``release_expired_paused``): the binding and the records go,
        so a later call is a new program's (bound afresh, no interval sampled)."""
        ttl = self.config.paused_retention_ttl_seconds
        if upto - self._earliest_paused < ttl:  # none is due: a later pause is due later
            return
        # the programs paused between calls, and since when
        paused = {
            s: p.paused_at
            for s, p in self._programs.items()
            if p.paused_at is not None and not p.live
        }
        for session, at in paused.items():
            if upto - at >= ttl:
                del self._programs[session]
        self._earliest_paused = min(
            (at for at in paused.values() if upto - at < ttl), default=math.inf
        )

    def _tick_at_or_after(self, t: float) -> float:
        """The first metrics tick at or after ``t``."""
        k = self._tick_index(t)
        interval = self.config.metrics_interval_seconds
        return k * interval if k * interval >= t else (k + 1) * interval

    def _order(self, session: str, now: float) -> tuple[object, ...]:
        p = self._programs[session]
        forced = p.force_deadline is not None and p.force_deadline <= now
        queued = p.queued_at if p.queued_at is not None else math.inf
        if self.config.resume_order == "mru":
            recent = -(p.last_finished if p.last_finished is not None else -math.inf)
            return (not forced, recent, queued, session)
        return (not forced, queued, session)

    def _admits(self, prog: _Program, rank: _Rank, now: float) -> bool:
        """The gates, as 0.1.17's ``rank_admission_plan`` takes them: the engine's waiting
        count first (a call past its force-resume deadline waits for it too), then,
        unless forced, the count of active programs and the token capacity. Outside PD
        mode the router reads 0 as its historical defaults: a threshold of 1, a bound of
        64 (``ProgramSchedulerConfig::from_program_config``)."""
        cfg = self.config
        threshold = cfg.admission_waiting_request_threshold or 1
        if rank.waiting >= threshold:
            return False
        if prog.force_deadline is not None and prog.force_deadline <= now:
            return True
        bound = cfg.max_active_programs_per_target or 64
        if rank.active >= bound:
            return False
        cap = cfg.token_capacity_per_target
        if cap is None:
            return True
        return rank.used_tokens + prog.tokens <= cap * cfg.low_watermark_ratio

    def _schedule(self, now: float) -> None:
        for r, rank in enumerate(self._ranks):
            while rank.queue:
                order = sorted(rank.queue, key=lambda s: self._order(s, now))
                chosen = next(
                    (s for s in order if self._admits(self._programs[s], rank, now)), None
                )
                if chosen is None:
                    break
                prog = self._programs[chosen]
                rank.queue.remove(chosen)
                prog.active = prog.in_flight = True
                prog.acting_deadline = prog.queued_at = prog.force_deadline = None
                rank.active += 1
                rank.used_tokens += prog.tokens
                self._ready.append((chosen, r))
