"""Golden cases for the KV block pools, ported from vLLM's prefix-caching tests.

The scenarios of ``tests/v1/core/test_prefix_caching.py`` (prefill then hit,
eviction order, touched blocks survive the allocation that follows, ...) restated
for agent programs: a program's next call repeats its previous stream, so "a
request that shares a prefix" becomes "the program's next call". Every case runs
against both pools (:class:`RunPool`, the fast one, and :class:`BlockPool`, the
per-block reference), and a hypothesis test drives both with the same random
operations and compares everything they report after every one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiles.cost import ConstantCostModel
from replay.kv import BlockPool, KVPool, OutOfBlocks, RunPool
from replay.policies.simple import VLLM
from replay.request import SimRequest
from replay.scheduler import SimScheduler, SimSchedulerConfig

POOLS = [RunPool, BlockPool]

pool_classes = pytest.mark.parametrize("cls", POOLS, ids=lambda c: c.__name__)


def conserved(pool: RunPool | BlockPool, programs: list[str]) -> None:
    pool.check()
    assert pool.free_blocks + sum(pool.held(p) for p in programs) == pool.num_blocks


# ------------------------------------------------------------------ prefill and hits


def _request(rid: int, program: str, turn: int, prompt: int, reusable: int) -> SimRequest:
    return SimRequest(rid, program, turn, 0.0, 0.0, prompt, 1, reusable, None, False)


def _serve(engine: SimScheduler, req: SimRequest) -> None:
    """Run ``req`` alone to its finish."""
    engine.add(req, 0.0)
    now = 0.0
    while req.finish is None:
        duration, _ = engine.step(now, float("inf"))
        assert duration > 0
        now += duration


@pytest.mark.parametrize("pool", ["runs", "blocks"])
def test_follow_up_hits_every_full_block_not_the_partial_one(pool: str) -> None:
    """vLLM test_prefill: 3 full blocks + 7 tokens cached; the next request over the
    same 3 blocks + 5 other tokens hits the 3 full blocks (48 tokens), nothing more."""
    config = SimSchedulerConfig(kv_tokens=16 * 11, block_size=16, pool=pool)
    engine = SimScheduler(config, ConstantCostModel(), VLLM())
    first = _request(0, "p", 0, prompt=55, reusable=0)
    _serve(engine, first)
    assert first.hit_tokens == 0
    assert engine.pool.cached_prefix("p") == 3  # the partial 4th block is not cached
    # the next call repeats the 55 + 1 tokens of the stream and adds 5
    second = _request(1, "p", 1, prompt=61, reusable=56)
    _serve(engine, second)
    assert second.hit_tokens == 48
    engine.pool.check()  # type: ignore[attr-defined]


@pytest.mark.parametrize("pool", ["runs", "blocks"])
def test_hit_is_capped_at_num_tokens_minus_one(pool: str) -> None:
    """A block-aligned prompt whose every block is cached still recomputes its last
    block: the hit stops at num_tokens − 1 (vLLM's get_computed_blocks)."""
    config = SimSchedulerConfig(kv_tokens=16 * 11, block_size=16, pool=pool)
    engine = SimScheduler(config, ConstantCostModel(), VLLM())
    _serve(engine, _request(0, "p", 0, prompt=48, reusable=0))
    assert engine.pool.cached_prefix("p") == 3
    again = _request(1, "p", 1, prompt=48, reusable=48)  # the same 3 blocks again
    _serve(engine, again)
    assert again.hit_tokens == 32
    # one token more and all three blocks hit
    longer = _request(2, "p", 2, prompt=49, reusable=48)
    _serve(engine, longer)
    assert longer.hit_tokens == 48


@pytest.mark.parametrize("pool", ["runs", "blocks"])
def test_hit_is_capped_by_what_the_prompt_repeats(pool: str) -> None:
    """A call that repeats only part of the previous stream hits only that part."""
    config = SimSchedulerConfig(kv_tokens=16 * 11, block_size=16, pool=pool)
    engine = SimScheduler(config, ConstantCostModel(), VLLM())
    _serve(engine, _request(0, "p", 0, prompt=80, reusable=0))
    assert engine.pool.cached_prefix("p") == 5
    diverged = _request(1, "p", 1, prompt=100, reusable=40)  # 2.5 blocks repeated
    _serve(engine, diverged)
    assert diverged.hit_tokens == 32


# ------------------------------------------------------------------ eviction order


#: (cached prefix of A, of B, evictions) after each of 10 blocks handed out, by free order
EVICTION_ORDER = {
    # free list: A's partial block, the never-used block, A4..A0, B2..B0
    "A then B": [
        (5, 3, 0),
        (5, 3, 0),
        (4, 3, 1),
        (3, 3, 2),
        (2, 3, 3),
        (1, 3, 4),
        (0, 3, 5),  # A is gone before B loses anything: freed earlier, evicted earlier
        (0, 2, 6),
        (0, 1, 7),
        (0, 0, 8),
    ],
    # free list: A's partial block, the never-used block, B2..B0, A4..A0. Appending A's
    # partial block to the tail instead would evict B's last block at the second block.
    "B then A": [
        (5, 3, 0),
        (5, 3, 0),
        (5, 2, 1),
        (5, 1, 2),
        (5, 0, 3),
        (4, 0, 4),
        (3, 0, 5),
        (2, 0, 6),
        (1, 0, 7),
        (0, 0, 8),
    ],
}


@pytest.mark.parametrize("order", sorted(EVICTION_ORDER))
@pool_classes
def test_eviction_order_lru_tail_first_partial_block_reused_first(cls: type, order: str) -> None:
    """vLLM test_evict: A holds 5 full blocks + a partial, B 3 full; both are freed, in
    either order. Cached blocks go to the tail of the free list (a request's last block
    first), the partial block (no hash) to its head: the partial block is handed out
    first, then the never-used block, then the cached blocks in the order they were
    freed. (``tests/vllmsim/test_block_pool.py`` checks the same on vLLM's BlockPool.)"""
    pool = cls(10, 16)
    pool.admit("A", 0, 6)
    pool.admit("B", 0, 3)
    assert pool.free_blocks == 1
    for program in order.split(" then "):
        pool.release(program, 5 if program == "A" else 3)
    assert pool.free_blocks == 10
    assert (pool.cached_prefix("A"), pool.cached_prefix("B")) == (5, 3)

    seen = []
    pool.admit("C", 0, 1)
    seen.append((pool.cached_prefix("A"), pool.cached_prefix("B"), pool.evicted_blocks()))
    for _ in range(9):
        pool.grow("C", 1)
        seen.append((pool.cached_prefix("A"), pool.cached_prefix("B"), pool.evicted_blocks()))
    assert seen == EVICTION_ORDER[order]
    assert pool.free_blocks == 0
    with pytest.raises(OutOfBlocks):
        pool.grow("C", 1)
    conserved(pool, ["A", "B", "C"])


@pool_classes
def test_a_preempted_requests_partial_block_is_reused_before_cached_blocks(cls: type) -> None:
    """C's cached block sits in the free list when A is preempted with 2 full blocks and a
    partial one: A's partial block goes to the head (no hash), its full blocks to the tail.
    The next two blocks handed out are the partial one and the never-used one: C keeps
    its block (appending the partial block to the tail would have evicted it)."""
    pool = cls(5, 16)
    pool.admit("C", 0, 1)
    pool.release("C", 1)
    pool.admit("A", 0, 3)
    pool.release("A", 2)  # preempted: 2 computed full blocks, 1 partial
    pool.admit("B", 0, 2)
    assert (pool.cached_prefix("A"), pool.cached_prefix("C"), pool.evicted_blocks()) == (2, 1, 0)
    pool.grow("B", 1)
    assert (pool.cached_prefix("A"), pool.cached_prefix("C"), pool.evicted_blocks()) == (2, 0, 1)


@pool_classes
def test_touching_a_prefix_takes_new_blocks_from_the_lru_head(cls: type) -> None:
    """vLLM test_evict, end: a request over A's first 2 blocks touches them and takes
    its new block from the head of the free list (the never-used block): 7 free."""
    pool = cls(10, 16)
    pool.admit("A", 0, 6)
    pool.admit("B", 0, 3)
    pool.release("A", 5)
    pool.release("B", 3)
    pool.admit("A", 2, 1)
    assert pool.free_blocks == 7
    assert pool.held("A") == 3
    assert pool.evicted_blocks() == 0
    assert pool.cached_prefix("B") == 3
    conserved(pool, ["A", "B"])


@pool_classes
def test_hit_blocks_are_not_evicted_by_the_same_admit(cls: type) -> None:
    """vLLM test_computed_blocks_not_evicted: two free cached blocks, A's at the LRU
    head. A's next call hits its block and needs one more: that one must come from
    B's block, not from the block being hit."""
    pool = cls(2, 16)
    pool.admit("A", 0, 1)
    pool.release("A", 1)
    pool.admit("B", 0, 1)
    pool.release("B", 1)
    assert pool.room_for("A", 1, 1)
    assert not pool.room_for("A", 1, 2)  # the hit block is not also a free block
    pool.admit("A", 1, 1)
    assert pool.held("A") == 2
    assert pool.cached_prefix("B") == 0
    assert pool.evicted_blocks() == 1
    pool.release("A", 2)
    assert pool.cached_prefix("A") == 2
    conserved(pool, ["A", "B"])


@pool_classes
def test_hash_is_dropped_when_a_cached_block_is_reused(cls: type) -> None:
    """vLLM test_hash_block_correct_reuse: a cached block handed out to another
    request loses its identity; releasing that request's partial block caches nothing."""
    pool = cls(1, 16)
    pool.admit("A", 0, 1)
    pool.release("A", 1)
    pool.admit("B", 0, 1)
    pool.release("B", 0)  # a partial block
    assert pool.cached_prefix("A") == 0
    assert pool.cached_prefix("B") == 0
    assert pool.evicted_blocks() == 1


# ------------------------------------------------------------------ divergence and pins


@pool_classes
def test_divergence_makes_the_rest_unhittable(cls: type) -> None:
    """A call that reuses fewer blocks than are cached: the blocks past the hit stay
    in the free list but no longer belong to the stream (not hittable, and handing
    them out later is not an eviction)."""
    pool = cls(8, 16)
    pool.admit("A", 0, 5)
    pool.release("A", 5)
    pool.admit("A", 2, 0)
    assert pool.free_blocks == 6
    pool.release("A", 2)
    assert pool.cached_prefix("A") == 2
    assert pool.free_blocks == 8
    # everything but A's two blocks goes before any eviction
    pool.admit("B", 0, 6)
    assert pool.evicted_blocks() == 0
    assert pool.cached_prefix("A") == 2
    pool.grow("B", 1)
    assert (pool.cached_prefix("A"), pool.evicted_blocks()) == (1, 1)
    conserved(pool, ["A", "B"])


@pool_classes
def test_divergence_with_nothing_reused_drops_the_whole_stream(cls: type) -> None:
    pool = cls(4, 16)
    pool.admit("A", 0, 3)
    pool.release("A", 3)
    pool.admit("A", 0, 1)
    pool.release("A", 0)
    assert pool.cached_prefix("A") == 0
    pool.admit("B", 0, 4)
    assert pool.evicted_blocks() == 0


@pool_classes
def test_pinned_program_is_handed_over_on_admit(cls: type) -> None:
    """A pin keeps the blocks referenced (release deferred). The program's next call
    shares the pinned blocks of its hit (nothing leaves the free list for them) and takes
    its new blocks from the free list while the pin still holds the rest: the pin's
    blocks are not free. Unpinning then frees what the call did not take."""
    pool = cls(10, 16)
    pool.admit("A", 0, 4)
    pool.pin("A", 3)  # 3 full blocks + a partial one
    pool.admit("B", 0, 3)
    assert pool.free_blocks == 3
    assert pool.cached_prefix("A") == 3  # the pin's full blocks: a partial one never hits
    assert pool.room_for("A", 3, 3)
    assert not pool.room_for("A", 3, 4)  # the partial block is not free until unpinned
    pool.admit("A", 3, 2)
    assert (pool.free_blocks, pool.held("A")) == (1, 6)
    pool.unpin("A")  # the partial block goes back
    assert (pool.free_blocks, pool.held("A")) == (2, 5)
    assert pool.evicted_blocks() == 0
    pool.release("A", 5)
    pool.release("B", 3)
    assert (pool.cached_prefix("A"), pool.cached_prefix("B")) == (5, 3)
    conserved(pool, ["A", "B"])


@pool_classes
def test_handover_frees_the_blocks_past_the_hit_after_allocating(cls: type) -> None:
    """The pin's partial block goes to the head of the free list only after the next
    call's new blocks were taken (vLLM allocates, then the plugin releases the pin): the
    allocation evicts the cached block at the head instead of reusing the partial one."""
    pool = cls(5, 16)
    pool.admit("B", 0, 1)
    pool.release("B", 1)
    pool.admit("A", 0, 2)
    pool.admit("C", 0, 2)
    pool.pin("A", 1)
    pool.release("C", 2)
    # free list: B0, C1, C0; A's pin holds its full block A0 and its partial block A1
    assert (pool.free_blocks, pool.cached_prefix("B")) == (3, 1)
    pool.admit("A", 1, 1)  # the new block is B0: B is evicted
    assert (pool.cached_prefix("B"), pool.evicted_blocks()) == (0, 1)
    pool.unpin("A")  # A1 goes to the head: the next block handed out, evicting nothing
    pool.grow("A", 1)
    assert (pool.cached_prefix("C"), pool.evicted_blocks()) == (2, 1)
    conserved(pool, ["A", "B", "C"])


@pool_classes
def test_unpinned_hit_comes_out_of_the_free_list(cls: type) -> None:
    pool = cls(10, 16)
    pool.admit("A", 0, 4)
    pool.release("A", 3)
    pool.admit("B", 0, 3)
    assert pool.free_blocks == 7
    assert pool.room_for("A", 3, 4)
    assert not pool.room_for("A", 3, 5)


@pool_classes
def test_admit_beyond_the_cache_raises(cls: type) -> None:
    pool = cls(4, 16)
    with pytest.raises((ValueError, KeyError)):
        pool.admit("A", 1, 0)
    pool.admit("A", 0, 2)
    pool.release("A", 2)
    with pytest.raises(OutOfBlocks):
        pool.admit("B", 0, 5)


@pool_classes
def test_handover_beyond_the_pinned_blocks_raises(cls: type) -> None:
    """Regression: RunPool booked blocks that did not exist, BlockPool kept only held."""
    pool = cls(10, 16)
    pool.admit("A", 0, 2)
    pool.pin("A", 2)
    with pytest.raises(ValueError):
        pool.admit("A", 3, 0)


@pool_classes
def test_release_caches_only_the_first_full_blocks(cls: type) -> None:
    """The interface: release(p, full) caches the first ``full`` blocks, the rest are
    anonymous. Here 3 of the 4 hit blocks are released as not full (the engine never
    releases fewer full blocks than it hit). Regression: BlockPool kept the stale
    hashes of blocks 1–2 and reported a cached prefix of 3."""
    pool = cls(10, 16)
    pool.admit("A", 0, 4)
    pool.release("A", 4)
    pool.admit("A", 3, 1)
    pool.release("A", 1)
    assert pool.cached_prefix("A") == 1
    pool.admit("B", 0, 10)
    assert pool.evicted_blocks() == 1


# ------------------------------------------------------------------ property: both pools agree

PROGRAMS = ["a", "b", "c", "d"]
NUM_BLOCKS = 12

#: each step: which of the valid actions, two numbers that pick its arguments, a flag
steps = st.lists(
    st.tuples(st.integers(0, 63), st.integers(0, 1 << 16), st.integers(0, 1 << 16), st.booleans()),
    min_size=5,
    max_size=60,
)


@dataclass
class Model:
    """What the engine knows of each program: running, pinned (held, not running) or
    neither."""

    running: set[str] = field(default_factory=set)
    pinned: set[str] = field(default_factory=set)
    #: blocks taken for a running program's request (the decode set's way), not assigned
    loose: dict[str, int] = field(default_factory=dict)

    def actions(self) -> list[tuple[str, str]]:
        out = [("admit", p) for p in PROGRAMS if p not in self.running]
        for p in sorted(self.running):
            out += [("grow", p), ("take", p), ("finish", p), ("preempt", p)]
        out += [("release_pin", p) for p in sorted(self.pinned)]
        return out


def _compare(fast: RunPool, ref: BlockPool, loose: int = 0) -> None:
    fast.check()
    ref.check()
    assert fast.free_blocks == ref.free_blocks
    assert fast.evicted_blocks() == ref.evicted_blocks()
    for p in PROGRAMS:
        assert fast.held(p) == ref.held(p), p
        assert fast.cached_prefix(p) == ref.cached_prefix(p), p
    assert fast.free_blocks + sum(fast.held(p) for p in PROGRAMS) + loose == NUM_BLOCKS


def _apply(fast: RunPool, ref: BlockPool, model: Model, step: tuple[int, int, int, bool]) -> None:
    choice, x, y, flag = step
    actions = model.actions()
    kind, p = actions[choice % len(actions)]
    if kind in ("finish", "preempt") or (kind == "take" and flag):
        n = model.loose.pop(p, 0)  # the request's blocks are counted before it frees them
        fast.assign(p, n)
        ref.assign(p, n)
    if kind == "admit":
        hit = x % (fast.cached_prefix(p) + 1)
        # mostly a few blocks, sometimes as many as could be free
        new = y % (fast.free_blocks + 2) if flag else y % 4
        room = fast.room_for(p, hit, new)
        assert room == ref.room_for(p, hit, new)
        if not room:
            for pool in (fast, ref):
                with pytest.raises(OutOfBlocks):
                    pool.admit(p, hit, new)
            return
        fast.admit(p, hit, new)
        ref.admit(p, hit, new)
        if p in model.pinned:  # a handover: the pin goes once the call has its blocks
            _compare(fast, ref, sum(model.loose.values()))
            fast.unpin(p)
            ref.unpin(p)
            model.pinned.discard(p)
        model.running.add(p)
    elif kind == "grow":
        new = x % (fast.free_blocks + 1) if flag else x % 3
        if new > fast.free_blocks:
            return
        fast.grow(p, new)
        ref.grow(p, new)
    elif kind == "take":
        new = x % (fast.free_blocks + 2) if flag else x % 3
        if new > fast.free_blocks:
            for pool in (fast, ref):
                with pytest.raises(OutOfBlocks):
                    pool.take(new)
            return
        fast.take(new)
        ref.take(new)
        model.loose[p] = model.loose.get(p, 0) + new
    elif kind == "finish" and flag:  # pinned: released later or handed over
        model.running.remove(p)
        model.pinned.add(p)
        full = x % (fast.held(p) + 1)
        fast.pin(p, full)
        ref.pin(p, full)
    elif kind == "release_pin":
        model.pinned.discard(p)
        fast.unpin(p)
        ref.unpin(p)
    else:  # finish and free, or preempt: any number of full blocks
        model.running.discard(p)
        full = x % (fast.held(p) + 1)
        fast.release(p, full)
        ref.release(p, full)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(steps)
def test_run_pool_equals_block_pool(sequence: list[tuple[int, int, int, bool]]) -> None:
    """Random engine-like operations on both pools give the same free count, held
    blocks, cached prefixes and evictions after every one, and conserve blocks
    (releases cache any number of full blocks up to the held ones, below the hit too)."""
    fast, ref = RunPool(NUM_BLOCKS, 4), BlockPool(NUM_BLOCKS, 4)
    model = Model()
    for step in sequence:
        _apply(fast, ref, model, step)
        _compare(fast, ref, sum(model.loose.values()))


@pool_classes
def test_room_for_a_handover_does_not_count_the_pins_blocks(cls: type) -> None:
    """A pinned program holding 1 full and 1 partial block in a 5-block pool: its next call
    keeps the full block and needs 4 more, but only 3 are free while the pin holds the
    partial one (vLLM's allocate_slots runs before the pin is released). Once the pin is
    released (the valve, when nothing runs) the hit block is evictable again and counts
    among the blocks to allocate: 1 + 4 of 5 free, the partial block taken first."""
    pool = cls(5, 4)
    pool.admit("P", 0, 2)
    pool.pin("P", 1)
    assert not pool.room_for("P", 1, 4)
    pool.unpin("P")
    assert pool.room_for("P", 1, 4)
    pool.admit("P", 1, 4)
    assert (pool.held("P"), pool.free_blocks, pool.evicted_blocks()) == (5, 0, 0)


# ------------------------------------------------------------------ shared prefixes

#: shared keys: X and Y share their first two blocks (a tree, as Mooncake's hash_ids)
X = (("x", 1), ("x", 2), ("x", 3))
Y = (("x", 1), ("x", 2), ("y", 3))
KEY_SETS = [(), X, Y, X[:1]]


@pool_classes
def test_a_shared_prefix_is_held_once_and_hit_from_another_program(cls: type) -> None:
    """A computes the 3 shared blocks and 2 of its own; B, running at the same time, hits
    the 3 (they are cached as they are allocated) and takes only its own blocks."""
    pool = cls(20, 4)
    pool.admit("A", 0, 5, X)
    pool.cache_full("A", 5)
    assert pool.prefix_hit("B", X, 0, 100) == 3
    assert pool.prefix_hit("B", Y, 0, 100) == 2  # the tree: the third block differs
    assert pool.room_for("B", 3, 15, X) and not pool.room_for("B", 3, 16, X)
    pool.admit("B", 3, 2, X)
    assert pool.free_blocks == 20 - 5 - 2
    assert (pool.held("A"), pool.held("B"), pool.overlap()) == (5, 5, 3)


@pool_classes
def test_shared_blocks_go_to_the_tail_after_their_last_holder_and_after_its_own(
    cls: type,
) -> None:
    """A and B hold the shared prefix; A goes: its own blocks go to the tail, the shared ones
    stay (B holds them). B goes: its own, then the shared ones, last first. Taking blocks
    evicts A's own, then B's own, then the shared ones from the last: the hit shrinks."""
    pool = cls(12, 4)
    pool.admit("A", 0, 5, X)
    pool.cache_full("A", 5)
    pool.admit("B", 3, 2, X)
    pool.cache_full("B", 5)
    pool.release("A", 5)
    assert pool.prefix_hit("A", X, 100, 100) == 5
    pool.release("B", 5)
    assert pool.free_blocks == 12
    pool.admit("C", 0, 5 + 2)  # the 5 never used, A's own 2
    assert (pool.prefix_hit("A", X, 100, 100), pool.prefix_hit("B", X, 100, 100)) == (3, 5)
    pool.grow("C", 2)  # B's own 2
    assert pool.prefix_hit("B", X, 100, 100) == 3
    pool.grow("C", 1)
    assert pool.prefix_hit("D", X, 100, 100) == 2
    assert pool.evicted_blocks() == 5


@pool_classes
def test_own_blocks_hit_only_after_the_same_shared_keys(cls: type) -> None:
    pool = cls(12, 4)
    pool.admit("A", 0, 5, X)
    pool.cache_full("A", 5)
    pool.release("A", 5)
    assert pool.prefix_hit("A", X, 100, 100) == 5
    assert pool.prefix_hit("A", X, 4, 100) == 4  # the call repeats 4 blocks of its stream
    assert pool.prefix_hit("A", X, 0, 100) == 3  # nothing of its own, the shared all the same
    assert pool.prefix_hit("A", Y, 100, 100) == 2
    assert pool.prefix_hit("A", (), 100, 100) == 0
    assert pool.prefix_hit("A", X, 100, 2) == 2  # the cap (num_tokens − 1)


@pool_classes
def test_a_block_computed_twice_has_two_copies_and_hits_the_oldest(cls: type) -> None:
    """A and B compute the same shared block at once (neither had cached it when admitted):
    two copies, as vLLM keeps them. After both go, C hits the oldest (A's); evicting it
    leaves B's copy for D."""
    pool = cls(8, 4)
    pool.admit("A", 0, 1, X[:1])
    pool.admit("B", 0, 1, X[:1])
    pool.cache_full("A", 1)
    pool.cache_full("B", 1)
    pool.release("B", 1)
    pool.release("A", 1)  # free list: 6 unused, B's copy, A's copy
    pool.admit("C", 0, 6)
    pool.grow("C", 1)  # B's copy: the key stays cached (A's copy)
    assert pool.prefix_hit("D", X[:1], 0, 100) == 1
    assert pool.evicted_blocks() == 1
    pool.grow("C", 1)
    assert pool.prefix_hit("D", X[:1], 0, 100) == 0


@dataclass
class SharingModel(Model):
    keys: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)

    def actions(self) -> list[tuple[str, str]]:
        return super().actions() + [("cache", p) for p in sorted(self.running)]


def _compare_shared(fast: RunPool, ref: BlockPool, loose: int) -> None:
    fast.check()
    ref.check()
    assert fast.free_blocks == ref.free_blocks
    assert fast.evicted_blocks() == ref.evicted_blocks()
    assert fast.overlap() == ref.overlap()
    for p in PROGRAMS:
        assert fast.held(p) == ref.held(p), p
        assert fast.cached_prefix(p) == ref.cached_prefix(p), p
        for keys in KEY_SETS:
            for reusable in (0, 4, 100):
                got = fast.prefix_hit(p, keys, reusable, 100)
                assert got == ref.prefix_hit(p, keys, reusable, 100), (p, keys, reusable)
    held = sum(fast.held(p) for p in PROGRAMS) - fast.overlap()
    assert fast.free_blocks + held + loose == NUM_BLOCKS


def _apply_shared(
    fast: RunPool, ref: BlockPool, model: SharingModel, step: tuple[int, int, int, bool]
) -> None:
    choice, x, y, flag = step
    actions = model.actions()
    kind, p = actions[choice % len(actions)]
    if kind == "cache":  # some of its blocks filled up (a prefill chunk)
        full = x % (fast.held(p) + 1)
        fast.cache_full(p, full)
        ref.cache_full(p, full)
        return
    if kind == "admit":
        keys = KEY_SETS[y % len(KEY_SETS)]
        reusable = x % 8
        hit = fast.prefix_hit(p, keys, reusable, 100)
        assert hit == ref.prefix_hit(p, keys, reusable, 100)
        new = (x // 8) % (fast.free_blocks + 2) if flag else (x // 8) % 4
        room = fast.room_for(p, hit, new, keys)
        assert room == ref.room_for(p, hit, new, keys)
        if not room:
            return
        fast.admit(p, hit, new, keys)
        ref.admit(p, hit, new, keys)
        if p in model.pinned:
            _compare_shared(fast, ref, sum(model.loose.values()))
            fast.unpin(p)
            ref.unpin(p)
            model.pinned.discard(p)
        model.running.add(p)
        return
    _apply(fast, ref, model, step)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(steps)
def test_run_pool_equals_block_pool_with_shared_prefixes(
    sequence: list[tuple[int, int, int, bool]],
) -> None:
    """The same walk with calls whose prompts start with shared blocks (two prefixes that
    share their first two blocks, one of one block, none), the blocks filling up (and
    cached for all) chunk by chunk: same free count, held blocks, overlap, hits for every
    program and key set, evictions."""
    fast, ref = RunPool(NUM_BLOCKS, 4), BlockPool(NUM_BLOCKS, 4)
    model = SharingModel()
    for step in sequence:
        _apply_shared(fast, ref, model, step)
        _compare_shared(fast, ref, sum(model.loose.values()))


# ------------------------------------------------------------------ single answers, both pools
# (the mutation audit of 2026-12-06: each case states one rule of replay/kv/interface.py)


@pool_classes
def test_a_partial_shared_hit_is_capped_too(cls: type) -> None:
    """prefix_hit is "at most ``cap``" also when only some of the call's shared keys are
    cached: Y's first two blocks are cached (A computed X), the cap is one block."""
    pool = cls(20, 4)
    pool.admit("A", 0, 5, X)
    pool.cache_full("A", 5)
    assert pool.prefix_hit("B", Y, 100, 100) == 2
    assert pool.prefix_hit("B", Y, 100, 1) == 1
    assert pool.prefix_hit("B", Y, 100, 0) == 0


@pool_classes
def test_room_counts_only_the_hit_shared_blocks_as_taken(cls: type) -> None:
    """room_for: ``new`` blocks free plus the ``hit`` blocks that sit in the free list. A
    hit of one of X's three cached (free) blocks takes one off the free list: 7 more fit
    in 8, not 8; the two shared blocks past the hit are free blocks like any other."""
    pool = cls(8, 4)
    pool.admit("A", 0, 3, X)
    pool.release("A", 3)
    assert pool.free_blocks == 8 and pool.prefix_hit("B", X, 0, 100) == 3
    assert pool.room_for("B", 1, 7, X) and not pool.room_for("B", 1, 8, X)
    assert pool.room_for("B", 0, 8, X)
    pool.admit("B", 1, 7, X)
    assert (pool.free_blocks, pool.held("B")) == (0, 8)


@pool_classes
def test_changes_counts_what_can_let_a_waiting_call_fit(cls: type) -> None:
    """``KVPool.changes``: bumped by admit (it may hand a pin over), release, unpin and a
    cache_full that caches shared blocks (a waiting call may hit them now), pin only
    through the cache_full it does; not by the calls that hand free blocks out (grow,
    take, assign, grow_batch), nor by a cache_full that caches nothing new."""

    def bumps(call: object, *args: object) -> int:
        before = pool.changes
        call(*args)  # type: ignore[operator]
        return pool.changes - before

    pool = cls(16, 4)
    assert bumps(pool.admit, "A", 0, 4, X) == 1
    assert bumps(pool.cache_full, "A", 2) == 1
    assert bumps(pool.cache_full, "A", 2) == 0  # nothing new
    assert bumps(pool.grow, "A", 1) == 0
    assert bumps(pool.take, 2) == 0
    assert bumps(pool.assign, "A", 2) == 0
    assert bumps(pool.grow_batch, [("A", 1)]) == 0
    assert bumps(pool.pin, "A", 5) == 1  # X[2] is full now: cached (cache_full's bump)
    assert bumps(pool.unpin, "A") == 1
    assert bumps(pool.admit, "B", 0, 2) == 1
    assert bumps(pool.pin, "B", 2) == 0  # no shared blocks: pin keeps the blocks in place
    assert bumps(pool.admit, "B", 2, 1) == 1  # the handover
    assert bumps(pool.unpin, "B") == 1
    assert bumps(pool.release, "B", 3) == 1


@pool_classes
def test_the_cached_prefix_after_shared_keys_counts_the_programs_own_blocks(cls: type) -> None:
    """cached_prefix: "leading blocks of the program's own stream that a new call could
    hit now (a pin's full blocks, or its cached blocks in the free list)". A program whose
    stream follows the three shared blocks of X has 2 full blocks of its own, pinned or
    freed alike (found by the audit: the run pool counted the shared blocks too, 5, and
    the block pool none, 0)."""
    pool = cls(16, 4)
    pool.admit("A", 0, 6, X)
    pool.pin("A", 5)
    assert pool.cached_prefix("A") == 2
    pool.unpin("A")
    assert pool.cached_prefix("A") == 2
    assert pool.prefix_hit("A", X, 100, 100) == 5
    pool.admit("B", 0, 11)  # A's partial block and the 10 never used: nothing evicted
    assert (pool.cached_prefix("A"), pool.evicted_blocks()) == (2, 0)
    pool.grow("B", 1)  # A's last own block
    assert (pool.cached_prefix("A"), pool.evicted_blocks()) == (1, 1)


@pool_classes
def test_a_long_shared_prefix_is_freed_and_hit_again_block_by_block(cls: type) -> None:
    """A call whose prompt starts with 600 shared blocks (a long system prompt: 9,600 tokens
    at 16 a block) frees them together; another program's call hits them all, then, once
    some are evicted from the high end, those before."""
    keys = tuple(("long", i) for i in range(600))
    pool = cls(700, 16)
    pool.admit("A", 0, 601, keys)
    pool.release("A", 600)
    pool.check()
    assert (pool.free_blocks, pool.prefix_hit("B", keys, 0, 1000)) == (700, 600)
    pool.admit("C", 0, 1 + 99 + 300)  # A's partial block, the 99 never used, 300 copies
    pool.check()
    assert (pool.prefix_hit("B", keys, 0, 1000), pool.evicted_blocks()) == (300, 300)
    pool.admit("B", 300, 0, keys)
    pool.check()
    assert (pool.free_blocks, pool.held("B")) == (0, 300)
    pool.release("B", 300)
    assert (pool.free_blocks, pool.prefix_hit("D", keys, 0, 1000)) == (300, 300)


@pool_classes
def test_blocks_handed_out_to_the_last_free_one_and_no_further(cls: type) -> None:
    """grow, take and grow_batch hand out every free block, and raise OutOfBlocks past the
    last, taking nothing; take's blocks are the running requests' once assigned."""
    pool = cls(10, 4)
    pool.admit("A", 0, 1)
    pool.admit("B", 0, 1)
    pool.grow_batch([("A", 3), ("B", 2)])
    assert (pool.free_blocks, pool.held("A"), pool.held("B")) == (3, 4, 3)
    with pytest.raises(OutOfBlocks):
        pool.grow_batch([("A", 2), ("B", 2)])
    with pytest.raises(OutOfBlocks):
        pool.take(4)
    with pytest.raises(OutOfBlocks):
        pool.grow("A", 4)
    assert pool.free_blocks == 3
    pool.take(2)
    with pytest.raises(ValueError):
        pool.assign("B", 3)
    pool.assign("B", 2)
    pool.grow("A", 1)
    assert (pool.free_blocks, pool.held("A"), pool.held("B")) == (0, 5, 5)
    pool.release("B", 0)
    pool.grow_batch([("A", 5)])
    assert (pool.free_blocks, pool.held("A")) == (0, 10)
    conserved(pool, ["A", "B"])


@pool_classes
def test_a_shared_block_held_by_three_is_freed_after_the_third(cls: type) -> None:
    """A shared copy is referenced by every request that holds it and goes to the free
    list when the last lets go: X's three blocks held by A, B and C count twice beyond
    the first (overlap) while all three run, then once, then not at all."""
    pool = cls(12, 4)
    pool.admit("A", 0, 3, X)
    pool.cache_full("A", 3)
    pool.admit("B", 3, 1, X)
    pool.admit("C", 3, 1, X)
    assert (pool.free_blocks, pool.overlap()) == (7, 6)
    pool.release("A", 3)
    pool.check()
    assert (pool.free_blocks, pool.overlap(), pool.held("B")) == (7, 3, 4)
    pool.release("B", 3)
    pool.check()
    assert (pool.free_blocks, pool.overlap(), pool.held("C")) == (8, 0, 4)
    pool.release("C", 3)
    assert (pool.free_blocks, pool.overlap(), pool.prefix_hit("D", X, 0, 100)) == (12, 0, 3)
    pool.check()


@pool_classes
def test_after_the_oldest_copy_is_evicted_a_hit_takes_the_next_oldest(cls: type) -> None:
    """A hit takes the oldest copy still cached: A, B and C compute X[0] at once (three
    copies, A's the oldest, then B's, then C's) and free them so that the free list reads
    A's, C's, O's own block, B's. Evicting A's copy leaves B's the oldest: D's hit takes
    B's from the end of the list, and the next block handed out is C's copy, not O's."""
    pool = cls(4, 4)
    for p in "ABC":
        pool.admit(p, 0, 1, X[:1])
        pool.cache_full(p, 1)
    pool.admit("O", 0, 1)
    for p in "ACOB":
        pool.release(p, 1)
    pool.admit("E", 0, 1)  # A's copy
    assert (pool.evicted_blocks(), pool.prefix_hit("D", X[:1], 0, 100)) == (1, 1)
    pool.admit("D", 1, 0, X[:1])
    pool.grow("E", 1)  # C's copy
    assert (pool.cached_prefix("O"), pool.evicted_blocks(), pool.free_blocks) == (1, 2, 1)
    pool.check()


@pool_classes
def test_a_release_caches_at_most_the_blocks_the_request_held(cls: type) -> None:
    """release and pin cache "the first ``full``" of the request's blocks: a ``full`` past
    what it holds caches them all and makes no more, with or without shared keys."""
    pool = cls(10, 4)
    pool.admit("A", 0, 2)
    pool.release("A", 5)
    assert (pool.free_blocks, pool.cached_prefix("A")) == (10, 2)
    pool.admit("B", 0, 4, X)
    pool.release("B", 9)
    assert (pool.free_blocks, pool.prefix_hit("B", X, 100, 100)) == (10, 4)
    pool.admit("C", 0, 2)
    pool.pin("C", 5)
    assert (pool.free_blocks, pool.held("C"), pool.cached_prefix("C")) == (8, 2, 2)
    pool.unpin("C")
    assert (pool.free_blocks, pool.cached_prefix("C")) == (10, 2)
    pool.check()


def test_a_run_pool_needs_blocks_of_some_size() -> None:
    """The run pool refuses a pool without blocks or with blocks of no tokens."""
    for num_blocks, block_size in ((0, 16), (-1, 16), (4, 0)):
        with pytest.raises(ValueError, match="must be positive"):
            RunPool(num_blocks, block_size)
    RunPool(1, 1).check()


def _two_copies_of_the_first_block_freed(cls: type) -> KVPool:
    """A pool of four blocks where C cached X[0], then A computed all of X (a second copy of
    X[0]), and both released theirs: C's copy first."""
    pool = cls(4, 4)
    pool.admit("C", 0, 1, X[:1])
    pool.cache_full("C", 1)
    pool.admit("A", 0, 3, X)
    pool.release("C", 1)
    pool.release("A", 3)
    return pool


@pool_classes
def test_evicting_shared_copies_down_to_a_hit_one(cls: type) -> None:
    """C caches X[0], then A computes all of X (a second copy of X[0]); both go. B's hit on
    X[:2] takes the oldest copy of each: C's X[0] and A's X[1], from the middle of what A
    freed. Handing out blocks then evicts A's X[2], skips the hit X[1], then evicts A's
    X[0] (C's is held): the hit stays two blocks long. The run pool's runs stay well
    formed (its :meth:`check`: a run's holes lie inside it)."""
    pool = _two_copies_of_the_first_block_freed(cls)
    pool.admit("B", 2, 0, X[:2])
    assert (pool.free_blocks, pool.overlap()) == (2, 0)
    pool.grow("B", 1)
    pool.check()
    assert (pool.prefix_hit("D", X, 0, 100), pool.evicted_blocks(), pool.free_blocks) == (2, 1, 1)
    pool.grow("B", 1)
    pool.check()
    assert (pool.prefix_hit("D", X, 0, 100), pool.evicted_blocks(), pool.free_blocks) == (2, 2, 0)


@pool_classes
def test_a_hit_on_the_last_copies_a_holder_freed(cls: type) -> None:
    """As above, but B's hit is on all of X: C's X[0], then A's X[1] and X[2], the end of
    what A freed. A's X[0] is the one block left free, evicted next; B's hit stays whole."""
    pool = _two_copies_of_the_first_block_freed(cls)
    pool.admit("B", 3, 0, X)
    pool.check()
    assert (pool.free_blocks, pool.held("B"), pool.prefix_hit("D", X, 0, 100)) == (1, 3, 3)
    pool.grow("B", 1)
    pool.check()
    assert (pool.free_blocks, pool.evicted_blocks(), pool.prefix_hit("D", X, 0, 100)) == (0, 1, 3)
