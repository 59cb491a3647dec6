"""The simulator's pool: runs of a program's consecutive blocks kept as one entry.

Same free-list order, hits and evictions as :class:`replay.kv.block_pool.BlockPool`
(the tests compare them step by step), at a cost per run rather than per block. The
model both follow is described in :mod:`replay.kv`.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from itertools import count

from replay.kv.interface import Keys, OutOfBlocks, Pin

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


@dataclass(slots=True)
class RunPool:
    """Free list of runs, head first; a program's own cached blocks are one run [s, hi)
    (s: its shared blocks); the shared copies one request or pin let go of together are
    one run too (:class:`_Copies`: taken from its high end, a copy hit again leaves a hole).

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
    #: blocks handed out by :meth:`take`, not yet assigned
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
    #: shared keys as small ints (:meth:`_ids`): hashed once per distinct tuple of keys,
    #: not at every lookup; the pool keeps and compares only these
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

    def held(self, program: str) -> int:
        held = self._held.get(program, 0) + len(self._kc.get(program, ()))
        pin = self._pins.get(program)
        if pin is not None:
            held += pin.blocks - max(0, pin.shared) + len(pin.copies)
        return held

    def cached_prefix(self, program: str) -> int:
        pin = self._pins.get(program)
        if pin is not None:
            return pin.full if pin.shared < 0 else 0
        rid = self._cached.get(program)
        return self._runs[rid].hi if rid is not None else 0

    def prefix_hit(self, program: str, keys: Keys, reusable: int, cap: int) -> int:
        if not keys:
            if program in self._base or (program in self._pins and self._pins[program].keys):
                return 0  # its cached blocks follow shared ones this call does not start with
            return min(self.cached_prefix(program), reusable, cap)
        keys = self._ids(keys)
        copies = self._copies
        s = len(keys)
        n = 0
        limit = s if s < cap else cap
        while n < limit and keys[n] in copies:
            n += 1
        if n < s:
            return n
        own = s
        pin = self._pins.get(program)
        if pin is not None:
            if pin.shared < 0 and pin.keys == keys:
                own = s + pin.full
        elif self._base.get(program) == keys:
            own = self._runs[self._cached[program]].hi
        return min(max(s, min(own, reusable)), cap)

    def room_for(self, program: str, hit: int, new: int, keys: Keys = ()) -> bool:
        pin = self._pins.get(program)
        s = len(keys)
        if s:
            keys = self._ids(keys)
            hits = map(self._copies.__getitem__, keys[: min(hit, s)])
            free_hit = sum(map(self._copy_at.__contains__, hits))
            if hit > s and (pin is None or pin.shared >= 0):
                free_hit += hit - s
            return new <= self._free - free_hit
        if pin is not None and pin.shared < 0:  # the hit is shared with the pin
            return new <= self._free
        return new <= self._free - hit

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

    def cache_full(self, program: str, full: int) -> None:
        keys = self._keys.get(program)
        if not keys:
            return
        kc = self._kc[program]
        upto = full if full < len(keys) else len(keys)
        if len(kc) >= upto:
            return
        self.changes += 1  # a waiting call may hit them now
        copies, refs = self._copies, self._copy_ref
        start = len(kc)
        cid = self._next_copy
        for key in keys[start:upto]:
            if key not in copies:
                copies[key] = cid
            elif key in self._later:
                self._later[key].append(cid)
            else:
                self._later[key] = [cid]
            refs[cid] = 1
            kc.append(cid)
            cid += 1
        self._next_copy = cid
        self._held[program] -= upto - start  # its own blocks become the copies

    def overlap(self) -> int:
        return self._overlap

    def grow(self, program: str, new: int) -> None:
        if new > self._free:
            raise OutOfBlocks(program)
        self._take(new)
        self._held[program] = self._held.get(program, 0) + new

    def take(self, new: int) -> None:
        if new > self._free:
            raise OutOfBlocks(f"{new} blocks")
        self._take(new)
        self._loose += new

    def assign(self, program: str, n: int) -> None:
        if n > self._loose:
            raise ValueError(f"{n} blocks assigned to {program}, {self._loose} taken")
        self._loose -= n
        self._held[program] = self._held.get(program, 0) + n

    def grow_batch(self, wants: list[tuple[str, int]]) -> None:
        total = sum(n for _, n in wants)
        if total > self._free:
            raise OutOfBlocks(wants[0][0])
        self._take(total)
        held = self._held
        for program, n in wants:
            held[program] = held.get(program, 0) + n

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

    def evicted_blocks(self) -> int:
        return self._evicted

    # internals

    def _ids(self, keys: Keys) -> Keys:
        """The shared keys as ints, one per distinct key (equal tuples: equal ids), cached
        for the tuple object (a call's keys are one tuple for every call that has them)."""
        got = self._ids_of.get(id(keys))
        if got is not None and got[0] is keys:
            return got[1]
        if len(self._ids_of) >= 4096:
            self._ids_of.clear()
        ids = tuple(map(self._key_id.setdefault, keys, self._next_key))
        self._ids_of[id(keys)] = (keys, ids)
        return ids

    def _free_stream(
        self, program: str, blocks: int, full: int, lo: int = 0, keys: Keys = ()
    ) -> None:
        """Free the program's own blocks [lo, lo + blocks), the first ``full`` cached (after
        the shared ``keys``)."""
        if blocks > full:
            self._prepend(lo + full, lo + blocks)  # the partial last block: reused first
        if full:
            old = self._cached.pop(program, None)
            if old is not None:  # not the stream any more
                self._runs[old].owner = None
            self._cached[program] = self._append(program, lo, lo + full)
            if keys:
                self._base[program] = keys
            elif program in self._base:
                del self._base[program]

    def _ref(self, keys: Keys) -> list[int]:
        """One more reference to the oldest copy of each key (off the free list if it was
        there); returns the copies."""
        kc = list(map(self._copies.__getitem__, keys))
        at_of, refs, runs = self._copy_at, self._copy_ref, self._runs
        taken = 0
        for cid in kc:
            at = at_of.pop(cid, None)
            if at is None:
                refs[cid] += 1
                continue
            refs[cid] = 1
            taken += 1
            rid, pos = divmod(at, _AT)
            run = runs[rid]
            copies: _Copies = run.owner  # type: ignore[assignment]
            holes = copies.holes
            if pos == run.lo:
                run.lo += 1
                while holes and run.lo in holes:
                    holes.remove(run.lo)
                    run.lo += 1
            elif pos == run.hi - 1:
                run.hi -= 1
                while holes and run.hi - 1 in holes:
                    holes.remove(run.hi - 1)
                    run.hi -= 1
            elif holes is None:
                copies.holes = {pos}
            else:
                holes.add(pos)
            if run.lo >= run.hi:
                del runs[rid]
        self._free -= taken
        self._overlap += len(kc) - taken
        return kc

    def _unref(self, kc: list[int], keys: Keys) -> None:
        """Drop one reference to each of the copies ``kc`` (of ``keys``), last first; those
        nobody holds any more go to the tail together, still cached."""
        nk = len(kc)
        if not nk:
            return
        refs = self._copy_ref
        counts = list(map(refs.__getitem__, kc))
        shared = nk - counts.count(1)  # copies someone else holds too
        self._overlap -= shared
        rid = self._next_id
        base = rid * _AT
        if not shared:  # the usual case: all of them go, in one run (C loops)
            deque(map(refs.__delitem__, kc), 0)
            self._copy_at.update(zip(kc, range(base, base + nk), strict=True))
            lo, hi, holes, freed = 0, nk, None, nk
        else:
            dropped: list[int] = []
            for pos in range(nk - 1, -1, -1):
                cid = kc[pos]
                ref = counts[pos]
                if ref > 1:
                    refs[cid] = ref - 1
                else:
                    del refs[cid]
                    dropped.append(pos)
            if not dropped:
                return
            lo, hi, freed = dropped[-1], dropped[0] + 1, len(dropped)
            holes = None
            if freed != hi - lo:
                holes = set(range(lo, hi)).difference(dropped)
            at = self._copy_at
            for pos in dropped:
                at[kc[pos]] = base + pos
        self._next_id += 1
        self._runs[rid] = _BlockRun(_Copies(kc, keys, holes), lo, hi)
        self._free += freed

    def _append(self, owner: str | None, lo: int, hi: int) -> int:
        rid = self._next_id
        self._next_id += 1
        self._runs[rid] = _BlockRun(owner, lo, hi)
        self._free += hi - lo
        return rid

    def _prepend(self, lo: int, hi: int) -> None:
        """Anonymous blocks [lo, hi) at the head, block hi − 1 first (vLLM's ``prepend_n``
        of a request's blocks in reverse)."""
        rid = self._append(None, lo, hi)
        self._runs.move_to_end(rid, last=False)

    def _take(self, count: int) -> None:
        """Hand out ``count`` blocks from the head (each run from its high end)."""
        self._free -= count
        runs = self._runs
        while count:
            rid = next(iter(runs))
            run = runs[rid]
            owner = run.owner
            if owner is not None and owner.__class__ is _Copies:
                count = self._take_copies(rid, run, count)
                continue
            size = run.hi - run.lo
            n = count if count < size else size
            run.hi -= n
            count -= n
            if owner is not None:
                self._evicted += n
            if n == size:
                del runs[rid]
                if owner is not None and self._cached.pop(owner, None) is not None:  # type: ignore[arg-type]
                    self._base.pop(owner, None)  # type: ignore[arg-type]

    def _take_copies(self, rid: int, run: _BlockRun, count: int) -> int:
        """Evict shared copies from the run's high end (past its holes); returns what is
        left to take."""
        copies: _Copies = run.owner  # type: ignore[assignment]
        holes = copies.holes
        cached, later, at = self._copies, self._later, self._copy_at
        while count and run.hi > run.lo:
            pos = run.hi - 1
            run.hi = pos
            if holes and pos in holes:
                holes.remove(pos)
                continue
            cid = copies.cids[pos]
            del at[cid]
            key = copies.keys[pos]
            if key in later or cached[key] != cid:
                self._uncache(key, cid)
            else:  # its only copy
                del cached[key]
            self._evicted += 1
            count -= 1
        while holes and run.hi - 1 in holes:
            holes.remove(run.hi - 1)
            run.hi -= 1
        if run.hi <= run.lo:
            del self._runs[rid]
        return count

    def _uncache(self, key: Hashable, cid: int) -> None:
        """The copy ``cid`` of ``key`` is evicted."""
        later = self._later.get(key)
        if self._copies[key] == cid:
            if later is None:
                del self._copies[key]
                return
            self._copies[key] = later.pop(0)
        else:
            assert later is not None
            later.remove(cid)
        if not later:
            del self._later[key]

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
