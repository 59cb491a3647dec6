"""``sticky-least-loaded``: vllm-router 0.1.17's ``sticky_least_loaded`` policy
(``src/policies/sticky_least_loaded.rs``).

Each session (``X-Session-ID``: the program) stays on the worker it was first given; a
new session goes to the worker with the fewest *active sessions*, ties broken by
rendezvous hashing (the highest ``fbi_hash("SESSION:URL")``). A session stays active
until ``finish_session`` (the live replay never calls it) or until it has not been seen
for the expiration (7,200 s, the ``VLLM_ROUTER_SLL_SESSION_EXPIRATION_IN_S`` environment
variable; swept at most once a minute). So sessions of finished programs keep counting
against their worker for two hours, as in the real router. The rendezvous weights use the
workers' URLs when given (``worker_urls``), else the ring's default names
(:func:`~replay.fleet.routers.consistent_hash.default_urls`). Deliberate differences: none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from replay.fleet.routers.base import FleetView, RoutedCall, Stateless
from replay.fleet.routers.consistent_hash import worker_urls
from replay.fleet.routers.furc import fbi_hash

SESSION_EXPIRATION_S = 7200.0
SWEEP_INTERVAL_S = 60.0


@dataclass(slots=True)
class StickyLeastLoaded(Stateless):
    session_expiration_s: float = SESSION_EXPIRATION_S
    #: the workers' URLs, in replica order (None: the default names), for as many replicas
    urls: Sequence[str] | None = None
    name: str = "sticky-least-loaded"
    _sessions: dict[str, tuple[int, float]] = field(default_factory=dict)
    _active: dict[int, int] = field(default_factory=dict)
    _last_sweep: float = 0.0

    def _sweep(self, now: float) -> None:
        if now - self._last_sweep < SWEEP_INTERVAL_S:
            return
        for session, (worker, seen) in list(self._sessions.items()):
            if now - seen >= self.session_expiration_s:
                del self._sessions[session]
                self._active[worker] -= 1
        self._last_sweep = now

    def route(self, call: RoutedCall, view: FleetView, now: float) -> int:
        self._sweep(now)
        held = self._sessions.get(call.session)
        if held is not None:
            self._sessions[call.session] = (held[0], now)
            return held[0]
        fewest = min(self._active.get(r, 0) for r in range(view.replicas))
        best, best_weight = 0, -1
        for r in range(view.replicas):
            if self._active.get(r, 0) != fewest:
                continue
            url = self.urls[r] if self.urls is not None else worker_urls(view.replicas)[r]
            weight = fbi_hash(f"{call.session}:{url}")
            if weight > best_weight:
                best, best_weight = r, weight
        self._sessions[call.session] = (best, now)
        self._active[best] = self._active.get(best, 0) + 1
        return best
