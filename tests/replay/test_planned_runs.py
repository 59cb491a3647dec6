"""A fleet replica's run of decode steps: planned when it starts waiting
(``merge_end``), taken as planned at its end (``take_run``), or its head when a call cuts it
short.
Taking the plan is exactly what a step from the same state takes; a plan is only taken
from the state it was made in."""

from __future__ import annotations

import math

import pytest

from profiles.cost import ConstantCostModel
from replay.policies.simple import VLLM
from replay.request import SimRequest
from replay.scheduler import SimScheduler, SimSchedulerConfig
from replay.sim_error import SimulationError


def decoding_engine() -> tuple[SimScheduler, float]:
    """An engine whose three requests have all left their prefill (decode steps only
    remain, different lengths), and the time its last step ended."""
    engine = SimScheduler(
        SimSchedulerConfig(kv_tokens=16 * 64, block_size=16), ConstantCostModel(), VLLM()
    )
    for rid, (name, output) in enumerate((("a", 40), ("b", 25), ("c", 60))):
        engine.add(SimRequest(rid, name, 0, 0.0, 0.0, 100 + rid, output, 0, None, True), 0.0)
    now = 0.0
    while any(not r.decoding for r in engine.running) or engine.waiting:
        duration, _ = engine.step(now, now)
        now += duration
    return engine, now


def state(engine: SimScheduler) -> tuple[object, ...]:
    s = engine.stats
    return (
        s.steps,
        s.busy_s,
        s.longest_step_s,
        engine.decoders.decode_steps,
        engine.pool.free_blocks,
        sorted((r.program, r.num_tokens) for r in engine.running),
    )


def test_the_planned_run_is_the_step_from_the_same_state() -> None:
    planned, now = decoding_engine()
    stepped, again = decoding_engine()
    assert again == now
    end = planned.merge_end(now)
    assert end is not None and end > now
    taken, finished = planned.take_run(now, math.inf)
    duration, finished_too = stepped.step(now, math.inf)
    assert taken == duration == end - now
    assert [r.program for r in finished] == [r.program for r in finished_too] == ["b"]
    assert state(planned) == state(stepped)
    assert planned.stats.steps > 3  # a run of several decode steps, not one


def test_a_plan_is_taken_only_from_where_it_was_made() -> None:
    engine, now = decoding_engine()
    with pytest.raises(SimulationError, match="no run of decode steps was planned"):
        engine.take_run(now, math.inf)
    assert engine.merge_end(now) is not None
    with pytest.raises(SimulationError, match="planned from t="):
        engine.take_run(now + 0.5, math.inf)
    # a step taken meanwhile (a call cut the wait short) drops the plan
    assert engine.merge_end(now) is not None
    duration, _ = engine.step(now, now + 1e-9)  # the run's first step only
    assert duration > 0
    with pytest.raises(SimulationError, match="no run of decode steps was planned"):
        engine.take_run(now + duration, math.inf)


@pytest.mark.parametrize("share", [0.05, 0.3, 0.77, 1.0])
def test_a_call_cuts_the_plan_where_a_step_would_stop(share: float) -> None:
    """A call routed to the replica while it waits: the steps of the plan that start
    before the call are taken, as a step up to the call takes them."""
    planned, now = decoding_engine()
    stepped, _ = decoding_engine()
    end = planned.merge_end(now)
    assert end is not None
    cut = now + share * (end - now)
    taken, finished = planned.take_run(now, cut)
    duration, finished_too = stepped.step(now, cut)
    assert taken == duration and now + taken >= cut
    assert [r.program for r in finished] == [r.program for r in finished_too]
    assert state(planned) == state(stepped)
    if share < 1.0:
        assert taken < end - now and not finished  # short of the finish that ended the plan
