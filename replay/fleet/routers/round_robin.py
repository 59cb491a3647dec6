"""``round-robin``: vllm-router 0.1.17's ``round_robin`` policy
(``src/policies/round_robin.rs``): a counter over the healthy workers, one step per
request. Deliberate differences: none (every replica is healthy in a replay)."""

from __future__ import annotations

from dataclasses import dataclass

from replay.fleet.routers.base import FleetView, RoutedCall, Stateless


@dataclass(slots=True)
class RoundRobin(Stateless):
    name: str = "round-robin"
    _next: int = 0

    def route(self, call: RoutedCall, view: FleetView, now: float) -> int:
        replica = self._next % view.replicas
        self._next += 1
        return replica
