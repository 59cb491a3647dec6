"""The fleet's one clock: its queue of events.

Two kinds, ordered by (time, kind, sequence), sends before engine steps at one instant:

- a *send*: a program's call leaves the client (it is routed at once), or, with no
  program, a router that retains calls is due (:meth:`EventQueue.router_due`);
- a *step*: a replica's step boundary (its generation: a later wake supersedes it).
"""

from __future__ import annotations

import heapq
import math

from replay.fleet.replica import Replica
from replay.sim import ProgramRun

SEND = 0
STEP = 1


class EventQueue:
    """The sends and the replicas' step events, in time order."""

    __slots__ = ("_seq", "sends", "steps")

    def __init__(self) -> None:
        #: run None: the router's own event (a wake it asked for, or a response end)
        self.sends: list[tuple[float, int, int, ProgramRun | None]] = []
        self.steps: list[tuple[float, int, int, int, int]] = []
        self._seq = 0

    def send(self, time: float, run: ProgramRun) -> None:
        """The program's next call leaves the client at ``time``."""
        heapq.heappush(self.sends, (time, SEND, self._seq, run))
        self._seq += 1

    def router_due(self, time: float) -> None:
        """A router that retains calls decides at ``time`` (before the sends queued after
        this one, and before any engine step at that instant)."""
        heapq.heappush(self.sends, (time, SEND, self._seq, None))
        self._seq += 1

    def wake(self, rep: Replica, time: float) -> None:
        """The replica's next step event is at ``time`` (any earlier one queued is stale)."""
        rep.generation += 1
        rep.wake = time
        heapq.heappush(self.steps, (time, STEP, self._seq, rep.index, rep.generation))
        self._seq += 1

    def next_send(self) -> float:
        """When the next queued call is sent (inf: none is queued)."""
        return self.sends[0][0] if self.sends else math.inf

    def __bool__(self) -> bool:
        return bool(self.sends or self.steps)
