"""The CPU offload tier with blocks shared across programs (trace column prefix_hashes).

As vLLM's CPU offloading stores blocks by their hash, a block several programs share is
stored once, counted once against the tier's capacity, and loaded by any program whose
prompt starts with it; a program's own blocks load only behind all of its shared ones.
"""

from __future__ import annotations

import pytest

from profiles.cost import ConstantCostModel
from replay.offload import OffloadTier
from replay.policies import PolicySpec, make
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig, simulate
from replay.workload import AgentProgram, Call, SharedPrefix, Workload
from tests.replay.test_equivalence import engine_config

BS = 16
COST = ConstantCostModel()
#: four shared blocks, and a second key list sharing only the first two
KEYS = (("s", 0), ("s", 1), ("s", 2), ("s", 3))
HALF = (("s", 0), ("s", 1), ("t", 2), ("t", 3))


def tier(capacity: int = 100 * BS) -> OffloadTier:
    return OffloadTier(capacity, COST, BS)


def test_a_shared_block_is_stored_once_and_counted_once() -> None:
    t = tier()
    t.store("a", 6 * BS, KEYS)  # 4 shared blocks + 2 of a's own
    assert t.used_tokens == 6 * BS
    t.store("b", 5 * BS, KEYS)  # the same 4 shared blocks + 1 of b's own
    assert t.used_tokens == 6 * BS + 1 * BS
    t.store("a", 8 * BS, KEYS)  # a's stream replaced, its shared blocks not stored again
    assert t.used_tokens == 8 * BS + 1 * BS


def test_any_program_loads_the_shared_blocks_another_stored() -> None:
    t = tier()
    t.store("a", 6 * BS, KEYS)
    # c never stored anything: its first call loads the 4 shared blocks a stored
    assert t.prefix("c", 0, 10 * BS, KEYS) == 4 * BS
    # a prompt sharing only the first two of them loads those two
    assert t.prefix("d", 0, 10 * BS, HALF) == 2 * BS
    # a's next call loads the shared blocks and its own stream (up to what it reuses)
    assert t.prefix("a", 6 * BS, 10 * BS, KEYS) == 6 * BS
    assert t.prefix("a", 5 * BS + 3, 10 * BS, KEYS) == 5 * BS
    assert t.prefix("a", 6 * BS, 3 * BS + 1, KEYS) == 3 * BS  # the cap
    # a call of a without the shared blocks cannot use a's own (they chain on them)
    assert t.prefix("a", 6 * BS, 10 * BS) == 0
    # nor one starting with other shared blocks
    assert t.prefix("a", 6 * BS, 10 * BS, HALF) == 2 * BS


def test_an_evicted_shared_block_cuts_every_program_that_needs_it() -> None:
    t = tier(capacity=8 * BS)
    t.store("a", 6 * BS, KEYS)  # 6 blocks: s0..s3, a's own 2
    t.store("b", 5 * BS, KEYS)  # +1: 7
    assert t.prefix("b", 5 * BS, 10 * BS, KEYS) == 5 * BS  # touches s0..s3 and b
    t.store("x", 3 * BS)  # 10 > 8: the least recently used go, a's own stream first
    assert t.used_tokens == 8 * BS
    assert t.prefix("a", 6 * BS, 10 * BS, KEYS) == 4 * BS
    assert t.prefix("b", 5 * BS, 10 * BS, KEYS) == 5 * BS
    t.store("y", 2 * BS)  # x is now the least recently used
    assert t.used_tokens == 7 * BS and t.prefix("x", 3 * BS, 10 * BS) == 0
    t.store("z", 3 * BS)  # then s0 and s1 go: s2 and s3 are stored, but lead nowhere
    assert t.used_tokens == 8 * BS
    assert t.prefix("b", 5 * BS, 10 * BS, KEYS) == 0
    assert t.prefix("c", 0, 10 * BS, KEYS) == 0
    assert t.prefix("y", 2 * BS, 10 * BS) == 2 * BS


def test_without_shared_blocks_the_tier_is_the_per_program_lru() -> None:
    t = tier(capacity=10 * BS)
    t.store("a", 6 * BS)
    t.store("b", 3 * BS)
    assert t.prefix("a", 5 * BS + 1, 20 * BS) == 5 * BS
    t.store("c", 2 * BS)  # b is the least recently used
    assert t.used_tokens == 8 * BS
    assert t.prefix("b", 3 * BS, 20 * BS) == 0
    t.store("big", 11 * BS)  # larger than the tier: not stored
    assert t.prefix("big", 11 * BS, 20 * BS) == 0 and t.used_tokens == 8 * BS


def test_a_stream_as_large_as_the_tier_is_stored() -> None:
    t = tier(capacity=4 * BS)
    t.store("a", 4 * BS)
    assert t.used_tokens == 4 * BS and t.prefix("a", 4 * BS, 10 * BS) == 4 * BS


def test_a_stream_stores_only_the_shared_blocks_it_holds() -> None:
    """A stream of 2 blocks whose prompt's keys name 4 stores the first 2 of them."""
    t = tier()
    t.store("a", 2 * BS, KEYS)
    assert t.used_tokens == 2 * BS
    assert t.prefix("c", 0, 10 * BS, KEYS) == 2 * BS


def test_a_lookup_touches_only_the_shared_blocks_within_its_cap() -> None:
    """A call capped at one block loads (and so refreshes) s0 alone: s1 stays the least
    recently used and is evicted next, leaving s0 and the last stored."""
    t = tier(capacity=3 * BS)
    t.store("a", 2 * BS, KEYS[:2])  # s0, s1
    t.store("b", 1 * BS, (("u", 0),))
    assert t.prefix("c", 0, 1 * BS, KEYS[:2]) == 1 * BS  # s0 touched
    t.store("d", 1 * BS, (("v", 0),))  # one block too many: s1 goes
    assert t.prefix("c", 0, 10 * BS, KEYS[:2]) == 1 * BS
    assert t.prefix("e", 0, 10 * BS, (("u", 0),)) == 1 * BS


def test_a_programs_own_stream_loads_only_after_the_shared_blocks_it_followed() -> None:
    """a's own 2 blocks followed s0; a call of a that starts with another shared block,
    stored by b, loads that block but not a's own stream (its hashes chain on s0)."""
    t = tier()
    t.store("a", 3 * BS, KEYS[:1])
    t.store("b", 1 * BS, (("u", 0),))
    assert t.prefix("a", 3 * BS, 10 * BS, KEYS[:1]) == 3 * BS
    assert t.prefix("a", 3 * BS, 10 * BS, (("u", 0),)) == 1 * BS


#: two products' prefixes of 4 blocks of 32 tokens, the first 2 in common
PRODUCTS = (SharedPrefix((1, 2, 3, 4), 32), SharedPrefix((1, 2, 5, 6), 32))


@pytest.mark.parametrize("pool", ["runs", "blocks"])
def test_a_replay_loads_a_prefix_another_program_offloaded(pool: str) -> None:
    """A computes its product's prefix (128 tokens), then D fills the GPU cache and evicts
    it; B (same product) and C (the first half) start later and load from the tier
    what the GPU lost: B all 128 shared tokens, C its 64."""
    a, c = PRODUCTS
    work = Workload(
        (
            AgentProgram("A", 0.0, (Call(300, 4, 0, None, 0.0, a),)),
            AgentProgram("D", 5.0, (Call(460, 4, 0, None, 0.0),)),
            AgentProgram("B", 10.0, (Call(200, 4, 0, None, 0.0, a),)),
            AgentProgram("C", 15.0, (Call(200, 4, 0, None, 0.0, c),)),
        )
    )
    engine = SimSchedulerConfig(
        kv_tokens=BS * 30, block_size=BS, max_num_batched_tokens=128, max_num_seqs=16
    )
    cfg = engine_config(ReplayConfig(engine=engine, check=True, offload_tokens=BS * 400), pool=pool)
    out = simulate(work, make(PolicySpec("vllm"), {}, lambda t, o: 0.0), COST, cfg)
    hits = {r.program: r.hit_tokens for r in out.calls}
    assert hits["B"] < 128  # D evicted the prefix from the GPU ...
    loaded = out.engine.stats.loaded_tokens
    # ... and the tier gave back the rest: B's and C's shared tokens are all reused
    assert loaded == (128 - hits["B"]) + (64 - hits["C"])
    assert loaded > 0
    # the tier holds the shared blocks once: A's 8 + C's product's 2 others, and the
    # programs' own streams
    tier_ = out.engine.offload
    assert tier_ is not None

    def stream(call: Call) -> int:  # the full blocks of what it computed (its last token not)
        return (call.input_tokens + call.output_tokens - 1) // BS * BS

    shared = {"A": 128, "D": 0, "B": 128, "C": 128}
    own = sum(stream(p.calls[0]) - shared[p.program_id] for p in work.programs)
    assert tier_.used_tokens == 128 + 2 * 32 + own
