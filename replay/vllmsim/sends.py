"""The clients' side of the harness: what is sent to vLLM's engine, and when.

:class:`Sends` is a queue of sends (a program's next call, due after the pause that follows
its last one's finish) and aborts, in order of time, then kind (a send before an abort at
the same time), then sequence. Programs start at their recorded start times; with a
concurrency cap, the first ``concurrency`` start at 0 and each of the others when one
ends (:meth:`Sends.next_program`), as a client that keeps that many programs live.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import Any

from replay.sim_outcome import ProgramRun
from replay.workload import Workload

ARRIVAL = 0
ABORT = 1


class Sends:
    """The sends and aborts to come, by time (see the module docstring)."""

    def __init__(self) -> None:
        #: (time, kind, sequence, payload): a :class:`ProgramRun` to send its next call
        #: (:data:`ARRIVAL`), or a request id to abort (:data:`ABORT`)
        self.events: list[tuple[float, int, int, Any]] = []
        #: every program's run, in the workload's order
        self.runs: list[ProgramRun] = []
        self._seq = 0
        self._pending: deque[ProgramRun] = deque()

    def push(self, at: float, kind: int, payload: Any) -> None:
        heapq.heappush(self.events, (at, kind, self._seq, payload))
        self._seq += 1

    def start(self, workload: Workload, concurrency: int | None) -> None:
        """Every program's first send: at its start, or (a cap) at 0 for the first
        ``concurrency`` and when one ends for the others."""
        runs = [ProgramRun(p, p.start_s) for p in workload.programs]
        self.runs = runs
        if concurrency is not None:
            for run in runs[:concurrency]:
                run.start = 0.0
                self.push(0.0, ARRIVAL, run)
            self._pending = deque(runs[concurrency:])
        else:
            for run in runs:
                self.push(run.start, ARRIVAL, run)

    def next_program(self, now: float) -> None:
        """A program ended at ``now``: the next one held back by the cap starts."""
        if self._pending:
            nxt = self._pending.popleft()
            nxt.start = now
            self.push(now, ARRIVAL, nxt)

    def due(self, now: float) -> tuple[float, int, Any] | None:
        """The next send or abort due by ``now`` (its time, kind and payload), taken off
        the queue; None: none is."""
        if self.events and self.events[0][0] <= now:
            at, kind, _, payload = heapq.heappop(self.events)
            return at, kind, payload
        return None

    def next_at(self) -> float:
        """When the next send or abort is due (inf: none is left)."""
        return self.events[0][0] if self.events else math.inf
