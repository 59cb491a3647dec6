"""The pin rules, free of vLLM: learn, decide, pin, expire, hand over, yield.

One implementation for the vLLM plugin (:mod:`ttlctl.engine.scheduler` maps vLLM's
events onto it) and for the simulator (``replay/pinning.py`` maps its own), so that
what was tuned in replay is what runs. Only where τ comes from differs by policy
(:class:`~ttlctl.engine.source.TauSource`: the bundle's policy, a constant, the
oracle's true pauses, InferCept's formula). The rules:

- arrival of a program's call: the program book records the program's first arrival
  (the queue key) and forgets a program idle longer than ``abandon_s``; the pause
  since the previous call finished is a sample of that call's tool
  (``observe_pause``); a program that comes back without a live pin will report its
  queueing delay at admission (``observe_queue_delay``, the T of the benefit);
- finish: the last call (``is_last``) ends the program (``observe_program_end`` with
  its number of calls) and is never pinned; any other call is pinned for τ (the
  source's) unless τ is 0, the source has pins off, or the pin would take pins past
  ``pin_cap`` of the usable blocks (vLLM's ``num_gpu_blocks − 1``); an aborted call is
  never pinned and releases its program's pin; two calls of one program in flight:
  the later finish replaces the earlier pin (checked against the cap without it; a
  refused pin leaves the earlier one in place);
- expiry, at each step start and at each arrival (an idle engine does not step: its
  pins stay until the next arrival): pins whose expiry passed are released, unless
  their program has a call waiting (the pin is parked until that call leaves the
  queue);
- admission of a pinned program's call: the call's blocks are allocated while the
  pin still holds its blocks (the pin's blocks past the hit are not free), then the
  pin is released: handed over (a hit);
- the valve, when the queue head cannot be admitted for lack of blocks: ``head``
  releases pins (latest program arrival first, never the head's own) until it fits;
  ``stall-only`` does so only when nothing is running. When nothing is running the
  head's own pin goes last (its blocks stay cached: the head still hits them);
- the waiting queue's order (:meth:`Retention.key`): preempted first, then the vLLM
  priority, a call whose program holds a pin, the program's first arrival, its order,
  the call's arrival, its order.

Per-call state lives from arrival to finish (:meth:`Retention.forget`); per-program
state is a bounded :class:`~ttlctl.engine.programs.ProgramBook`. The valve's order and
the queue's order are :class:`~ttlctl.engine.orders.PinOrders`, the base of
:class:`Retention`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from fitting.policy import TTLPolicy
from ttlctl.engine.calls import Live
from ttlctl.engine.counters import Counters
from ttlctl.engine.orders import PinOrders
from ttlctl.engine.pins import Pin, PinTable
from ttlctl.engine.programs import DEFAULT_CAP, ProgramBook
from ttlctl.engine.source import PolicySource, TauSource
from ttlctl.engine.tags import Tags

#: how a request finished, as far as the rules care
OK, ABORTED, FAILED = "ok", "aborted", "failed"

__all__ = ["ABORTED", "FAILED", "OK", "Live", "Retention"]


class Retention(PinOrders):
    """The pin rules' state: pins, the program book, calls in flight, counters.

    Invariants (:meth:`check`): at most one pin per program, each of at least one block,
    holding ``pins.blocks`` blocks in all, never more than ``pin_cap`` of
    ``capacity_blocks`` when it was made; the counters balance: pins made = hit + expired
    + released + dropped + pins held now; the program book holds at most
    ``program_cap`` programs; ``live`` holds only calls between arrival and forget.
    """

    def __init__(
        self,
        source: TauSource | None,
        *,
        free: Callable[[Sequence[Any]], None],
        capacity_blocks: int,
        caching: bool = True,
        program_cap: int = DEFAULT_CAP,
        counters: Counters | None = None,
        on_pins_changed: Callable[[str], None] | None = None,
    ) -> None:
        self.capacity_blocks = max(1, capacity_blocks)
        self.caching = caching
        self.pins = PinTable(free=free)
        self.book = ProgramBook(cap=program_cap)
        self.counters = counters if counters is not None else Counters(export=False)
        self.live: dict[Hashable, Live] = {}
        #: called with the program whose pin was made or released
        self.on_pins_changed = on_pins_changed
        self._seq = itertools.count()
        self._source: TauSource | None = None
        self.source = source

    # ------------------------------------------------------------ the τ source

    @property
    def source(self) -> TauSource | None:
        return self._source

    @source.setter
    def source(self, source: TauSource | None) -> None:
        self._source = source
        if source is not None:
            self.book.idle_s = source.params.abandon_s

    @property
    def policy(self) -> TTLPolicy | None:
        """The bundle's policy, when the source is one (the plugin's)."""
        return self._source.policy if isinstance(self._source, PolicySource) else None

    @policy.setter
    def policy(self, policy: TTLPolicy | None) -> None:
        self.source = PolicySource(policy) if policy is not None else None

    @property
    def pinning(self) -> bool:
        """Whether new pins may be made (a source with pins on, prefix caching on)."""
        return self._source is not None and self._source.params.pins and self.caching

    # ------------------------------------------------------------ events

    def arrive(
        self, request_id: Hashable, tags: Tags, now: float, request: object | None = None
    ) -> Live:
        """A call arrived (``Scheduler.add_request``); call :meth:`expire` first."""
        program = tags.program
        seq = next(self._seq)
        live = Live(tags=tags, arrival=now, program_start=now, seq=seq, program_seq=seq)
        live.request = request
        if program is not None:
            arrival = self.book.arrive(program, now, seq)
            live.program_start = arrival.program.start
            live.program_seq = arrival.program.seq
            if arrival.previous is not None:
                finished_at, tool = arrival.previous
                if self._source is not None:
                    self._source.observe_pause(tool, now - finished_at)
                live.returned_unpinned = program not in self.pins
        if self._source is not None:
            live.ttl_s = 0.0
        self.live[request_id] = live
        return live

    def expire(self, now: float, waiting: Callable[[str], bool]) -> int:
        """Release the pins that expired, unless their program has a call waiting (then the
        pin is parked until :meth:`unpark`)."""
        released = 0
        for pin in self.pins.due(now):
            if waiting(pin.program):
                self.pins.park(pin)
            else:
                self.release(pin.program, "expired")
                released += 1
        return released

    def unpark(self, program: str) -> None:
        """The program has no call waiting any more (the queue's count came to 0): a pin
        parked past its expiry goes at the next :meth:`expire`."""
        self.pins.unpark(program)

    def next_expiry(self) -> float | None:
        """When the next pin that is not parked expires (None: none)."""
        return self.pins.next_expiry()

    def admitted(self, request_id: Hashable, now: float, cached_tokens: int | None) -> None:
        """The call got its blocks (its prefix hit included): hand its program's pin over."""
        live = self.live.get(request_id)
        if live is None:
            return
        if not live.admitted:
            live.admitted = True
            live.cached_tokens = cached_tokens
            if live.returned_unpinned and self._source is not None:
                self._source.observe_queue_delay(now - live.arrival)
        program = live.tags.program
        if program is not None and program in self.pins:
            self.release(program, "hit")

    def finish(self, request_id: Hashable, how: str, context_tokens: int, now: float) -> float:
        """The call finished: learn, and return τ to pin it for (0: free its blocks)."""
        live = self.live.get(request_id)
        if live is None:
            return 0.0
        program = live.tags.program
        if program is None:
            return 0.0
        if how == ABORTED:
            self.release(program, "dropped")
            return 0.0
        if how != OK:
            return 0.0
        if live.tags.is_last:
            entry = self.book.end(program)
            if self._source is not None:
                self._source.observe_program_end(entry.calls if entry is not None else 1)
            self.release(program, "dropped")
            return 0.0
        self.book.finish(program, now, live.tags.tool)
        if not self.pinning:
            return 0.0
        assert self._source is not None
        ttl = self._source.tau(live, context_tokens)
        return ttl if math.isfinite(ttl) and ttl > 0 else 0.0

    def pin(self, request_id: Hashable, blocks: Sequence[Any], ttl_s: float, now: float) -> bool:
        """Hold ``blocks`` for ``ttl_s``; False (the caller frees them) over the pin cap, and
        when there is nothing to hold (a request preempted before it stopped on stale output
        under async scheduling: its blocks went back at the preemption).

        Two calls of one program in flight: the later finish replaces the earlier pin, and
        the cap is checked as if the earlier pin were gone; a refused pin leaves the earlier
        one in place (the program keeps what it had)."""
        live = self.live.get(request_id)
        if live is None or live.tags.program is None or ttl_s <= 0 or self._source is None:
            return False
        if not blocks:
            return False
        program = live.tags.program
        earlier = self.pins.get(program)
        held = self.pins.blocks - (earlier.n_blocks if earlier is not None else 0)
        cap = self._source.params.pin_cap * self.capacity_blocks
        if held + len(blocks) > cap:
            self.counters.bump("refused")
            live.pin_skipped = "refused"
            return False
        if earlier is not None:  # the latest call wins
            self.release(program, "dropped")
        self.pins.add(
            Pin(
                program=program,
                blocks=blocks,
                expiry=now + ttl_s,
                created=now,
                program_start=live.program_start,
                program_seq=live.program_seq,
                ttl_s=ttl_s,
            )
        )
        live.ttl_s = ttl_s
        self.counters.bump("made")
        self._changed(program)
        return True

    def deferred(self, request_id: Hashable) -> None:
        """The call was to be pinned, but vLLM defers freeing its blocks (a KV connector
        may still write them: async scheduling, or the connector's own delayed free): no
        pin is made; counted (``deferred``) and noted on the call for the engine log."""
        live = self.live.get(request_id)
        if live is not None:
            live.pin_skipped = "deferred"
        self.counters.bump("deferred")

    def release(self, program: str, reason: str) -> bool:
        """Release the program's pin (reason: a counter name); False if it had none."""
        if self.pins.release(program) is None:
            return False
        self.counters.bump(reason)
        self._changed(program)
        return True

    def release_all(self, reason: str = "dropped") -> int:
        programs = list(self.pins.pins)
        for program in programs:
            self.release(program, reason)
        return len(programs)

    def forget(self, request_id: Hashable) -> Live | None:
        return self.live.pop(request_id, None)

    # ------------------------------------------------------------ checks

    def check(self) -> None:
        """The invariants of the class docstring (tests and ``--check`` replays)."""
        self.pins.check()
        assert all(p.n_blocks > 0 for p in self.pins.pins.values())
        c = self.counters
        assert c.made == c.hit + c.expired + c.released + c.dropped + len(self.pins)
        assert len(self.book) <= self.book.cap

    def _changed(self, program: str) -> None:
        self.counters.pinned(self.pins.blocks, len(self.pins))
        if self.on_pins_changed is not None:
            self.on_pins_changed(program)
