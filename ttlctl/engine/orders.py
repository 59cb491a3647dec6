"""The two orders the pin rules impose, read off the pins held now: which pins yield to a
queue head that cannot be admitted, one program at a time (the valve:
:meth:`PinOrders.valve_order`), and the waiting queue's order (:meth:`PinOrders.key`).
Both are described with the rest of the rules in :mod:`ttlctl.engine.retention`;
:class:`~ttlctl.engine.retention.Retention` derives from :class:`PinOrders`, so the
plugin and the simulator call them on it, and they change nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from ttlctl.engine.calls import Live
from ttlctl.engine.pins import PinTable
from ttlctl.engine.source import TauSource


class PinOrders:
    """The valve's order and the queue's order (:class:`~ttlctl.engine.retention.Retention`'s
    base): they read the pins and the τ source's valve, and change nothing."""

    pins: PinTable
    _source: TauSource | None

    # ------------------------------------------------------------ the valve

    def valve_releases(self, head_program: str | None, stalled: bool) -> bool:
        """Whether :meth:`valve_order` names any pin (without sorting them)."""
        if not self.pins or self._source is None:
            return False
        if self._source.params.valve == "stall-only" and not stalled:
            return False
        return stalled or len(self.pins) > (head_program in self.pins)

    def valve_order(self, head_program: str | None, stalled: bool) -> Iterator[str]:
        """Programs whose pins to release, one at a time, until the head fits (``stalled``:
        nothing is running)."""
        if not self.valve_releases(head_program, stalled):
            return iter(())
        order = [p.program for p in self.pins.by_latest_program(exclude=head_program)]
        if stalled and head_program is not None and head_program in self.pins:
            order.append(head_program)
        return iter(order)

    # ------------------------------------------------------------ the queue's order

    def key(self, live: Live | None, preempted: bool, priority: float = 0.0) -> tuple[float, ...]:
        """The waiting queue's order, smallest first: preempted, the vLLM priority, a live
        pin of the call's program, the program's first arrival and its order, the call's
        arrival and its order (an untagged or unknown call last among its peers)."""
        first = 0.0 if preempted else 1.0
        if live is None:
            return (first, priority, 1.0, math.inf, math.inf, math.inf, 0.0)
        program = live.tags.program
        pinned = 0.0 if program is not None and program in self.pins.pins else 1.0
        return (
            first,
            priority,
            pinned,
            live.program_start,
            float(live.program_seq),
            live.arrival,
            float(live.seq),
        )
