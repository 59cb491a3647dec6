"""replay/replay_run.py and replay/loads.py: the replay document built without the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiles.cost import ConstantCostModel
from replay.loads import SEEDS_MAX, check_seeds, load_list, one_load
from replay.policies import PolicySpec
from replay.policies.continuum import Continuum
from replay.policy_runs import Load, prepare, run_all, simulate_one, sized_engine
from replay.replay_run import ReplayRequest, policy_names, replay_doc
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.workload import AgentProgram, Call, Workload
from tests.bundles import write_bundle
from tests.tune.inputs import KV_TOKENS, PROFILE, write_trace
from ttlctl import bundle as bundle_mod
from ttlctl.errors import ConfigError


def test_one_load_and_its_refusals() -> None:
    assert one_load(None, 4, 3) == Load(concurrency=4, seed=3)
    for jps, conc, message in ((1.0, 2, "not both"), (-1.0, None, "--jps"), (None, 0, "--conc")):
        with pytest.raises(ConfigError, match=message):
            one_load(jps, conc)
    assert load_list([2.0], [3]) == (Load(jps=2.0), Load(concurrency=3))
    with pytest.raises(ConfigError, match="positive"):
        load_list([], [0])


def test_a_count_of_seeds_runs_from_1_to_seeds_max() -> None:
    check_seeds("--seeds", 1)
    check_seeds("--holdout-seeds", SEEDS_MAX)
    with pytest.raises(ConfigError, match="--seeds must be >= 1, not 0"):
        check_seeds("--seeds", 0)
    with pytest.raises(ConfigError, match="--holdout-seeds must be at most 10,000, not 10,001"):
        check_seeds("--holdout-seeds", SEEDS_MAX + 1)


def test_policy_names_split_and_expand() -> None:
    assert policy_names(["vllm, continuum"], "fast") == ["vllm", "continuum"]
    every = policy_names(["all"], "fast")
    assert "oracle" in every and "infercept" in every
    assert set(policy_names(["all"], "vllm")) < set(every)
    with pytest.raises(ConfigError, match="unknown policy"):
        policy_names(["nope"], "fast")
    with pytest.raises(ConfigError, match="unknown policy 'all'"):  # all stands alone
        policy_names(["all,vllm"], "fast")


def test_replay_doc_records_what_made_it(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.parquet", programs=6)
    req = ReplayRequest(
        trace=trace,
        policies=["vllm,unlimited-kv"],
        load=Load(concurrency=3, seed=1),
        engine=SimSchedulerConfig(kv_tokens=KV_TOKENS),
        profile=PROFILE,
        timed=False,
    )
    doc = replay_doc(req)
    assert [r["policy"] for r in doc["results"]] == ["vllm", "unlimited-kv"]
    assert doc["trace"]["programs"] == 6 and doc["bundle"] is None
    assert doc["config"]["concurrency"] == 3 and doc["config"]["seed"] == 1
    assert doc["config"]["engine"]["kv_tokens"] == KV_TOKENS
    assert all(r["wall_s"] is None for r in doc["results"])
    assert replay_doc(req) == doc  # the same request, the same document
    with pytest.raises(ConfigError, match="--valve"):
        replay_doc(ReplayRequest(trace, ["vllm"], Load(), SimSchedulerConfig(), valve="x"))


def test_unlimited_kv_holds_every_programs_largest_call_at_once() -> None:
    """64 programs of an 18-token call (two blocks each, a block being whole) start
    together on an engine of 16 blocks: unlimited-kv widens it so that none is preempted;
    an engine already larger is never narrowed, and other policies keep theirs."""
    work = Workload(
        tuple(AgentProgram(f"p{i}", 0.0, (Call(16, 2, 0, None, 0.0),)) for i in range(64))
    )
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=16 * 16))
    outcome, _ = simulate_one(work, PolicySpec("unlimited-kv"), ConstantCostModel(), config, Load())
    assert len(outcome.calls) == 64 and outcome.engine.stats.preemptions == 0
    large = SimSchedulerConfig(kv_tokens=10**6)
    assert sized_engine(PolicySpec("unlimited-kv"), work, config, large) == large
    assert sized_engine(PolicySpec("vllm"), work, config, config.engine) == config.engine


def test_poisson_starts_follow_the_seed() -> None:
    work = Workload(
        tuple(AgentProgram(f"p{i}", 0.0, (Call(16, 2, 0, None, 0.0),)) for i in range(8))
    )
    starts = [[p.start_s for p in prepare(work, Load(jps=1.0, seed=s)).programs] for s in (1, 1, 2)]
    assert starts[0] == starts[1] != starts[2]


def test_a_replayed_continuum_prices_a_miss_in_the_engines_steps(tmp_path: Path) -> None:
    """The bundle's policy in a replay prices a rebuild in steps of the engine's
    ``max_num_batched_tokens``, as the plugin does on a server sized so."""
    doc = bundle_mod.read(write_bundle(tmp_path / "b.json"))
    work = Workload((AgentProgram("p", 0.0, (Call(16, 2, 0, None, 0.0),)),))
    config = ReplayConfig(engine=SimSchedulerConfig(max_num_batched_tokens=64))
    spec = PolicySpec("continuum", bundle=doc)
    outcome, _ = simulate_one(work, spec, ConstantCostModel(), config, Load())
    policy = outcome.engine.policy
    assert isinstance(policy, Continuum)
    priced = policy.ttl.rebuild_s(4096, False)
    assert priced == bundle_mod.policy_from(doc, 64).rebuild_s(4096, False)
    assert priced != bundle_mod.policy_from(doc, None).rebuild_s(4096, False)


def test_a_pin_cap_of_the_whole_cache_is_taken(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.parquet", programs=2)
    req = ReplayRequest(
        trace,
        ["static-ttl"],
        Load(),
        SimSchedulerConfig(kv_tokens=KV_TOKENS),
        profile=PROFILE,
        pin_cap=1.0,
        timed=False,
    )
    assert replay_doc(req)["config"]["pin_cap"] == 1.0


def test_run_all_tells_each_policy_as_it_starts_then_done() -> None:
    work = Workload((AgentProgram("p", 0.0, (Call(16, 2, 0, None, 0.0),)),))
    told: list[tuple[str, int, int]] = []
    specs = [PolicySpec("vllm"), PolicySpec("program-fcfs")]
    config = ReplayConfig(engine=SimSchedulerConfig())
    run_all(work, specs, ConstantCostModel(), config, Load(), progress=lambda *t: told.append(t))
    assert told == [("vllm", 0, 2), ("program-fcfs", 1, 2), ("done", 2, 2)]
