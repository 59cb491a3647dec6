"""Routing a call (replay/fleet/routing.py): a replica index the router gives that the
fleet has not is a simulation error naming the router; a call routed to a replica that is
not stepping wakes it at once, whatever later wake it had queued."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from replay.fleet import run as fleet_run
from replay.fleet.books import Books
from replay.fleet.events import EventQueue
from replay.fleet.replica import Replica
from replay.fleet.routers import RouterSettings
from replay.fleet.routers.base import FleetView, RoutedCall, Stateless
from replay.fleet.routing import dispatch
from replay.fleet.run import FleetSpec, simulate_fleet_one
from replay.policies import PolicySpec
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.sim_error import SimulationError
from replay.synth import synth
from replay.workload import from_frame


class _Astray(Stateless):
    """Sends every call to replica ``pick``, which the fleet may not have."""

    name = "astray"

    def __init__(self, pick: int) -> None:
        self.pick = pick

    def route(self, call: RoutedCall, view: FleetView, now: float) -> int:
        return self.pick


@pytest.mark.parametrize("pick", [2, 3, -1])
def test_a_replica_the_fleet_has_not_is_an_error_naming_the_router(
    pick: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas: index 2 (one past the last), 3 or -1 is refused with the router's
    name and the index, not an IndexError, nor Python's negative indexing serving the
    last replica."""

    def astray(fleet: FleetSpec, cost: Any, *, seed: int, block_size: int) -> _Astray:
        return _Astray(pick)

    monkeypatch.setattr(fleet_run, "fleet_router", astray)
    with pytest.raises(SimulationError, match=rf"^router astray chose replica {pick}$"):
        simulate_fleet_one(
            from_frame(synth("swe-bench", 2, 3)),
            PolicySpec("vllm"),
            ProfileCostModel(resolve("llama-3.1-8b-h100")[0]),
            ReplayConfig(engine=SimSchedulerConfig(kv_tokens=120_000)),
            Load(concurrency=2),
            FleetSpec(2, RouterSettings("round-robin")),
        )


class _View:
    """The fleet's view as :func:`dispatch` reads it: no program has a previous replica."""

    def previous_replica(self, program: str) -> int | None:
        return None

    def sent(self, replica: int, call: RoutedCall) -> None:
        pass


def _fleet(rep: Replica) -> Any:
    return SimpleNamespace(
        books=Books(), view=_View(), replicas=[rep], router=Stateless(), queue=EventQueue()
    )


CALL = RoutedCall("p", 1, (), 100)


def test_a_call_wakes_a_replica_waiting_on_a_later_wake_at_once() -> None:
    """A replica that is not stepping and waits on a wake it queued for later (as a
    replica whose head cannot be admitted waits for a pin's expiry) takes a call routed
    to it at once: its step event is now, and the later one is stale."""
    rep = Replica(0, None, None)  # type: ignore[arg-type]  # dispatch reads no engine
    rep.now = 5.0
    fleet = _fleet(rep)
    fleet.queue.wake(rep, 9.0)  # the pin's expiry
    dispatch(fleet, None, 6.0, CALL, 0, 6.0)  # type: ignore[arg-type]
    assert rep.wake == 6.0 and len(rep.inbox) == 1
    live = [(t, i) for t, _, i, gen in fleet.queue.steps if gen == rep.generation]
    assert live == [(6.0, 0)]


def test_a_call_leaves_a_stepping_replica_or_one_due_now_as_it_is() -> None:
    """A replica in a step takes the call at the step's end (its wake); one whose step
    event is due at this instant takes it then: no second event is queued."""
    rep = Replica(0, None, None)  # type: ignore[arg-type]
    fleet = _fleet(rep)
    fleet.queue.wake(rep, 8.0)
    rep.busy = True
    dispatch(fleet, None, 6.0, CALL, 0, 6.0)  # type: ignore[arg-type]
    assert rep.wake == 8.0 and len(fleet.queue.steps) == 1
    rep.busy = False
    fleet.queue.wake(rep, 7.0)
    dispatch(fleet, None, 7.0, CALL, 0, 7.0)  # type: ignore[arg-type]
    assert rep.wake == 7.0 and len(fleet.queue.steps) == 2 and len(rep.inbox) == 2
