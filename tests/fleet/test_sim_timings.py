"""The simulated fleet's mean over perturbed arrival timings (replay/validation/timings.py,
``simulate_timings``): each draw moves only starts and pauses, within its bounds, the same
for a seed; the mean is the draws' mean, and it is what a fleet row is compared by."""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from profiles.shipped import resolve
from replay.fit_context import fit_context
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.synth import synth
from replay.validation.fleet_runs import merge_fleet_runs
from replay.validation.fleet_sim import FLEET_COMPARED, simulate_fleets, simulate_timings
from replay.validation.sim_side import SimSide
from replay.validation.timings import Timings, perturbed
from replay.workload import Workload, from_frame


def _work() -> Workload:
    return from_frame(fit_context(synth("swe-bench", 6, 0), 1900))


def test_a_draw_moves_starts_and_pauses_within_bounds_and_nothing_else() -> None:
    work = _work()
    timings = Timings(draws=4, pause_rel=0.05, start_s=0.02, seed=3)
    one = perturbed(work, timings, 1)
    assert one == perturbed(work, timings, 1)  # the same for a seed and a draw
    assert one != perturbed(work, timings, 2)
    assert one != perturbed(work, Timings(draws=4, pause_rel=0.05, start_s=0.02, seed=4), 1)
    moved = shorter = 0
    for a, b in zip(work.programs, one.programs, strict=True):
        assert a.program_id == b.program_id and len(a.calls) == len(b.calls)
        assert a.start_s <= b.start_s <= a.start_s + 0.02
        for c, d in zip(a.calls, b.calls, strict=True):
            assert (c.input_tokens, c.output_tokens, c.reused_tokens) == (
                d.input_tokens,
                d.output_tokens,
                d.reused_tokens,
            )
            assert abs(d.pause_s - c.pause_s) <= 0.05 * c.pause_s + 1e-12
            moved += d.pause_s != c.pause_s
            shorter += d.pause_s < c.pause_s
    assert moved > 0
    assert 0 < shorter < moved  # a pause is scaled by 1 ± pause_rel: shortened or lengthened


def test_the_default_perturbation_is_the_documented_one() -> None:
    """docs/validate.md: 32 draws, each pause × 1 ± 2%, each start + 0–10 ms."""
    assert Timings().to_json() == {"draws": 32, "pause_rel": 0.02, "start_s": 0.01, "seed": 0}


def _side() -> SimSide:
    engine = SimSchedulerConfig(kv_tokens=4064, block_size=32, max_model_len=2048)
    return SimSide(replicas=2, profile=resolve("tiny-cpu")[0], engine=engine, timing=Load())


def test_the_simulated_figures_are_the_mean_over_the_draws() -> None:
    work = _work()
    timings = Timings(draws=3, seed=1)
    drawn = simulate_timings(work, _side(), timings, policy="vllm", router="cache_aware")
    assert drawn is not None
    each = []
    for k in (1, 2, 3):
        sim, _ = simulate_fleets(
            perturbed(work, timings, k), _side(), policies=["vllm"], routers=["cache_aware"]
        )
        result = sim["vllm"]["cache_aware"]
        assert result is not None
        each.append(result)
    for _, key, _, _ in FLEET_COMPARED:
        values = [float(r[key]) for r in each]  # type: ignore[literal-required]
        assert drawn[key] == pytest.approx(statistics.mean(values))
        assert drawn["timings"]["range"][key] == [min(values), max(values)]
    assert drawn["timings"]["draws"] == 3 and drawn["timings"]["seed"] == 1
    again = simulate_timings(work, _side(), timings, policy="vllm", router="cache_aware")
    assert again == drawn  # deterministic for a seed
    none = simulate_timings(work, _side(), Timings(draws=0), policy="vllm", router="cache_aware")
    assert none is None
    missing = simulate_timings(work, _side(), timings, policy="vllm", router="least_cost")
    assert missing is None  # a router with no model is not simulated


def test_merged_runs_keep_the_trace_timings_figure_beside_the_mean() -> None:
    def row(live: float, drawn: float, one: float) -> dict[str, Any]:
        def compare(sim: float) -> list[dict[str, Any]]:
            return [{"metric": m, "sim": sim if m == "jct_mean_s" else 0.5, "live": None,
                     "error": None} for m, *_ in FLEET_COMPARED]  # fmt: skip

        return {"jct_mean_s": live, "ttft_mean_s": 1.0, "hit_rate": 0.5, "returned_share": 0.5,
                "compare": compare(drawn), "compare_one_timing": compare(one),
                "jct_within_10pct": True,
                "sim_timings": {"draws": 32, "pause_rel": 0.02, "start_s": 0.01, "seed": 0,
                                "range": {}}}  # fmt: skip

    merged = merge_fleet_runs([row(10.0, 10.0, 8.0), row(12.0, 11.0, 7.0)])
    by = {c["metric"]: c for c in merged["compare"]}
    one = {c["metric"]: c for c in merged["compare_one_timing"]}
    assert by["jct_mean_s"]["sim"] == pytest.approx(10.5)
    assert by["jct_mean_s"]["error"] == pytest.approx(10.5 / 11.0 - 1)
    assert one["jct_mean_s"]["sim"] == pytest.approx(7.5)
    assert one["jct_mean_s"]["error"] == pytest.approx(7.5 / 11.0 - 1)
    assert merged["sim_timings"] == {"draws": 32, "pause_rel": 0.02, "start_s": 0.01, "seed": 0}
