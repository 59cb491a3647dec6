"""What the run pool's parts share: the run types, and the pool's fields and the methods
one part calls in another, declared for the type checker.

:class:`~replay.kv.run_pool.RunPool` is one slotted dataclass assembled from parts, each a
mixin in its own module with the methods of one concept: the free list of runs
(:mod:`replay.kv.run_free`), the prefix lookup (:mod:`replay.kv.run_lookup`), the shared
copies (:mod:`replay.kv.run_shared`) and the pins (:mod:`replay.kv.run_pins`). Each part
derives from :class:`RunPoolState`, which declares the fields the parts read (the
dataclass in :mod:`replay.kv.run_pool` defines them, with the invariants they keep) and
the methods a part calls in another, so that each part checks on its own and none imports
another: imports run from the pool down to its parts, to this module.

The declarations exist for the type checker only; the methods are the parts' own (found by
the class's method resolution, as any method is: no call goes through anything extra).
The run types are the parts' own too (``_``: nothing outside the run pool uses them).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from replay.kv.interface import Keys

if TYPE_CHECKING:
    from collections import OrderedDict
    from itertools import count

    from replay.kv.interface import Pin

#: a free copy's place, run id * _AT + position (positions are below a call's block count)
_AT = 1 << 32


@dataclass(slots=True)
class _Copies:
    """Shared blocks freed together: ``cids[i]`` is the copy of ``keys[i]``; the run holds
    positions [lo, hi) less ``holes`` (taken again, or still held when the run was made)."""

    cids: list[int]
    keys: Keys
    holes: set[int] | None = None


@dataclass(slots=True)
class _BlockRun:
    #: program whose own cached blocks [lo, hi) these are; shared copies; None: anonymous
    owner: str | _Copies | None
    lo: int
    hi: int

    @property
    def size(self) -> int:
        owner = self.owner
        if owner is not None and owner.__class__ is _Copies and owner.holes:  # type: ignore[union-attr]
            return self.hi - self.lo - len(owner.holes)  # type: ignore[union-attr]
        return self.hi - self.lo


class RunPoolState:
    """The pool's fields and the methods its parts use (declarations only; see the module's
    docstring)."""

    if TYPE_CHECKING:
        # the fields (:class:`replay.kv.run_pool.RunPool` says what each holds)
        num_blocks: int
        block_size: int
        _runs: OrderedDict[int, _BlockRun]
        _free: int
        _next_id: int
        _cached: dict[str, int]
        _held: dict[str, int]
        _pins: dict[str, Pin]
        _loose: int
        _evicted: int
        changes: int
        _copies: dict[Hashable, int]
        _later: dict[Hashable, list[int]]
        _copy_ref: dict[int, int]
        _copy_at: dict[int, int]
        _next_copy: int
        _overlap: int
        _keys: dict[str, Keys]
        _kc: dict[str, list[int]]
        _base: dict[str, Keys]
        _key_id: dict[Hashable, int]
        _next_key: count[int]
        _ids_of: dict[int, tuple[Keys, Keys]]

        # the free list (replay.kv.run_free)
        def grow(self, program: str, new: int) -> None: ...
        def _free_stream(
            self, program: str, blocks: int, full: int, lo: int = 0, keys: Keys = ()
        ) -> None: ...
        def _append(self, owner: str | None, lo: int, hi: int) -> int: ...
        def _prepend(self, lo: int, hi: int) -> None: ...

        # the prefix lookup (replay.kv.run_lookup)
        def cached_prefix(self, program: str) -> int: ...
        def room_for(self, program: str, hit: int, new: int, keys: Keys = ()) -> bool: ...
        def _ids(self, keys: Keys) -> Keys: ...

        # the shared copies (replay.kv.run_shared)
        def cache_full(self, program: str, full: int) -> None: ...
        def _ref(self, keys: Keys) -> list[int]: ...
        def _unref(self, kc: list[int], keys: Keys) -> None: ...
        def _uncache(self, key: Hashable, cid: int) -> None: ...

    else:
        # no slots of its own (the dataclass holds the fields): with no ``__dict__`` in
        # any class of the pool, an instance has none. Hidden from the type checker, which
        # reads an empty ``__slots__`` as "no attribute may be assigned" in a part.
        __slots__ = ()
