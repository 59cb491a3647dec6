"""``random``: vllm-router 0.1.17's ``random`` policy (``src/policies/random.rs``): a
uniform pick among the healthy workers. Deliberate difference: the generator is seeded
(``--seed``), so a replay is repeatable."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replay.fleet.routers.base import FleetView, RoutedCall, Stateless


@dataclass(slots=True)
class RandomPick(Stateless):
    rng: np.random.Generator
    name: str = "random"

    def route(self, call: RoutedCall, view: FleetView, now: float) -> int:
        return int(self.rng.integers(view.replicas))
