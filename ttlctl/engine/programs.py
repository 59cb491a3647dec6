"""Per-program bookkeeping, bounded.

For each program the engine remembers when its first call arrived (the key of
program-level FCFS), how many calls it made (η learns from it at the end), and
when and with which tool its last call finished (the pause the next call
measures). An entry is dropped when its program ends (``is_last``), when it has
been idle longer than ``idle_s`` (the policy's ``abandon_s``), or, least recently
seen first, when more than ``cap`` programs are known. Every operation is O(1)
amortised; memory never grows past ``cap`` entries.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

DEFAULT_CAP = 100_000


@dataclass(slots=True)
class Program:
    #: arrival of the first call seen (monotonic seconds)
    start: float
    #: arrival order of that first call (breaks ties in ``start``)
    seq: int = 0
    #: calls that arrived so far
    calls: int = 0
    #: when the last call finished and the tool the client said comes next
    last_finish: float | None = None
    last_tool: str | None = None
    #: last time anything happened (arrival or finish)
    seen: float = 0.0


@dataclass(slots=True)
class Arrival:
    program: Program
    #: (finished at, tool) of the previous call, if this program had one
    previous: tuple[float, str | None] | None


class ProgramBook:
    def __init__(self, cap: int = DEFAULT_CAP, idle_s: float = 3600.0) -> None:
        if cap < 1 or idle_s <= 0:
            raise ValueError("cap >= 1 and idle_s > 0")
        self.cap = cap
        self.idle_s = idle_s
        self._programs: OrderedDict[str, Program] = OrderedDict()
        #: entries dropped because they were idle or over the cap
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._programs)

    def __contains__(self, program: object) -> bool:
        return program in self._programs

    def get(self, program: str) -> Program | None:
        return self._programs.get(program)

    def _touch(self, program: str, now: float, seq: int = 0) -> Program:
        entry = self._programs.get(program)
        if entry is None:
            entry = self._programs[program] = Program(start=now, seq=seq)
        else:
            self._programs.move_to_end(program)
        entry.seen = now
        return entry

    def arrive(self, program: str, now: float, seq: int = 0) -> Arrival:
        """A call of ``program`` arrived (``seq``: its arrival order): returns its entry
        and the previous finish. Idle entries go first (a program idle longer than
        ``idle_s`` arrives as a new one), then, once it is in, the least recently seen
        beyond ``cap``."""
        programs = self._programs
        self.prune(now)
        entry = self._touch(program, now, seq)
        if len(programs) > self.cap:  # a new program: the least recently seen makes room
            self.prune(now)
        entry.calls += 1
        previous = None
        if entry.last_finish is not None:
            previous = (entry.last_finish, entry.last_tool)
        entry.last_finish = None
        entry.last_tool = None
        return Arrival(entry, previous)

    def finish(self, program: str, now: float, tool: str | None) -> Program:
        """A call of ``program`` finished and the agent now runs ``tool``."""
        entry = self._touch(program, now)
        entry.last_finish = now
        entry.last_tool = tool
        self.prune(now)
        return entry

    def end(self, program: str) -> Program | None:
        """The program's last call finished: forget it."""
        return self._programs.pop(program, None)

    def prune(self, now: float) -> None:
        """Drop entries idle for longer than ``idle_s`` and any beyond ``cap``."""
        programs = self._programs
        while programs:
            name = next(iter(programs))
            if len(programs) <= self.cap and now - programs[name].seen <= self.idle_s:
                break
            del programs[name]
            self.dropped += 1
