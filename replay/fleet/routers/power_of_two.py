"""``power-of-two``: vllm-router 0.1.17's ``power_of_two`` policy
(``src/policies/power_of_two.rs``): draw two different workers at random and send the
request to the one with fewer requests in flight (the first drawn on a tie). The real
router may add a load polled from the workers' ``/load`` every few seconds; without a
poller configured it uses its own in-flight count, as here. Deliberate difference: the
draws are seeded (``--seed``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replay.fleet.routers.base import FleetView, RoutedCall, Stateless


@dataclass(slots=True)
class PowerOfTwo(Stateless):
    rng: np.random.Generator
    name: str = "power-of-two"

    def route(self, call: RoutedCall, view: FleetView, now: float) -> int:
        n = view.replicas
        if n == 1:
            return 0
        first = int(self.rng.integers(n))
        second = int(self.rng.integers(n))
        while second == first:
            second = int(self.rng.integers(n))
        return first if view.load(first) <= view.load(second) else second
