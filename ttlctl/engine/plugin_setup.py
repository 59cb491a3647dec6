"""The plugin's own state on a vLLM scheduler, and the callbacks that read it.

Built once, when vLLM builds the scheduler (:meth:`TTLSetup._ttl_setup`): the bundle
watcher and its series, the pin rules (:class:`~ttlctl.engine.retention.Retention`) over
vLLM's block pool, the program queue in place of vLLM's waiting queue once a policy is
loaded, the engine log and the engine's facts it states, the prefix-hit memo, and the
admission hook installed on the KV-cache manager. The warnings the plugin logs, the
waiting queue's order and the return of a released pin's blocks are here too: the
rules and the queue call them back. The hooks that map vLLM's events onto the rules are
:class:`ttlctl.engine.scheduler.TTLMixin`, which derives from :class:`TTLSetup`.

Importing this module checks the installed vLLM first (:func:`compat.check_installed`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from ttlctl.engine import compat

VLLM_VERSION = compat.check_installed()

from vllm.logger import init_logger  # noqa: E402
from vllm.v1.core.sched.request_queue import SchedulingPolicy  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402

from ttlctl.engine.bundle_series import BundleSeries  # noqa: E402
from ttlctl.engine.counters import Counters  # noqa: E402
from ttlctl.engine.enginelog import ENV_LOG, EngineLog  # noqa: E402
from ttlctl.engine.facts import EngineFacts, configured, replica_name  # noqa: E402
from ttlctl.engine.hitmemo import HitMemo  # noqa: E402
from ttlctl.engine.programs import DEFAULT_CAP  # noqa: E402
from ttlctl.engine.queue import ProgramQueue  # noqa: E402
from ttlctl.engine.retention import Retention  # noqa: E402
from ttlctl.engine.watch import BundleWatcher  # noqa: E402

logger = init_logger("vllm.ttlctl.engine")

ENV_PROGRAM_CAP = "TTLCTL_MAX_PROGRAMS"


class TTLSetup:
    """The plugin's state and callbacks; :class:`~ttlctl.engine.scheduler.TTLMixin`'s base."""

    # attributes of vLLM's Scheduler this mixin uses (for the type checker)
    kv_cache_manager: Any
    cache_config: Any
    connector: Any
    running: list[Request]
    waiting: Any
    requests: dict[str, Request]
    policy: SchedulingPolicy
    #: the admission hook :meth:`_ttl_setup` installs (``TTLMixin._ttl_allocate_slots``)
    _ttl_allocate_slots: Callable[..., Any]

    # ------------------------------------------------------------ setup

    def _ttl_setup(self) -> None:
        env = os.environ
        #: every warning the plugin logged (tests count them)
        self.ttl_warnings: list[str] = []
        self.ttl_clock = time.monotonic
        # a miss is priced in steps of this engine's budget, not the profile's
        budget = getattr(getattr(self, "scheduler_config", None), "max_num_batched_tokens", None)
        chunk = budget if isinstance(budget, int) and budget > 0 else None
        if chunk is None:
            self._ttl_warn(
                "ttlctl: the engine's max_num_batched_tokens is unknown (no "
                "scheduler_config): a miss is priced in the budget the bundle's profile "
                "was measured with"
            )
        self.ttl_watcher = BundleWatcher.from_env(env, self._ttl_warn, self._ttl_info, chunk)
        self.ttl_bundle_series = BundleSeries()
        self.ttl_bundle_series.observe(self.ttl_watcher)
        pool = self.kv_cache_manager.block_pool
        caching = bool(self.cache_config.enable_prefix_caching)
        program_cap = self._ttl_program_cap(env.get(ENV_PROGRAM_CAP))
        self.ttl = Retention(
            None,
            free=self._ttl_free_pinned,
            capacity_blocks=int(pool.num_gpu_blocks) - 1,  # the null block never holds KV
            caching=caching,
            program_cap=program_cap,
            counters=Counters(),
            on_pins_changed=self._ttl_pins_changed,
        )
        self.ttl.policy = self.ttl_watcher.policy
        if not caching and self.ttl.policy is not None and self.ttl.policy.params.pins:
            self._ttl_warn("ttlctl: prefix caching is off, so pins cannot help: none are made")
        log_path = env.get(ENV_LOG) or None
        self.ttl_log = EngineLog(log_path, self._ttl_warn) if log_path else None
        self._ttl_replica = replica_name(env)
        self._ttl_write_facts()
        self._ttl_pin_ttl: dict[str, float] = {}
        self._ttl_awaiting_first: dict[str, Request] = {}
        self._ttl_queue: ProgramQueue | None = None
        if self.ttl.policy is not None:
            self._ttl_install_queue()
        # the admission hook: vLLM's waiting path calls kv_cache_manager.allocate_slots
        self._ttl_allocate = self.kv_cache_manager.allocate_slots
        self.kv_cache_manager.allocate_slots = self._ttl_allocate_slots
        # the waiting path's prefix lookup, remembered while exact (ttlctl.engine.hitmemo)
        self.ttl_memo, memo_off = HitMemo.install(self.kv_cache_manager, self.connector, env)
        self._ttl_info(
            f"ttlctl: {type(self).__name__} on vLLM {VLLM_VERSION}, "
            f"{self.ttl.capacity_blocks} KV blocks, engine log {log_path or 'off'}"
            f"{f' (replica {self._ttl_replica})' if self._ttl_replica else ''}, "
            f"prefix-hit memo {'on' if memo_off is None else f'off ({memo_off})'}"
        )

    def _ttl_program_cap(self, given: str | None) -> int:
        """``TTLCTL_MAX_PROGRAMS``: a whole number >= 1; anything else warns once, naming
        the value, and the default holds."""
        if given is None or not given.strip():
            return DEFAULT_CAP
        try:
            cap = int(given)
        except ValueError:
            cap = 0
        if cap >= 1:
            return cap
        self._ttl_warn(
            f"ttlctl: {ENV_PROGRAM_CAP}={given!r} is not a whole number >= 1; "
            f"keeping {DEFAULT_CAP:,} programs"
        )
        return DEFAULT_CAP

    def _ttl_facts(self) -> EngineFacts:
        """The engine as configured (what a replay of its log must be sized like)."""
        doc = self.ttl_watcher.doc if self.ttl.policy is not None else None
        return configured(
            getattr(self, "vllm_config", None),
            self.cache_config,
            num_gpu_blocks=int(self.kv_cache_manager.block_pool.num_gpu_blocks),
            connector=getattr(self, "connector", None),
            vllm_version=VLLM_VERSION,
            bundle_sha256=str(doc["sha256"]) if doc is not None else None,
            replica=self._ttl_replica,
        )

    def _ttl_write_facts(self) -> None:
        if self.ttl_log is not None:
            self.ttl_log.write_facts(self._ttl_facts())

    def _ttl_warn(self, message: str) -> None:
        self.ttl_warnings.append(message)
        logger.warning("%s", message)

    def _ttl_info(self, message: str) -> None:
        logger.info("%s", message)

    def _ttl_install_queue(self) -> None:
        queue = ProgramQueue(self._ttl_key, self._ttl_program_of, on_empty=self.ttl.unpark)
        for request in self.waiting:
            queue.add_request(request)
        self.waiting = queue
        self._ttl_queue = queue
        # vLLM 0.34's --cache-aware-admission-window, as its scheduler applies it (0 unless
        # FCFS with prefix caching): it reorders the window by removing and prepending
        # requests, which this queue puts back in the policy's order
        window = getattr(self, "cache_aware_window", 0)
        if isinstance(window, int) and window > 0:
            self._ttl_warn(
                f"ttlctl: --cache-aware-admission-window {window} has no effect while a TTL "
                "policy orders the waiting queue (the program queue keeps its own order); it "
                "only costs a prefix lookup per request in the window at each step the cache is "
                "past --cache-aware-admission-threshold: set it to 0"
            )
        # vLLM 0.34's --max-num-inflight-kv-loads with a connector: a request the connector
        # may load asynchronously waits in the scheduler's own second queue, not this one
        loads = getattr(getattr(self, "scheduler_config", None), "max_num_inflight_kv_loads", None)
        if self.connector is not None and isinstance(loads, int) and loads > 0:
            self._ttl_warn(
                f"ttlctl: --max-num-inflight-kv-loads {loads}: the requests the KV connector "
                "loads asynchronously wait in vLLM's own queue, outside the program queue, so "
                "they are not ordered by program and a pin can expire while its call waits "
                "there; leave the option unset to keep every request in the policy's order"
            )

    # ------------------------------------------------------------ queue order

    def _ttl_program_of(self, request: Request) -> str | None:
        live = self.ttl.live.get(request.request_id)
        return live.tags.program if live is not None else None

    def _ttl_key(self, request: Request) -> tuple[float, ...]:
        preempted = request.status == RequestStatus.PREEMPTED
        priority = float(request.priority) if self.policy == SchedulingPolicy.PRIORITY else 0.0
        return self.ttl.key(self.ttl.live.get(request.request_id), preempted, priority)

    def _ttl_pins_changed(self, program: str) -> None:
        if self._ttl_queue is not None:
            self._ttl_queue.touch()

    def _ttl_waiting(self, program: str) -> bool:
        return self._ttl_queue is not None and self._ttl_queue.has_program(program)

    def _ttl_free_pinned(self, blocks: Sequence[Any]) -> None:
        # tail blocks first to be evicted, as in Scheduler._drain_deferred_frees
        self.kv_cache_manager.block_pool.free_blocks(reversed(blocks))
