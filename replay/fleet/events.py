"""The fleet's one clock: its queue of events.

Two kinds, each in its own heap ordered by (time, sequence), sends before engine steps
at one instant (the loop takes the earlier head, a send on a tie):

- a *send*: a program's call leaves the client (it is routed at once), or, with no
  program, a router that retains calls is due (:meth:`EventQueue.router_due`);
- a *step*: a replica's step boundary (its generation: a later wake supersedes it).

An entry holds no kind: each heap holds one kind, so a tie on time is broken by the
sequence alone (a shorter tuple to make and to compare: the heaps order about 50k
events per replay of the fleet bench).
"""

from __future__ import annotations

import heapq
import math
from itertools import count

from replay.fleet.replica import Replica
from replay.sim_outcome import ProgramRun


class EventQueue:
    """The sends and the replicas' step events, in time order."""

    __slots__ = ("_seq", "sends", "steps")

    def __init__(self) -> None:
        #: (time, sequence, the program's run); run None: the router's own event (a
        #: wake it asked for, or a response end)
        self.sends: list[tuple[float, int, ProgramRun | None]] = []
        #: (time, sequence, replica, its generation)
        self.steps: list[tuple[float, int, int, int]] = []
        #: the sequence numbers, in the order the events are queued (both kinds)
        self._seq = count()

    def send(self, time: float, run: ProgramRun) -> None:
        """The program's next call leaves the client at ``time``."""
        heapq.heappush(self.sends, (time, next(self._seq), run))

    def router_due(self, time: float) -> None:
        """A router that retains calls decides at ``time`` (before the sends queued after
        this one, and before any engine step at that instant)."""
        heapq.heappush(self.sends, (time, next(self._seq), None))

    def wake(self, rep: Replica, time: float) -> None:
        """The replica's next step event is at ``time`` (any earlier one queued is stale)."""
        rep.generation = generation = rep.generation + 1
        rep.wake = time
        heapq.heappush(self.steps, (time, next(self._seq), rep.index, generation))

    def next_send(self) -> float:
        """When the next queued call is sent (inf: none is queued)."""
        return self.sends[0][0] if self.sends else math.inf

    def __bool__(self) -> bool:
        return bool(self.sends or self.steps)
