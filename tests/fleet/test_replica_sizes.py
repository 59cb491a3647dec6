"""Replicas of different sizes (``FleetSpec.engines``, as ``refit`` replays the logs of
several replicas): each replica runs its own engine; a fleet of equal sizes given one by
one is the fleet of the replay's size."""

from __future__ import annotations

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
from replay.sim_error import SimulationError
from replay.synth import synth
from replay.workload import from_frame
from ttlctl.errors import ConfigError

WORK = from_frame(synth("swe-bench", 16, 5))
COST = ProfileCostModel(resolve("llama-3.1-8b-h100")[0])
CONFIG = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=120_000), check=True)
LOAD = Load(concurrency=8)


def _run(fleet: FleetSpec, config: ReplayConfig = CONFIG):  # type: ignore[no-untyped-def]
    out, _, _ = simulate_fleet_one(WORK, PolicySpec("continuum"), COST, config, LOAD, fleet)
    return out


def test_each_replica_runs_an_engine_of_its_own_size() -> None:
    small = replace(CONFIG.engine, kv_tokens=80_000, max_num_seqs=4)
    big = replace(CONFIG.engine, kv_tokens=400_000)
    out = _run(FleetSpec(2, RouterSettings("round-robin"), engines=(small, big)))
    assert [e.config for e in out.engines] == [small, big]
    # a call longer than the small replica's cache is refused there (its program stops),
    # and only there: every call it served fits it
    assert out.rejected_calls > 0 and len(out.calls) + out.rejected_calls == WORK.calls
    served = [c for c, i in zip(out.calls, out.call_replicas, strict=True) if i == 0]
    assert served and all(c.prompt + c.output <= 80_000 for c in served)
    assert max(c.prompt + c.output for c in out.calls) > 80_000  # the big one took those
    same = _run(FleetSpec(2, RouterSettings("round-robin"), engines=(CONFIG.engine,) * 2))
    assert same.calls == _run(FleetSpec(2, RouterSettings("round-robin"))).calls


def test_sizes_must_match_the_replicas_and_share_a_block_size() -> None:
    with pytest.raises(ConfigError, match="2 engine sizes given for 3 replicas"):
        FleetSpec(3, engines=(CONFIG.engine,) * 2)
    other = replace(CONFIG.engine, block_size=32)
    with pytest.raises(SimulationError, match="share the replay's block size"):
        _run(FleetSpec(2, engines=(CONFIG.engine, other)))
