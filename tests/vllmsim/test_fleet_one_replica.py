"""A vLLM fleet of one replica is the single-engine vLLM backend, call by call, with
synchronous and with async scheduling (both step vLLM's scheduler through the same batch
queue, ``replay.vllmsim.batch_queue``; the fleet's loop around it must not change when
anything reaches the scheduler or when any output is applied). Replicas of different
sizes: the vLLM fleet is the fast fleet of the same sizes, call by call."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from replay.fleet.routers import RouterSettings
from replay.fleet.run import FleetSpec, simulate_fleet_one
from replay.policies import PolicySpec
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.sim_outcome import SimCallRecord
from replay.vllmsim.backend import BackendError
from replay.vllmsim.fleet import simulate
from replay.vllmsim.run import run
from tests.replay.test_equivalence import workload
from tests.vllmsim.fleet_differential import compare_fleets

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


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("policy", ["vllm", "continuum"])
def test_replicas_of_different_sizes(async_scheduling: bool, policy: str) -> None:
    """Each vLLM replica builds vLLM's scheduler of its own size (``FleetSpec.engines``):
    a call the small one cannot hold is refused there and only there (its program stops),
    and the fleet is the fast fleet of the same sizes call by call
    (``fleet_differential.compare_fleets``). Not with ``--truncate``: docs/replay.md says
    where the two fleets' models of a truncated call's history part."""
    small = replace(ENGINE, kv_tokens=16 * 30, max_num_seqs=4)
    big = replace(ENGINE, kv_tokens=16 * 200, max_num_batched_tokens=512)
    fleet = FleetSpec(
        2,
        RouterSettings("round-robin"),
        engines=(small, big),
        async_scheduling=async_scheduling,
    )
    work, timing = workload(1), Load(concurrency=8, seed=1)
    spec, config = PolicySpec(policy), replace(CONFIG, truncate=False)
    fast, _, _ = simulate_fleet_one(work, spec, COST, config, timing, fleet)
    ours = simulate(work, spec, COST, config, timing, replace(fleet, backend="vllm"))
    assert [e.config for e in ours.engines] == [small, big]
    assert [e.built.scheduler.cache_config.num_gpu_blocks for e in ours.engines] == [
        small.num_blocks + 1,
        big.num_blocks + 1,
    ]  # vLLM's null block besides
    calls, diffs = compare_fleets(fast, ours.outcome)
    assert calls == len(fast.calls) > 100
    assert not diffs, [(d.call, d.metric, d.fast, d.vllm) for d in diffs[:8]]
    # the small replica refused calls the big one served
    assert ours.outcome.rejected_calls == fast.rejected_calls > 0
    served = {0: 0, 1: 0}
    for c, i in zip(ours.outcome.calls, ours.outcome.call_replicas, strict=True):
        served[i] = max(served[i], c.prompt + c.output)
    assert served[0] <= small.kv_tokens < served[1]


def test_replicas_of_different_sizes_refuse_truncate() -> None:
    small = replace(ENGINE, kv_tokens=16 * 30)
    fleet = FleetSpec(2, engines=(small, ENGINE), backend="vllm")
    with pytest.raises(BackendError, match="different sizes does not take --truncate"):
        simulate(workload(0), PolicySpec("vllm"), COST, CONFIG, Load(concurrency=4), fleet)


def test_replicas_of_different_model_lengths_refuse_calls_past_the_shortest() -> None:
    """An output cut at one replica's model length and its program's next call on a
    replica that takes longer calls part the fast fleet and vLLM's (as --truncate does):
    refused when a call is that long, taken when none is."""
    work = workload(0)
    longest = max(c.input_tokens + c.output_tokens for p in work.programs for c in p.calls)
    config = replace(CONFIG, truncate=False)
    short = replace(ENGINE, max_model_len=longest - 1)
    fleet = FleetSpec(2, engines=(short, ENGINE), backend="vllm")
    with pytest.raises(BackendError, match="different --max-model-len does not take calls"):
        simulate(work, PolicySpec("vllm"), COST, config, Load(concurrency=4), fleet)
    roomy = replace(ENGINE, max_model_len=longest)
    fleet = FleetSpec(
        2, engines=(roomy, replace(ENGINE, max_model_len=longest + 1)), backend="vllm"
    )
    got = simulate(work, PolicySpec("vllm"), COST, config, Load(concurrency=4), fleet)
    fast, _, _ = simulate_fleet_one(
        work, PolicySpec("vllm"), COST, config, Load(concurrency=4), replace(fleet, backend="fast")
    )
    assert got.outcome.rejected_calls == fast.rejected_calls  # longer than the cache
    assert len(got.outcome.calls) == len(fast.calls) > 0
