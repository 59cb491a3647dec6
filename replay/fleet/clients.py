"""The agents: when each program starts, and when its next call is sent.

With a concurrency limit, the first ``concurrency`` programs start at 0 and each one that
ends starts the next; without, each program starts at its trace's start time.
"""

from __future__ import annotations

from collections import deque

from replay.fleet.events import EventQueue
from replay.sim_outcome import ProgramRun
from replay.workload import Workload


class Clients:
    """The programs' runs, and those not started yet."""

    __slots__ = ("_queue", "_waiting", "runs")

    def __init__(self, workload: Workload, concurrency: int | None, queue: EventQueue) -> None:
        self._queue = queue
        self.runs: list[ProgramRun] = [ProgramRun(p, p.start_s) for p in workload.programs]
        if concurrency is None:
            for run in self.runs:
                queue.send(run.start, run)
            self._waiting: deque[ProgramRun] = deque()
            return
        for run in self.runs[:concurrency]:
            run.start = 0.0
            queue.send(0.0, run)
        self._waiting = deque(self.runs[concurrency:])

    def answered(self, run: ProgramRun, turn: int, at: float) -> None:
        """The program's call ``turn`` got its response at ``at``: it sends its next
        call after its tool's pause, or ends."""
        run.last_finish = at
        run.next_turn += 1
        if run.next_turn < len(run.program.calls):
            self._queue.send(at + run.program.calls[turn].pause_s, run)
        else:
            self.end(run, at)

    def end(self, run: ProgramRun, at: float) -> None:
        """The program ended at ``at``: the next one waiting starts then."""
        run.done = True
        if self._waiting:
            nxt = self._waiting.popleft()
            nxt.start = at
            self._queue.send(at, nxt)
