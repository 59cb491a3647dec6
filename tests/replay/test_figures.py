"""A replay's figures (:func:`replay.figures.summarize`) read off its records as
docs/replay.md names them: JCT from a program's first call sent to its last call's finish,
TTFT and queueing from each call's sending, the makespan from the first program's start to
the last finish, throughput of the programs that ran to their end, the pins' fates by name
(they add up to ``made``), pinned token-seconds in tokens."""

from __future__ import annotations

from statistics import mean

import pytest

from fitting.percentile import percentile
from profiles.cost import ConstantCostModel
from replay.figures import summarize, timeline
from replay.policies import PolicySpec
from replay.policy_runs import Load, simulate_one
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.workload import AgentProgram, Call, Workload
from tests.replay.test_policy_options import WORK


def test_the_figures_are_read_off_the_records() -> None:
    """WORK's programs (A's pin released by the head valve for C while B runs; C listed
    first though it starts at 150 ms) and D, whose call is longer than the KV cache:
    refused, D is cut short."""
    a, b, c = WORK.programs
    d = AgentProgram("D", 0.3, (Call(2000, 1, 0, None, 0.0),))
    work = Workload((c, a, b, d))
    engine = SimSchedulerConfig(kv_tokens=16 * 80, block_size=16)
    outcome, _ = simulate_one(
        work,
        PolicySpec("static-ttl", ttl_s=1.0),
        ConstantCostModel(),
        ReplayConfig(engine=engine),
        Load(),
    )
    r = summarize(outcome, "static-ttl", evaluation_only=False, wall_s=0.5)
    calls, stats = outcome.calls, outcome.engine.stats
    ran = [p for p in outcome.programs if not p.cut_short]
    assert (r["programs"], r["programs_cut_short"], r["rejected_calls"]) == (3, 1, 1)
    assert r["jct_mean_s"] == pytest.approx(mean(p.last_finish - p.first_arrival for p in ran))  # type: ignore[operator]
    assert r["ttft_mean_s"] == pytest.approx(mean(c.first_token - c.arrival for c in calls))
    assert r["queue_mean_s"] == pytest.approx(mean(c.admitted - c.arrival for c in calls))
    assert r["queue_mean_s"] > 0  # C queued behind A's pin
    assert r["makespan_s"] == pytest.approx(max(c.finish for c in calls) - 0.0)
    assert r["throughput_programs_per_s"] == pytest.approx(3 / r["makespan_s"])
    assert stats.pinned_block_seconds > 0
    assert r["pinned_token_seconds"] == pytest.approx(stats.pinned_block_seconds * 16)
    pins = r["pins"]
    assert pins is not None
    assert (pins["made"], pins["released_under_pressure"], pins["hit"], pins["expired"]) == (
        1,
        1,
        0,
        0,
    )
    assert pins.get("dropped") == pins.get("held_at_end") == pins.get("refused") == 0
    assert r["sim_calls_per_s"] == len(calls) / 0.5 and r["llm_calls"] == len(calls) == 4


def test_the_pinned_timeline_keeps_each_slices_peak_and_ends_at_the_replays_end() -> None:
    """Five samples downsampled to two points: slices of three and two samples (a ceiling),
    each given at its first instant with its largest value, then the last sample's value
    at the replay's end."""
    engine = SimSchedulerConfig(kv_tokens=16 * 80, block_size=16)
    outcome, _ = simulate_one(
        WORK, PolicySpec("vllm"), ConstantCostModel(), ReplayConfig(engine=engine), Load()
    )
    outcome.engine.timeline[:] = [(0.0, 2), (1.0, 5), (2.0, 3), (3.0, 1), (4.0, 4)]
    assert timeline(outcome, 16, points=2) == {
        "t_s": [0.0, 3.0, outcome.end],
        "pinned_tokens": [5 * 16, 4 * 16, 4 * 16],
    }


def test_the_percentiles_and_the_refused_pins_are_read_off_the_records() -> None:
    """40 programs of two calls of growing sizes under a pin cap of 1% of the cache: the
    JCT and TTFT percentiles are numpy's of the records, and every pin is refused."""
    work = Workload(
        tuple(
            AgentProgram(
                f"p{i}",
                0.01 * i,
                (Call(16 * (i % 7 + 1), 2, 0, "t", 0.01), Call(16 * (i % 7 + 2), 2, 0, None, 0.0)),
            )
            for i in range(40)
        )
    )
    engine = SimSchedulerConfig(kv_tokens=16 * 400, block_size=16)
    spec = PolicySpec("static-ttl", pin_cap=0.001)
    outcome, _ = simulate_one(work, spec, ConstantCostModel(), ReplayConfig(engine=engine), Load())
    r = summarize(outcome, "static-ttl", evaluation_only=False, wall_s=None)
    jct = [p.last_finish - p.first_arrival for p in outcome.programs]  # type: ignore[operator]
    ttft = [c.first_token - c.arrival for c in outcome.calls]
    for q in (50, 95, 99):
        assert r[f"jct_p{q}_s"] == percentile(jct, q)  # type: ignore[literal-required]
    assert r["jct_p95_s"] is not None and r["ttft_p95_s"] == percentile(ttft, 95) is not None
    stats = outcome.engine.stats
    assert r["pins"] is not None and stats.pins_refused == 40 and stats.pins_made == 0
    assert (r["pins"].get("refused"), r["pins"].get("held_at_end")) == (40, 0)
    assert r["sim_calls_per_s"] is None
