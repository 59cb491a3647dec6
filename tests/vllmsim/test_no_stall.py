"""The premise under six equivalent faults of the vLLM backend (docs/testing.md): vLLM's
scheduler with the plugin never *stalls* (a ``schedule()`` that runs and preempts nothing
while requests remain and no step is in flight). With nothing in flight every running
request is scheduled or preempted, so a stall has nothing running, and then the waiting head
is admitted: the valve frees every pin when nothing runs, and a call always fits the cache.

So the harness's wait after a stall and a fleet replica's step of no time are never reached
on this release. ``make vllm-check`` runs this file on other releases' scheduler classes:
where it fails, those paths run there, and the faults the audit found equivalent on them
are live and untested.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings

from replay.fleet.run import FleetSpec
from replay.vllmsim.engine import VllmEngine
from replay.vllmsim.fleet import simulate
from replay.vllmsim.harness import Harness
from replay.vllmsim.run import run
from tests.vllmsim.drive import COST
from tests.vllmsim.stress import DRAWN, setup
from tests.vllmsim.test_stress import PLUGIN_ENV, cases


def _never(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("vLLM's scheduler stalled: the harness waited after an empty step")


@settings(DRAWN, max_examples=15)
@given(case=cases())
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_one_engine_never_waits_after_an_empty_step(
    monkeypatch: pytest.MonkeyPatch, async_scheduling: bool, case: dict[str, object]
) -> None:
    monkeypatch.setattr(Harness, "_wait", _never)
    work, spec, config, load = setup(case)
    outcome = run(
        work, spec, COST, config, load, async_scheduling=async_scheduling, plugin_env=PLUGIN_ENV
    )
    assert outcome.calls  # the run went through


@settings(DRAWN, max_examples=10)
@given(case=cases())
def test_a_replica_never_takes_a_step_of_no_time_with_calls_in_it(
    monkeypatch: pytest.MonkeyPatch, case: dict[str, object]
) -> None:
    """A fleet of two: a replica's step returns no time only when nothing is left in its
    engine (the fleet's wait for a pin expiry after such a step is then never reached)."""
    stepped = VllmEngine.step
    steps = [0]

    def checked(engine: VllmEngine, now: float, horizon: float) -> Any:
        duration, finished = stepped(engine, now, horizon)
        steps[0] += 1
        if duration <= 0:
            left = engine.built.scheduler.get_num_unfinished_requests()
            assert not left, f"a step of no time with {left} requests in the engine"
        return duration, finished

    monkeypatch.setattr(VllmEngine, "step", checked)
    work, spec, config, load = setup(case)
    got = simulate(work, spec, COST, config, load, FleetSpec(2, backend="vllm"))
    assert got.outcome.calls and steps[0] > 0
