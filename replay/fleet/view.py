"""What the router sees of the fleet (:class:`~replay.fleet.routers.base.FleetView`)."""

from __future__ import annotations

from collections.abc import Sequence

from replay.fleet.engine import Engine
from replay.fleet.routers.base import RoutedCall
from replay.fleet.streams import Streams
from replay.request import SimRequest


class FleetState:
    """The router's records (requests in flight per replica, each session's last replica)
    and the replicas' KV events (which prompt blocks each one holds)."""

    __slots__ = (
        "_engines",
        "_load",
        "_load_tokens",
        "_previous",
        "_requests",
        "_streams",
        "replicas",
    )

    def __init__(self, engines: Sequence[Engine], streams: Streams) -> None:
        self._engines = engines
        self.replicas = len(engines)
        self._load = [0] * len(engines)
        self._load_tokens = [0] * len(engines)
        self._previous: dict[str, int] = {}
        #: (program, turn) -> the request a call became at its replica, until it ends
        self._requests: dict[tuple[str, int], SimRequest] = {}
        self._streams = streams

    def load(self, replica: int) -> int:
        return self._load[replica]

    def loads(self) -> list[int]:
        return self._load

    def load_tokens(self, replica: int) -> int:
        return self._load_tokens[replica]

    def cached_tokens(self, replica: int, call: RoutedCall) -> int:
        engine = self._engines[replica]
        bs = engine.config.block_size
        hit = engine.pool.prefix_hit(
            call.program,
            self._streams.shared(call),
            self._streams.reusable(replica, call) // bs,
            (call.prompt_tokens - 1) // bs,
        )
        return hit * bs

    def previous_replica(self, program: str) -> int | None:
        return self._previous.get(program)

    def waiting_requests(self, replica: int) -> int:
        return len(self._engines[replica].waiting)

    def output_started(self, call: RoutedCall, now: float) -> bool:
        # an engine stamps a request's first token with the end of the step that makes
        # it: the chunk streams through the router then, not when the step is planned
        req = self._requests.get((call.program, call.turn))
        return req is not None and req.first_token is not None and req.first_token <= now

    def arrived(self, call: RoutedCall, req: SimRequest) -> None:
        """``call`` reached its replica's scheduler as ``req``."""
        self._requests[(call.program, call.turn)] = req

    def sent(self, replica: int, call: RoutedCall) -> None:
        self._load[replica] += 1
        self._load_tokens[replica] += call.prompt_tokens
        self._previous[call.program] = replica

    def done(self, replica: int, call: RoutedCall) -> None:
        self._requests.pop((call.program, call.turn), None)
        self._load[replica] -= 1
        self._load_tokens[replica] -= call.prompt_tokens
