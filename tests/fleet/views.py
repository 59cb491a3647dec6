"""A hand-made fleet as a router model sees it (:class:`replay.fleet.routers.base.FleetView`),
for the router tests: what each replica has in flight, cached and waiting."""

from __future__ import annotations

from dataclasses import dataclass, field

from replay.fleet.routers.base import RoutedCall


@dataclass
class View:
    """Loads (requests in flight per replica), prompt tokens in flight, cached tokens,
    each program's previous replica, the calls that have begun their output and each
    replica's waiting requests (none unless given)."""

    in_flight: list[int]
    tokens_in_flight: list[int] | None = None
    cached: dict[int, int] = field(default_factory=dict)
    previous: dict[str, int] = field(default_factory=dict)
    #: the programs whose call in flight has streamed its first output
    started: set[str] = field(default_factory=set)
    waiting: list[int] | None = None

    @property
    def replicas(self) -> int:
        return len(self.in_flight)

    def load(self, replica: int) -> int:
        return self.in_flight[replica]

    def loads(self) -> list[int]:
        return self.in_flight

    def load_tokens(self, replica: int) -> int:
        return (self.tokens_in_flight or [0] * self.replicas)[replica]

    def cached_tokens(self, replica: int, call: RoutedCall) -> int:
        return self.cached.get(replica, 0)

    def previous_replica(self, program: str) -> int | None:
        return self.previous.get(program)

    def waiting_requests(self, replica: int) -> int:
        return (self.waiting or [0] * self.replicas)[replica]

    def output_started(self, call: RoutedCall, now: float) -> bool:
        return call.program in self.started


def idle(replicas: int) -> View:
    """Nothing in flight, cached or waiting."""
    return View([0] * replicas)


def waiting(counts: list[int]) -> View:
    """Nothing in flight or cached; ``counts[r]`` requests waiting on replica ``r``."""
    return View([0] * len(counts), waiting=counts)
