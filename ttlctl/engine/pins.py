"""The pins: a finished request's KV blocks kept referenced until an expiry.

A pin is what vLLM's own deferred free does (``Scheduler._free_request_blocks``:
``KVCacheManager.pop_blocks_for_free`` now, ``BlockPool.free_blocks`` later) plus
an expiry. While a pin holds its blocks' references, ``BlockPool.get_new_blocks``
cannot evict them and a prefix hit finds them; releasing a pin hands the blocks
back to the pool's LRU free list, still hashed. At most one pin per program.

This table knows nothing of vLLM: blocks are opaque and ``free`` returns them (the
simulator's blocks are a count). Expiries sit in a heap (lazy deletion), so finding
the pins that expired is O(log n) per pin. A pin past its expiry whose program has a
call waiting is parked off the heap until that call leaves the queue
(:meth:`PinTable.unpark`), so a long wait costs nothing per step.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Pin:
    program: str
    blocks: Sequence[Any]
    expiry: float
    created: float
    #: first arrival of the program (the valve releases the latest programs first)
    program_start: float
    ttl_s: float
    seq: int = 0
    #: arrival order of the program's first call (ties in program_start)
    program_seq: int = 0

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)


@dataclass(slots=True)
class PinTable:
    """The pins, at most one per program.

    Invariants (:meth:`check`): ``blocks`` is the sum of the pins' blocks; every pin is
    either parked (its program's call waiting: it cannot expire; the plugin parks a pin
    when it comes due, the simulator as soon as the call arrives) or has a heap entry
    with its expiry and sequence number; the heap holds at most ``2·pins + 64``
    entries (stale ones are dropped lazily).
    """

    #: returns a pin's blocks to the pool (``BlockPool.free_blocks(reversed(blocks))``)
    free: Callable[[Sequence[Any]], None]
    pins: dict[str, Pin] = field(default_factory=dict)
    #: blocks referenced by pins now (a block shared by two pins counts twice)
    blocks: int = 0
    _heap: list[tuple[float, int, str]] = field(default_factory=list)
    _seq: Iterator[int] = field(default_factory=itertools.count)
    #: programs whose pin is parked
    _parked: set[str] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self.pins)

    def __contains__(self, program: object) -> bool:
        return program in self.pins

    def get(self, program: str) -> Pin | None:
        return self.pins.get(program)

    def add(self, pin: Pin) -> None:
        if pin.program in self.pins:
            raise ValueError(f"program {pin.program!r} already holds a pin")
        pin.seq = next(self._seq)
        self.pins[pin.program] = pin
        self.blocks += pin.n_blocks
        heapq.heappush(self._heap, (pin.expiry, pin.seq, pin.program))

    def release(self, program: str) -> Pin | None:
        """Drop the program's pin and return its blocks to the pool."""
        pin = self.pins.pop(program, None)
        if pin is None:
            return None
        self.blocks -= pin.n_blocks
        self._parked.discard(program)
        self.free(pin.blocks)
        if len(self._heap) > 2 * len(self.pins) + 64:  # keep the lazy heap bounded
            self._heap = [
                (p.expiry, p.seq, p.program)
                for p in self.pins.values()
                if p.program not in self._parked
            ]
            heapq.heapify(self._heap)
        return pin

    def due(self, now: float) -> list[Pin]:
        """Pins whose expiry is at or before ``now`` (still held: the caller decides)."""
        out: list[Pin] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, seq, program = heapq.heappop(heap)
            pin = self.pins.get(program)
            if pin is not None and pin.seq == seq and program not in self._parked:
                out.append(pin)
        return out

    def any_due(self, now: float) -> bool:
        """Whether :meth:`due` may find a pin at ``now`` (its earliest entry is due)."""
        heap = self._heap
        return bool(heap) and heap[0][0] <= now

    def park(self, pin: Pin) -> None:
        """A pin whose program's next call waits stays: off the heap until :meth:`unpark`
        (its heap entry, if not yet popped, goes stale: the pin takes a new number)."""
        if self.pins.get(pin.program) is pin and pin.program not in self._parked:
            pin.seq = next(self._seq)
            self._parked.add(pin.program)

    def unpark(self, program: str) -> None:
        """The program has no call waiting any more: its parked pin (if any) is due again."""
        if program in self._parked:
            self._parked.discard(program)
            pin = self.pins[program]
            heapq.heappush(self._heap, (pin.expiry, pin.seq, pin.program))

    def next_expiry(self) -> float | None:
        """The earliest expiry of a pin that is not parked (None: none)."""
        heap = self._heap
        while heap:
            _, seq, program = heap[0]
            pin = self.pins.get(program)
            if pin is not None and pin.seq == seq and program not in self._parked:
                return heap[0][0]
            heapq.heappop(heap)
        return None

    def check(self) -> None:
        assert self.blocks == sum(p.n_blocks for p in self.pins.values())
        assert self._parked <= set(self.pins)
        live = {(p.expiry, p.seq, p.program) for p in self.pins.values()}
        queued = set(self._heap) & live
        for pin in self.pins.values():
            key = (pin.expiry, pin.seq, pin.program)
            assert (pin.program in self._parked) != (key in queued), pin.program
        assert len(self._heap) <= 2 * len(self.pins) + 64

    def by_latest_program(self, exclude: str | None = None) -> list[Pin]:
        """Pins in the valve's order: latest program arrival first."""
        return sorted(
            (p for p in self.pins.values() if p.program != exclude),
            key=lambda p: (-p.program_start, -p.program_seq, p.program),
        )
