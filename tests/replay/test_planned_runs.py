"""A fleet replica's run of decode steps: planned when it starts waiting
(``merge_end``), taken as planned at its end (``take_run``), or its head when a call cuts it
short. Taking the plan is exactly what a step from the same state takes; a plan is taken
only from the time it was made at, and a step or a call to the engine since drops it."""

from __future__ import annotations

import math

import pytest

from profiles.cost import ConstantCostModel
from replay.policies import PolicySpec, make
from replay.policies.simple import VLLM
from replay.request import SimRequest
from replay.scheduler import SimScheduler, SimSchedulerConfig
from replay.sim_error import SimulationError


def decoding_engine(*, pinned: bool = False) -> tuple[SimScheduler, float]:
    """An engine whose requests have all left their prefill (decode steps only remain,
    different lengths), and the time its last step ended. ``pinned``: under a static TTL,
    with one program's pin held (a call with a tool, finished first), so that its expiry
    is the horizon of a run planned then."""
    policy = make(PolicySpec("static-ttl", ttl_s=0.25), {}, lambda t, o: 0.0) if pinned else VLLM()
    engine = SimScheduler(
        SimSchedulerConfig(kv_tokens=16 * 64, block_size=16), ConstantCostModel(), policy
    )
    calls = (("a", 40, None), ("b", 25, None), ("c", 60, None))
    if pinned:
        calls += (("p", 3, "tool"),)
    for rid, (name, output, tool) in enumerate(calls):
        call = SimRequest(rid, name, 0, 0.0, 0.0, 100 + rid, output, 0, tool, tool is None)
        engine.add(call, 0.0)
    now = 0.0
    for _ in range(100):
        ready = all(r.decoding for r in engine.running) and not engine.waiting
        if ready and (not pinned or engine.next_expiry() < math.inf):
            return engine, now
        duration, _ = engine.step(now, now)
        now += duration
    raise AssertionError("the engine never reached a decode-only state")


def state(engine: SimScheduler) -> tuple[object, ...]:
    """What taking a run changes: the engine's counters, the decode set, the pool, the
    running requests' tokens, the pinned memory's clock and timeline, the last step's end."""
    s = engine.stats
    return (
        s.steps,
        s.busy_s,
        s.longest_step_s,
        s.pinned_block_seconds,
        engine.decoders.decode_steps,
        engine.pool.free_blocks,
        sorted((r.program, r.num_tokens) for r in engine.running),
        engine.clock,
        list(engine.timeline),
        engine._last_end,
    )


def test_the_planned_run_is_the_step_from_the_same_state() -> None:
    planned, now = decoding_engine()
    stepped, again = decoding_engine()
    assert again == now
    end = planned.merge_end(now)
    assert end is not None and end > now
    taken, finished = planned.take_run(now, math.inf)
    duration, finished_too = stepped.step(now, math.inf)
    assert taken == duration and now + taken == end
    assert [r.program for r in finished] == [r.program for r in finished_too] == ["b"]
    assert state(planned) == state(stepped)
    assert planned.stats.steps > 3  # a run of several decode steps, not one


def test_a_plan_is_taken_only_from_where_it_was_made() -> None:
    engine, now = decoding_engine()
    with pytest.raises(SimulationError, match="no run of decode steps is planned"):
        engine.take_run(now, math.inf)
    assert engine.merge_end(now) is not None
    with pytest.raises(SimulationError, match=r"planned from t=.* s, not t="):
        engine.take_run(now + 0.5, math.inf)
    # a step taken meanwhile (a call cut the wait short) drops the plan
    assert engine.merge_end(now) is not None
    duration, _ = engine.step(now, now + 1e-9)  # the run's first step only
    assert duration > 0
    with pytest.raises(SimulationError, match="no run of decode steps is planned"):
        engine.take_run(now + duration, math.inf)
    # so does a call reaching the engine (the step after it decides again)
    now += duration
    assert engine.merge_end(now) is not None
    engine.add(SimRequest(9, "late", 0, now, now, 50, 5, 0, None, True), now)
    with pytest.raises(SimulationError, match="no run of decode steps is planned"):
        engine.take_run(now, math.inf)


def test_a_plan_stops_before_the_next_pin_expiry() -> None:
    """With a pin held, the plan's horizon is its expiry: the plan taken whole is the step
    up to it, pinned memory integrated alike."""
    planned, now = decoding_engine(pinned=True)
    stepped, _ = decoding_engine(pinned=True)
    expiry = planned.next_expiry()
    assert now < expiry < math.inf
    end = planned.merge_end(now)
    assert end is not None
    taken, finished = planned.take_run(now)
    duration, finished_too = stepped.step(now, expiry)
    assert taken == duration and now + taken == end
    assert [r.program for r in finished] == [r.program for r in finished_too] == []
    assert state(planned) == state(stepped)
    assert planned.stats.pinned_block_seconds > 0


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
