"""The rules of the TTL scheduler, free of vLLM: learn, decide, pin, expire, hand over, yield.

The same rules as the simulator's ``continuum`` policy
(``replay/policies/continuum.py`` with ``replay/policies/common.py`` and the pin
handling of ``replay/scheduler.py``), fed by the scheduler glue with what vLLM
sees, so that what was tuned in replay is what runs:

- arrival of a program's call: the pause since its previous call finished is
  a sample of that call's tool (``TTLPolicy.observe_pause``); a program that
  comes back without a live pin will report its queueing delay at admission
  (``observe_queue_delay``, the T of the benefit);
- finish: the last call (``is_last``) ends the program (``observe_program_end``
  with its number of calls) and is never pinned; any other call is pinned for
  τ* = ``TTLPolicy.decide(tool, computed tokens)`` unless τ* is 0, the policy
  has pins off, or the pin would take pins past ``pin_cap`` of the cache; an
  aborted call is never pinned and releases its program's pin;
- at each step start: pins whose expiry passed are released unless their
  program has a request waiting;
- admission of a pinned program's call: its prefix hit takes the pinned blocks
  and the pin is released (handed over);
- the valve, when the queue head cannot be admitted for lack of blocks:
  ``head`` releases pins (latest program arrival first, never the head's own)
  until it fits; ``stall-only`` does so only when nothing is running. When
  nothing is running and the head still does not fit, the head's own pin goes
  too (the simulator has no such case; on a real engine it would be a stall).

Per-request state lives from arrival to finish (:meth:`Retention.forget`);
per-program state is a bounded :class:`~ttlctl.engine.programs.ProgramBook`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from fitting.policy import TTLPolicy
from ttlctl.engine.counters import Counters
from ttlctl.engine.pins import Pin, PinTable
from ttlctl.engine.programs import DEFAULT_CAP, ProgramBook
from ttlctl.engine.tags import Tags

#: how a request finished, as far as the rules care
OK, ABORTED, FAILED = "ok", "aborted", "failed"


@dataclass(slots=True)
class Live:
    """What the rules keep about a request between its arrival and its finish."""

    tags: Tags
    #: monotonic seconds
    arrival: float
    program_start: float
    seq: int
    #: arrival order of the program's first call (ties in program_start)
    program_seq: int = 0
    #: its program's previous call finished and no pin was alive at this arrival
    returned_unpinned: bool = False
    admitted: bool = False
    cached_tokens: int | None = None
    first_token_unix_s: float | None = None
    #: the pin made at finish (0: none); None when no policy is loaded
    ttl_s: float | None = None


class Retention:
    def __init__(
        self,
        policy: TTLPolicy | None,
        *,
        free: Callable[[Sequence[Any]], None],
        capacity_blocks: int,
        caching: bool = True,
        program_cap: int = DEFAULT_CAP,
        counters: Counters | None = None,
        on_pins_changed: Callable[[], None] | None = None,
    ) -> None:
        self.capacity_blocks = max(1, capacity_blocks)
        self.caching = caching
        self.pins = PinTable(free=free)
        self.book = ProgramBook(cap=program_cap)
        self.counters = counters if counters is not None else Counters(export=False)
        self.live: dict[str, Live] = {}
        self.on_pins_changed = on_pins_changed
        self._seq = itertools.count()
        self._policy: TTLPolicy | None = None
        self.policy = policy

    # ------------------------------------------------------------ policy

    @property
    def policy(self) -> TTLPolicy | None:
        return self._policy

    @policy.setter
    def policy(self, policy: TTLPolicy | None) -> None:
        self._policy = policy
        if policy is not None:
            self.book.idle_s = policy.params.abandon_s

    @property
    def pinning(self) -> bool:
        """Whether new pins may be made (a policy with pins on, prefix caching on)."""
        return self._policy is not None and self._policy.params.pins and self.caching

    # ------------------------------------------------------------ events

    def arrive(self, request_id: str, tags: Tags, now: float) -> Live:
        """A request arrived (``Scheduler.add_request``)."""
        program = tags.program
        seq = next(self._seq)
        live = Live(tags=tags, arrival=now, program_start=now, seq=seq, program_seq=seq)
        if program is not None:
            arrival = self.book.arrive(program, now, seq)
            live.program_start = arrival.program.start
            live.program_seq = arrival.program.seq
            if arrival.previous is not None:
                finished_at, tool = arrival.previous
                if self._policy is not None:
                    self._policy.observe_pause(tool, now - finished_at)
                live.returned_unpinned = program not in self.pins
        if self._policy is not None:
            live.ttl_s = 0.0
        self.live[request_id] = live
        return live

    def expire(self, now: float, waiting: Callable[[str], bool]) -> int:
        """Release the pins that expired, unless their program has a request waiting."""
        released = 0
        for pin in self.pins.due(now):
            if waiting(pin.program):
                self.pins.keep(pin)
            else:
                self.release(pin.program, "expired")
                released += 1
        return released

    def admitted(self, request_id: str, now: float, cached_tokens: int | None) -> None:
        """The request got its blocks (its prefix hit included): hand its program's pin over."""
        live = self.live.get(request_id)
        if live is None:
            return
        if not live.admitted:
            live.admitted = True
            live.cached_tokens = cached_tokens
            if live.returned_unpinned and self._policy is not None:
                self._policy.observe_queue_delay(now - live.arrival)
        program = live.tags.program
        if program is not None and program in self.pins:
            self.release(program, "hit")

    def finish(self, request_id: str, how: str, context_tokens: int, now: float) -> float:
        """The request finished: learn, and return τ to pin it for (0: free its blocks)."""
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
            if self._policy is not None:
                self._policy.observe_program_end(entry.calls if entry is not None else 1)
            self.release(program, "dropped")
            return 0.0
        self.book.finish(program, now, live.tags.tool)
        if not self.pinning:
            return 0.0
        assert self._policy is not None
        ttl = self._policy.decide(live.tags.tool, context_tokens).ttl_s
        return ttl if math.isfinite(ttl) and ttl > 0 else 0.0

    def pin(self, request_id: str, blocks: Sequence[Any], ttl_s: float, now: float) -> bool:
        """Hold ``blocks`` for ``ttl_s``; False (the caller frees them) over the pin cap, and
        when there is nothing to hold (a request preempted before it stopped on stale output
        under async scheduling: its blocks went back at the preemption)."""
        live = self.live.get(request_id)
        if live is None or live.tags.program is None or ttl_s <= 0 or self._policy is None:
            return False
        if not blocks:
            return False
        program = live.tags.program
        if program in self.pins:  # two calls of one program in flight: the latest wins
            self.release(program, "dropped")
        cap = self._policy.params.pin_cap * self.capacity_blocks
        if self.pins.blocks + len(blocks) > cap:
            self.counters.bump("refused")
            return False
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
        self._changed()
        return True

    def valve_order(self, head_program: str | None, stalled: bool) -> Iterator[str]:
        """Programs whose pins to release, one at a time, until the head fits."""
        if not self.pins or self._policy is None:
            return iter(())
        if self._policy.params.valve == "stall-only" and not stalled:
            return iter(())
        order = [p.program for p in self.pins.by_latest_program(exclude=head_program)]
        if stalled and head_program is not None and head_program in self.pins:
            order.append(head_program)
        return iter(order)

    def release(self, program: str, reason: str) -> bool:
        """Release the program's pin (reason: a counter name); False if it had none."""
        if self.pins.release(program) is None:
            return False
        self.counters.bump(reason)
        self._changed()
        return True

    def release_all(self, reason: str = "dropped") -> int:
        programs = list(self.pins.pins)
        for program in programs:
            self.release(program, reason)
        return len(programs)

    def forget(self, request_id: str) -> Live | None:
        return self.live.pop(request_id, None)

    def _changed(self) -> None:
        self.counters.pinned(self.pins.blocks, len(self.pins))
        if self.on_pins_changed is not None:
            self.on_pins_changed()
