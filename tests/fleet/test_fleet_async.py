"""The fast fleet with vLLM's async scheduling (``AsyncSimScheduler`` replicas): one replica
is the single-engine async replay call for call; several keep the invariants under every
router, and differ from the synchronous fleet."""

from __future__ import annotations

from dataclasses import replace

import pytest

from profiles.cost import ConstantCostModel
from replay.fleet.routers import ROUTERS, RouterSettings
from replay.fleet.run import FleetSpec, simulate_fleet_one
from replay.policies import PolicySpec
from replay.policy_runs import Load, simulate_one
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.sim_outcome import SimCallRecord
from tests.replay.test_equivalence import workload as seeded_workload

COST = ConstantCostModel()
# small enough to preempt and evict (as tests/replay/test_async.py)
ENGINE = SimSchedulerConfig(kv_tokens=16 * 150, max_num_batched_tokens=512, max_num_seqs=16)
ASYNC = ReplayConfig(engine=ENGINE, check=True, async_scheduling=True)


def _calls(records: list[SimCallRecord]) -> list[tuple[object, ...]]:
    """Every call in finish order, with what the engine did to it."""
    # fmt: off
    return [
        (c.program, c.turn, c.arrival, c.admitted, c.first_token, c.finish, c.hit_tokens,
         c.preemptions, c.admitted_step, c.finish_step)
        for c in records
    ]
    # fmt: on


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("policy", ["vllm", "program-fcfs", "static-ttl", "continuum"])
def test_one_async_replica_is_the_single_async_engine(seed: int, policy: str) -> None:
    work = seeded_workload(seed)
    spec = PolicySpec(policy)
    for timing in (Load(jps=4.0, seed=seed), Load(concurrency=8, seed=seed)):
        single, _ = simulate_one(work, spec, COST, ASYNC, timing)
        sync, _ = simulate_one(work, spec, COST, replace(ASYNC, async_scheduling=False), timing)
        assert _calls(single.calls) != _calls(sync.calls)  # async changes the replay
        for router in ("round-robin", "kv-aware"):
            fleet = FleetSpec(1, RouterSettings(router), async_scheduling=True)
            outcome, _, _ = simulate_fleet_one(
                work, spec, COST, replace(ASYNC, async_scheduling=False), timing, fleet
            )
            assert _calls(outcome.calls) == _calls(single.calls), (router, timing)
            assert outcome.rejected_calls == single.rejected_calls
            assert outcome.engines[0].stats == single.engine.stats


@pytest.mark.parametrize("router", [r for r in ROUTERS if r != "as-logged"])
def test_three_async_replicas_under_every_router(router: str) -> None:
    work = seeded_workload(0)
    timing = Load(concurrency=12, seed=0)
    spec = PolicySpec("continuum")
    settings = RouterSettings(
        router,
        program_scheduling_calibration="reference" if router == "program-scheduling" else None,
    )
    async_fleet, _, _ = simulate_fleet_one(
        work, spec, COST, ASYNC, timing, FleetSpec(3, settings, async_scheduling=True)
    )
    sync_fleet, _, _ = simulate_fleet_one(
        work, spec, COST, replace(ASYNC, async_scheduling=False), timing, FleetSpec(3, settings)
    )
    assert len(async_fleet.calls) == work.calls  # every call served once (check=True held)
    served = sorted((c.program, c.turn) for c in async_fleet.calls)
    assert served == sorted({(c.program, c.turn) for c in async_fleet.calls})
    assert _calls(async_fleet.calls) != _calls(sync_fleet.calls), router
