"""vLLM v1's KV block pool for agent programs: prefix caching, LRU free list, runs of blocks.

Mirrors ``vllm/v1/core/block_pool.py`` and ``kv_cache_manager.py`` (0.32) as far
as agent programs exercise them:

- blocks of ``block_size`` tokens; a full block is hashed from its chain, so a
  program's next call, which repeats the previous prompt and output, hits every
  full block of that stream up to the point where it diverges;
- the free list (``FreeKVCacheBlockQueue``) hands blocks out from its head. Freed
  blocks that have a hash (full blocks) go to its tail, a request's in reverse (its
  last block nearest the head, evicted first); freed blocks without one (a request's
  partial last block) go to its head, reused first (``BlockPool.free_blocks``: LIFO
  for uncached blocks, LRU for cached ones). A cached block is evicted only when the
  free list hands it out again;
- a hit touches the blocks (takes them off the free list) before new blocks are
  allocated, and is capped at ``num_tokens − 1`` (the last token is recomputed);
- a pin (the plugin's deferred free, :mod:`ttlctl.engine.pins`) keeps a finished
  request's blocks referenced: :meth:`KVPool.pin`. The program's next call shares the
  pinned blocks of its hit (``touch`` of blocks still referenced: nothing leaves the
  free list for them) and allocates its new blocks while the pin still holds the rest;
  :meth:`KVPool.unpin` then frees what the call did not take.

Two pools implement one interface: :class:`RunPool`, which keeps runs of a
program's consecutive blocks as one entry (fast), and :class:`BlockPool`, which
keeps every block (the reference the tests compare it, and vLLM's own
``BlockPool``, with).

Shared prefixes (:meth:`replay.workload.Call.block_keys`): a call whose prompt starts
with blocks other programs share passes their keys. Those blocks are kept one by one,
as vLLM keeps every block: a key may have several cached copies (vLLM does not
de-duplicate: a request that computes a block another request cached meanwhile caches
its own copy), a hit takes the oldest copy still cached (``get_one_block``), a copy is
referenced by every running request and pin that holds it and goes to the free list's
tail when the last one lets go (a request's shared blocks after its own ones, each in
reverse: ``free_blocks(reversed(blocks))``). A shared block is cached as soon as it is
allocated full (:meth:`KVPool.cache_full`, vLLM's ``cache_blocks`` in
``allocate_slots``), so another program can hit it in the same step. The program's own
blocks follow its shared ones: they hit only while the call's shared keys are the same
as when they were cached (in vLLM their hashes chain on the shared ones).

Deliberate differences from vLLM, neither of which changes eviction order or hit
lengths: a program's own chain has one identity per block index, and when a new call
diverges from the cached stream (fewer reused tokens than cached) the blocks past the
divergence keep their place in the free list but lose their identity here (vLLM
keeps a hash nothing will ever match again), so handing them out again is not
counted as an eviction.
"""

from __future__ import annotations

from collections import OrderedDict
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
    #: (release, unpin) or hand a pin over (admit). Not by the ones handing free blocks
    #: out (they only take room, never a pin's blocks), nor by :meth:`pin`: it keeps a
    #: finished call's blocks where they were, and only its own program's prefix changes,
    #: a program that has no call waiting (a program's calls run one at a time)
    changes: int

    @property
    def free_blocks(self) -> int: ...

    def held(self, program: str) -> int:
        """Blocks held for ``program`` (by its running request and its pin)."""
        ...

    def cached_prefix(self, program: str) -> int:
        """Leading blocks of the program's stream that a new call could hit now (a pin's
        full blocks, or its cached blocks in the free list)."""
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
class _Pin:
    """A pin's blocks in a pool: ``copies``, its shared blocks (the keys ``keys``), then
    ``blocks`` of the program's own stream, the first ``full`` cached; ``shared``: the
    first own blocks its program's next call took (-1: none yet)."""

    blocks: int
    full: int
    shared: int = -1
    copies: list[int] = field(default_factory=list)
    keys: Keys = ()


# ---------------------------------------------------------------------- runs


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
    _pins: dict[str, _Pin] = field(default_factory=dict)
    #: blocks handed out by :meth:`take`, not yet assigned
    _loose: int = 0
    _evicted: int = 0
    changes: int = 0
    # shared blocks
    _copies: dict[Hashable, list[int]] = field(default_factory=dict)  # key -> copies, oldest first
    _copy_ref: dict[int, int] = field(default_factory=dict)  # referenced copies
    #: free copy -> (its run, its position there)
    _copy_at: dict[int, tuple[int, int]] = field(default_factory=dict)
    _next_copy: int = 0
    _overlap: int = 0
    #: program -> its running request's shared keys and the copies it holds (leading)
    _keys: dict[str, Keys] = field(default_factory=dict)
    _kc: dict[str, list[int]] = field(default_factory=dict)
    #: program -> the shared keys its cached run follows (absent: none)
    _base: dict[str, Keys] = field(default_factory=dict)

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
            free_hit = 0
            copies, free_copies = self._copies, self._copy_at
            for k in keys[: min(hit, s)]:
                if copies[k][0] in free_copies:
                    free_hit += 1
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
            copies = self._copies
            kc = [self._ref(copies[k][0]) for k in keys[: min(hit, s)]]
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
            lst = copies.get(key)
            if lst is None:
                copies[key] = [cid]
            else:
                lst.append(cid)
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
        self._pins[program] = _Pin(held, max(0, min(full - nk, held)), -1, kc, keys)

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

    def _ref(self, cid: int) -> int:
        """One more reference to a shared copy (off the free list if it was there)."""
        at = self._copy_at.pop(cid, None)
        if at is None:
            self._copy_ref[cid] += 1
            self._overlap += 1
            return cid
        rid, pos = at
        run = self._runs[rid]
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
            del self._runs[rid]
        self._free -= 1
        self._copy_ref[cid] = 1
        return cid

    def _unref(self, kc: list[int], keys: Keys) -> None:
        """Drop one reference to each of the copies ``kc`` (of ``keys``), last first; those
        nobody holds any more go to the tail together, still cached."""
        refs = self._copy_ref
        dropped: list[int] = []
        for pos in range(len(kc) - 1, -1, -1):
            cid = kc[pos]
            ref = refs[cid]
            if ref > 1:
                refs[cid] = ref - 1
                self._overlap -= 1
            else:
                del refs[cid]
                dropped.append(pos)
        if not dropped:
            return
        lo, hi = dropped[-1], dropped[0] + 1
        holes = None
        if len(dropped) != hi - lo:
            holes = set(range(lo, hi)).difference(dropped)
        rid = self._next_id
        self._next_id += 1
        self._runs[rid] = _BlockRun(_Copies(kc, keys, holes), lo, hi)
        self._free += len(dropped)
        at = self._copy_at
        for pos in dropped:
            at[kc[pos]] = (rid, pos)

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
        cached, at = self._copies, self._copy_at
        while count and run.hi > run.lo:
            pos = run.hi - 1
            run.hi = pos
            if holes and pos in holes:
                holes.remove(pos)
                continue
            cid = copies.cids[pos]
            del at[cid]
            key = copies.keys[pos]
            left = cached[key]
            left.remove(cid)
            if not left:
                del cached[key]
            self._evicted += 1
            count -= 1
        while holes and run.hi - 1 in holes:
            holes.remove(run.hi - 1)
            run.hi -= 1
        if run.hi <= run.lo:
            del self._runs[rid]
        return count

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
        listed = [c for cids in self._copies.values() for c in cids]
        assert all(self._copies.values()) and len(listed) == len(set(listed))
        assert set(listed) == set(self._copy_ref) | set(self._copy_at)
        assert not set(self._copy_ref) & set(self._copy_at)
        for cid, (rid, pos) in self._copy_at.items():
            run = self._runs[rid]
            assert isinstance(run.owner, _Copies) and run.owner.cids[pos] == cid
            assert run.lo <= pos < run.hi and pos not in (run.owner.holes or ())
            assert cid in self._copies[run.owner.keys[pos]]
        for run in self._runs.values():
            if isinstance(run.owner, _Copies) and run.owner.holes:
                assert all(run.lo < h < run.hi - 1 for h in run.owner.holes)


# ---------------------------------------------------------------------- blocks


#: marks a shared block's hash in :class:`BlockPool` (a program's own: ``(program, index)``)
_SHARED = "\x00shared"


@dataclass(slots=True)
class BlockPool:
    """Every block on its own, as vLLM keeps them: the reference for :class:`RunPool`.

    Invariants (:meth:`check`): every block is free, held by running requests or pins
    (a shared block counted once, however many hold it: ``_ref``), or taken and not yet
    assigned, never two of them.
    """

    num_blocks: int
    block_size: int
    _queue: OrderedDict[int, None] = field(default_factory=OrderedDict)  # free, head first
    #: block -> (program, idx) for a program's own, (_SHARED, key) for a shared one
    _hash: dict[int, tuple[str, Hashable]] = field(default_factory=dict)
    _by_hash: dict[tuple[str, Hashable], int] = field(default_factory=dict)
    #: shared key -> its cached blocks, oldest first
    _shared: dict[Hashable, dict[int, None]] = field(default_factory=dict)
    #: shared block -> references (running requests and pins holding it)
    _ref: dict[int, int] = field(default_factory=dict)
    #: program -> its running request's blocks (its ``_nk`` leading ones shared)
    _owned: dict[str, list[int]] = field(default_factory=dict)
    _nk: dict[str, int] = field(default_factory=dict)
    _keys: dict[str, Keys] = field(default_factory=dict)
    #: program -> the shared keys its cached own blocks follow
    _base: dict[str, Keys] = field(default_factory=dict)
    #: program -> (its own blocks, the pin)
    _pins: dict[str, tuple[list[int], _Pin]] = field(default_factory=dict)
    #: blocks handed out by :meth:`take`, not yet assigned
    _loose: list[int] = field(default_factory=list)
    _evicted: int = 0
    changes: int = 0

    def __post_init__(self) -> None:
        for b in range(self.num_blocks):
            self._queue[b] = None

    @property
    def free_blocks(self) -> int:
        return len(self._queue)

    def held(self, program: str) -> int:
        held = len(self._owned.get(program, ()))
        if program in self._pins:
            blocks, pin = self._pins[program]
            held += len(blocks) - max(0, pin.shared) + len(pin.copies)
        return held

    def cached_prefix(self, program: str) -> int:
        if program in self._pins:
            _, pin = self._pins[program]
            return pin.full if pin.shared < 0 else 0
        if program in self._owned:
            return 0
        n = 0
        while (program, n) in self._by_hash:
            n += 1
        return n

    def prefix_hit(self, program: str, keys: Keys, reusable: int, cap: int) -> int:
        s = len(keys)
        if not s:
            if program in self._base or (program in self._pins and self._pins[program][1].keys):
                return 0
            return min(self.cached_prefix(program), reusable, cap)
        n = 0
        while n < min(s, cap) and keys[n] in self._shared:
            n += 1
        if n < s:
            return n
        own = s
        if program in self._pins:
            _, pin = self._pins[program]
            if pin.shared < 0 and pin.keys == keys:
                own = s + pin.full
        elif self._base.get(program) == keys:
            while (program, own) in self._by_hash:
                own += 1
        return min(max(s, min(own, reusable)), cap)

    def room_for(self, program: str, hit: int, new: int, keys: Keys = ()) -> bool:
        pinned = program in self._pins and self._pins[program][1].shared < 0
        s = len(keys)
        if s:
            free_hit = sum(
                1 for k in keys[: min(hit, s)] if next(iter(self._shared[k])) in self._queue
            )
            if hit > s and not pinned:
                free_hit += hit - s
            return new <= len(self._queue) - free_hit
        if pinned:
            return new <= len(self._queue)
        return new <= len(self._queue) - hit

    def admit(self, program: str, hit: int, new: int, keys: Keys = ()) -> None:
        self.changes += 1
        if not self.room_for(program, hit, new, keys):
            raise OutOfBlocks(program)
        s = len(keys)
        blocks = []
        own_hit = hit
        if s:
            for k in keys[: min(hit, s)]:
                b = next(iter(self._shared[k]))
                self._queue.pop(b, None)  # touch
                self._ref[b] = self._ref.get(b, 0) + 1
                blocks.append(b)
            own_hit = hit - s if hit > s else 0
            self._keys[program] = keys
        self._nk[program] = len(blocks)
        if program in self._pins:
            pinned, pin = self._pins[program]
            if pin.shared >= 0 or own_hit > pin.full:
                raise ValueError(f"hit {hit} beyond the {pin.full} cached blocks pinned")
            pin.shared = own_hit
            blocks.extend(pinned[:own_hit])
        else:
            start = s
            if self._base.get(program, ()) != keys:
                start = len(self._base.get(program, ()))
            for i in range(start, start + own_hit):
                b = self._by_hash[(program, i)]
                del self._queue[b]  # touch: off the free list
                blocks.append(b)
            # cached blocks past the hit no longer match the new stream
            i = start + own_hit
            while (program, i) in self._by_hash:
                self._unhash(self._by_hash[(program, i)])
                i += 1
            self._base.pop(program, None)
        self._owned[program] = blocks
        self.grow(program, new)

    def cache_full(self, program: str, full: int) -> None:
        keys = self._keys.get(program)
        if not keys:
            return
        blocks = self._owned[program]
        nk = self._nk[program]
        upto = min(full, len(keys))
        if nk >= upto:
            return
        self.changes += 1
        for i in range(nk, upto):
            b = blocks[i]
            self._hash[b] = (_SHARED, keys[i])
            self._shared.setdefault(keys[i], {})[b] = None
            self._ref[b] = 1
        self._nk[program] = upto

    def overlap(self) -> int:
        return sum(r - 1 for r in self._ref.values())

    def grow(self, program: str, new: int) -> None:
        if new > len(self._queue):
            raise OutOfBlocks(program)
        blocks = self._owned.setdefault(program, [])
        for _ in range(new):
            b, _ = self._queue.popitem(last=False)
            if b in self._hash:
                self._unhash(b)
                self._evicted += 1
            blocks.append(b)

    def take(self, new: int) -> None:
        if new > len(self._queue):
            raise OutOfBlocks(f"{new} blocks")
        for _ in range(new):
            b, _ = self._queue.popitem(last=False)
            if b in self._hash:
                self._unhash(b)
                self._evicted += 1
            self._loose.append(b)

    def assign(self, program: str, n: int) -> None:
        if n > len(self._loose):
            raise ValueError(f"{n} blocks assigned to {program}, {len(self._loose)} taken")
        blocks = self._owned.setdefault(program, [])
        for _ in range(n):
            blocks.append(self._loose.pop())

    def grow_batch(self, wants: list[tuple[str, int]]) -> None:
        if sum(n for _, n in wants) > len(self._queue):
            raise OutOfBlocks(wants[0][0])
        for program, n in wants:
            self.grow(program, n)

    def release(self, program: str, full: int) -> None:
        self.changes += 1
        if program in self._keys:
            self.cache_full(program, full)
        blocks = self._owned.pop(program, [])
        nk = self._nk.pop(program, 0)
        keys = self._keys.pop(program, ())
        own = blocks[nk:]
        self._free(program, own, max(0, min(full - nk, len(own))), 0, nk, keys)
        self._unref(blocks[:nk])

    def pin(self, program: str, full: int) -> None:
        if program in self._pins:
            raise ValueError(f"{program} already holds a pin")
        if program in self._keys:
            self.cache_full(program, full)
        blocks = self._owned.pop(program, [])
        nk = self._nk.pop(program, 0)
        keys = self._keys.pop(program, ())
        own = blocks[nk:]
        pin = _Pin(len(own), max(0, min(full - nk, len(own))), -1, blocks[:nk], keys)
        self._pins[program] = (own, pin)

    def unpin(self, program: str) -> None:
        self.changes += 1
        blocks, pin = self._pins.pop(program)
        nk = len(pin.copies)
        if pin.shared < 0:
            self._free(program, blocks, pin.full, 0, nk, pin.keys)
        else:  # the next call keeps [0, shared); past it nothing matches its stream
            self._free(None, blocks, pin.full, pin.shared, nk, ())
        self._unref(pin.copies)

    def evicted_blocks(self) -> int:
        return self._evicted

    def _unref(self, copies: list[int]) -> None:
        """Drop one reference to each shared block, last first; one nobody holds goes to
        the tail, still cached."""
        for b in reversed(copies):
            if self._ref[b] > 1:
                self._ref[b] -= 1
            else:
                del self._ref[b]
                self._queue[b] = None

    def _free(
        self,
        program: str | None,
        blocks: list[int],
        full: int,
        start: int,
        offset: int = 0,
        keys: Keys = (),
    ) -> None:
        """vLLM's ``free_blocks(reversed(blocks[start:]))``: blocks [start, full) cached
        (as ``program``'s stream from block ``offset``, after the shared ``keys``; None:
        nothing hits them) to the tail, last first; the rest to the head, the last block at
        the very head."""
        for i in range(start, full):
            b = blocks[i]
            if b in self._hash:
                self._unhash(b)
            if program is not None:
                key = (program, offset + i)
                old = self._by_hash.get(key)
                if old is not None:  # an older copy no longer belongs to the stream
                    self._unhash(old)
                self._hash[b] = key
                self._by_hash[key] = b
        if program is not None and full > start:
            if keys:
                self._base[program] = keys
            else:
                self._base.pop(program, None)
        for b in reversed(blocks[start:full]):
            self._queue[b] = None
        for b in blocks[max(start, full) :]:
            if b in self._hash:  # not full now: whatever hash a hit left on it is stale
                self._unhash(b)
            self._queue[b] = None
            self._queue.move_to_end(b, last=False)

    def _unhash(self, block: int) -> None:
        key = self._hash.pop(block)
        if key[0] == _SHARED:
            left = self._shared[key[1]]
            del left[block]
            if not left:
                del self._shared[key[1]]
        elif self._by_hash.get(key) == block:
            del self._by_hash[key]

    def check(self) -> None:
        owned = {b for v in self._owned.values() for b in v}
        pinned = {b for v, _ in self._pins.values() for b in v}
        pinned |= {b for _, p in self._pins.values() for b in p.copies}
        loose = set(self._loose)
        assert len(self._queue) + len(owned | pinned) + len(loose) == self.num_blocks
        assert not (set(self._queue) & (owned | pinned | loose))
        assert not (loose & (owned | pinned))
        refs: dict[int, int] = {}
        for program, blocks in self._owned.items():
            for b in blocks[: self._nk.get(program, 0)]:
                refs[b] = refs.get(b, 0) + 1
        for _, p in self._pins.values():
            for b in p.copies:
                refs[b] = refs.get(b, 0) + 1
        assert refs == self._ref, (refs, self._ref)
