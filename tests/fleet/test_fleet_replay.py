"""The fleet replay: one replica is the single-engine replay exactly (every policy, every
router); several replicas conserve calls and report where each went."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from replay.fleet import run as fleet_run
from replay.fleet.metrics import replica_results
from replay.fleet.routers import ROUTERS, RouterSettings
from replay.fleet.routers.base import FleetView, RoutedCall
from replay.fleet.routers.kv_aware import KvAware
from replay.fleet.run import FleetSpec, logged_replicas, runner, simulate_fleet_one
from replay.policies import NAMES, PolicySpec
from replay.policy_runs import Load, run_one
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.synth import synth
from replay.workload import Workload, from_frame
from ttlctl.errors import ConfigError


@pytest.fixture(scope="module")
def workload() -> Workload:
    return from_frame(synth("swe-bench", 24, 3))


@pytest.fixture(scope="module")
def cost() -> ProfileCostModel:
    return ProfileCostModel(resolve("llama-3.1-8b-h100")[0])


# tight enough that pins, the valve and preemptions all happen
CONFIG = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=120_000), check=True)
LOAD = Load(concurrency=12)


@pytest.mark.parametrize("policy", NAMES)
def test_one_replica_is_the_single_engine(workload, cost, policy):
    spec = PolicySpec(policy)
    single = run_one(workload, spec, cost, CONFIG, LOAD, timed=False)
    for name in ROUTERS:
        if name in ("as-logged", "program-scheduling"):
            continue  # program-scheduling retains calls: test_program_scheduling.py
        fleet = runner(FleetSpec(1, RouterSettings(name)))(
            workload, spec, cost, CONFIG, LOAD, timed=False
        )
        assert {k: fleet[k] for k in single} == single, name
        assert fleet["replicas"] == 1 and fleet["pins_wasted"] == 0


def test_four_replicas_serve_every_call_once(workload, cost):
    calls = workload.calls
    for name in ("round-robin", "consistent-hash", "cache-aware", "kv-aware", "pin-aware"):
        r = runner(FleetSpec(4, RouterSettings(name)))(
            workload, PolicySpec("continuum"), cost, CONFIG, LOAD, timed=False
        )
        per = r["per_replica"]
        assert r["llm_calls"] == calls == sum(p["llm_calls"] for p in per)
        assert r["load_balance"] >= 1.0
        assert sum(p["engine_busy_s"] for p in per) == pytest.approx(r["engine_busy_s"])
        if name == "consistent-hash":  # sticky: every follow-up returns, no pin wasted
            assert r["returned_share"] == 1.0 and r["pins_wasted"] == 0
            assert r["miss_reasons"]["routed_elsewhere"] == 0
        if name == "round-robin":  # about 1 in 4 return: pins go to waste
            assert r["returned_share"] < 0.5 and r["pins_wasted"] > 0
            assert r["miss_reasons"]["routed_elsewhere"] > 0
        # every pin made is accounted for, those still held at the end included (a pin
        # whose program went on, and ended, elsewhere)
        pins = r["pins"]
        assert pins["made"] == sum(
            pins[k] for k in ("hit", "expired", "released_under_pressure", "dropped", "held_at_end")
        ), (name, pins)
        if name == "round-robin":
            assert pins["held_at_end"] > 0 and pins["made"] > 0


def test_per_replica_ttft_parts_start_where_vllms_do(workload, cost):
    """A replica's queue time runs from a call reaching its scheduler (at the replica's
    step boundary after the send, as vLLM stamps QUEUED in add_request) to its first
    admission; the prefill time from there to its first token. Both fit in the TTFT,
    which counts from the send."""
    fleet = FleetSpec(2, RouterSettings("round-robin"))
    outcome, _, _ = simulate_fleet_one(workload, PolicySpec("continuum"), cost, CONFIG, LOAD, fleet)
    rows = replica_results(outcome)
    waited = 0
    for r, row in enumerate(rows):
        calls = [c for c, at in zip(outcome.calls, outcome.call_replicas, strict=True) if at == r]
        delivered = [outcome.routes[(c.program, c.turn)].delivered for c in calls]
        queue = [c.admitted - d for c, d in zip(calls, delivered, strict=True)]
        waited += sum(d > c.arrival for c, d in zip(calls, delivered, strict=True))
        assert min(queue) >= 0.0
        assert row["scheduler_queue_mean_s"] == pytest.approx(np.mean(queue))
        assert row["prefill_mean_s"] == pytest.approx(
            np.mean([c.first_token - c.admitted for c in calls])
        )
        assert row["scheduler_queue_mean_s"] + row["prefill_mean_s"] <= row["ttft_mean_s"] + 1e-12
        assert row["decode_mean_s"] == pytest.approx(
            np.mean([c.finish - c.first_token for c in calls])
        )
        assert row["decode_mean_s"] > 0
    assert waited > 0  # some calls were sent while their replica stepped


def test_same_seed_same_fleet(workload, cost):
    run = runner(FleetSpec(3, RouterSettings("power-of-two")))
    load = Load(concurrency=12, seed=5)
    a = run(workload, PolicySpec("continuum"), cost, CONFIG, load, timed=False)
    b = run(workload, PolicySpec("continuum"), cost, CONFIG, load, timed=False)
    assert a == b


def test_as_logged_replays_the_recorded_routing(tmp_path: Path, workload, cost):
    frame = synth("swe-bench", 24, 3)
    frame = frame.with_columns(
        pl.when(pl.col("turn") % 2 == 0)
        .then(pl.lit("10.0.0.2:8000"))
        .otherwise(pl.lit("10.0.0.1:8000"))
        .alias("replica")
    )
    path = tmp_path / "fleet.parquet"
    frame.write_parquet(path)
    logged = logged_replicas(path)
    r = runner(FleetSpec(2, RouterSettings("as-logged"), logged))(
        workload, PolicySpec("vllm"), cost, CONFIG, LOAD, timed=False
    )
    # even turns on the second name (sorted: index 1), odd on the first: none returns
    assert r["returned_share"] == 0.0
    plain = tmp_path / "plain.parquet"
    synth("swe-bench", 4, 3).write_parquet(plain)
    with pytest.raises(ConfigError, match=r"--router as-logged: .* has no 'replica' column"):
        logged_replicas(plain)


def test_fleet_refusals():
    with pytest.raises(ConfigError, match="--replicas must be at least 1"):
        FleetSpec(0)
    with pytest.raises(ConfigError, match="--router as-logged needs"):
        FleetSpec(2, RouterSettings("as-logged"))


@pytest.mark.parametrize("seed", [0, 1])
def test_shared_prefixes_one_replica_and_a_fleet(seed: int) -> None:
    """Programs of two products whose prompts start with shared blocks: one replica is the
    single engine, every policy; on three replicas kv-aware sees the shared blocks that
    other programs left on a replica (a first call hits there)."""
    from tests.replay.test_prefix_sharing import CONFIG as SHARED_CONFIG
    from tests.replay.test_prefix_sharing import COST as SHARED_COST
    from tests.replay.test_prefix_sharing import workload as shared_workload

    work = shared_workload(seed)
    load = Load()
    for policy in ("vllm", "continuum"):
        spec = PolicySpec(policy)
        single = run_one(work, spec, SHARED_COST, SHARED_CONFIG, load, timed=False)
        for name in ("cache-aware", "kv-aware"):
            fleet = runner(FleetSpec(1, RouterSettings(name)))(
                work, spec, SHARED_COST, SHARED_CONFIG, load, timed=False
            )
            assert {k: fleet[k] for k in single} == single, (policy, name)
    outcome, _, _ = simulate_fleet_one(
        work, PolicySpec("vllm"), SHARED_COST, SHARED_CONFIG, load,
        FleetSpec(3, RouterSettings("kv-aware")),
    )  # fmt: skip
    firsts = [c for c in outcome.calls if c.turn == 0 and c.prompt > 64]
    assert any(c.hit_tokens > 0 for c in firsts)  # a prefix another program computed


@pytest.mark.parametrize(
    ("name", "policy"),
    [
        ("kv-aware", "vllm"),
        ("kv-aware", "continuum"),
        ("round-robin", "vllm"),
        ("round-robin", "continuum"),
        ("pin-aware", "continuum"),
        ("cache-aware", "static-ttl"),
        ("power-of-two", "program-fcfs"),
    ],
)
def test_waiting_decode_runs_match_step_by_step(workload, cost, name, policy):
    """Three replicas: the fleet's waiting runs of decode steps (taken up to the next call
    routed there) give what stepping one decode token at a time gives. (A run taken at once
    up to the next send known would not: a send made later by a finish on another replica
    can come before it ends.)"""
    per_token = replace(CONFIG, engine=replace(CONFIG.engine, fast=False))
    run = runner(FleetSpec(3, RouterSettings(name)))
    fast = run(workload, PolicySpec(policy), cost, CONFIG, LOAD, timed=False)
    slow = run(workload, PolicySpec(policy), cost, per_token, LOAD, timed=False)
    for key in ("llm_calls", "preemptions", "pins_wasted", "miss_reasons", "pins"):
        assert fast[key] == slow[key], key
    for key in ("jct_mean_s", "ttft_mean_s", "prefix_hit_rate", "engine_busy_s"):
        assert fast[key] == pytest.approx(slow[key], rel=1e-9), key


class _Watch:
    """kv-aware as the fleet drives it, noting at each response's end whether its pending
    prefill had already been taken off (at its first output chunk) or is taken off now."""

    def __init__(self, inner: KvAware) -> None:
        self.inner = inner
        self.name = inner.name
        self.at_first_chunk = 0
        self.at_end = 0

    def route(self, call: RoutedCall, view: FleetView, now: float) -> int:
        return self.inner.route(call, view, now)

    def completed(self, replica: int, call: RoutedCall, now: float) -> None:
        if (call.session, call.turn) in self.inner._placed:
            self.at_end += 1
        else:
            self.at_first_chunk += 1
        self.inner.completed(replica, call, now)


def test_the_fleet_tells_kv_aware_when_a_response_begins(workload, cost, monkeypatch):
    """The fleet says a response has begun once the step that made its first token has
    ended: kv-aware then takes the call's prefill off its replica at its next placement,
    before the call ends (vllm-router does so at the first chunk), and nothing is left
    pending at the end."""
    made: list[_Watch] = []

    def watched(fleet, cost, *, seed, block_size):
        made.append(_Watch(KvAware(np.random.default_rng(seed), block_size=block_size)))
        return made[0]

    monkeypatch.setattr(fleet_run, "fleet_router", watched)
    outcome, _, _ = simulate_fleet_one(
        workload, PolicySpec("vllm"), cost, CONFIG, LOAD, FleetSpec(3, RouterSettings("kv-aware"))
    )
    watch = made[0]
    assert watch.at_first_chunk + watch.at_end == len(outcome.calls)
    # 12 programs at once on 3 replicas: most calls' first tokens come before another
    # call is placed, and those prefills leave at the first chunk
    assert watch.at_first_chunk > watch.at_end > 0
    assert watch.inner._placed == {} and set(watch.inner._prefilling.values()) == {0}


def test_programs_started_per_replica_count_those_cut_short(workload, cost):
    """A call too long for the engine cuts its program short: the replica it started on
    counts it among ``programs_started`` (not among the JCTs), so the replicas' sum is the
    fleet's ``programs`` plus ``programs_cut_short``, as docs/replay.md says."""
    longest = max(c.input_tokens + c.output_tokens for p in workload.programs for c in p.calls)
    small = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=longest // 2 // 16 * 16))
    r = runner(FleetSpec(3, RouterSettings("round-robin")))(
        workload, PolicySpec("vllm"), cost, small, LOAD, timed=False
    )
    assert r["programs_cut_short"] > 0 and r["rejected_calls"] > 0
    started = sum(p["programs_started"] for p in r["per_replica"])
    assert started == r["programs"] + r["programs_cut_short"] == len(workload.programs)


def test_truncated_calls_are_counted_on_every_replica(workload, cost):
    """With ``truncate`` a call longer than ``max_model_len`` is clipped, not refused, and
    counted in ``truncated_calls``: on one replica or three, as many as the workload's calls
    past the limit, as the single engine counts them."""
    lengths = [c.input_tokens + c.output_tokens for p in workload.programs for c in p.calls]
    limit = int(np.percentile(lengths, 85))
    over = sum(n > limit for n in lengths)
    assert over > 1
    config = replace(CONFIG, engine=replace(CONFIG.engine, max_model_len=limit), truncate=True)
    single = run_one(workload, PolicySpec("vllm"), cost, config, LOAD, timed=False)
    assert single["truncated_calls"] == over and single["rejected_calls"] == 0
    for replicas in (1, 3):
        r = runner(FleetSpec(replicas, RouterSettings("round-robin")))(
            workload, PolicySpec("vllm"), cost, config, LOAD, timed=False
        )
        assert r["truncated_calls"] == over, replicas
        assert r["rejected_calls"] == 0 and r["llm_calls"] == len(lengths), replicas
