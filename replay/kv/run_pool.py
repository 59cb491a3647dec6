"""The simulator's pool: runs of a program's consecutive blocks kept as one entry.

Same free-list order, hits and evictions as :class:`replay.kv.block_pool.BlockPool`
(the tests compare them step by step), at a cost per run rather than per block. The
model both follow is described in :mod:`replay.kv`.

:class:`RunPool` is one slotted dataclass assembled from parts, mixins of one concept each
(:mod:`replay.kv.run_state` says how): here its fields and the invariants they keep, a
request's blocks admitted and released, and the check; the free list of runs in
:mod:`replay.kv.run_free`, the prefix lookup in :mod:`replay.kv.run_lookup`, the shared
copies in :mod:`replay.kv.run_shared`, the pins in :mod:`replay.kv.run_pins`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from itertools import count

from replay.kv.interface import Keys, OutOfBlocks, Pin
from replay.kv.run_free import FreeList
from replay.kv.run_lookup import PrefixLookup
from replay.kv.run_pins import Pins
from replay.kv.run_shared import SharedCopies
from replay.kv.run_state import _AT, _BlockRun, _Copies


@dataclass(slots=True)
class RunPool(FreeList, PrefixLookup, SharedCopies, Pins):
    """Free list of runs, head first; a program's own cached blocks are one run [s, hi)
    (s: its shared blocks); the shared copies one request or pin let go of together are
    one run too (:class:`~replay.kv.run_state._Copies`: taken from its high end, a copy
    hit again leaves a hole).

    Invariants (:meth:`check`): free + held + pinned-not-shared + shared blocks referenced
    + taken-not-assigned = ``num_blocks``; every run is non-empty; a program's cached run
    starts after its shared keys and is owned by it; a program has at most one of: a
    cached run, a pin not yet shared; a shared copy is either referenced or in the free
    list, and is listed under its key.
    """

    num_blocks: int
    block_size: int
    _runs: OrderedDict[int, _BlockRun] = field(default_factory=OrderedDict)
    _free: int = 0
    _next_id: int = 0
    _cached: dict[str, int] = field(default_factory=dict)  # program -> run id
    #: program -> its running request's own blocks (not its shared copies)
    _held: dict[str, int] = field(default_factory=dict)
    _pins: dict[str, Pin] = field(default_factory=dict)
    #: blocks handed out by :meth:`~replay.kv.run_free.FreeList.take`, not yet assigned
    _loose: int = 0
    _evicted: int = 0
    changes: int = 0
    # shared blocks
    #: key -> its oldest copy; key -> its further copies, oldest first (only if any).
    #: Ints, not a list per key nor a tuple per free copy: a trace makes millions of
    #: copies, and as many long-lived containers would wake the cyclic GC
    _copies: dict[Hashable, int] = field(default_factory=dict)
    _later: dict[Hashable, list[int]] = field(default_factory=dict)
    _copy_ref: dict[int, int] = field(default_factory=dict)  # referenced copies
    #: free copy -> its run * _AT + its position there
    _copy_at: dict[int, int] = field(default_factory=dict)
    _next_copy: int = 0
    _overlap: int = 0
    #: program -> its running request's shared keys and the copies it holds (leading)
    _keys: dict[str, Keys] = field(default_factory=dict)
    _kc: dict[str, list[int]] = field(default_factory=dict)
    #: program -> the shared keys its cached run follows (absent: none)
    _base: dict[str, Keys] = field(default_factory=dict)
    #: shared keys as small ints (:meth:`~replay.kv.run_lookup.PrefixLookup._ids`): hashed
    #: once per distinct tuple of keys, not at every lookup; the pool keeps and compares
    #: only these
    _key_id: dict[Hashable, int] = field(default_factory=dict)
    _next_key: count[int] = field(default_factory=count)
    _ids_of: dict[int, tuple[Keys, Keys]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.num_blocks <= 0 or self.block_size <= 0:
            raise ValueError("num_blocks and block_size must be positive")
        self._append(None, 0, self.num_blocks)

    @property
    def free_blocks(self) -> int:
        return self._free

    def admit(self, program: str, hit: int, new: int, keys: Keys = ()) -> None:
        self.changes += 1
        if not self.room_for(program, hit, new, keys):
            raise OutOfBlocks(program)
        s = len(keys)
        own_hit = hit
        if s:
            keys = self._ids(keys)
            kc = self._ref(keys[: min(hit, s)])
            self._keys[program], self._kc[program] = keys, kc
            own_hit = hit - s if hit > s else 0
        pin = self._pins.get(program)
        if pin is not None:
            if pin.shared >= 0 or own_hit > pin.full:
                raise ValueError(f"hit {hit} beyond the {pin.full} cached blocks pinned")
            pin.shared = own_hit
        else:
            rid = self._cached.pop(program, None)
            if s or program in self._base:
                self._base.pop(program, None)
            if rid is not None:
                run = self._runs[rid]
                if own_hit > run.hi - run.lo:
                    raise ValueError(f"hit {hit} beyond cached {run.hi} for {program}")
                self._free -= own_hit
                if own_hit == run.hi - run.lo:
                    del self._runs[rid]
                else:  # the blocks past the hit no longer match the stream
                    run.lo, run.owner = run.lo + own_hit, None
            elif own_hit:
                raise ValueError(f"hit {hit} for {program} with nothing cached")
        self._held[program] = own_hit
        self.grow(program, new)

    def release(self, program: str, full: int) -> None:
        self.changes += 1
        if program in self._keys:  # full blocks are cached (the engine did as it computed)
            self.cache_full(program, full)
        held = self._held.pop(program, 0)
        kc = self._kc.pop(program, None)
        if kc is None:
            self._free_stream(program, held, min(full, held))
            return
        keys = self._keys.pop(program)
        nk = len(kc)
        self._free_stream(program, held, max(0, min(full - nk, held)), nk, keys)
        self._unref(kc, keys)

    def check(self) -> None:
        """Block conservation and well-formed runs (see the class docstring)."""
        free = sum(r.size for r in self._runs.values())
        assert free == self._free, (free, self._free)
        assert all(r.size > 0 for r in self._runs.values())
        pinned = sum(p.blocks - max(0, p.shared) for p in self._pins.values())
        assert (
            self._free + sum(self._held.values()) + pinned + len(self._copy_ref) + self._loose
            == self.num_blocks
        )
        for program, rid in self._cached.items():
            run = self._runs[rid]
            assert run.owner == program and run.lo == len(self._base.get(program, ()))
            assert program not in self._pins or self._pins[program].shared >= 0
        for pin in self._pins.values():
            assert 0 <= pin.full <= pin.blocks and pin.shared <= pin.full
        refs: dict[int, int] = {}
        for kc in [*self._kc.values(), *(p.copies for p in self._pins.values())]:
            for cid in kc:
                refs[cid] = refs.get(cid, 0) + 1
        assert refs == self._copy_ref, (refs, self._copy_ref)
        assert self._overlap == sum(r - 1 for r in refs.values())
        assert set(self._later) <= set(self._copies) and all(self._later.values())
        listed = [*self._copies.values(), *(c for cids in self._later.values() for c in cids)]
        assert len(listed) == len(set(listed))
        assert set(listed) == set(self._copy_ref) | set(self._copy_at)
        assert not set(self._copy_ref) & set(self._copy_at)
        for cid, at in self._copy_at.items():
            rid, pos = divmod(at, _AT)
            run = self._runs[rid]
            assert isinstance(run.owner, _Copies) and run.owner.cids[pos] == cid
            assert run.lo <= pos < run.hi and pos not in (run.owner.holes or ())
            key = run.owner.keys[pos]
            assert cid == self._copies[key] or cid in self._later[key]
        for run in self._runs.values():
            if isinstance(run.owner, _Copies) and run.owner.holes:
                assert all(run.lo < h < run.hi - 1 for h in run.owner.holes)
