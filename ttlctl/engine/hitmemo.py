"""The prefix hit of a waiting request, remembered while nothing it was read from changed.

vLLM looks up the prefix hit of the request at the head of its waiting queue
(``KVCacheManager.get_computed_blocks``: one hash-map probe per block of the prompt)
every step it tries to admit it. A head that does not fit (its memory is held by pins
the ``stall-only`` valve keeps while something runs) is looked up again each step, and
a long prompt costs a few thousand probes each time. :class:`HitMemo` wraps that
method on the manager instance and answers from the last lookup of the same request
when that answer still is what vLLM would find:

- the lookup is a pure function of the request's block hashes, the length bound and
  the cache map (a block hash -> the first block cached under it). A remembered hit is
  the blocks found for the first ``k`` hashes and, past them, a miss or the bound. The
  bound is the request's tokens less one, or less if the caller passes one; 0.34 also
  caps it at the request's own limit (prompt logprobs are scored from a given row,
  ``Request.get_max_cache_hit_length``), which the memo asks the request for;
- the map's answer for a hash changes only when the block it gives loses that hash
  (a new block with the same hash goes after it). Every loss goes through
  ``BlockPool._remove_cached_block_hashes`` (eviction by ``get_new_blocks`` and
  ``evict_blocks``, a partial block promoted, hashes moved to a copy), wrapped here to
  log the block; ``BlockPool.reset_prefix_cache`` (which replaces the map, or empties
  it in place in 0.34) drops every memo;
- a memo is used only if none of its blocks is logged since it was made or checked,
  and the request's first ``k`` hashes equal the remembered ones (a streaming update
  truncates and re-hashes them in place). The probe then resumes at hash ``k``, so a
  block cached since extends the hit, and the result is cut to the length bound
  (a request that grew has a longer one);
- every other case is vLLM's own lookup: prefix caching off or skipped for the
  request, several KV cache groups or any manager but full attention, EAGLE/MTP,
  context parallelism, hashes at a finer grain than blocks, a KV connector, KV events
  reported in full, a call shape the wrapper does not know, and any vLLM but the
  versions this was read against (0.32 to 0.34: ``compat.SUPPORTED``) or one whose
  ``get_computed_blocks`` takes other parameters.

``ttlctl.engine.hooks`` lists the vLLM methods and attributes used here, so that a
version that renames them fails the import-time check; ``tests/tools/vllm_hooks.py``
also checks, in the sources, that the cache map loses entries only in
``_remove_cached_block_hashes`` and is replaced or emptied only by
``reset_prefix_cache``.

The lookup has no other side effect (prefix-cache stats are recorded by the scheduler
at admission). A memo is dropped when its request is admitted or finishes; at most
:data:`CAP` are kept (oldest first out), and the removal log is checked and emptied
when it grows past :data:`LOG_CAP` entries.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import vllm
from vllm.v1.core.kv_cache_coordinator import UnitaryKVCacheCoordinator
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager
from vllm.v1.request import Request

from ttlctl.engine import compat

#: ``TTLCTL_PREFIX_MEMO=0`` turns the memo off (vLLM's lookup every time)
ENV = "TTLCTL_PREFIX_MEMO"
#: waiting requests remembered at once
CAP = 32
#: removed blocks logged before every memo is checked against them and the log emptied
LOG_CAP = 65_536
_INCREMENTAL = "incremental"


#: the parameters (after ``self``) of ``KVCacheManager.get_computed_blocks`` the memo
#: was written against: vLLM 0.32 has the first, 0.33 and 0.34 the second
LOOKUP_SIGNATURES = (("request",), ("request", "max_cache_hit_length"))
#: the request bounds its own hit (0.34: ``Request.get_max_cache_hit_length``, a hook
#: of that release in :data:`ttlctl.engine.hooks.HOOKS`)
REQUEST_BOUNDS = hasattr(Request, "get_max_cache_hit_length")


def _lookup_signature() -> tuple[str, ...]:
    params = list(inspect.signature(KVCacheManager.get_computed_blocks).parameters.values())
    return tuple(p.name for p in params[1:])


def why_not(manager: Any, connector: Any) -> str | None:
    """Why the memo cannot be exact for this KV cache manager (None: it can)."""
    version = str(getattr(vllm, "__version__", "unknown"))
    if not compat.supported(version):
        return f"written against vLLM {compat.supported_text()}, found {version}"
    signature = _lookup_signature()
    if signature not in LOOKUP_SIGNATURES:
        return f"KVCacheManager.get_computed_blocks has parameters {signature}"
    if connector is not None:
        return "a KV connector is configured"
    if not manager.enable_caching:
        return "prefix caching is off"
    coordinator = manager.coordinator
    if type(coordinator) is not UnitaryKVCacheCoordinator:
        return f"the KV cache has several groups ({type(coordinator).__name__})"
    single = coordinator.single_type_managers[0]
    if type(single) is not FullAttentionManager:
        return f"the KV cache is not full attention ({type(single).__name__})"
    # 0.33 drops a block for drop_eagle_group_ids (EAGLE groups unless hashes look ahead)
    if getattr(coordinator, "drop_eagle_group_ids", coordinator.eagle_group_ids):
        return "EAGLE/MTP drops the last block of a hit"
    if coordinator.dcp_world_size != 1 or coordinator.pcp_world_size != 1:
        return "context parallelism is on"
    if not manager.block_pool.hash_block_size == single.block_size == coordinator.block_size:
        return "block hashes are finer than blocks"
    return None


@dataclass(slots=True)
class _Memo:
    request: Any
    #: the request's first ``len(blocks)`` block hashes when the hit was found
    hashes: list[Any]
    blocks: list[Any]
    #: the removal log's length when the memo was last checked
    mark: int
    #: ids of ``blocks``, made when first needed
    ids: set[int] | None = None


@dataclass(slots=True)
class MemoStats:
    """What the memo did (for tests and benches; not the plugin's counters)."""

    lookups: int = 0
    reused: int = 0
    stale: int = 0
    extended: int = 0
    passed: int = 0

    def snapshot(self) -> dict[str, int]:
        return {
            "lookups": self.lookups,
            "reused": self.reused,
            "stale": self.stale,
            "extended": self.extended,
            "passed": self.passed,
        }


class HitMemo:
    """Wraps ``manager.get_computed_blocks`` and two methods of its block pool, on the
    instances (see the module docstring); :meth:`install` builds one where it is exact."""

    def __init__(self, manager: Any, *, cap: int = CAP, log_cap: int = LOG_CAP) -> None:
        self.manager = manager
        self.cap = cap
        self.log_cap = log_cap
        self.stats = MemoStats()
        pool = manager.block_pool
        self._lookup: Callable[..., Any] = manager.get_computed_blocks
        self._remove: Callable[[Any], Any] = pool._remove_cached_block_hashes
        self._reset: Callable[..., Any] = pool.reset_prefix_cache
        self._get_cached: Callable[[Any, list[int]], Any] = pool.get_cached_block
        self._groups = [0]
        self._block_size = int(manager.coordinator.single_type_managers[0].block_size)
        self._memos: dict[str, _Memo] = {}
        #: ids of blocks that lost a cache hash while some memo was kept
        self._removed: list[int] = []
        manager.get_computed_blocks = self.get_computed_blocks
        pool._remove_cached_block_hashes = self._removed_hashes
        pool.reset_prefix_cache = self._reset_prefix_cache

    @classmethod
    def install(
        cls, manager: Any, connector: Any, env: Mapping[str, str]
    ) -> tuple[HitMemo | None, str | None]:
        """The memo wrapped onto ``manager``; None and why not where it cannot be exact
        or ``TTLCTL_PREFIX_MEMO=0`` turns it off."""
        if env.get(ENV, "1").strip() == "0":
            return None, f"{ENV}=0"
        why = why_not(manager, connector)
        if why is not None:
            return None, why
        return cls(manager), None

    # ------------------------------------------------------------ what the pool tells

    def _removed_hashes(self, block: Any) -> Any:
        removed = self._remove(block)
        if removed and self._memos:
            self._removed.append(block.block_id)
            if len(self._removed) > self.log_cap:
                self._check_all()
        return removed

    def _reset_prefix_cache(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._reset(*args, **kwargs)
        finally:
            self.clear()

    # ------------------------------------------------------------ the lookup

    def get_computed_blocks(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        self.stats.lookups += 1
        bound = _bound(request, args, kwargs)
        manager = self.manager
        if (
            bound is None
            or bound < 0
            or not manager.prefix_cache_lookup_enabled(request)
            or (
                manager.enable_kv_cache_events
                and getattr(request, "kv_cache_report_mode", _INCREMENTAL) != _INCREMENTAL
            )
        ):
            self.stats.passed += 1
            return self._lookup(request, *args, **kwargs)
        limit = bound // self._block_size
        memo = self._memos.get(request.request_id)
        if memo is not None and memo.request is request and self._holds(memo, request):
            self.stats.reused += 1
            blocks = memo.blocks
            if len(blocks) < limit:
                self._extend(memo, request.block_hashes, limit)
            found = blocks[:limit] if len(blocks) > limit else list(blocks)
            return manager.create_kv_cache_blocks((found,)), len(found) * self._block_size, 0
        if memo is not None:
            self.stats.stale += 1
        result = self._lookup(request, *args, **kwargs)
        self._remember(request, result)
        return result

    def _holds(self, memo: _Memo, request: Any) -> bool:
        """No block of ``memo`` lost its hash since it was checked, and the request's
        first hashes are those it was found for."""
        log = self._removed
        if memo.mark < len(log):
            if memo.ids is None:
                memo.ids = {b.block_id for b in memo.blocks}
            fresh = memo.ids.isdisjoint(log[memo.mark :])
            memo.mark = len(log)
            if not fresh:
                return False
        hashes: list[Any] = request.block_hashes[: len(memo.hashes)]
        return hashes == memo.hashes

    def _extend(self, memo: _Memo, hashes: Any, limit: int) -> None:
        """Probe on from the first hash the memo did not find, as vLLM's loop does."""
        blocks = memo.blocks
        start = len(blocks)
        get, groups = self._get_cached, self._groups
        for i in range(start, min(limit, len(hashes))):
            found = get(hashes[i], groups)
            if not found:
                break
            blocks.append(found[0])
            memo.hashes.append(hashes[i])
            if memo.ids is not None:
                memo.ids.add(found[0].block_id)
        if len(blocks) > start:
            self.stats.extended += 1

    def _remember(self, request: Any, result: Any) -> None:
        computed, num_tokens, boundary = result
        groups = computed.blocks
        if boundary or len(groups) != 1:
            return
        blocks = list(groups[0])
        if num_tokens != len(blocks) * self._block_size:
            return
        rid = request.request_id
        memos = self._memos
        memos.pop(rid, None)
        while len(memos) >= self.cap:
            del memos[next(iter(memos))]
        if not memos:
            self._removed.clear()
        hashes = list(request.block_hashes[: len(blocks)])
        memos[rid] = _Memo(request, hashes, blocks, len(self._removed))

    # ------------------------------------------------------------ bounds

    def forget(self, request_id: str) -> None:
        """Drop the memo of a request that was admitted or finished."""
        if self._memos.pop(request_id, None) is not None and not self._memos:
            self._removed.clear()

    def clear(self) -> None:
        self._memos.clear()
        self._removed.clear()

    def _check_all(self) -> None:
        """Check every memo against the log now, keep the sound ones, empty the log."""
        log = self._removed
        for rid, memo in list(self._memos.items()):
            if memo.ids is None:
                memo.ids = {b.block_id for b in memo.blocks}
            if not memo.ids.isdisjoint(log[memo.mark :]):
                del self._memos[rid]
        log.clear()
        for memo in self._memos.values():
            memo.mark = 0

    def __len__(self) -> int:
        return len(self._memos)


def _bound(request: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """The hit's length bound in tokens, as vLLM computes it (0.33 and 0.34 may pass one
    as ``max_cache_hit_length``; 0.34 lets the request lower it: :data:`REQUEST_BOUNDS`);
    None for a call shape the wrapper does not know."""
    value = None
    if args:
        if len(args) > 1 or kwargs:
            return None
        value = args[0]
    elif kwargs:
        if set(kwargs) != {"max_cache_hit_length"}:
            return None
        value = kwargs["max_cache_hit_length"]
    if value is not None and not isinstance(value, int):
        return None
    if REQUEST_BOUNDS:
        return int(request.get_max_cache_hit_length(value))
    return int(request.num_tokens) - 1 if value is None else value
