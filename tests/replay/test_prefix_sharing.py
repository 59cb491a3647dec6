"""Prefixes shared across programs in whole replays (issue 18, item 2).

Programs of two "products" whose prompts start with shared blocks (a tree: the products'
prefixes share their first half, as Mooncake's ``hash_ids`` do), on a cache small enough
to preempt and evict: both pools and both stepping modes agree under every policy with
the invariants checked after every step, a program hits the prefix another program
computed, and the prefix is held once.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from profiles.cost import ConstantCostModel
from replay.policies import NAMES, PolicySpec, make
from replay.policy_runs import Load, run_one
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig, simulate
from replay.workload import AgentProgram, Call, SharedPrefix, Workload
from tests.replay.test_equivalence import assert_close, engine_config

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
