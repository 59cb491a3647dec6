"""A replay's progress: how many of its calls are done, told to the caller now and then.

A call is done when it finished or was refused (a refused call ends its program: the
program's calls from it on are done at once), so the count ends at the workload's calls.
The simulators read no clock and tell by count: the loops compare the finished calls
with :attr:`CallTally.next_at`, an int, once per step that finished calls (the vLLM
backend's harness, once per finished call), and call
:meth:`CallTally.told` only when it is reached (about :data:`TELLS` times a replay).
Without a callback ``next_at`` is never reached: no call, no cost but that comparison.

Work counted in whole runs (validate's live runs, refit's replays) tells its runs done
with :func:`each_told`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

#: told (calls done, calls in all): the CLI draws it; the libraries never print
CallsDone = Callable[[int, int], None]
#: told (runs done, runs in all), of work counted in whole runs
RunsDone = Callable[[int, int], None]

T = TypeVar("T")

#: about how many times a replay tells its progress (every 1/TELLS of its calls)
TELLS = 1_000
#: a count of finished calls no replay reaches
NEVER = sys.maxsize


class CallTally:
    """When to tell ``tell`` how many of ``total`` calls are done.

    Always holds: the counts told rise strictly, and the last is told by :meth:`end`
    (the total, when every call was finished or refused)."""

    __slots__ = ("every", "next_at", "tell", "told", "total")

    def __init__(self, tell: CallsDone | None, total: int) -> None:
        self.tell = tell
        self.total = total
        self.every = max(1, total // TELLS)
        #: the number of finished calls at which to tell next (:data:`NEVER`: no callback)
        self.next_at = NEVER if tell is None else self.every
        self.told = 0

    def told_at(self, finished: int, done: int) -> int:
        """Tell ``done`` calls done (``finished`` of them finished); the next ``next_at``."""
        self._tell(done)
        self.next_at = finished + self.every
        return self.next_at

    def end(self, done: int) -> None:
        """The replay ended with ``done`` calls done: tell it, unless told already."""
        self._tell(done)

    def _tell(self, done: int) -> None:
        if self.tell is not None and done > self.told:
            self.told = done
            self.tell(done, self.total)


def each_told(runs: Sequence[T], tell: RunsDone | None) -> Iterator[T]:
    """Each of ``runs`` in order, telling ``tell`` how many are done: 0 before the first,
    then one more as each ends (when the next is asked for), up to ``len(runs)`` after the
    last; a run that raises is not told done."""
    for done, run in enumerate(runs):
        if tell is not None:
            tell(done, len(runs))
        yield run
    if tell is not None:
        tell(len(runs), len(runs))
