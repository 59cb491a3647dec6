"""The glue: vLLM 0.32's to 0.34's ``Scheduler`` with KV-cache TTL pins.

``--scheduler-cls ttlctl.engine.TTLScheduler`` (or ``LLM(scheduler_cls=TTLScheduler)``).
When vLLM runs with async scheduling, ``TTLScheduler`` builds a
:class:`TTLAsyncScheduler` (the same hooks over vLLM's ``AsyncScheduler``), so the
plugin does not turn async scheduling off. The rules are in
:mod:`ttlctl.engine.retention`, the plugin's state and the callbacks that read it in
:mod:`ttlctl.engine.plugin_setup`; this module only maps vLLM's events onto them.
Hooks, as ``file:line`` of 0.32.0 / 0.33.0 / 0.34.0 (``vllm/v1/core/sched/scheduler.py``
unless named; ``tests/tools/vllm_hooks.py SRC`` prints them for a source tree,
and :mod:`ttlctl.engine.hooks` lists every name the plugin relies on):

- ``schedule`` (591 / 699 / 716): first poll the bundle file and release expired pins;
- ``add_request`` (2616 / 2931 / 3065): record the arrival (pause learned, program FCFS
  key), after expiring pins (an idle engine does not step, so pins that expired
  while it was idle go at the next arrival);
- ``KVCacheManager.allocate_slots``, wrapped on the instance: the waiting path
  (1256 / 1435 / 1497) calls it with the prefix hit from ``_get_local_prefix_cache_hit``
  (558 / 664 / 681) while the pinned blocks still hold their references, so nothing can
  evict them; a success is the admission: the pin is released (handed over)
  right after ``touch`` took the new request's references. A failure is the
  valve's cue: release pins in the valve's order and retry. The running path
  (778 / 914 / 930) is left alone (vLLM preempts, like the simulator). The wrapper
  tells the paths apart by the request's status, not its place in the queue: a
  waiting request granted 0 tokens (encoder budget, MTP lookahead) ends admission
  in 0.32 (1217) and is requeued from 0.33 (1394 / 1456), so 0.33 and 0.34 may call
  it for the requests behind such a head, with the same arguments;
- ``_free_request`` (2714 / 3031 / 3170, every finish, aborts included via
  ``finish_requests`` 2649 / 2964 / 3100): learn, decide τ, write the engine log; when a KV
  connector delays the free (``_free_blocks`` is not called) the pin is not made and
  counted ``deferred``;
- ``_free_blocks`` (2746 / 3064 / 3204): pin instead of free: ``pop_blocks_for_free``
  (``kv_cache_manager.py`` 651 / 660 / 681) keeps the references,
  ``BlockPool.free_blocks`` returns them later, exactly vLLM's deferred-free path
  (``_free_request_blocks`` 2766 / 3084 / 3224); 0.33's and 0.34's ``pop_blocks_for_free`` leave
  out leading null blocks (a sliding window's skipped prefix), so a pin there
  holds only blocks with KV; when vLLM defers the free
  (``_request_blocks_can_be_freed`` false: a consumer KV connector under async
  scheduling) the plugin leaves it to vLLM, unpinned, and counts it ``deferred``;
- ``Scheduler.waiting`` (223 / 232 / 230) is a :class:`~ttlctl.engine.queue.ProgramQueue`
  while a policy is loaded (the three versions make the same queue calls; 0.34's
  ``--cache-aware-admission-window`` reorders it by removing and prepending requests,
  which the program queue puts back in its own order: see :mod:`ttlctl.engine.plugin_setup`);
- ``reset_prefix_cache`` (2840 / 3184 / 3324): pins are released first (a reset needs
  every block free).
"""

from __future__ import annotations

import time
from typing import Any

from ttlctl.engine import plugin_setup

VLLM_VERSION = plugin_setup.VLLM_VERSION  # the installed vLLM, checked before it is imported

from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402

from ttlctl.engine import tags as tags_mod  # noqa: E402
from ttlctl.engine.enginelog import Record  # noqa: E402
from ttlctl.engine.plugin_setup import TTLSetup  # noqa: E402
from ttlctl.engine.retention import ABORTED, FAILED, OK  # noqa: E402

_OK = {
    RequestStatus.FINISHED_STOPPED,
    RequestStatus.FINISHED_LENGTH_CAPPED,
    RequestStatus.FINISHED_REPETITION,
}
_ADMITTING = (RequestStatus.WAITING, RequestStatus.PREEMPTED)


def _how(status: RequestStatus) -> str:
    if status in _OK:
        return OK
    if status == RequestStatus.FINISHED_ABORTED:
        return ABORTED
    return FAILED


class TTLMixin(TTLSetup):
    """The hooks; mixed in front of vLLM's ``Scheduler`` or ``AsyncScheduler`` (the
    plugin's state and callbacks: :class:`~ttlctl.engine.plugin_setup.TTLSetup`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ttl_setup()

    # ------------------------------------------------------------ step start

    def _ttl_tick(self, now: float) -> None:
        if self.ttl_watcher.poll(now):
            self.ttl.policy = self.ttl_watcher.policy
            if self._ttl_queue is None:
                self._ttl_install_queue()
            self._ttl_write_facts()  # a new bundle
        self.ttl_bundle_series.observe(self.ttl_watcher)
        if self.ttl.pins:
            self.ttl.expire(now, self._ttl_waiting)
        if self._ttl_queue is not None:
            self._ttl_queue.refresh()

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        self._ttl_tick(self.ttl_clock())
        return super().schedule(*args, **kwargs)  # type: ignore[misc]

    def add_request(self, request: Request) -> None:
        if request.request_id not in self.requests:  # not a streaming-input update
            now = self.ttl_clock()
            self._ttl_tick(now)
            self.ttl.arrive(request.request_id, tags_mod.of_request(request), now)
        super().add_request(request)  # type: ignore[misc]

    # ------------------------------------------------------------ admission and the valve

    def _ttl_allocate_slots(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        blocks = self._ttl_allocate(request, *args, **kwargs)
        if request.status not in _ADMITTING:
            return blocks  # a running request growing: vLLM preempts if it must
        if blocks is None and self.ttl.pins:
            live = self.ttl.live.get(request.request_id)
            head = live.tags.program if live is not None else None
            for program in self.ttl.valve_order(head, stalled=not self.running):
                self.ttl.release(program, "released")
                blocks = self._ttl_allocate(request, *args, **kwargs)
                if blocks is not None:
                    break
        if blocks is not None:
            if self.ttl_memo is not None:
                self.ttl_memo.forget(request.request_id)
            self._ttl_admitted(request, kwargs)
        return blocks

    def _ttl_admitted(self, request: Request, kwargs: dict[str, Any]) -> None:
        cached = None
        if request.num_preemptions <= 0:
            stats = request.prefill_stats
            cached = (
                int(stats.num_cached_tokens)
                if stats is not None
                else int(kwargs.get("num_new_computed_tokens", 0))
            )
        live = self.ttl.live.get(request.request_id)
        first = live is not None and not live.admitted
        self.ttl.admitted(request.request_id, self.ttl_clock(), cached)
        if first and self.ttl_log is not None:
            self._ttl_awaiting_first[request.request_id] = request

    # ------------------------------------------------------------ first tokens (engine log)

    def update_from_output(self, *args: Any, **kwargs: Any) -> Any:
        outputs = super().update_from_output(*args, **kwargs)  # type: ignore[misc]
        if self._ttl_awaiting_first:
            now = time.time()
            for request_id, request in list(self._ttl_awaiting_first.items()):
                if request.num_output_tokens > 0 or request.is_finished():
                    del self._ttl_awaiting_first[request_id]
                    live = self.ttl.live.get(request_id)
                    if live is not None and live.first_token_unix_s is None:
                        live.first_token_unix_s = now
        return outputs

    # ------------------------------------------------------------ finish: pin or free

    def _free_request(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        request_id = request.request_id
        how = _how(request.status)
        ttl = self.ttl.finish(request_id, how, int(request.num_computed_tokens), self.ttl_clock())
        if ttl > 0:
            self._ttl_pin_ttl[request_id] = ttl
        try:
            return super()._free_request(request, *args, **kwargs)  # type: ignore[misc]
        finally:
            if self._ttl_pin_ttl.pop(request_id, None) is not None:
                self.ttl.deferred(request_id)  # the connector delays the free: no pin
            if self.ttl_memo is not None:
                self.ttl_memo.forget(request_id)
            self._ttl_awaiting_first.pop(request_id, None)
            live = self.ttl.forget(request_id)
            if self.ttl_log is not None and live is not None:
                self._ttl_write_log(request, live)

    def _free_blocks(self, request: Request) -> None:
        ttl = self._ttl_pin_ttl.pop(request.request_id, 0.0)
        if ttl > 0:
            if not self._request_blocks_can_be_freed(request):  # type: ignore[attr-defined]
                # a KV connector may still write them: vLLM frees them later, unpinned
                self.ttl.deferred(request.request_id)
            else:
                blocks = self.kv_cache_manager.pop_blocks_for_free(request)
                if not self.ttl.pin(request.request_id, blocks, ttl, self.ttl_clock()):
                    self._ttl_free_pinned(blocks)
                del self.requests[request.request_id]
                return
        super()._free_blocks(request)  # type: ignore[misc]

    def _ttl_write_log(self, request: Request, live: Any) -> None:
        assert self.ttl_log is not None
        now = time.time()
        first = live.first_token_unix_s
        if first is None and request.num_output_tokens > 0:
            first = now  # first token and finish in the same step
        reason = request.get_finished_reason()
        self.ttl_log.write(
            Record(
                request_id=request.request_id,
                program_id=live.tags.program,
                tool=live.tags.tool,
                is_last=live.tags.is_last,
                arrival_unix_s=float(request.arrival_time),
                first_token_unix_s=first,
                finish_unix_s=max(now, float(request.arrival_time)),
                prompt_tokens=int(request.num_prompt_tokens),
                output_tokens=int(request.num_output_tokens),
                cached_tokens=live.cached_tokens,
                finish_reason=str(reason) if reason is not None else request.status.name.lower(),
                ttl_s=live.ttl_s,
                pin_skipped=live.pin_skipped,
            )
        )

    # ------------------------------------------------------------ the rest

    def reset_prefix_cache(self, *args: Any, **kwargs: Any) -> bool:
        self.ttl.release_all("dropped")
        return bool(super().reset_prefix_cache(*args, **kwargs))  # type: ignore[misc]

    def shutdown(self) -> None:
        if self.ttl_log is not None:
            self.ttl_log.close()
        super().shutdown()  # type: ignore[misc]

    def ttl_stats(self) -> dict[str, int]:
        """Pins made, hit, expired, released, dropped, refused; blocks and programs pinned now."""
        return self.ttl.counters.snapshot()


class TTLScheduler(TTLMixin, Scheduler):
    """vLLM's scheduler with TTL pins (builds a :class:`TTLAsyncScheduler` under async
    scheduling)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> TTLScheduler:
        target: type[TTLScheduler] = cls
        if cls is TTLScheduler:
            config = kwargs.get("vllm_config", args[0] if args else None)
            sched_config = getattr(config, "scheduler_config", None)
            if getattr(sched_config, "async_scheduling", False):
                target = TTLAsyncScheduler
        return object.__new__(target)


class TTLAsyncScheduler(TTLScheduler, AsyncScheduler):
    """The same hooks over vLLM's ``AsyncScheduler`` (MRO: the mixin, then AsyncScheduler)."""


__all__ = ["VLLM_VERSION", "TTLAsyncScheduler", "TTLMixin", "TTLScheduler"]
