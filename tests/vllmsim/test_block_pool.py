"""The simulator's KV pools against vLLM's own ``BlockPool`` (``tests/vllmsim/vllm_pool.py``).

Golden cases (the free list's order: cached blocks to the tail in LRU order, a request's
last block first; blocks without a hash to the head) and random engine-like operations
on the three pools, compared after every operation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.kv import BlockPool, RunPool
from tests.replay.test_kv import EVICTION_ORDER
from tests.vllmsim.vllm_pool import VllmPool

POOLS = [RunPool, BlockPool, VllmPool]
pools = pytest.mark.parametrize("cls", POOLS, ids=lambda c: c.__name__)


@pools
def test_freeing_b_then_a_and_taking_two_blocks_evicts_nothing(cls: type) -> None:
    """Issue 11's example: B (3 full blocks) is freed, then A (5 full + 1 partial), and two
    blocks are taken: A's partial block (at the head: it has no hash) and the block nobody
    used. Appending the partial block to the tail, as the simulator did, evicted B's
    last block instead."""
    pool = cls(10, 16)
    pool.admit("A", 0, 6)
    pool.admit("B", 0, 3)
    pool.release("B", 3)
    pool.release("A", 5)
    pool.admit("C", 0, 2)
    assert (pool.cached_prefix("A"), pool.cached_prefix("B")) == (5, 3)


@pytest.mark.parametrize("order", sorted(EVICTION_ORDER))
def test_vllm_hands_blocks_out_in_the_order_the_simulator_expects(order: str) -> None:
    """``tests/replay/test_kv.py``'s eviction-order sequences, on vLLM's BlockPool (which
    does not count evictions: only the cached prefixes are compared)."""
    pool = VllmPool(10, 16)
    pool.admit("A", 0, 6)
    pool.admit("B", 0, 3)
    for program in order.split(" then "):
        pool.release(program, 5 if program == "A" else 3)
    seen = []
    pool.admit("C", 0, 1)
    seen.append((pool.cached_prefix("A"), pool.cached_prefix("B")))
    for _ in range(9):
        pool.grow("C", 1)
        seen.append((pool.cached_prefix("A"), pool.cached_prefix("B")))
    assert seen == [(a, b) for a, b, _ in EVICTION_ORDER[order]]


@pools
def test_a_handover_allocates_before_the_pin_frees_its_partial_block(cls: type) -> None:
    """A's pin holds a full and a partial block; A's next call hits the full one and needs
    one new block, which comes from the head of the free list (B's cached block) while
    the pin still holds the partial one; then the pin goes and the partial block is at
    the head."""
    pool = cls(5, 16)
    pool.admit("B", 0, 1)
    pool.release("B", 1)
    pool.admit("A", 0, 2)
    pool.admit("C", 0, 2)
    pool.pin("A", 1)
    pool.release("C", 2)
    assert not pool.room_for("A", 1, 4) and pool.room_for("A", 1, 3)
    pool.admit("A", 1, 1)
    pool.unpin("A")
    assert (pool.cached_prefix("B"), pool.cached_prefix("C")) == (0, 2)
    pool.grow("A", 1)
    assert (pool.cached_prefix("C"), pool.free_blocks) == (2, 2)


# ---------------------------------------------------------------------- random operations

PROGRAMS = ["a", "b", "c"]
NUM_BLOCKS = 10

steps = st.lists(
    st.tuples(st.integers(0, 63), st.integers(0, 1 << 16), st.integers(0, 1 << 16), st.booleans()),
    min_size=5,
    max_size=40,
)


@dataclass
class Model:
    running: dict[str, int] = field(default_factory=dict)  # program -> its hit
    pinned: set[str] = field(default_factory=set)

    def actions(self) -> list[tuple[str, str]]:
        out = [("admit", p) for p in PROGRAMS if p not in self.running]
        for p in sorted(self.running):
            out += [("grow", p), ("finish", p), ("preempt", p)]
        out += [("release_pin", p) for p in sorted(self.pinned)]
        return out


def _compare(ours: RunPool, ref: VllmPool) -> None:
    ours.check()
    assert ours.free_blocks == ref.free_blocks
    for p in PROGRAMS:
        assert ours.held(p) == ref.held(p), p
        assert ours.cached_prefix(p) == ref.cached_prefix(p), p


def _apply(pools: tuple[RunPool, VllmPool], model: Model, step: tuple[int, int, int, bool]) -> None:
    ours = pools[0]
    choice, x, y, flag = step
    actions = model.actions()
    kind, p = actions[choice % len(actions)]
    if kind == "admit":
        hit = x % (ours.cached_prefix(p) + 1)
        new = y % (ours.free_blocks + 2) if flag else y % 4
        if not all(pool.room_for(p, hit, new) for pool in pools):
            assert not any(pool.room_for(p, hit, new) for pool in pools)
            return
        for pool in pools:
            pool.admit(p, hit, new)
        if p in model.pinned:  # the handover: the pin goes once the call has its blocks
            for pool in pools:
                pool.unpin(p)
            model.pinned.discard(p)
        model.running[p] = hit
    elif kind == "grow":
        new = min(x % (ours.free_blocks + 1) if flag else x % 3, ours.free_blocks)
        for pool in pools:
            pool.grow(p, new)
    elif kind == "release_pin":
        model.pinned.discard(p)
        for pool in pools:
            pool.unpin(p)
    else:  # finish (freed, or pinned with the flag) or preempt: full blocks from the hit on
        hit = model.running.pop(p)
        full = hit + x % (ours.held(p) - hit + 1)
        pinned = kind == "finish" and flag
        for pool in pools:
            if pinned:
                pool.pin(p, full)
            else:
                pool.release(p, full)
        if pinned:
            model.pinned.add(p)


@settings(max_examples=150, derandomize=True, deadline=None, database=None)
@given(steps)
def test_run_pool_equals_vllms_block_pool(sequence: list[tuple[int, int, int, bool]]) -> None:
    """Random admissions (with hits, diverging streams), growth, finishes, preemptions,
    pins, handovers and pin releases: the simulator's pool and vLLM's agree on free
    blocks, held blocks and every program's cached prefix after each one."""
    pools = (RunPool(NUM_BLOCKS, 4), VllmPool(NUM_BLOCKS, 4))
    model = Model()
    for step in sequence:
        _apply(pools, model, step)
        _compare(*pools)


# ---------------------------------------------------------------------- shared prefixes

#: two prefixes sharing their first block, one of one block, none
KEY_SETS = [(), (("x", 1), ("x", 2), ("x", 3)), (("x", 1), ("y", 2)), (("x", 1),)]


@dataclass
class SharingModel:
    running: dict[str, int] = field(default_factory=dict)  # program -> its hit
    pinned: set[str] = field(default_factory=set)

    def actions(self) -> list[tuple[str, str]]:
        out = [("admit", p) for p in PROGRAMS if p not in self.running]
        for p in sorted(self.running):
            out += [("grow", p), ("cache", p), ("finish", p), ("preempt", p)]
        out += [("release_pin", p) for p in sorted(self.pinned)]
        return out


def _compare_shared(ours: RunPool, ref: VllmPool, model: SharingModel) -> None:
    ours.check()
    assert ours.free_blocks == ref.free_blocks
    for p in PROGRAMS:
        assert ours.held(p) == ref.held(p), p
        if p in model.running:
            continue
        for keys in KEY_SETS:
            for reusable in (2, 100):
                got = ours.prefix_hit(p, keys, reusable, 100)
                assert got == ref.prefix_hit(p, keys, reusable, 100), (p, keys, reusable)


def _apply_shared(
    pools: tuple[RunPool, VllmPool], model: SharingModel, step: tuple[int, int, int, bool]
) -> None:
    ours = pools[0]
    choice, x, y, flag = step
    actions = model.actions()
    kind, p = actions[choice % len(actions)]
    if kind == "admit":
        keys = KEY_SETS[y % len(KEY_SETS)]
        reusable = (x >> 8) % 8
        hit = ours.prefix_hit(p, keys, reusable, 100)
        hit = x % (hit + 1) if flag else hit  # now and then less (a diverging call)
        new = (y >> 4) % (ours.free_blocks + 2) if flag else (y >> 4) % 4
        if not all(pool.room_for(p, hit, new, keys) for pool in pools):
            assert not any(pool.room_for(p, hit, new, keys) for pool in pools)
            return
        for pool in pools:
            pool.admit(p, hit, new, keys)
        if p in model.pinned:
            for pool in pools:
                pool.unpin(p)
            model.pinned.discard(p)
        model.running[p] = hit
    elif kind == "grow":
        new = min(x % (ours.free_blocks + 1) if flag else x % 3, ours.free_blocks)
        for pool in pools:
            pool.grow(p, new)
    elif kind == "cache":  # a prefill chunk filled blocks: vLLM caches them as allocated
        full = x % (ours.held(p) + 1)
        for pool in pools:
            pool.cache_full(p, full)
        model.running[p] = max(model.running[p], full)
    elif kind == "release_pin":
        model.pinned.discard(p)
        for pool in pools:
            pool.unpin(p)
    else:
        hit = model.running.pop(p)
        full = hit + x % (ours.held(p) - hit + 1)
        pinned = kind == "finish" and flag
        for pool in pools:
            if pinned:
                pool.pin(p, full)
            else:
                pool.release(p, full)
        if pinned:
            model.pinned.add(p)


@settings(max_examples=80, derandomize=True, deadline=None, database=None)
@given(steps)
def test_run_pool_equals_vllms_block_pool_with_shared_prefixes(
    sequence: list[tuple[int, int, int, bool]],
) -> None:
    """The same with calls whose prompts start with shared blocks (vLLM finds them by the
    tokens, the simulator by the keys), filled and cached chunk by chunk, computed twice
    when two programs race: free blocks, held blocks and every program's hit agree."""
    pools = (RunPool(NUM_BLOCKS, 4), VllmPool(NUM_BLOCKS, 4))
    model = SharingModel()
    for step in sequence:
        _apply_shared(pools, model, step)
        _compare_shared(*pools, model)
