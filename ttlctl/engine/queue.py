"""vLLM's waiting queue in the order of the priority tuple of docs/method.md.

vLLM (0.32 to 0.34 alike) keeps waiting requests in a ``RequestQueue``
(``vllm/v1/core/sched/request_queue.py``): a deque for FCFS (preempted requests
are ``prepend_request``-ed to the front) or a heap on ``(priority, arrival)``.
The scheduler only peeks, pops, prepends (preemption, skipped requests),
removes (aborts, stops) and iterates, so any ``RequestQueue`` that keeps its
order under those calls drops in (``Scheduler.waiting``).

:class:`ProgramQueue` orders by a key the scheduler supplies, most significant
first: preempted before not, (the vLLM priority under ``--scheduling-policy
priority``), a request whose program holds a live pin before one whose program
does not, the program's first arrival, the request's arrival, a sequence number.
The key of a request changes when its program gains or loses a pin, so the
owner calls :meth:`ProgramQueue.touch` then, and :meth:`ProgramQueue.refresh` at
the start of a step: the order is frozen while vLLM's waiting loop runs, because
that loop peeks at the head, allocates its blocks (which may release pins: the
handover, the valve) and then pops, and the popped request must be the one it
peeked. The list is re-sorted lazily on the next look (timsort on an almost
sorted list). It also counts waiting requests
per program (the expiry rule asks "has this program a request waiting?"), under the
program the request had when it entered: vLLM may forget a request before it takes it
out of the queue (under async scheduling a preempted request that stops on stale
output goes through ``_free_request`` before ``waiting.remove_requests``), and the
count must still come down.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from vllm.v1.core.sched.request_queue import RequestQueue
from vllm.v1.request import Request

Key = Callable[[Request], tuple[Any, ...]]
ProgramOf = Callable[[Request], str | None]


class ProgramQueue(RequestQueue):
    def __init__(
        self, key: Key, program_of: ProgramOf, on_empty: Callable[[str], None] | None = None
    ) -> None:
        self._key = key
        self._program_of = program_of
        #: called with a program whose last waiting request left the queue
        self._on_empty = on_empty
        #: sorted with the head LAST (pop from the end is O(1))
        self._items: list[Request] = []
        self._dirty = False
        #: keys changed since the last refresh (applied at the next step start)
        self._stale = False
        self._programs: Counter[str] = Counter()
        #: the program each queued request was counted under
        self._owner: dict[Request, str] = {}

    # -- bookkeeping -------------------------------------------------------

    def touch(self) -> None:
        """Keys changed (a pin was made or released): re-sort at the next :meth:`refresh`."""
        self._stale = True

    def refresh(self) -> None:
        """A step starts: apply the key changes since the last one."""
        if self._stale:
            self._stale = False
            self._dirty = True

    def _sorted(self) -> list[Request]:
        if self._dirty:
            self._items.sort(key=self._key, reverse=True)
            self._dirty = False
        return self._items

    def _enter(self, request: Request) -> None:
        program = self._program_of(request)
        if program is None or request in self._owner:
            return
        self._owner[request] = program
        self._programs[program] += 1

    def _leave(self, request: Request) -> None:
        program = self._owner.pop(request, None)
        if program is None:
            return
        count = self._programs[program] - 1
        if count > 0:
            self._programs[program] = count
        else:
            del self._programs[program]
            if self._on_empty is not None:
                self._on_empty(program)

    def has_program(self, program: str) -> bool:
        return self._programs.get(program, 0) > 0

    # -- RequestQueue ------------------------------------------------------

    def add_request(self, request: Request) -> None:
        self._items.append(request)
        self._enter(request)
        self._dirty = True

    def pop_request(self) -> Request:
        items = self._sorted()
        if not items:
            raise IndexError("pop from an empty queue")
        request = items.pop()
        self._leave(request)
        return request

    def peek_request(self) -> Request:
        items = self._sorted()
        if not items:
            raise IndexError("peek from an empty queue")
        return items[-1]

    def prepend_request(self, request: Request) -> None:
        self.add_request(request)

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        for request in requests:
            self.add_request(request)

    def remove_request(self, request: Request) -> None:
        self._items.remove(request)
        self._leave(request)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        gone = requests if isinstance(requests, set) else set(requests)
        if not gone:
            return
        kept: list[Request] = []
        for request in self._items:
            if request in gone:
                self._leave(request)
            else:
                kept.append(request)
        self._items = kept

    def __bool__(self) -> bool:
        return bool(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Request]:
        return iter(list(reversed(self._sorted())))
