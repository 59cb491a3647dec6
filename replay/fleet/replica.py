"""One replica of the fleet: an engine (:class:`~replay.fleet.engine.Engine`) and where it
stands on the fleet's clock."""

from __future__ import annotations

from dataclasses import dataclass, field

from replay.fleet.engine import Engine
from replay.fleet.routers.base import RoutedCall
from replay.request import SimRequest
from replay.sim import ReplayConfig
from replay.sim_outcome import ProgramRun


@dataclass(slots=True)
class Replica:
    index: int
    engine: Engine
    #: the replay's settings with this replica's engine (replicas may differ in size)
    config: ReplayConfig
    #: the end of its last step (or when it last woke)
    now: float = 0.0
    #: a step event is queued for it (the time, and its generation: older ones are stale)
    wake: float | None = None
    generation: int = 0
    #: True while a step runs (calls routed to it wait for its end)
    busy: bool = False
    #: the calls routed to it since its last boundary: each program's run, its send time,
    #: the call as the router saw it, the replica of its program's previous call and that
    #: call's pin expiry (see :class:`~replay.fleet.books.CallRoute`)
    inbox: list[tuple[ProgramRun, float, RoutedCall, int | None, float | None]] = field(
        default_factory=list
    )
    #: the requests the running step finishes at its end (applied then, not before: the
    #: router sees a response end when it ends)
    pending: list[SimRequest] = field(default_factory=list)
    #: its last step finished calls: if nothing is left, vLLM's engine core schedules once
    #: more to report them, and the pins that fell due during the step expire then
    unreported: bool = False
    #: a run of decode steps waits from this time (None: none): it is taken when a call
    #: is routed here (up to the call) or at its natural end, whichever comes first
    deferred_from: float | None = None
    #: its engine is the fast synchronous one, which returns after a step that only
    #: preempted (the async and vLLM's engines take the next step themselves)
    retakes: bool = False
    #: check the fast backend's invariants after each step (``ReplayConfig.check``)
    checked: bool = False

    def pin_expiry(self, program: str) -> float | None:
        """The expiry of the pin the engine holds for ``program`` (None: none)."""
        pinning = self.engine.pinning
        if pinning is None:
            return None
        pin = pinning.retention.pins.pins.get(program)
        return None if pin is None else pin.expiry
