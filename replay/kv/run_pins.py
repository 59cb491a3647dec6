"""The run pool's pins: a finished request's blocks kept referenced for its program's
next call (the plugin's deferred free, :mod:`ttlctl.engine.pins`).

A pin holds the request's own blocks and its shared copies; the next call shares the
pinned blocks of its hit (:meth:`~replay.kv.run_pool.RunPool.admit`), and
:meth:`~Pins.unpin` frees what it did not take, as vLLM's ``free_blocks`` would have at the
finish. What a program holds counts its pin's blocks too (:meth:`~Pins.held`).
"""

from __future__ import annotations

from replay.kv.interface import Pin
from replay.kv.run_state import RunPoolState


class Pins(RunPoolState):
    """The pins (a part of :class:`~replay.kv.run_pool.RunPool`)."""

    __slots__ = ()

    def held(self, program: str) -> int:
        held = self._held.get(program, 0) + len(self._kc.get(program, ()))
        pin = self._pins.get(program)
        if pin is not None:
            held += pin.blocks - max(0, pin.shared) + len(pin.copies)
        return held

    def pin(self, program: str, full: int) -> None:
        if program in self._pins:
            raise ValueError(f"{program} already holds a pin")
        if program in self._keys:
            self.cache_full(program, full)
        held = self._held.pop(program, 0)
        kc = self._kc.pop(program, [])
        keys = self._keys.pop(program, ())
        nk = len(kc)
        self._pins[program] = Pin(held, max(0, min(full - nk, held)), -1, kc, keys)

    def unpin(self, program: str) -> None:
        self.changes += 1
        pin = self._pins.pop(program)
        nk = len(pin.copies)
        if pin.shared < 0:
            self._free_stream(program, pin.blocks, pin.full, nk, pin.keys)
        else:
            # what the next call did not take: cached blocks past its hit (they no longer
            # match its stream) to the tail, the partial block to the head
            if pin.blocks > pin.full:
                self._prepend(nk + pin.full, nk + pin.blocks)
            if pin.full > pin.shared:
                self._append(None, nk + pin.shared, nk + pin.full)
        if pin.copies:
            self._unref(pin.copies, pin.keys)
