"""The simulator's glue to the pin rules, as :mod:`ttlctl.engine.scheduler` is vLLM's.

The rules themselves (pin, expiry, valve order, handover, cap, the program book, the
queue key) are :class:`ttlctl.engine.retention.Retention`, the plugin's own; this
module maps the simulator's events onto them at the points where vLLM's scheduler
calls the plugin:

- a call reaches the scheduler (``add_request``): expire, then arrive;
- a step starts (``schedule``): expire;
- a waiting call got its blocks (the plugin's ``allocate_slots`` wrapper): hand over;
- the waiting head does not fit: release pins in the valve's order, retrying after each;
- a call finishes (``_free_request`` / ``_free_blocks``): learn, and pin or free;
- a program's waiting call leaves the queue: a pin parked past its expiry is due again.

The pool keeps the pinned blocks (:meth:`replay.kv.KVPool.pin`); the rules see them as
a :class:`PinnedBlocks` (a program and a count) and give them back through
:meth:`Pinning.free`, which unpins them in the pool.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

from replay.kv import KVPool
from replay.request import SimRequest
from ttlctl.engine.counters import Counters
from ttlctl.engine.retention import OK, Retention
from ttlctl.engine.source import TauSource
from ttlctl.engine.tags import Tags


class PinnedBlocks(Sequence[int]):
    """A pin's blocks as the rules see them: ``n`` blocks of ``program``'s stream."""

    __slots__ = ("n", "program")

    def __init__(self, program: str, n: int) -> None:
        self.program = program
        self.n = n

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[int]: ...
    def __getitem__(self, index: int | slice) -> int | Sequence[int]:
        return range(self.n)[index]


class Pinning:
    """One replay's pin rules over its pool (``on_change``: a program's pin was made or
    released, so its waiting call's queue key changed)."""

    __slots__ = ("_pool", "retention")

    def __init__(
        self,
        source: TauSource,
        pool: KVPool,
        on_change: Callable[[str], None],
    ) -> None:
        self._pool = pool
        self.retention = Retention(
            source,
            free=self.free,
            capacity_blocks=pool.num_blocks,  # vLLM's usable blocks (num_gpu_blocks − 1)
            counters=Counters(export=False),
            on_pins_changed=on_change,
        )

    def free(self, blocks: Sequence[Any]) -> None:
        """The rules release a pin: its blocks the program's call did not take go back."""
        assert isinstance(blocks, PinnedBlocks)
        self._pool.unpin(blocks.program)

    @property
    def pinned_blocks(self) -> int:
        return self.retention.pins.blocks

    def arrive(self, req: SimRequest, now: float, waiting: Callable[[str], bool]) -> None:
        r = self.retention
        if r.pins:
            r.expire(now, waiting)
        req.live = r.arrive(req.rid, Tags(req.program, req.tool, req.is_last), now, req)
        pin = r.pins.get(req.program)
        if pin is not None:
            # the call waits from now on, and a pin whose program's call waits is parked
            # when it expires: parking it at once decides nothing differently and keeps
            # an expiry nobody can observe out of the replay's horizon
            r.pins.park(pin)

    def step_starts(self, now: float, waiting: Callable[[str], bool]) -> None:
        if self.retention.pins:
            self.retention.expire(now, waiting)

    def admitted(self, req: SimRequest, now: float) -> None:
        """``req`` got its blocks (shared with its program's pin, if any): hand over."""
        self.retention.admitted(req.rid, now, None)

    def valve(self, head: SimRequest, stalled: bool) -> Iterator[str]:
        """Release pins one at a time in the valve's order; yields after each release."""
        r = self.retention
        for program in r.valve_order(head.program, stalled):
            r.release(program, "released")
            yield program

    def finish(self, req: SimRequest, full: int, now: float) -> None:
        """``req`` finished: pin its blocks (the first ``full`` cached) for the source's τ
        or free them; its per-call state goes."""
        r = self.retention
        ttl = r.finish(req.rid, OK, req.num_computed_tokens, now)
        if ttl > 0 and r.pin(req.rid, PinnedBlocks(req.program, req.blocks), ttl, now):
            self._pool.pin(req.program, full)
        else:
            self._pool.release(req.program, full)
        r.forget(req.rid)
        # its Live names it back (``request``): unlinking the two leaves no cycle, so a
        # finished request no longer needed goes at once, not at a collection
        req.live = None

    def key(self, req: SimRequest) -> tuple[float, ...]:
        return self.retention.key(req.live, req.preempted)
