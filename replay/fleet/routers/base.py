"""What every router model answers, and what it may read.

A router model is a port of a real router's decision rule (each module names the file
and version it follows). It reads only what the real router sees: its own records (the
requests it sent each replica and has not seen finish, the replica it sent each session
to), the request (its prompt, its ``X-Session-ID`` header: the program id, as the live
replay sends it) and, for the routers that subscribe to them, the engines' KV events
(which prompt blocks each replica holds). Never an engine's pins or clock; of its queue
only the waiting count vLLM's metrics export (``vllm:num_requests_waiting``), which the
routers that poll them (``program-scheduling``) read.

A router may hold a call back (:data:`HOLD`, Program scheduling's request pool): such a
router is a :class:`HoldingRouter`, and the loop asks it for the calls it releases after
each routing, each response end and at the times it asks to be woken.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from replay.fleet.prompts import Runs


class RoutedCall(NamedTuple):
    """One call as the router receives it (a tuple: one is made per call, cheaply, and
    the garbage collector stops tracking it)."""

    program: str
    turn: int
    prompt: Runs
    prompt_tokens: int
    #: the replica the trace's engine log says served it (``as-logged``; None: unknown)
    logged_replica: str | None = None

    @property
    def session(self) -> str:
        """The ``X-Session-ID`` header the live replay sends: the program id."""
        return self.program


class FleetView(Protocol):
    """What a router can know about the fleet."""

    @property
    def replicas(self) -> int: ...

    def load(self, replica: int) -> int:
        """Requests the router sent ``replica`` that have not finished (vllm-router's
        ``worker.load()``)."""
        ...

    def loads(self) -> Sequence[int]:
        """:meth:`load` of every replica, in order."""
        ...

    def load_tokens(self, replica: int) -> int:
        """Prompt tokens of those requests."""
        ...

    def cached_tokens(self, replica: int, call: RoutedCall) -> int:
        """Prompt tokens of ``call`` that ``replica`` holds in full KV blocks, as its KV
        events (``BlockStored`` / ``BlockRemoved``) have told the router."""
        ...

    def previous_replica(self, program: str) -> int | None:
        """Where the router sent the program's previous call (its own record)."""
        ...

    def waiting_requests(self, replica: int) -> int:
        """The replica's waiting requests, as its metrics endpoint exports them now."""
        ...

    def output_started(self, call: RoutedCall, now: float) -> bool:
        """Whether the response to ``call`` (sent and not finished) has streamed its first
        output by ``now``: the router sees that chunk pass through it."""
        ...


#: :meth:`Router.route`'s answer for a call the router retains (sent later)
HOLD = -1


class Router(Protocol):
    name: str

    def route(self, call: RoutedCall, view: FleetView, now: float) -> int:
        """The replica (0-based) that ``call`` goes to."""
        ...

    def completed(self, replica: int, call: RoutedCall, now: float) -> None:
        """The response to ``call`` ended (the router sees the stream close)."""
        ...


@runtime_checkable
class HoldingRouter(Protocol):
    """A router that may retain calls (:data:`HOLD`) and send them later."""

    def released(self) -> list[tuple[str, int]]:
        """Retained calls it sends now: (session, replica), in order."""
        ...

    def tick(self, now: float, view: FleetView | None = None) -> None:
        """Its own periodic decisions at ``now`` (a wake it asked for)."""
        ...

    def next_wake(self, now: float) -> float | None:
        """When it next wants :meth:`tick` (None: not before another event)."""
        ...


def least_loaded(view: FleetView) -> int:
    """The first replica with the fewest requests in flight (Rust's ``min_by_key``)."""
    loads = view.loads()
    return loads.index(min(loads))


class Stateless:
    """A router that keeps no per-request record (nothing to do on completion)."""

    def completed(self, replica: int, call: RoutedCall, now: float) -> None:
        return None
