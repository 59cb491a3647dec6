"""The fleet's records of its calls: where each went, and what each left."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from replay.fleet.routers.base import RoutedCall
from replay.sim_outcome import ProgramRun, SimCallRecord


class CallRoute(NamedTuple):
    """Where one call went, and what had become of its program's previous call's pin
    (the miss reasons and the wasted pins are read from these). Made once the call
    reached its replica's scheduler; a tuple of numbers, so the garbage collector stops
    tracking it (a replay keeps one per call)."""

    replica: int
    #: the replica of the program's previous call (None: a first call)
    previous: int | None
    #: the previous call's pin expiry (None: the engine did not pin it)
    previous_pin_expiry: float | None
    #: that pin was still held once this call reached the same replica's scheduler
    #: (after the pins due then expired)
    pin_held: bool
    #: when the call reached its replica's scheduler
    delivered: float


@dataclass(slots=True)
class Books:
    """Every call's route and record, and the calls in flight."""

    #: the finished calls, in finish order, and the replica of each
    records: list[SimCallRecord] = field(default_factory=list)
    call_replicas: list[int] = field(default_factory=list)
    #: (program, turn) -> where it went (once it reached its replica's scheduler)
    routes: dict[tuple[str, int], CallRoute] = field(default_factory=dict)
    #: request id -> its program's run and the call as the router saw it
    routed: dict[int, tuple[ProgramRun, RoutedCall]] = field(default_factory=dict)
    #: program -> the expiry of the pin its last finished call got
    last_pin: dict[str, float] = field(default_factory=dict)
    #: pins whose program's next call went to another replica
    pins_wasted: int = 0
    rejected: int = 0
    truncated: int = 0
    #: the next request id
    rid: int = 0
