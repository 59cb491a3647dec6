"""The fleet's figures (replay/fleet/metrics.py) against the same figures built in the test
from a small three-replica replay's own records: the call records, the replica each call
went to and each replica's engine counters."""

from __future__ import annotations

import pytest

from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from replay.fleet.loop import FleetOutcome
from replay.fleet.metrics import fleet_result, replica_results, together
from replay.fleet.routers import RouterSettings
from replay.fleet.run import FleetSpec, simulate_fleet_one
from replay.policies import PolicySpec
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.synth import synth
from replay.workload import Workload, from_frame

CONFIG = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=120_000), check=True)


@pytest.fixture(scope="module")
def replayed() -> tuple[FleetOutcome, Workload]:
    """12 programs on three replicas, round-robin: the replicas' loads differ."""
    cost = ProfileCostModel(resolve("llama-3.1-8b-h100")[0])
    outcome, work, _ = simulate_fleet_one(
        from_frame(synth("swe-bench", 12, 3)), PolicySpec("continuum"), cost, CONFIG,
        Load(concurrency=6), FleetSpec(3, RouterSettings("round-robin")),
    )  # fmt: skip
    return outcome, work


def test_the_fleets_longest_step_is_its_replicas_longest(
    replayed: tuple[FleetOutcome, Workload],
) -> None:
    """The replicas read as one engine: counters summed, but the longest step is the
    longest of any replica's (steps on different replicas run side by side, not one after
    another). Nothing printed reads it today: this holds :func:`together` itself."""
    outcome, _ = replayed
    steps = [e.stats.longest_step_s for e in outcome.engines]
    assert all(s > 0 for s in steps)
    merged = together(outcome.engines).stats
    assert merged.longest_step_s == max(steps)
    assert merged.steps == sum(e.stats.steps for e in outcome.engines)
    assert merged.busy_s == pytest.approx(sum(e.stats.busy_s for e in outcome.engines))


def test_a_replicas_jct_is_over_the_programs_started_there(
    replayed: tuple[FleetOutcome, Workload],
) -> None:
    """``jct_mean_s`` per replica: the programs whose first call that replica served
    (docs/replay.md: "programs started there ... and the mean JCT of those that ran to their
    end"), each from its first call's send to its last call's finish."""
    outcome, _ = replayed
    assert all(p.done and not p.cut_short for p in outcome.programs)
    replica_of = {
        (c.program, c.turn): r for c, r in zip(outcome.calls, outcome.call_replicas, strict=True)
    }
    spans: dict[str, list[float]] = {}
    for c in outcome.calls:
        first, last = spans.setdefault(c.program, [c.arrival, c.finish])
        spans[c.program] = [min(first, c.arrival), max(last, c.finish)]
    rows = replica_results(outcome)
    means = []
    for r, row in enumerate(rows):
        jcts = [last - first for pid, (first, last) in spans.items() if replica_of[(pid, 0)] == r]
        assert jcts  # round-robin starts programs on every replica
        means.append(sum(jcts) / len(jcts))
        assert row["jct_mean_s"] == pytest.approx(means[-1], rel=1e-12), r
    assert len({round(m, 6) for m in means}) == 3  # the replicas' programs differ


def test_load_balance_is_the_busiest_over_the_mean(replayed: tuple[FleetOutcome, Workload]) -> None:
    """``load_balance``: the busiest replica's engine-busy seconds over the mean (1 = even),
    as docs/replay.md says, not over the least busy."""
    outcome, work = replayed
    busy = [e.stats.busy_s for e in outcome.engines]
    assert min(busy) < max(busy)  # uneven: the mean and the least busy differ
    r = fleet_result(
        outcome, work, "continuum", evaluation_only=False, wall_s=None,
        router={"name": "round-robin", "settings": {}, "replicas": 3},
    )  # fmt: skip
    assert r["load_balance"] == pytest.approx(max(busy) / (sum(busy) / len(busy)), rel=1e-12)
    assert [p["engine_busy_s"] for p in r["per_replica"]] == busy
