"""``consistent-hash``: vllm-router 0.1.17's ``consistent_hash`` policy
(``src/policies/consistent_hash.rs``, key from ``src/policies/hash_key.rs``).

A ring of 160 virtual nodes per worker (``fbi_hash("URL:i")``); a request goes to the
first node at or after ``fbi_hash(key)``, wrapping around. The key is the
``X-Session-ID`` header when present, as ``header:x-session-id:VALUE`` (what the router
logs); the live replay sends the program id there, so every call of a program lands on
one replica. Replicas are named ``http://replica-I`` (their URLs place them on the
ring). Deliberate differences: none besides the names.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from replay.fleet.routers.base import FleetView, RoutedCall, Stateless
from replay.fleet.routers.furc import fbi_hash

VIRTUAL_NODES_PER_WORKER = 160


def replica_url(index: int) -> str:
    return f"http://replica-{index}"


def session_key(session: str) -> str:
    return f"header:x-session-id:{session}"


@dataclass(slots=True)
class ConsistentHash(Stateless):
    replicas: int
    name: str = "consistent-hash"
    _points: list[int] = field(default_factory=list)
    _owners: list[int] = field(default_factory=list)
    _memo: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ring: dict[int, int] = {}
        for r in range(self.replicas):
            for i in range(VIRTUAL_NODES_PER_WORKER):
                # a BTreeMap insert: a later worker's node replaces an equal hash
                ring[fbi_hash(f"{replica_url(r)}:{i}")] = r
        self._points = sorted(ring)
        self._owners = [ring[p] for p in self._points]

    def owner(self, session: str) -> int:
        """The replica the ring gives ``session``."""
        at = self._memo.get(session)
        if at is None:
            i = bisect_left(self._points, fbi_hash(session_key(session)))
            at = self._owners[i % len(self._points)]
            self._memo[session] = at
        return at

    def route(self, call: RoutedCall, view: FleetView, now: float) -> int:
        return self.owner(call.session)
