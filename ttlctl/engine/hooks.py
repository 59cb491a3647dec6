"""The vLLM internals the plugin relies on, as data: which class, which name, how it is used.

vLLM's scheduler interface is not public (vLLM says so when it loads a custom
scheduler class), so each supported version is read, and this table is what a
version must keep for the plugin to work on it. A hook is used in one of five ways:

- ``override``: the plugin redefines the method with exactly these parameters
  (vLLM's callers may pass any parameter vLLM's own method has, so a new one,
  even with a default, breaks the override);
- ``wrap``: the plugin overrides or wraps it and passes ``*args, **kwargs``
  through, reading only the named parameters (``params`` lead, ``keywords``
  anywhere);
- ``call``: the plugin calls it with ``params`` as positional arguments, so
  those must lead and every other parameter needs a default;
- ``member``: a class-level name (an enum member, a config field);
- ``attribute``: an instance attribute vLLM sets; it cannot be seen on the
  class, so only the static check over vLLM's sources looks for it.

A hook that only some releases have names them (``releases``; none: every supported
release): a version is checked against the hooks of its release
(:func:`for_release`).

Two checks read this table: :func:`ttlctl.engine.compat.check_hooks` with
``inspect`` on the installed vLLM at import, and ``tests/tools/vllm_hooks.py``
with ``ast`` on a folder of vLLM sources (a version that cannot be installed
here, e.g. the CUDA wheel on a CPU machine), which also checks the call sites
the scheduler's docstring cites. Both judge a signature with :func:`mismatch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

OVERRIDE, WRAP, CALL, MEMBER, ATTRIBUTE = "override", "wrap", "call", "member", "attribute"
METHOD_USES = (OVERRIDE, WRAP, CALL)

#: parameter kinds, as both checks see them
POSITIONAL, KEYWORD, VAR_POSITIONAL, VAR_KEYWORD = "positional", "keyword", "*", "**"

SCHEDULER = "vllm.v1.core.sched.scheduler"
ASYNC_SCHEDULER = "vllm.v1.core.sched.async_scheduler"
REQUEST_QUEUE = "vllm.v1.core.sched.request_queue"
KV_CACHE_MANAGER = "vllm.v1.core.kv_cache_manager"
BLOCK_POOL = "vllm.v1.core.block_pool"
KV_CACHE_COORDINATOR = "vllm.v1.core.kv_cache_coordinator"
SINGLE_TYPE_MANAGER = "vllm.v1.core.single_type_kv_cache_manager"
KV_CACHE_UTILS = "vllm.v1.core.kv_cache_utils"
REQUEST = "vllm.v1.request"
SCHEDULER_CONFIG = "vllm.config.scheduler"

#: a vLLM release, (major, minor)
Release = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Hook:
    module: str
    owner: str
    name: str
    use: str
    params: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    #: the releases that have it (empty: every one)
    releases: tuple[Release, ...] = ()

    @property
    def label(self) -> str:
        if self.use in METHOD_USES:
            shown = [*self.params, *(f"{k}=" for k in self.keywords)]
            if self.use == WRAP:
                shown.append("...")
            return f"{self.owner}.{self.name}({', '.join(shown)})"
        return f"{self.owner}.{self.name}"

    @property
    def where(self) -> str:
        return f"{self.label} in {self.module}"


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    kind: str
    default: bool = False


def _hook(module: str, use: str, spec: str, releases: tuple[Release, ...] = ()) -> Hook:
    """``"Owner.name(a, b, kw=, ...)"``: ``a, b`` lead, ``kw`` anywhere, ``...`` passed through."""
    head, _, args = spec.partition("(")
    owner, name = head.split(".", 1)
    parts = [a.strip() for a in args.rstrip(")").split(",") if a.strip() not in ("", "...")]
    params = tuple(a for a in parts if not a.endswith("="))
    keywords = tuple(a[:-1] for a in parts if a.endswith("="))
    return Hook(module, owner, name, use, params, keywords, releases)


def _each(module: str, use: str, *specs: str) -> list[Hook]:
    return [_hook(module, use, spec) for spec in specs]


HOOKS: tuple[Hook, ...] = (
    # TTLScheduler.__new__ reads vllm_config (the engine core passes it by keyword)
    _hook(SCHEDULER, WRAP, "Scheduler.__init__(vllm_config, ...)"),
    *_each(SCHEDULER, WRAP, "Scheduler.schedule(...)", "Scheduler.update_from_output(...)"),
    *_each(SCHEDULER, WRAP, "Scheduler.reset_prefix_cache(...)"),
    _hook(SCHEDULER, WRAP, "Scheduler._free_request(request, ...)"),
    _hook(SCHEDULER, ATTRIBUTE, "Scheduler.connector"),
    *_each(SCHEDULER, OVERRIDE, "Scheduler.add_request(request)", "Scheduler.shutdown()"),
    _hook(SCHEDULER, OVERRIDE, "Scheduler._free_blocks(request)"),
    _hook(SCHEDULER, CALL, "Scheduler._request_blocks_can_be_freed(request)"),
    *_each(SCHEDULER, ATTRIBUTE, "Scheduler.kv_cache_manager", "Scheduler.cache_config"),
    # a miss is priced in steps of the engine's budget (ttlctl.bundle.policy_from)
    _hook(SCHEDULER, ATTRIBUTE, "Scheduler.scheduler_config"),
    *_each(SCHEDULER, ATTRIBUTE, "Scheduler.running", "Scheduler.waiting"),
    *_each(SCHEDULER, ATTRIBUTE, "Scheduler.requests", "Scheduler.policy"),
    # 0.34's cache-aware admission window as applied (the plugin warns that it is moot)
    _hook(SCHEDULER, ATTRIBUTE, "Scheduler.cache_aware_window", ((0, 34),)),
    _hook(ASYNC_SCHEDULER, WRAP, "AsyncScheduler.__init__(...)"),
    # the admission hook, wrapped on the instance; reads the waiting path's prefix hit
    _hook(
        KV_CACHE_MANAGER,
        WRAP,
        "KVCacheManager.allocate_slots(request, num_new_computed_tokens=, ...)",
    ),
    _hook(KV_CACHE_MANAGER, CALL, "KVCacheManager.pop_blocks_for_free(request)"),
    _hook(KV_CACHE_MANAGER, ATTRIBUTE, "KVCacheManager.block_pool"),
    _hook(BLOCK_POOL, CALL, "BlockPool.free_blocks(ordered_blocks)"),
    _hook(BLOCK_POOL, ATTRIBUTE, "BlockPool.num_gpu_blocks"),
    # the prefix-hit memo (ttlctl.engine.hitmemo): the lookup it wraps on the manager,
    # what it reads to decide it is exact, the pool methods it wraps to see evictions
    _hook(KV_CACHE_MANAGER, WRAP, "KVCacheManager.get_computed_blocks(request, ...)"),
    *_each(
        KV_CACHE_MANAGER,
        CALL,
        "KVCacheManager.prefix_cache_lookup_enabled(request)",
        "KVCacheManager.create_kv_cache_blocks(blocks)",
    ),
    *_each(
        KV_CACHE_MANAGER,
        ATTRIBUTE,
        "KVCacheManager.enable_caching",
        "KVCacheManager.enable_kv_cache_events",
        "KVCacheManager.coordinator",
    ),
    *_each(
        KV_CACHE_COORDINATOR,
        ATTRIBUTE,
        *(
            f"UnitaryKVCacheCoordinator.{name}"
            for name in (
                "single_type_managers",
                "eagle_group_ids",
                "dcp_world_size",
                "pcp_world_size",
                "block_size",
            )
        ),
    ),
    _hook(SINGLE_TYPE_MANAGER, ATTRIBUTE, "FullAttentionManager.block_size"),
    _hook(BLOCK_POOL, OVERRIDE, "BlockPool._remove_cached_block_hashes(block)"),
    _hook(BLOCK_POOL, WRAP, "BlockPool.reset_prefix_cache(...)"),
    _hook(BLOCK_POOL, CALL, "BlockPool.get_cached_block(block_hash, kv_cache_group_ids)"),
    _hook(BLOCK_POOL, ATTRIBUTE, "BlockPool.hash_block_size"),
    _hook(KV_CACHE_UTILS, ATTRIBUTE, "KVCacheBlock.block_id"),
    # ProgramQueue replaces Scheduler.waiting and implements these
    *_each(
        REQUEST_QUEUE,
        OVERRIDE,
        "RequestQueue.add_request(request)",
        "RequestQueue.pop_request()",
        "RequestQueue.peek_request()",
        "RequestQueue.prepend_request(request)",
        "RequestQueue.prepend_requests(requests)",
        "RequestQueue.remove_request(request)",
        "RequestQueue.remove_requests(requests)",
        "RequestQueue.__bool__()",
        "RequestQueue.__len__()",
        "RequestQueue.__iter__()",
    ),
    _hook(REQUEST_QUEUE, MEMBER, "SchedulingPolicy.PRIORITY"),
    *_each(
        REQUEST,
        MEMBER,
        "RequestStatus.WAITING",
        "RequestStatus.PREEMPTED",
        "RequestStatus.FINISHED_STOPPED",
        "RequestStatus.FINISHED_LENGTH_CAPPED",
        "RequestStatus.FINISHED_REPETITION",
        "RequestStatus.FINISHED_ABORTED",
    ),
    *_each(REQUEST, CALL, "Request.is_finished()", "Request.get_finished_reason()"),
    *_each(
        REQUEST,
        ATTRIBUTE,
        *(
            f"Request.{name}"
            for name in (
                "request_id",
                "status",
                "priority",
                "arrival_time",
                "num_preemptions",
                "prefill_stats",
                "num_computed_tokens",
                "num_prompt_tokens",
                "num_output_tokens",
                "sampling_params",
                "session_id",
                "block_hashes",
                "num_tokens",
            )
        ),
    ),
    # the lookup's length bound (ttlctl.engine.hitmemo): the request's tokens less one,
    # unless it skips the cache (0.32, 0.33); 0.34 also bounds it by the request's own
    # limit (prompt logprobs are scored from a row on), which the memo asks it for
    _hook(REQUEST, ATTRIBUTE, "Request.skip_reading_prefix_cache", ((0, 32), (0, 33))),
    _hook(REQUEST, CALL, "Request.get_max_cache_hit_length(bound)", ((0, 34),)),
    _hook(SCHEDULER_CONFIG, MEMBER, "SchedulerConfig.async_scheduling"),
    _hook(SCHEDULER_CONFIG, MEMBER, "SchedulerConfig.max_num_batched_tokens"),
)


def for_release(release: Release, table: Sequence[Hook] = HOOKS) -> tuple[Hook, ...]:
    """The hooks of ``table`` that ``release`` must have."""
    return tuple(h for h in table if not h.releases or release in h.releases)


#: classes the plugin subclasses whole: every abstract method must be a hook above
#: (a new one would make ProgramQueue abstract, and fail only when a policy loads)
COMPLETE: tuple[tuple[str, str], ...] = ((REQUEST_QUEUE, "RequestQueue"),)


def implemented(module: str, owner: str, table: Sequence[Hook] = HOOKS) -> frozenset[str]:
    """The methods of ``owner`` the plugin implements (its ``override`` hooks)."""
    return frozenset(
        h.name for h in table if (h.module, h.owner) == (module, owner) and h.use == OVERRIDE
    )


def signature(params: Sequence[Param]) -> str:
    shown: list[str] = []
    star = False
    for p in params:
        if p.kind == VAR_POSITIONAL:
            shown.append(f"*{p.name}")
            star = True
        elif p.kind == VAR_KEYWORD:
            shown.append(f"**{p.name}")
        else:
            if p.kind == KEYWORD and not star:
                shown.append("*")
                star = True
            shown.append(f"{p.name}=..." if p.default else p.name)
    return f"({', '.join(shown)})"


def mismatch(hook: Hook, params: Sequence[Param]) -> str | None:
    """Why a method with ``params`` (after ``self``) does not fit the hook; None if it does."""
    positional = [p for p in params if p.kind == POSITIONAL]
    names = {p.name for p in params if p.kind in (POSITIONAL, KEYWORD)}
    lead = tuple(p.name for p in positional[: len(hook.params)])
    found = f"has {signature(params)}"
    if hook.use == OVERRIDE:
        if tuple(p.name for p in params) != hook.params or len(positional) != len(params):
            return f"{found}; the plugin overrides it as ({', '.join(hook.params)})"
    elif hook.use == WRAP:
        if lead != hook.params:
            return f"{found}; the plugin needs ({', '.join(hook.params)}, ...) first"
        missing = [k for k in hook.keywords if k not in names]
        if missing:
            return f"{found}; the plugin reads {', '.join(missing)}"
    elif hook.use == CALL:
        if lead != hook.params:
            return f"{found}; the plugin calls it with ({', '.join(hook.params)})"
        rest = [p for p in params if p.kind in (POSITIONAL, KEYWORD)][len(hook.params) :]
        required = [p.name for p in rest if not p.default]
        if required:
            return f"{found}; the plugin does not pass {', '.join(required)}"
    return None
