"""The parts of one fleet replay, as its stages (routing a call, a call's arrival, a
replica's step, finishing a step's calls) share them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from replay.fleet.books import Books
from replay.fleet.clients import Clients
from replay.fleet.events import EventQueue
from replay.fleet.replica import Replica
from replay.fleet.routers.base import HoldingRouter, RoutedCall, Router
from replay.fleet.streams import Streams
from replay.fleet.view import FleetState
from replay.progress import CallTally
from replay.sim import ReplayConfig
from replay.sim_outcome import ProgramRun

#: a named tuple made from its fields without its generated ``__new__`` (a Python
#: function: one frame fewer per call routed and per route kept)
make_tuple = tuple.__new__


@dataclass(slots=True)
class Fleet:
    config: ReplayConfig
    router: Router
    replicas: list[Replica]
    queue: EventQueue
    clients: Clients
    streams: Streams
    view: FleetState
    books: Books
    #: (program, turn) -> the replica the engine log names (``as-logged``; None: none)
    logged_replicas: Mapping[tuple[str, int], str] | None
    #: more than one replica (a call may come from another replica's finish)
    several: bool = False
    #: the router, when it may retain calls (Program scheduling's request pool)
    holding: HoldingRouter | None = None
    #: the router, when it keeps a record per request (told of each response's end;
    #: None: a :class:`~replay.fleet.routers.base.Stateless` one, which has nothing to do)
    completes: Router | None = None
    #: session -> a call the router retains: its run, send time and routed call
    held: dict[str, tuple[ProgramRun, float, RoutedCall]] = field(default_factory=dict)
    #: the earliest wake the holding router asked for (None: none queued)
    router_wake: float | None = None
    #: when to tell the replay's progress (:mod:`replay.progress`; never, by default)
    tally: CallTally = field(default_factory=lambda: CallTally(None, 0))

    def router_changed(self, now: float) -> None:
        """A response ended at ``now``: a router that retains calls may release some
        (at once, before the program's next call is sent)."""
        if self.holding is not None:
            self.queue.router_due(now)
