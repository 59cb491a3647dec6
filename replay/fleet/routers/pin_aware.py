"""``pin-aware``: ttlctl's own router, for engines that pin a program's KV between calls.

A pin pays only if the program's next call comes back to the replica holding it. So a
call goes:

1. to the replica that served its program's previous call (where the pin is, if the
   engine pinned it), unless that replica has more than ``--pin-queue-bound`` requests
   in flight beyond the least loaded replica's;
2. else to the replica whose KV events show the most of its prompt cached (if any);
3. else to the least loaded replica (the first of them).

It reads what vllm-router reads: its own in-flight counts and its record of where each
session went, and the engines' KV events. There is no vllm-router policy that does
this; the nearest are ``kv_aware`` with ``--kv-aware-session-affinity-ttl-secs`` (sticky
while a session is active, then cost-based) and ``consistent_hash`` (sticky, blind to
load).
"""

from __future__ import annotations

from dataclasses import dataclass

from replay.fleet.routers.base import FleetView, RoutedCall, Stateless, least_loaded
from ttlctl.router_doc import default_of


@dataclass(slots=True)
class PinAware(Stateless):
    # --pin-queue-bound's default (ttlctl.router_doc's table)
    pin_queue_bound: int = int(default_of("pin-aware", "pin_queue_bound"))
    name: str = "pin-aware"

    def route(self, call: RoutedCall, view: FleetView, now: float) -> int:
        home = view.previous_replica(call.program)
        if home is not None:
            lightest = min(view.load(r) for r in range(view.replicas))
            if view.load(home) - lightest <= self.pin_queue_bound:
                return home
        best, best_cached = -1, 0
        for r in range(view.replicas):
            if r == home:
                continue  # over its bound
            cached = view.cached_tokens(r, call)
            if cached > best_cached:
                best, best_cached = r, cached
        return best if best >= 0 else least_loaded(view)
