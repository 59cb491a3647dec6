"""The prefix-hit memo on vLLM's real KV cache manager and block pool (no scheduler).

Every answer the memo gives is compared with vLLM's own lookup
(``KVCacheManager.get_computed_blocks``, the method the memo wraps) on the same
state, block by block (identities, not only ids). The directed tests make each
invalidation rule happen: a memoised block evicted (by an allocation and by
``evict_blocks``), a duplicate of a memoised block evicted (the memo still holds),
a block cached since extending the hit, a reset, a request that grows, one whose
hashes are truncated and recomputed in place (a streaming update), and the bounds on
what is kept. A random walk over allocations, frees, preemptions, decodes,
evictions and resets checks every lookup on the way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from vllm.v1.request import Request, RequestStatus

from ttlctl.engine import hitmemo
from ttlctl.engine.hitmemo import ENV, REQUEST_BOUNDS, HitMemo, why_not

BS = 4


def _spec(window: int | None = None) -> Any:
    if window is not None:
        return SlidingWindowSpec(
            block_size=BS, num_kv_heads=2, head_size=64, dtype=torch.bfloat16, sliding_window=window
        )
    return FullAttentionSpec(block_size=BS, num_kv_heads=2, head_size=64, dtype=torch.bfloat16)


def manager(blocks: int = 24, *groups: Any, **kwargs: Any) -> KVCacheManager:
    specs = groups or (_spec(),)
    config = KVCacheConfig(
        num_blocks=blocks + 1,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec([f"layer{i}"], s) for i, s in enumerate(specs)],
    )
    kwargs.setdefault("enable_caching", True)
    kwargs.setdefault("scheduler_block_size", BS)
    kwargs.setdefault("hash_block_size", BS)
    return KVCacheManager(config, max_model_len=4096, **kwargs)


def _hasher() -> Any:
    fn = get_hash_fn_by_name("sha256")
    init_none_hash(fn)
    return get_request_block_hasher(BS, fn)


HASHER = _hasher()


@dataclass
class Cache:
    """A KV cache manager with the memo, used the way the scheduler's waiting loop uses it."""

    blocks: int = 24
    m: KVCacheManager = field(init=False)
    memo: HitMemo = field(init=False)
    n: int = 0

    def __post_init__(self) -> None:
        self.m = manager(self.blocks)
        memo, why = HitMemo.install(self.m, None, {})
        assert memo is not None, why
        self.memo = memo

    def request(self, tokens: list[int], **params: Any) -> Request:
        self.n += 1
        sampling = SamplingParams(max_tokens=8, **params)
        return Request(f"r{self.n}", list(tokens), sampling, None, block_hasher=HASHER)

    def look(self, request: Request) -> tuple[list[Any], int]:
        """The memo's answer, checked against vLLM's own lookup on the same state."""
        got = self.m.get_computed_blocks(request)
        want = self.memo._lookup(request)
        assert got[1:] == want[1:]
        assert len(got[0].blocks) == len(want[0].blocks) == 1
        ours, theirs = list(got[0].blocks[0]), list(want[0].blocks[0])
        assert len(ours) == len(theirs) and all(a is b for a, b in zip(ours, theirs, strict=True))
        assert (got[0] is self.m.empty_kv_cache_blocks) == (want[0] is self.m.empty_kv_cache_blocks)
        return ours, got[1]

    def admit(self, request: Request) -> bool:
        hit, tokens = self.look(request)
        blocks = self.m.allocate_slots(
            request,
            request.num_tokens - tokens,
            num_new_computed_tokens=tokens,
            new_computed_blocks=self.m.create_kv_cache_blocks((hit,)),
        )
        if blocks is None:
            return False
        self.memo.forget(request.request_id)
        request.status = RequestStatus.RUNNING
        request.num_computed_tokens = request.num_tokens
        return True

    def free(self, request: Request) -> None:
        self.m.free(request)
        self.memo.forget(request.request_id)

    def fill(self) -> Request:
        """Take every free block (evicting every cached one that is free)."""
        hog = self.request([10**6 + i for i in range(self.m.block_pool.get_num_free_blocks() * BS)])
        assert self.admit(hog)
        return hog


def tokens(stem: int, n: int) -> list[int]:
    return [stem * 1000 + i for i in range(n)]


def test_a_blocked_request_is_answered_from_the_memo_with_vllms_blocks() -> None:
    c = Cache()
    a = c.request(tokens(1, 8 * BS))
    assert c.admit(a)
    c.free(a)  # its blocks stay cached, free
    b = c.request(tokens(1, 8 * BS + 3))
    for _ in range(5):
        hit, n = c.look(b)
        assert n == 8 * BS and len(hit) == 8
    assert c.memo.stats.reused == 4 and c.memo.stats.stale == 0
    assert c.admit(b)
    assert len(c.memo) == 0  # admitted: forgotten


def test_eviction_of_a_memoised_block_is_seen() -> None:
    c = Cache(blocks=12)
    a = c.request(tokens(1, 6 * BS))
    assert c.admit(a)
    c.free(a)
    b = c.request(tokens(1, 6 * BS + 1))
    assert c.look(b)[1] == 6 * BS
    # an allocation of 8 blocks takes the 6 free uncached ones first (LIFO), then evicts
    # two of a's cached blocks, tail first
    other = c.request(tokens(2, 8 * BS))
    assert c.admit(other)
    assert c.look(b)[1] == 4 * BS
    assert c.memo.stats.stale == 1
    c.m.evict_blocks({c.look(b)[0][1].block_id})  # the connector's eviction path
    assert c.look(b)[1] == BS
    assert c.memo.stats.stale == 2


def test_eviction_of_a_duplicate_leaves_the_memo_sound() -> None:
    c = Cache(blocks=20)
    a = c.request(tokens(1, 4 * BS))
    assert c.admit(a)
    # the same prompt allocated without its hit: its blocks are cached under the same
    # hashes, after a's (vLLM does not deduplicate)
    dup = c.request(tokens(1, 4 * BS))
    assert c.m.allocate_slots(dup, dup.num_tokens) is not None
    pool = c.m.block_pool
    assert len(pool.cached_block_hash_to_block) == 4
    b = c.request(tokens(1, 4 * BS + 2))
    first = c.look(b)[0]
    owned = c.m.get_blocks(a.request_id).blocks[0]
    assert [x.block_id for x in first] == [x.block_id for x in owned]
    c.free(dup)
    c.fill()  # evicts dup's blocks, which a's references keep the memo's blocks from
    again = c.look(b)[0]
    assert all(x is y for x, y in zip(first, again, strict=True))
    assert c.memo.stats.stale == 0 and c.memo.stats.reused >= 1


def test_a_block_cached_since_extends_the_hit() -> None:
    c = Cache(blocks=16)
    a = c.request(tokens(1, 3 * BS))
    assert c.admit(a)
    other = c.request(tokens(2, 2 * BS))
    assert c.admit(other)
    unrelated = {x.block_id for x in c.m.get_blocks(other.request_id).blocks[0]}
    c.free(other)
    b = c.request(tokens(1, 7 * BS))
    assert c.look(b)[1] == 3 * BS
    c.m.evict_blocks(unrelated)
    assert c.look(b)[1] == 3 * BS  # an unrelated eviction: the memo holds
    longer = c.request(tokens(1, 6 * BS))
    assert c.admit(longer)  # caches blocks 4 to 6 of the same prefix
    assert c.look(b)[1] == 6 * BS
    assert c.memo.stats.extended == 1 and c.memo.stats.stale == 0
    c.free(longer)
    c.fill()  # evicts the blocks the hit was extended by
    assert c.look(b)[1] == 3 * BS
    assert c.memo.stats.stale == 1


def test_a_reset_drops_every_memo() -> None:
    c = Cache()
    a = c.request(tokens(1, 5 * BS))
    assert c.admit(a)
    c.free(a)
    b = c.request(tokens(1, 5 * BS + 1))
    assert c.look(b)[1] == 5 * BS
    assert c.m.reset_prefix_cache()
    assert len(c.memo) == 0
    assert c.look(b)[1] == 0


def test_a_request_that_grows_or_is_rehashed() -> None:
    c = Cache(blocks=40)
    a = c.request(tokens(1, 6 * BS) + [7] * (4 * BS))
    assert c.admit(a)
    b = c.request(tokens(1, 6 * BS))
    assert c.look(b)[1] == 5 * BS  # the last token is always computed: prompt - 1 bounds the hit
    b.append_output_token_ids([7] * (2 * BS))  # resumed with output: a longer bound
    assert c.look(b)[1] == 7 * BS
    assert c.memo.stats.extended == 1
    # a streaming update: tokens and hashes truncated in place, then other tokens
    del b._all_token_ids[3 * BS :]
    del b.block_hashes[3:]
    b._all_token_ids.extend([9] * (5 * BS))
    b.update_block_hashes()
    assert c.look(b)[1] == 3 * BS
    assert c.memo.stats.stale == 1
    # shorter than the memo: its hit is cut to the new bound
    del b._all_token_ids[2 * BS :]
    del b.block_hashes[2:]
    assert c.look(b)[1] == BS


def test_bounds_cap_forget_and_log() -> None:
    c = Cache(blocks=40)
    c.memo.cap = 3
    a = c.request(tokens(1, 8 * BS))
    assert c.admit(a)
    c.free(a)
    waiting = [c.request(tokens(1, (2 + i) * BS)) for i in range(5)]
    for r in waiting:
        c.look(r)
    assert len(c.memo) == 3 and set(c.memo._memos) == {r.request_id for r in waiting[2:]}
    c.memo.forget(waiting[2].request_id)
    assert len(c.memo) == 2
    c.memo.log_cap = 2
    c.fill()  # evicts a's blocks: the log overflows and every memo is checked
    assert len(c.memo._removed) <= 2 and len(c.memo) == 0
    for r in waiting:
        assert c.look(r)[1] == 0


def test_what_is_left_to_vllm() -> None:
    c = Cache()
    a = c.request(tokens(1, 4 * BS))
    assert c.admit(a)
    skip = c.request(tokens(1, 4 * BS + 1), skip_reading_prefix_cache=True)
    assert c.look(skip)[1] == 0  # (prompt logprobs set it by default): vLLM skips the lookup
    assert c.memo.stats.passed == 1 and len(c.memo) == 0
    events = manager(enable_kv_cache_events=True)
    memo, _ = HitMemo.install(events, None, {})
    assert memo is not None
    r = Request("x", tokens(1, 9), SamplingParams(max_tokens=1), None, block_hasher=HASHER)
    r.kv_cache_report_mode = "full"  # type: ignore[attr-defined]
    events.get_computed_blocks(r)
    assert memo.stats.passed == 1
    assert HitMemo.install(manager(), None, {ENV: "0"}) == (None, f"{ENV}=0")


def test_a_request_that_caps_its_own_hit_is_cut_where_vllm_cuts_it() -> None:
    """vLLM 0.34 lets a request cap its prefix hit (prompt logprobs scored from row k on
    reuse at most k cached tokens): a memo extended by blocks cached since stops there.
    0.32 and 0.33 read the whole cache for such a request (no cap)."""
    c = Cache()
    assert c.admit(c.request(tokens(1, 2 * BS)))
    capped = c.request(
        tokens(1, 6 * BS + 1),
        prompt_logprobs=1,
        prompt_logprob_start=3 * BS + 1,
        skip_reading_prefix_cache=False,
    )
    assert c.look(capped)[1] == 2 * BS and len(c.memo) == 1  # waiting, remembered
    assert c.admit(c.request(tokens(1, 5 * BS)))  # caches blocks 2 to 4 of the same prefix
    # c.look compares the memo's answer with vLLM's own lookup, block by block
    assert c.look(capped)[1] == (3 * BS if REQUEST_BOUNDS else 5 * BS)
    assert c.memo.stats.reused == 1 and c.memo.stats.extended == 1


class _Capping:
    """A request as vLLM 0.34 makes one: it caps its own hit (``get_max_cache_hit_length``:
    the least of its tokens less one, its own limit and the bound given)."""

    num_tokens = 40

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.asked: list[int | None] = []

    def get_max_cache_hit_length(self, bound: int | None = None) -> int:
        self.asked.append(bound)
        return min(x for x in (self.num_tokens - 1, self.limit, bound) if x is not None)


@pytest.mark.parametrize("capping", [False, True])
def test_the_bound_is_vllms_for_every_call_shape(
    monkeypatch: pytest.MonkeyPatch, capping: bool
) -> None:
    """0.32 and 0.33 bound a hit by the request's tokens less one or the bound passed; 0.34
    asks the request, passing the bound on (``REQUEST_BOUNDS``, read from vLLM's class: the
    installed vLLM runs one branch, ``make vllm-check`` the other on vLLM's own request)."""
    monkeypatch.setattr(hitmemo, "REQUEST_BOUNDS", capping)
    r = _Capping(limit=12)
    shapes = [((), {}), ((20,), {}), ((), {"max_cache_hit_length": 7}), ((None,), {})]
    got = [hitmemo._bound(r, args, kwargs) for args, kwargs in shapes]
    assert got == ([12, 12, 7, 12] if capping else [39, 20, 7, 39])
    assert r.asked == ([None, 20, 7, None] if capping else [])
    # shapes the wrapper does not know go to vLLM's own lookup (None), the request unasked
    for args, kwargs in [(("x",), {}), ((1, 2), {}), ((), {"other": 3}), ((1,), {"x": 1})]:
        assert hitmemo._bound(r, args, kwargs) is None
    assert len(r.asked) == (4 if capping else 0)


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda: manager(), None),
        (lambda: manager(enable_caching=False), "prefix caching is off"),
        (lambda: manager(24, _spec(), _spec(window=8)), "several groups"),
        (lambda: manager(24, _spec(window=8)), "not full attention"),
        (lambda: manager(use_eagle=True), "EAGLE"),
        (
            lambda: manager(dcp_world_size=2, scheduler_block_size=2 * BS, hash_block_size=2 * BS),
            "context parallelism",
        ),
        (lambda: manager(pcp_world_size=2), "context parallelism"),
    ],
)
def test_only_configurations_where_it_is_exact(make: Any, why: str | None) -> None:
    m = make()
    found = why_not(m, None)
    assert found is None if why is None else why in str(found)
    assert why_not(manager(), object()) == "a KV connector is configured"
    before = m.get_computed_blocks
    memo, reason = HitMemo.install(m, None, {})
    assert (memo is None) == (why is not None) and reason == found
    assert (m.get_computed_blocks == before) == (why is not None)


# ------------------------------------------------------------ a random walk

ops = st.lists(
    st.one_of(
        st.tuples(st.just("new"), st.integers(0, 2), st.integers(1, 14 * BS)),
        st.tuples(st.just("look"), st.integers(0, 9)),
        st.tuples(st.just("admit"), st.integers(0, 9)),
        st.tuples(st.just("free"), st.integers(0, 9)),
        st.tuples(st.just("preempt"), st.integers(0, 9)),
        st.tuples(st.just("decode"), st.integers(0, 9), st.integers(1, 2 * BS)),
        st.tuples(st.just("evict"), st.sets(st.integers(1, 24), max_size=4)),
        st.tuples(st.just("restream"), st.integers(0, 9), st.integers(0, 4 * BS)),
        st.just(("reset",)),
    ),
    min_size=5,
    max_size=80,
)
prompts = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 14 * BS)), min_size=2, max_size=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompts, ops)
def test_random_walk_every_lookup_is_vllms(
    first: list[tuple[int, int]], steps: list[tuple[Any, ...]]
) -> None:
    c = Cache(blocks=24)
    waiting = [c.request(tokens(stem, n)) for stem, n in first]
    running: list[Request] = []

    def pick(pool: list[Request], i: int) -> Request | None:
        return pool[i % len(pool)] if pool else None

    for op in steps:
        kind = op[0]
        if kind == "new":
            waiting.append(c.request(tokens(op[1], op[2])))
        elif kind == "look" and (r := pick(waiting, op[1])) is not None:
            c.look(r)
            c.look(r)
        elif kind == "admit" and (r := pick(waiting, op[1])) is not None:
            if c.admit(r):
                waiting.remove(r)
                running.append(r)
        elif kind == "free" and (r := pick(running, op[1])) is not None:
            running.remove(r)
            c.free(r)
        elif kind == "preempt" and (r := pick(running, op[1])) is not None:
            running.remove(r)
            c.free(r)
            r.status = RequestStatus.PREEMPTED
            r.num_computed_tokens = 0
            waiting.append(r)
        elif kind == "decode" and (r := pick(running, op[1])) is not None:
            # output tokens depend on the position only: equal prompts decode into
            # equal blocks, cached twice (duplicates)
            for _ in range(op[2]):
                r.append_output_token_ids(r.num_tokens % 5)
                if c.m.allocate_slots(r, 1) is None:
                    running.remove(r)
                    c.free(r)
                    break
                r.num_computed_tokens += 1
        elif kind == "evict":
            c.m.evict_blocks(op[1])
        elif kind == "restream" and (r := pick(waiting, op[1])) is not None:
            keep = min(op[2], r.num_tokens)
            del r._all_token_ids[keep:]
            del r.block_hashes[keep // BS :]
            r._all_token_ids.extend([3] * (1 + op[2] % 7))
            r.update_block_hashes()
        elif kind == "reset" and not running:
            assert c.m.reset_prefix_cache()
        for r in waiting:
            c.look(r)


def test_off_on_a_vllm_it_was_not_read_against(monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm

    monkeypatch.setattr(vllm, "__version__", "0.35.0")
    assert "found 0.35.0" in str(why_not(manager(), None))
    monkeypatch.undo()
    monkeypatch.setattr(hitmemo, "_lookup_signature", lambda: ("request", "new_flag"))
    assert "new_flag" in str(why_not(manager(), None))


def test_every_vllm_method_it_wraps_is_checked_at_import() -> None:
    """A vLLM that renames or re-signs one fails ttlctl.engine.compat's check loudly."""
    from ttlctl.engine import hooks

    table = {(h.owner, h.name): h.use for h in hooks.HOOKS}
    assert table[("KVCacheManager", "get_computed_blocks")] == hooks.WRAP
    assert table[("BlockPool", "_remove_cached_block_hashes")] == hooks.OVERRIDE
    assert table[("BlockPool", "reset_prefix_cache")] == hooks.WRAP
    assert table[("BlockPool", "get_cached_block")] == hooks.CALL
    assert table[("KVCacheManager", "create_kv_cache_blocks")] == hooks.CALL
    assert table[("KVCacheManager", "prefix_cache_lookup_enabled")] == hooks.CALL
