"""One replica of a vLLM fleet: vLLM's scheduler driven by the fleet's loop.

:class:`VllmEngine` has the shape the fleet loop drives (:class:`replay.fleet.engine.Engine`),
so ``--backend vllm --replicas N`` runs in the fast fleet's own loop
(:func:`replay.fleet.loop.drive`): the same clock, routing, arrivals, step events and
finishes; only the engine under each replica is vLLM's ``Scheduler`` (or ttlctl's
``TTLScheduler``, each replica with its own plugin, as each server loads its own). What
one :meth:`VllmEngine.step` does is one turn of the engine core's loop, through the
batch queue the single-engine harness steps with (:mod:`replay.vllmsim.batch_queue`):
synchronous, ``schedule()`` at the step's start, the stand-in executor,
``update_from_output()`` with the virtual clock at the step's end; with
``--async-scheduling`` (vLLM's ``AsyncScheduler``, a batch queue of two), the next
step is scheduled before the oldest one's output is applied, so a replica keeps a step
in flight between the fleet's step events, as one engine does between its loop turns.
As with the fast engine, the step's effects on the engine (blocks freed, pins made) are
applied when the loop takes the step; its calls finish, for the router and the clients,
at the step's end event.

Differences from the fast engine, on purpose:

- no run of decode steps is taken in one piece (:meth:`VllmEngine.merge_end` is always
  None): vLLM schedules every step, so a replica waiting in decode steps takes them one
  event each; the router reads its cache as of the current step (the fast fleet reads it
  as of the start of the decode run it waits in; docs/replay.md says when that differs);
- the router's KV events (:class:`KvEvents`) are vLLM's own: the call's prompt hashed as
  vLLM hashes it, matched against the replica's block pool (what its ``BlockStored`` /
  ``BlockRemoved`` events publish);
- a step that leaves the replica with no calls is followed by one more ``schedule()``
  (:attr:`VllmEngine.idle` is vLLM's ``has_requests()``: the engine core steps once more
  to report finished calls), in which the plugin expires the pins that fell due during
  the step; the fast engine has no such step and expires them in the fleet loop's turn
  that finds it idle (:meth:`VllmEngine.expire_pins` does nothing).

:class:`~replay.vllmsim.prompts.TokenBook` gives every call its token ids, the same on
whichever replica it lands (one stream per program, fleet-wide).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm.sampling_params import SamplingParams
from vllm.v1.request import Request

from profiles.cost import CostModel
from replay.client_tags import FULL, vllm_xargs
from replay.request import SimRequest
from replay.scheduler import SimSchedulerConfig, Stats
from replay.sim_error import SimulationError
from replay.vllmsim.batch_queue import BatchQueue, Queued
from replay.vllmsim.build import Built
from replay.vllmsim.executor import book_step, execute
from replay.vllmsim.harness import FILLER
from replay.vllmsim.outcome import put_plugin_counters
from replay.vllmsim.prompts import KvEvents, TokenBook


@dataclass(frozen=True, slots=True)
class _Pinning:
    """The plugin's pin rules (its :class:`~ttlctl.engine.retention.Retention`)."""

    retention: Any


@dataclass(slots=True)
class _Live:
    req: SimRequest
    request: Request
    #: the call's output token ids (the stand-in executor samples them in order)
    outputs: list[int]


@dataclass(slots=True)
class VllmEngine:
    """vLLM's scheduler as one replica of the fleet loop (see the module docstring)."""

    built: Built
    config: SimSchedulerConfig
    cost: CostModel
    book: TokenBook
    plugin: bool
    #: vLLM's ``--async-scheduling`` (``built`` holds its ``AsyncScheduler``)
    async_scheduling: bool = False
    #: what the clients tag each call with (``--client-tags``; the fleet loop's requests
    #: are tagged so already: :func:`replay.sim.arriving`)
    client_tags: str = FULL
    stats: Stats = field(default_factory=Stats)
    timeline: list[tuple[float, int]] = field(default_factory=list)
    #: the plugin's counters at the end (empty for vLLM's own scheduler)
    plugin_counters: dict[str, int] = field(default_factory=dict)
    #: the virtual clock (the plugin reads it)
    now: float = 0.0
    pool: KvEvents = field(init=False)
    pinning: _Pinning | None = field(init=False)
    _live: dict[str, _Live] = field(default_factory=dict)
    _pinned: int = 0
    _pins_clock: float = 0.0
    _batch: BatchQueue = field(init=False)
    #: the calls the current :meth:`step` finished
    _finished: list[SimRequest] = field(default_factory=list)
    _applied: int = -1
    #: the step sizes it has run (None: every size; ``config.sizes_run``)
    _sizes: set[int] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        scheduler = self.built.scheduler
        self.pool = KvEvents(scheduler, self.book, self.config)
        self.pinning = _Pinning(scheduler.ttl) if self.plugin else None
        self._batch = BatchQueue(2 if self.async_scheduling else 1)
        if self.config.sizes_run is not None:
            self._sizes = set(self.config.sizes_run)
        if self.plugin:
            scheduler.ttl_clock = self._clock

    def _clock(self) -> float:
        return self.now

    @property
    def scheduler_name(self) -> str:
        return type(self.built.scheduler).__name__

    @property
    def waiting(self) -> list[SimRequest]:
        s = self.built.scheduler
        live = self._live
        return [live[r.request_id].req for q in (s.kv_holding_waiting, s.waiting) for r in q]

    @property
    def idle(self) -> bool:
        # finished calls not yet reported make vLLM's engine core step once more; a step
        # still in the batch queue (async) has its output applied first
        return not self.built.scheduler.has_requests() and not self._batch.steps

    def _observe_pins(self) -> None:
        """Integrate pinned memory up to now, then take the plugin's figure (the harness's)."""
        if self.now > self._pins_clock:
            self.stats.pinned_block_seconds += self._pinned * (self.now - self._pins_clock)
            self._pins_clock = self.now
        pinned = int(self.built.scheduler.ttl.pins.blocks) if self.plugin else 0
        if pinned != self._pinned:
            self.timeline.append((self.now, pinned))
            self._pinned = pinned

    def tick(self, now: float) -> None:
        self.now = max(self.now, now)
        self._observe_pins()

    def expire_pins(self, now: float) -> None:
        """Nothing to do: :attr:`idle` is vLLM's ``has_requests()``, so this replica is
        idle only once its engine core's extra ``schedule()`` has expired them."""

    def add(self, req: SimRequest, now: float) -> None:
        """The call reaches vLLM's scheduler (``add_request``: due pins expire first)."""
        self.now = now
        prompt = self.book.prompt(req.program, req.turn, self.config)
        assert prompt is not None  # the loop refused it on arrival otherwise
        xargs = vllm_xargs(req.program, req.tool, req.is_last, self.client_tags)
        request = Request(
            request_id=str(req.rid),
            prompt_token_ids=prompt.tokens,
            sampling_params=SamplingParams(
                max_tokens=req.output, ignore_eos=True, temperature=0.0, extra_args=xargs
            ),
            pooling_params=None,
            arrival_time=req.arrival if req.sent is None else req.sent,
            block_hasher=self.built.hasher,
        )
        self._live[request.request_id] = _Live(req, request, self.book.streams.fresh(req.output))
        self.built.scheduler.add_request(request)
        self._observe_pins()

    def has_requests(self) -> bool:
        return bool(self.built.scheduler.has_requests())

    def step(self, now: float, horizon: float) -> tuple[float, list[SimRequest]]:
        """The engine core's loop from ``now`` (:meth:`BatchQueue.turn`, the harness's)
        until a step that computed something has its output applied, or nothing can
        change before the next call or pin expiry; returns (seconds from ``now`` to that
        output, calls finished). Synchronous: one step, ``schedule()`` at its start and
        ``update_from_output()`` at its end; a step that only preempted is followed by
        the next at once. ``horizon`` is not used: vLLM takes one step at a time."""
        self.now = now
        finished = self._finished = []
        batch = self._batch
        while True:
            done = batch.turn(self)
            if done is None or done.index >= 0 or batch.stalled(done, self):
                return self.now - now, finished

    def schedule_step(self, last_end: float, start: float) -> Queued:
        """``schedule()`` at the clock and the executor's step (the harness's)."""
        scheduler = self.built.scheduler
        stats = self.stats
        live = self._live
        now = self.now
        output = scheduler.schedule()
        self._observe_pins()
        step = execute(output, scheduler.requests, live, FILLER)
        seconds, index = book_step(step, output, self.cost, stats, last_end, start, self._sizes)
        for request_id in output.num_scheduled_tokens:
            req = live[request_id].req
            if req.admitted is None:
                req.admitted = now
                req.admitted_step = index
                prefill = live[request_id].request.prefill_stats
                req.hit_tokens = int(prefill.num_cached_tokens) if prefill is not None else 0
                stats.prompt_tokens += req.prompt
                stats.hit_tokens += min(req.hit_tokens, req.prompt)
        return Queued(output, step, seconds, index)

    def apply_step(self, queued: Queued) -> None:
        """``update_from_output()`` at the step's end (the clock): the calls it finished
        go to the current :meth:`step`'s list."""
        if queued.index >= 0:
            self._applied = queued.index
        end = self.now
        outputs = self.built.scheduler.update_from_output(queued.output, queued.step.output)
        self._observe_pins()
        live = self._live
        for client in outputs.values():
            for out in client.outputs:
                entry = live.get(out.request_id)
                if entry is None:
                    continue  # aborted meanwhile: vLLM drops its output
                req = entry.req
                if out.new_token_ids and req.first_token is None:
                    req.first_token = end
                if out.finish_reason is not None:
                    del live[out.request_id]
                    request = entry.request
                    req.finish = end
                    req.preemptions = int(request.num_preemptions)
                    req.generated = int(request.num_output_tokens)
                    if req.first_token is None:
                        req.first_token = end
                    self.book.finished(req.program, req.turn, list(request.all_token_ids))
                    self._finished.append(req)

    def next_expiry(self) -> float:
        """The next pin expiry after now, while calls are in the engine (an engine without
        any does not step: its pins stay until the next call, as the harness leaves them)."""
        if not self.plugin or not self.built.scheduler.get_num_unfinished_requests():
            return float("inf")
        now = self.now
        return min(
            (p.expiry for p in self.built.scheduler.ttl.pins.pins.values() if p.expiry > now),
            default=float("inf"),
        )

    def merge_end(self, now: float) -> float | None:
        return None  # vLLM schedules every step (the module docstring)

    def take_run(
        self, start: float, horizon: float = float("inf")
    ) -> tuple[float, list[SimRequest]]:
        raise SimulationError("vLLM's scheduler plans no run of decode steps to take")

    def applied_step(self) -> int:
        """The step whose output was applied last (async: the step after it is in
        flight)."""
        return self._applied

    def pin_counters(self) -> None:
        """The plugin's counters into :attr:`stats` (and :attr:`plugin_counters`)."""
        if not self.plugin:
            return
        counters = dict(self.built.scheduler.ttl_stats())
        self.plugin_counters = counters
        put_plugin_counters(self.stats, counters)
