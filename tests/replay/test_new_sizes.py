"""A step of a size (scheduled tokens) the engine has not run pays the profile's
``new_shape`` on top, once per size per engine, on an engine told which sizes it has run
(``SimSchedulerConfig.sizes_run``); an engine that has served for long (None, a replay's
default) never pays it. The fast backend (one engine, a fleet replica, the async engine)
and vLLM's own scheduler charge it through one rule (:func:`replay.step_price.new_size_extra`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from profiles.cost import ProfileCostModel
from profiles.new_shape import new_shape_s
from profiles.profile_read import from_json
from profiles.shipped import resolve
from replay.fleet.routers import RouterSettings
from replay.fleet.run import FleetSpec, runner
from replay.policies import PolicySpec
from replay.policy_runs import Load, run_one
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.step_price import new_size_extra
from replay.synth import synth
from replay.validation.warmup import lengths, warm_sizes
from replay.vllmsim.run import run as vllm_run
from replay.workload import AgentProgram, Call, Workload, from_frame

PROFILE = replace(resolve("llama-3.1-8b-h100")[0], new_shape=((100.0, 0.01), (1100.0, 0.03)))
COST = ProfileCostModel(PROFILE)


def test_the_points_price_a_size_between_and_beyond_them() -> None:
    points = PROFILE.new_shape
    assert new_shape_s(points, 100) == 0.01 and new_shape_s(points, 1100) == 0.03
    assert new_shape_s(points, 600) == pytest.approx(0.02)
    assert new_shape_s(points, 1) == 0.01 and new_shape_s(points, 9000) == 0.03  # flat
    assert new_shape_s((), 500) == 0.0
    # the profile's JSON keeps them; a malformed field is refused naming it
    assert from_json(PROFILE.to_json()).new_shape == points
    bad = PROFILE.to_json() | {"new_shape": [[100, "x"]]}
    with pytest.raises(ValueError, match="new_shape must be a list of"):
        from_json(bad)


def test_the_rule_charges_a_size_once() -> None:
    sizes: set[int] = {64}
    assert new_size_extra(COST, sizes, 64) == 0.0  # run before
    assert new_size_extra(COST, sizes, 600) == pytest.approx(0.02)
    assert new_size_extra(COST, sizes, 600) == 0.0 and sizes == {64, 600}


def _two_alike() -> Workload:
    """Two one-call programs with prompts of the same length, one after the other."""
    return Workload(
        (
            AgentProgram("a", 0.0, (Call(600, 4, 0, None, 0.0),)),
            AgentProgram("b", 5.0, (Call(600, 4, 0, None, 0.0),)),
        )
    )


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_the_first_prefill_of_a_length_pays_and_the_second_does_not(
    async_scheduling: bool,
) -> None:
    work = _two_alike()
    spec = PolicySpec("vllm")
    base = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=100_000))
    warm = run_one(work, spec, COST, replace(base, async_scheduling=async_scheduling), Load())
    engine = replace(base.engine, sizes_run=frozenset())
    fresh = run_one(
        work, spec, COST, replace(base, engine=engine, async_scheduling=async_scheduling), Load()
    )
    # program a's prefill (600) and its first decode step (1) are new; b's are not
    extra = new_shape_s(PROFILE.new_shape, 600) + new_shape_s(PROFILE.new_shape, 1)
    assert fresh["engine_busy_s"] - warm["engine_busy_s"] == pytest.approx(extra, rel=1e-9)
    # an engine that had run both sizes pays nothing
    seen = replace(base.engine, sizes_run=frozenset({1, 600}))
    again = run_one(
        work, spec, COST, replace(base, engine=seen, async_scheduling=async_scheduling), Load()
    )
    assert again["engine_busy_s"] == pytest.approx(warm["engine_busy_s"], rel=1e-12)


CONFIG = ReplayConfig(
    engine=SimSchedulerConfig(kv_tokens=120_000, sizes_run=frozenset({1, 2})), check=True
)


@pytest.mark.parametrize("policy", ["vllm", "continuum"])
def test_one_replica_is_the_single_engine_with_new_sizes(policy: str) -> None:
    """The fleet's waiting runs of decode steps (planned at a step boundary) and one
    engine's merged runs agree on which steps are new: one replica replays one engine."""
    work = from_frame(synth("swe-bench", 12, 5))
    spec, load = PolicySpec(policy), Load(concurrency=6)
    single = run_one(work, spec, COST, CONFIG, load, timed=False)
    fleet = runner(FleetSpec(1, RouterSettings("round-robin")))(
        work, spec, COST, CONFIG, load, timed=False
    )
    assert {k: fleet[k] for k in single} == single
    warm_config = replace(CONFIG, engine=replace(CONFIG.engine, sizes_run=None))
    warm = run_one(work, spec, COST, warm_config, load, timed=False)
    assert single["engine_busy_s"] > warm["engine_busy_s"]


def test_vllms_scheduler_charges_new_sizes_as_the_fast_backend() -> None:
    """vLLM's own scheduler (the vLLM backend) books the same steps with the same extras."""
    work = from_frame(synth("swe-bench", 4, 3))
    config = ReplayConfig(
        engine=SimSchedulerConfig(kv_tokens=2_000_000, sizes_run=frozenset()), concurrency=3
    )
    spec = PolicySpec("vllm")
    fast = run_one(work, spec, COST, config, Load(concurrency=3), timed=False)
    got = vllm_run(work, spec, COST, config, Load(concurrency=3))
    assert got.engine.stats.steps == fast["engine_steps"]
    assert got.engine.stats.busy_s == pytest.approx(fast["engine_busy_s"], rel=1e-9)
    plain = vllm_run(
        work, spec, COST, replace(config, engine=replace(config.engine, sizes_run=None)),
        Load(concurrency=3),
    )  # fmt: skip
    assert got.engine.stats.busy_s > plain.engine.stats.busy_s


def test_the_warm_up_sizes_are_within_the_step_budget_as_chunks() -> None:
    """validate's engines start having run the warm-up's sizes: its prefills (a prompt
    longer than the step budget as its chunks: the budget, then the rest), the batches'
    decodes 1 to 4, and nothing above the budget."""
    whole = warm_sizes(2048, 32, 8192)
    assert set(lengths(2048)) <= whole and {1, 2, 3, 4} <= whole
    # the short prompts prefilled 1 to 4 at a time, beside the batch's other decodes
    short = min(lengths(2048))
    assert {k * short + d for k in range(1, 5) for d in range(5 - k)} <= whole
    chunked = warm_sizes(2048, 32, 512)
    assert max(chunked) == 512
    assert {n % 512 for n in lengths(2048) if n > 512 and n % 512} <= chunked
