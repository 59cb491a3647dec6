"""How ``validate --replicas N --repeats K`` prices its live runs (replay/validation/
fleet_rows.py): with a profile measured in each repeat, each run by its own repeat's, and
by the pooled one beside it (``compare_pooled``); the goal judged on both."""

from __future__ import annotations

from typing import Any

import pytest

from profiles import schema
from profiles.engine_timings import EngineSamples
from profiles.shipped import resolve
from replay.fit_context import fit_context
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.synth import synth
from replay.validation.error import ValidateError
from replay.validation.fleet_profile import Measured, by_repeat
from replay.validation.fleet_rows import LiveRun, simulate_runs
from replay.validation.fleet_runs import goal_repriced, merge_fleet_runs
from replay.validation.fleet_sim import simulate_timings
from replay.validation.sim_side import SimSide
from replay.validation.timings import Timings
from replay.workload import Workload, from_frame
from tests.resimulated import slower

URLS = ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]
ROUTERS = ("cache_aware", "round_robin")


def _work() -> Workload:
    return from_frame(fit_context(synth("swe-bench", 4, 0), 1900))


#: what each live replica's /metrics gave over a run (engine_metrics.engine_delta)
ENGINE = {
    "engine_steps": 100,
    "requests": 20,
    "ttft_mean_s": 0.3,
    "queue_mean_s": 0.05,
    "prefill_mean_s": 0.2,
    "decode_mean_s": 0.3,
}


def _run(work: Workload, repeat: int, router: str, live_jct: float) -> LiveRun:
    """A live run as validate records it: every call's replica in its program's arrival
    order (alternating), and each replica's own figures."""
    fleet = {
        "worker_order": URLS,
        "replicas": {f"r{i + 1}": {"url": u, "engine": ENGINE} for i, u in enumerate(URLS)},
    }
    order = {p.program_id: [f"r{1 + (i % 2)}" for i in range(len(p.calls))] for p in work.programs}
    result = {"jct_mean_s": live_jct, "ttft_mean_s": 0.4, "server": {"client_hit_rate": 0.4}}
    return LiveRun(repeat, "vllm", router, result, order, fleet)


def _jct(compared: list[dict[str, Any]], metric: str = "jct_mean_s") -> dict[str, Any]:
    return next(c for c in compared if c["metric"] == metric)


def test_each_repeat_is_priced_by_its_own_measurement_and_the_pooled_one_beside_it() -> None:
    work = _work()
    fast = resolve("tiny-cpu")[0]
    slow = slower(fast, 1.5)
    engine = SimSchedulerConfig(kv_tokens=4064, block_size=32, max_model_len=2048)
    side = SimSide(replicas=2, profile=fast, engine=engine, timing=Load())
    timings = Timings(draws=0)
    runs = [_run(work, k, r, 10.0) for k in (0, 1) for r in ROUTERS]
    out = simulate_runs(runs, work, side, {0: fast, 1: slow}, timings)
    assert out.per_repeat
    for router in ROUTERS:
        first, second = out.rows["vllm"][router]
        # repeat 2 ran on the slower machine: its simulation is priced by its own profile
        # (the calls' times: the tools' pauses are the same)
        assert _jct(second["compare"])["sim"] > _jct(first["compare"])["sim"]
        ttft = [_jct(r["compare"], "ttft_mean_s")["sim"] for r in (first, second)]
        assert ttft[1] > 1.3 * ttft[0]
        # and so is the simulation on the live placement, with the replicas' parts
        routed = [_jct(r["compare_as_routed"])["sim"] for r in (first, second)]
        assert routed[1] > routed[0]
        for part in ("prefill_mean_s", "decode_mean_s"):
            sims = [r["engines_as_routed"]["r1"][part]["sim"] for r in (first, second)]
            assert sims[1] > 1.3 * sims[0], part
        # beside it, the pooled profile (here the fast one) prices both runs alike
        assert _jct(second["compare_pooled"])["sim"] == pytest.approx(_jct(first["compare"])["sim"])
        assert _jct(first["compare_pooled"]) == _jct(first["compare"])
        merged = merge_fleet_runs(out.rows["vllm"][router])
        assert _jct(merged["compare_pooled"])["sim"] == pytest.approx(_jct(first["compare"])["sim"])
    pooled = goal_repriced(out.rows["vllm"], "compare_pooled")
    assert set(pooled["errors"]) == set(ROUTERS)
    # live 10 s everywhere: the fast profile's simulation, some 35% short, misses the goal
    # on both routers, and the routers' order is judged on the pooled figures
    assert pooled["met"] is False
    assert pooled["ranking"]["routers"] == list(ROUTERS)
    for router in ROUTERS:
        merged = merge_fleet_runs(out.rows["vllm"][router])
        assert pooled["errors"][router] == pytest.approx(_jct(merged["compare_pooled"])["error"])
        assert pooled["errors"][router] < _jct(merged["compare"])["error"]
    # one profile for every run (given, or one repeat): no second pricing
    one = simulate_runs(runs[:2], work, side, {0: slow}, timings)
    assert not one.per_repeat
    assert all("compare_pooled" not in row for row in one.rows["vllm"]["cache_aware"])
    # a run whose repeat has none among several profiles is refused, not priced by another
    with pytest.raises(ValueError, match=r"repeat\(s\) \[2\]"):
        simulate_runs(
            [*runs, _run(work, 2, "round_robin", 10.0)], work, side, {0: fast, 1: slow}, timings
        )
    given = simulate_runs(runs, work, side, {}, timings)
    assert not given.per_repeat
    assert _jct(given.rows["vllm"]["round_robin"][1]["compare"]) == _jct(
        out.rows["vllm"]["round_robin"][1]["compare_pooled"]
    )


def _measured(repeat: int, profile: schema.Profile) -> Measured:
    samples = EngineSamples(
        url="http://127.0.0.1:8001", model="m", max_model_len=2048, kv_capacity=4064,
        version="0.32.0", kv_bytes_per_token=12288, kv_bytes_from="config", created="",
        repeats=2, output_tokens=16, decode_output_tokens=16, prefill=(), decode=(),
    )  # fmt: skip
    return Measured(repeat, f"measured in repeat {repeat}", 0, samples, profile)


def test_each_measurement_is_its_repeat_counted_from_zero_as_the_runs_are() -> None:
    fast = resolve("tiny-cpu")[0]
    slow = slower(fast, 2.0)
    # validate numbers its measurements 1..K, its runs' repeats 0..K-1
    own = by_repeat([_measured(1, fast), _measured(2, slow), _measured(3, fast)], 3)
    assert own == {0: fast, 1: slow, 2: fast}
    assert by_repeat([], 3) == {}  # a profile was given
    with pytest.raises(ValidateError, match="got repeats 1, 3"):
        by_repeat([_measured(1, fast), _measured(3, slow)], 2)
    with pytest.raises(ValidateError, match="got repeats 1, 1"):
        by_repeat([_measured(1, fast), _measured(1, slow)], 2)
    with pytest.raises(ValidateError, match="got repeats 1, 2, 2"):  # one repeat twice
        by_repeat([_measured(1, fast), _measured(2, slow), _measured(2, fast)], 2)


def _side(**engine: int) -> SimSide:
    sized = SimSchedulerConfig(kv_tokens=4064, block_size=32, max_model_len=2048, **engine)
    return SimSide(replicas=2, profile=resolve("tiny-cpu")[0], engine=sized, timing=Load())


def _row(work: Workload, side: SimSide, timings: Timings, run: LiveRun) -> dict[str, Any]:
    return simulate_runs([run], work, side, {}, timings).rows["vllm"][run.router][0]


def test_a_run_is_compared_and_judged_by_its_perturbed_timings_mean() -> None:
    """With draws, ``compare`` (and the goal) is the draws' mean; ``compare_one_timing``
    the trace's own timing; the live hit rate is the client's."""
    work, side, timings = _work(), _side(), Timings(draws=1)
    row = _row(work, side, timings, _run(work, 0, "cache_aware", 10.0))
    drawn = simulate_timings(
        work, side, timings, policy="vllm", router="cache_aware", worker_urls=URLS
    )
    assert drawn is not None and row["sim_timings"] == drawn["timings"]
    mean, one = _jct(row["compare"])["sim"], _jct(row["compare_one_timing"])["sim"]
    assert mean == pytest.approx(drawn["jct_mean_s"]) and mean != one
    assert row["hit_rate"] == 0.4
    # a live mean JCT within 10% of the lower figure and not of the higher
    row = _row(work, side, timings, _run(work, 0, "cache_aware", (mean + one) / 2 / 1.1))
    assert row["jct_within_10pct"] is (mean < one)


def test_simulated_replica_i_is_the_live_routers_i_th_worker() -> None:
    """The worker order the live router reported places the simulated calls, not the
    order the replicas are listed in."""
    work, side, timings = _work(), _side(), Timings(draws=0)
    run = _run(work, 0, "round_robin", 10.0)
    row = _row(work, side, timings, run)
    swapped = LiveRun(0, "vllm", "round_robin", run.result, run.order,
                      {**run.fleet, "worker_order": URLS[::-1]})  # fmt: skip
    calls = row["sim_calls_per_replica"]
    assert calls["r1"] != calls["r2"]
    assert _row(work, side, timings, swapped)["sim_calls_per_replica"] == {
        "r1": calls["r2"],
        "r2": calls["r1"],
    }


def test_steps_compare_while_every_prompt_fits_the_step_budget() -> None:
    """A prompt of exactly max_num_batched_tokens is one step: steps still compare; one
    token over, it is chunked and they do not."""
    work, timings = _work(), Timings(draws=0)
    longest = max(c.input_tokens for p in work.programs for c in p.calls)
    for budget, comparable in ((longest, True), (longest - 1, False)):
        row = _row(
            work, _side(max_num_batched_tokens=budget), timings, _run(work, 0, "cache_aware", 10.0)
        )
        engines = row["engines_as_routed"]
        assert engines is not None
        assert {e["steps_comparable"] for e in engines.values()} == {comparable}
