"""``kv-aware``: vllm-router 0.1.17's ``kv_aware`` policy (``src/policies/kv_aware.rs``),
fed by the engines' KV events (``BlockStored`` / ``BlockRemoved``).

vllm-router 0.1.17 describes it as a cost (its ``--router-temperature``: "0 selects
minimum cost"; ``--kv-aware-session-affinity-ttl-secs``: an idle TTL in seconds, 1 to
31,536,000, off when omitted). Its 0.1.17 source was not readable here (the wheel ships
the compiled router; the public repository's ``kv_aware.rs`` is older and picks the
longest cached prefix, least loaded when nothing is cached), so the cost follows the KV
router it names as its model, Dynamo's (``lib/llm/src/kv_router/scheduler.rs``):
per worker, the prompt blocks it would have to prefill (those its KV events do not show
cached) plus the blocks of the requests already in flight on it (the router's own
count). The lowest cost wins (ties: fewer requests in flight, then the lower index);
with a temperature above 0 a worker is drawn with probability ∝ exp(−cost / (T · max
cost)) (seeded). With the session-affinity TTL, a session (``X-Session-ID``: the program)
whose last request was routed or answered at most TTL seconds ago goes back to its
worker.

Deliberate differences: KV events reach the router at once (the real ones cross a ZMQ
socket, milliseconds late), and the speculative entries the older policy wrote for a
routed prompt's uncached blocks are not modelled; the tier credits
(``--kv-penalty-host`` …) concern offloaded tiers and are not taken.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from replay.fleet.routers.base import FleetView, RoutedCall
from replay.math_utils import cdiv


@dataclass(slots=True)
class KvAware:
    rng: np.random.Generator
    block_size: int = 16
    router_temperature: float = 0.0
    kv_aware_session_affinity_ttl_secs: float | None = None
    name: str = "kv-aware"
    #: session -> (worker, last routed or answered)
    _sessions: dict[str, tuple[int, float]] = field(default_factory=dict)

    def costs(self, call: RoutedCall, view: FleetView) -> list[float]:
        bs = self.block_size
        blocks = cdiv(call.prompt_tokens, bs)
        return [
            float(blocks - view.cached_tokens(r, call) // bs + cdiv(view.load_tokens(r), bs))
            for r in range(view.replicas)
        ]

    def route(self, call: RoutedCall, view: FleetView, now: float) -> int:
        ttl = self.kv_aware_session_affinity_ttl_secs
        if ttl is not None:
            held = self._sessions.get(call.session)
            if held is not None and now - held[1] <= ttl:
                self._sessions[call.session] = (held[0], now)
                return held[0]
        costs = self.costs(call, view)
        if self.router_temperature > 0:
            top = max(costs) or 1.0
            weights = np.array([math.exp(-c / (self.router_temperature * top)) for c in costs])
            worker = int(self.rng.choice(len(costs), p=weights / weights.sum()))
        else:
            worker = min(range(len(costs)), key=lambda r: (costs[r], view.load(r), r))
        if ttl is not None:
            self._sessions[call.session] = (worker, now)
        return worker

    def completed(self, replica: int, call: RoutedCall, now: float) -> None:
        held = self._sessions.get(call.session)
        if held is not None and held[0] == replica:
            self._sessions[call.session] = (replica, now)
