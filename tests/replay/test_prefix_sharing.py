"""Prefixes shared across programs in whole replays (issue 18, item 2).

Programs of two "products" whose prompts start with shared blocks (a tree: the products'
prefixes share their first half, as Mooncake's ``hash_ids`` do), on a cache small enough
to preempt and evict: both pools and both stepping modes agree under every policy with
the invariants checked after every step, a program hits the prefix another program
computed, and the prefix is held once.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from profiles.cost import ConstantCostModel
from replay.policies import NAMES, PolicySpec, make
from replay.policy_runs import Load, run_one
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig, simulate
from replay.workload import AgentProgram, Call, SharedPrefix, Workload, from_frame
from tests.replay.test_equivalence import assert_close, engine_config
from ttlctl.trace.columns import conform

COST = ConstantCostModel()
ENGINE = SimSchedulerConfig(
    kv_tokens=16 * 150, block_size=16, max_num_batched_tokens=128, max_num_seqs=16
)
CONFIG = ReplayConfig(engine=ENGINE, check=True)
#: two products' prefixes of 4 blocks of 32 tokens, the first 2 in common
PRODUCTS = (SharedPrefix((1, 2, 3, 4), 32), SharedPrefix((1, 2, 5, 6), 32))


def workload(seed: int, shared: bool = True) -> Workload:
    rng = np.random.default_rng(seed)
    programs = []
    for p in range(int(rng.integers(12, 25))):
        prefix = PRODUCTS[int(rng.integers(0, 2))]
        calls = []
        stream = 0
        for turn in range(int(rng.integers(2, 6))):
            reused = stream if rng.random() > 0.15 else int(rng.integers(0, stream + 1))
            prompt = (reused or 128) + int(rng.integers(1, 120))
            output = int(rng.integers(1, 40))
            # now and then a call whose prompt ends inside the prefix
            if turn == 0 and rng.random() < 0.2:
                prompt = int(rng.integers(20, 128))
            calls.append(Call(prompt, output, reused, "bash", float(rng.exponential(0.3)), prefix))
            stream = prompt + output
        if not shared:
            calls = [replace(c, prefix=None) for c in calls]
        programs.append(AgentProgram(f"p{p:02d}", float(rng.uniform(0, 1)), tuple(calls)))
    return Workload(tuple(programs))


def run(seed: int, name: str, config: ReplayConfig, shared: bool = True) -> dict[str, object]:
    return run_one(
        workload(seed, shared),
        PolicySpec(name),
        COST,
        config,
        Load(jps=8.0, seed=seed),
        timed=False,
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", NAMES)
def test_pools_and_stepping_modes_agree_with_shared_prefixes(seed: int, name: str) -> None:
    runs = run(seed, name, engine_config(CONFIG, pool="runs"))
    blocks = run(seed, name, engine_config(CONFIG, pool="blocks"))
    assert runs == blocks
    slow = run(seed, name, engine_config(CONFIG, fast=False))
    assert_close(runs, slow)


@pytest.mark.parametrize("pool", ["runs", "blocks"])
def test_a_program_hits_the_prefix_another_program_computed(pool: str) -> None:
    """B starts after A finished: B's first call hits A's 4 shared blocks of 32 tokens
    (8 engine blocks of 16); C's product shares only the first 2 (4 engine blocks)."""
    a, c = PRODUCTS
    work = Workload(
        (
            AgentProgram("A", 0.0, (Call(300, 4, 0, None, 0.0, a),)),
            AgentProgram("B", 5.0, (Call(200, 4, 0, None, 0.0, a),)),
            AgentProgram("C", 6.0, (Call(200, 4, 0, None, 0.0, c),)),
            AgentProgram("D", 7.0, (Call(200, 4, 0, None, 0.0),)),
        )
    )
    cfg = engine_config(CONFIG, pool=pool)
    out = simulate(work, make(PolicySpec("vllm"), {}, lambda t, o: 0.0), COST, cfg)
    hits = {r.program: r.hit_tokens for r in out.calls}
    assert hits == {"A": 0, "B": 128, "C": 64, "D": 0}


def test_sharing_raises_the_hit_rate_under_pressure() -> None:
    """A cache of a few contexts: programs still hit the products' prefixes that others
    computed, which the same workload without them cannot."""
    cfg = engine_config(CONFIG, kv_tokens=16 * 60)
    with_ = run(3, "vllm", cfg)
    without = run(3, "vllm", cfg, shared=False)
    assert with_["prefix_hit_rate"] > without["prefix_hit_rate"]


def test_block_keys_convert_trace_blocks_to_engine_blocks() -> None:
    """Trace blocks of 24 tokens, engine blocks of 16: each engine block is keyed by the
    hash of the trace block holding its last token and its end; the program's own blocks
    follow, up to the prompt's last full block."""
    call = Call(100, 5, 0, None, 0.0, SharedPrefix((10, 20, 30), 24))
    assert call.block_keys("p", 16) == (
        ((10, 24), 16),
        ((20, 24), 32),
        ((20, 24), 48),
        ((30, 24), 64),
        ("p", 4),
        ("p", 5),
    )
    # Mooncake's 512-token blocks: 32 engine blocks of 16 per hash; a prompt ending
    # inside the prefix has keys for its own full blocks only
    mooncake = Call(1000, 5, 0, None, 0.0, SharedPrefix((7, 8), 512))
    keys = mooncake.shared_keys(16)
    assert len(keys) == 1000 // 16 and keys[31] == ((7, 512), 512) and keys[32] == ((8, 512), 528)
    assert mooncake.block_keys("p", 16) == keys
    # engine blocks larger than the trace's: the last trace block inside each
    big = Call(200, 5, 0, None, 0.0, SharedPrefix((1, 2, 3), 64))
    assert big.shared_keys(128) == (((2, 64), 128),)
    assert Call(50, 5, 0, None, 0.0).block_keys("q", 16) == (("q", 0), ("q", 1), ("q", 2))
    # the same hash at another trace block size is another prefix (two sources ingested
    # together), even where the end tokens agree
    assert not set(Call(96, 1, 0, None, 0.0, SharedPrefix((1, 2), 24)).shared_keys(16)) & set(
        Call(96, 1, 0, None, 0.0, SharedPrefix((1, 2), 32)).shared_keys(16)
    )


def test_workload_reads_the_prefix_columns(tmp_path: Path) -> None:
    frame = pl.DataFrame(
        {
            "program_id": ["a", "a", "b"],
            "turn": [0, 1, 0],
            "arrival_s": [0.0, None, 1.0],
            "input_tokens": [100, 200, 50],
            "output_tokens": [5, 5, 5],
            "prefix_hashes": [[1, 2], [1, 2], None],
            "prefix_block_tokens": [32, 32, None],
        }
    )
    work = from_frame(frame.lazy().pipe(conform, keep_source=False).collect())
    a, b = work.programs
    assert a.calls[0].prefix == SharedPrefix((1, 2), 32)
    assert a.calls[0].prefix is a.calls[1].prefix  # one object: its keys are computed once
    assert b.calls[0].prefix is None


#: two products' prefixes of 12 blocks of 32 tokens (a sixth of the cache each), the first
#: 6 in common: a preempted call's prefix blocks are mostly held by other running calls
LONG = (
    SharedPrefix(tuple(range(1, 13)), 32),
    SharedPrefix(tuple(range(1, 7)) + tuple(range(20, 26)), 32),
)


def long_prefix_workload(seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    programs = []
    for p in range(int(rng.integers(10, 20))):
        prefix = LONG[int(rng.integers(0, 2))]
        calls, stream = [], 0
        for _ in range(int(rng.integers(2, 6))):
            prompt = max(stream, 384) + int(rng.integers(1, 120))
            output = int(rng.integers(1, 80))
            calls.append(Call(prompt, output, stream, "bash", float(rng.exponential(0.3)), prefix))
            stream = prompt + output
        programs.append(AgentProgram(f"p{p:02d}", float(rng.uniform(0, 1)), tuple(calls)))
    return Workload(tuple(programs))


@pytest.mark.parametrize("seed", [3, 33])
@pytest.mark.parametrize("name", ["static-ttl", "continuum", "vllm"])
def test_a_preempted_call_frees_only_the_shared_blocks_no_one_else_holds(
    seed: int, name: str
) -> None:
    """When blocks run short, the fast step preempts from the tail until the needs fit. A
    victim whose prefix blocks other running calls still hold frees only its own blocks
    (vLLM's reference counts); counting all it held left the step short of blocks
    (``OutOfBlocks`` on these seeds under static-ttl). Both stepping modes and both pools
    agree, the invariants checked after every step."""

    def once(**changes: object) -> dict[str, object]:
        work = long_prefix_workload(seed)
        cfg = engine_config(CONFIG, **changes)
        return dict(
            run_one(work, PolicySpec(name), COST, cfg, Load(jps=8.0, seed=seed), timed=False)
        )

    fast = once(pool="runs")
    assert fast["preemptions"]
    assert fast == once(pool="blocks")
    assert_close(fast, once(fast=False))
