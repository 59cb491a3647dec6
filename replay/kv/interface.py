"""What the simulator asks of a KV block pool (:class:`KVPool`), and what both pools share.

The model the pools follow (vLLM 0.32's ``block_pool.py`` and ``kv_cache_manager.py``) is
described in :mod:`replay.kv`.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Protocol

#: the shared blocks of a call's prompt, in order (``Call.shared_keys``)
Keys = tuple[Hashable, ...]


class OutOfBlocks(Exception):
    """Raised by :meth:`KVPool.admit`/:meth:`KVPool.grow` callers that did not check room."""


class KVPool(Protocol):
    block_size: int
    num_blocks: int
    #: bumped by every call that can let a waiting call fit: those that free blocks
    #: (release, unpin), hand a pin over (admit) or cache shared blocks another program's
    #: call may hit (:meth:`cache_full`, also the one :meth:`pin` does for its call's last
    #: full shared blocks).
    #: Not by the ones handing free blocks out (they only take room, never a pin's
    #: blocks), nor by :meth:`pin` otherwise: it keeps a finished call's blocks where
    #: they were, and only its own program's prefix changes, a program that has no call
    #: waiting (a program's calls run one at a time)
    changes: int

    @property
    def free_blocks(self) -> int: ...

    def held(self, program: str) -> int:
        """Blocks held for ``program`` (by its running request and its pin)."""
        ...

    def cached_prefix(self, program: str) -> int:
        """Leading blocks of the program's own stream that a new call could hit now (a
        pin's full blocks, or its cached blocks in the free list). For a program whose
        prompts start with shared keys, its own blocks after them, whether or not the
        shared ones are still cached (what a call hits then is :meth:`prefix_hit`'s)."""
        ...

    def prefix_hit(self, program: str, keys: Keys, reusable: int, cap: int) -> int:
        """Blocks a call of ``program`` whose prompt starts with the shared blocks ``keys``
        hits now: the leading keys any program cached, then, once all are, the program's
        own cached blocks (cached after the same keys) up to block ``reusable``; at most
        ``cap``. Without keys: ``min(cached_prefix, reusable, cap)``."""
        ...

    def room_for(self, program: str, hit: int, new: int, keys: Keys = ()) -> bool:
        """Whether :meth:`admit` with this hit and ``new`` further blocks would succeed:
        ``new`` blocks must be free, plus the ``hit`` blocks that sit in the free list
        (vLLM counts a hit block with no reference as one to allocate); a pin's blocks
        and shared blocks another request holds are not free."""
        ...

    def admit(self, program: str, hit: int, new: int, keys: Keys = ()) -> None:
        """A call of ``program`` enters with the first ``hit`` cached blocks (taken off the
        free list, or shared with the program's pin or, for shared keys, with whoever holds
        them) and ``new`` blocks from the free list's head."""
        ...

    def cache_full(self, program: str, full: int) -> None:
        """The running request's first ``full`` blocks are full: its shared blocks among
        them become cached for every program (no-op without shared keys)."""
        ...

    def overlap(self) -> int:
        """References to shared blocks beyond the first: ``held`` summed over programs
        minus this is what they hold."""
        ...

    def grow(self, program: str, new: int) -> None:
        """``new`` more blocks for the program's running request."""
        ...

    def take(self, new: int) -> None:
        """``new`` blocks from the free list's head for running requests, each to be
        :meth:`assign`-ed to its program later (the decode set grows its members' blocks
        by count; which request holds which block does not matter until it frees them)."""
        ...

    def assign(self, program: str, n: int) -> None:
        """``n`` of the blocks handed out by :meth:`take` are the program's running
        request's."""
        ...

    def grow_batch(self, wants: list[tuple[str, int]]) -> None:
        """``n`` more blocks for each (program, n), in that order."""
        ...

    def release(self, program: str, full: int) -> None:
        """Free the running request's blocks: the first ``full`` are cached (hashed) and
        go to the tail, the rest (a partial last block) are anonymous and go to the head."""
        ...

    def pin(self, program: str, full: int) -> None:
        """The running request finished and its blocks stay referenced (the first ``full``
        cached): a pin."""
        ...

    def unpin(self, program: str) -> None:
        """Drop the pin's reference: its blocks that the program's running request does
        not share go back to the free list (cached ones to the tail, the partial one to
        the head)."""
        ...

    def evicted_blocks(self) -> int:
        """Cached blocks handed out again so far (for reports and tests)."""
        ...


@dataclass(slots=True)
class Pin:
    """A pin's blocks in a pool: ``copies``, its shared blocks (the keys ``keys``), then
    ``blocks`` of the program's own stream, the first ``full`` cached; ``shared``: the
    first own blocks its program's next call took (-1: none yet)."""

    blocks: int
    full: int
    shared: int = -1
    copies: list[int] = field(default_factory=list)
    keys: Keys = ()
