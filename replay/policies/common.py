"""What the policies share: the queue keys and the rule parameters of their τ sources."""

from __future__ import annotations

from fitting.policy_params import PolicyParams
from replay.request import SimRequest
from replay.scheduler import SimScheduler


def fcfs_key(req: SimRequest) -> tuple[float, ...]:
    """vLLM's FCFS: preempted requests go back to the front (latest first), then arrival."""
    if req.preempted:
        return (0.0, -float(req.preempt_seq), 0.0)
    return (1.0, req.arrival, float(req.rid))


def program_key(req: SimRequest, engine: SimScheduler) -> tuple[float, ...]:
    """The plugin's queue order (:meth:`ttlctl.engine.orders.PinOrders.key`): preempted,
    a live pin of the program, the program's first arrival (from the program book), the
    request's arrival."""
    assert engine.pinning is not None, "a program-ordered policy has a τ source"
    return engine.pinning.key(req)


def rules(valve: str = "head", pin_cap: float = 1.0, pins: bool = True) -> PolicyParams:
    """The parameters the pin rules read from a τ source that is not a bundle's policy."""
    return PolicyParams(valve=valve, pin_cap=pin_cap, pins=pins)


class NoHooks:
    """A policy the engine's events leave unchanged: its hooks do nothing (the pin rules,
    when it has a τ source, see the events themselves)."""

    __slots__ = ()

    def on_arrival(self, req: SimRequest, engine: SimScheduler, now: float) -> None:
        pass

    def on_admit(self, req: SimRequest, engine: SimScheduler, now: float) -> None:
        pass

    def on_finish(self, req: SimRequest, engine: SimScheduler, now: float) -> None:
        pass


class Observes:
    """A τ source that learns nothing from the events (static TTL, InferCept)."""

    __slots__ = ()

    def observe_pause(self, tool: str | None, seconds: float) -> object:
        return None

    def observe_queue_delay(self, seconds: float) -> None:
        pass

    def observe_program_end(self, n_calls: int) -> None:
        pass
