"""A vLLM fleet of one replica is the single-engine vLLM backend, call by call, with
synchronous and with async scheduling (both step vLLM's scheduler through the same batch
queue, ``replay.vllmsim.batch_queue``; the fleet's loop around it must not change when
anything reaches the scheduler or when any output is applied)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from replay.fleet.routers import RouterSettings
from replay.fleet.run import FleetSpec
from replay.policies import PolicySpec
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig, SimCallRecord
from replay.vllmsim.fleet import simulate
from replay.vllmsim.run import run
from tests.replay.test_equivalence import workload

COST = ProfileCostModel(resolve("llama-3.1-8b-h100")[0])
#: small enough to preempt and evict
ENGINE = SimSchedulerConfig(kv_tokens=16 * 60, max_num_batched_tokens=256, max_num_seqs=8)
CONFIG = ReplayConfig(engine=ENGINE, truncate=True)


def _calls(records: Sequence[SimCallRecord]) -> list[tuple[object, ...]]:
    """Every call in finish order, with what the engine did to it."""
    # fmt: off
    return [
        (c.program, c.turn, c.arrival, c.admitted, c.first_token, c.finish, c.hit_tokens,
         c.preemptions, c.admitted_step, c.finish_step)
        for c in sorted(records, key=lambda c: (c.finish, c.program, c.turn))
    ]
    # fmt: on


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(
    ("policy", "timing"),
    [
        ("vllm", Load(jps=6.0, seed=0)),
        ("static-ttl", Load(concurrency=6, seed=1)),
        ("continuum", Load(concurrency=6, seed=2)),
    ],
)
def test_one_vllm_replica_is_the_single_vllm_engine(
    async_scheduling: bool, policy: str, timing: Load
) -> None:
    work = workload(timing.seed)
    spec = PolicySpec(policy)
    single = run(work, spec, COST, CONFIG, timing, async_scheduling=async_scheduling)
    if async_scheduling:  # async changes the replay
        sync = run(work, spec, COST, CONFIG, timing)
        assert _calls(sync.calls) != _calls(single.calls)
    fleet = FleetSpec(
        1, RouterSettings("round-robin"), backend="vllm", async_scheduling=async_scheduling
    )
    ours = simulate(work, spec, COST, CONFIG, timing, fleet)
    assert len(single.calls) > 50
    assert _calls(ours.outcome.calls) == _calls(single.calls)
    assert ours.outcome.rejected_calls == single.rejected_calls
    engine = ours.engines[0]
    assert engine.stats.steps == single.engine.stats.steps
    assert engine.stats.preemptions == single.engine.stats.preemptions
    assert engine.plugin_counters == single.engine.plugin_counters
    assert engine.stats.pinned_block_seconds == pytest.approx(
        single.engine.stats.pinned_block_seconds, rel=1e-9
    )
    assert engine.scheduler_name == single.scheduler
    assert ("Async" in engine.scheduler_name) == async_scheduling
