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

Deliberate differences from vLLM, neither of which changes eviction order or hit
lengths: a program's chain has one identity per block index (prefix sharing across
programs, e.g. a common system prompt, is not modelled), and when a new call
diverges from the cached stream (fewer reused tokens than cached) the blocks past the
divergence keep their place in the free list but lose their identity here (vLLM
keeps a hash nothing will ever match again), so handing them out again is not
counted as an eviction.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol


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

    def room_for(self, program: str, hit: int, new: int) -> bool:
        """Whether :meth:`admit` with this hit and ``new`` further blocks would succeed:
        ``new`` blocks must be free, plus the ``hit`` blocks when they sit in the free list
        (vLLM counts a hit block with no reference as one to allocate); a pin's blocks
        are not free."""
        ...

    def admit(self, program: str, hit: int, new: int) -> None:
        """A call of ``program`` enters with the first ``hit`` cached blocks (taken off the
        free list, or shared with the program's pin) and ``new`` blocks from the free
        list's head."""
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
    """A pin's blocks in a pool: ``blocks`` of the program's stream, the first ``full``
    cached; ``shared``: the first blocks its program's next call took (-1: none yet)."""

    blocks: int
    full: int
    shared: int = -1


# ---------------------------------------------------------------------- runs


@dataclass(slots=True)
class _BlockRun:
    owner: str | None  # program whose cached prefix [0, hi) this is; None: anonymous
    lo: int
    hi: int

    @property
    def size(self) -> int:
        return self.hi - self.lo


@dataclass(slots=True)
class RunPool:
    """Free list of runs, head first; a program's cached blocks are one run [0, hi).

    Invariants (:meth:`check`): free + held + pinned-not-shared + taken-not-assigned =
    ``num_blocks``; every
    run is non-empty; a program's cached run starts at block 0 and is owned by it; a
    program has at most one of: a cached run, a pin not yet shared.
    """

    num_blocks: int
    block_size: int
    _runs: OrderedDict[int, _BlockRun] = field(default_factory=OrderedDict)
    _free: int = 0
    _next_id: int = 0
    _cached: dict[str, int] = field(default_factory=dict)  # program -> run id
    _held: dict[str, int] = field(default_factory=dict)  # program -> its running request's
    _pins: dict[str, _Pin] = field(default_factory=dict)
    #: blocks handed out by :meth:`take`, not yet assigned
    _loose: int = 0
    _evicted: int = 0
    changes: int = 0

    def __post_init__(self) -> None:
        if self.num_blocks <= 0 or self.block_size <= 0:
            raise ValueError("num_blocks and block_size must be positive")
        self._append(None, 0, self.num_blocks)

    @property
    def free_blocks(self) -> int:
        return self._free

    def held(self, program: str) -> int:
        held = self._held.get(program, 0)
        pin = self._pins.get(program)
        if pin is not None:
            held += pin.blocks - max(0, pin.shared)
        return held

    def cached_prefix(self, program: str) -> int:
        pin = self._pins.get(program)
        if pin is not None:
            return pin.full if pin.shared < 0 else 0
        rid = self._cached.get(program)
        return self._runs[rid].hi if rid is not None else 0

    def room_for(self, program: str, hit: int, new: int) -> bool:
        pin = self._pins.get(program)
        if pin is not None and pin.shared < 0:  # the hit is shared with the pin
            return new <= self._free
        return new <= self._free - hit

    def admit(self, program: str, hit: int, new: int) -> None:
        self.changes += 1
        if not self.room_for(program, hit, new):
            raise OutOfBlocks(program)
        pin = self._pins.get(program)
        if pin is not None:
            if pin.shared >= 0 or hit > pin.full:
                raise ValueError(f"hit {hit} beyond the {pin.full} cached blocks pinned")
            pin.shared = hit
        else:
            rid = self._cached.pop(program, None)
            if rid is not None:
                run = self._runs[rid]
                if hit > run.hi:
                    raise ValueError(f"hit {hit} beyond cached {run.hi} for {program}")
                self._free -= hit
                if hit == run.hi:
                    del self._runs[rid]
                else:  # the blocks past the hit no longer match the stream
                    run.lo, run.owner = hit, None
            elif hit:
                raise ValueError(f"hit {hit} for {program} with nothing cached")
        self._held[program] = hit
        self.grow(program, new)

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
        held = self._held.pop(program, 0)
        self._free_stream(program, held, min(full, held))

    def pin(self, program: str, full: int) -> None:
        if program in self._pins:
            raise ValueError(f"{program} already holds a pin")
        held = self._held.pop(program, 0)
        self._pins[program] = _Pin(held, min(full, held))

    def unpin(self, program: str) -> None:
        self.changes += 1
        pin = self._pins.pop(program)
        if pin.shared < 0:
            self._free_stream(program, pin.blocks, pin.full)
            return
        # what the next call did not take: cached blocks past its hit (they no longer
        # match its stream) to the tail, the partial block to the head
        if pin.blocks > pin.full:
            self._prepend(pin.full, pin.blocks)
        if pin.full > pin.shared:
            self._append(None, pin.shared, pin.full)

    def evicted_blocks(self) -> int:
        return self._evicted

    # internals

    def _free_stream(self, program: str, blocks: int, full: int) -> None:
        """Free blocks [0, blocks) of the program's stream, the first ``full`` cached."""
        if blocks > full:
            self._prepend(full, blocks)  # the partial last block: reused first
        if full:
            old = self._cached.pop(program, None)
            if old is not None:  # not the stream any more
                self._runs[old].owner = None
            self._cached[program] = self._append(program, 0, full)

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
            size = run.hi - run.lo
            n = count if count < size else size
            run.hi -= n
            count -= n
            if run.owner is not None:
                self._evicted += n
            if n == size:
                del runs[rid]
                if run.owner is not None:
                    self._cached.pop(run.owner, None)

    def check(self) -> None:
        """Block conservation and well-formed runs (see the class docstring)."""
        free = sum(r.size for r in self._runs.values())
        assert free == self._free, (free, self._free)
        assert all(r.size > 0 for r in self._runs.values())
        pinned = sum(p.blocks - max(0, p.shared) for p in self._pins.values())
        assert self._free + sum(self._held.values()) + pinned + self._loose == self.num_blocks
        for program, rid in self._cached.items():
            run = self._runs[rid]
            assert run.owner == program and run.lo == 0
            assert program not in self._pins or self._pins[program].shared >= 0
        for pin in self._pins.values():
            assert 0 <= pin.full <= pin.blocks and pin.shared <= pin.full


# ---------------------------------------------------------------------- blocks


@dataclass(slots=True)
class BlockPool:
    """Every block on its own, as vLLM keeps them: the reference for :class:`RunPool`.

    Invariants (:meth:`check`): every block is free, held by a running request or by a
    pin (a shared block counted once), or taken and not yet assigned, never two of them.
    """

    num_blocks: int
    block_size: int
    _queue: OrderedDict[int, None] = field(default_factory=OrderedDict)  # free, head first
    _hash: dict[int, tuple[str, int]] = field(default_factory=dict)  # block -> (program, idx)
    _by_hash: dict[tuple[str, int], int] = field(default_factory=dict)
    _owned: dict[str, list[int]] = field(default_factory=dict)
    #: program -> (its blocks, full, shared)
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
            held += len(blocks) - max(0, pin.shared)
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

    def room_for(self, program: str, hit: int, new: int) -> bool:
        if program in self._pins and self._pins[program][1].shared < 0:
            return new <= len(self._queue)
        return new <= len(self._queue) - hit

    def admit(self, program: str, hit: int, new: int) -> None:
        self.changes += 1
        if not self.room_for(program, hit, new):
            raise OutOfBlocks(program)
        if program in self._pins:
            pinned, pin = self._pins[program]
            if pin.shared >= 0 or hit > pin.full:
                raise ValueError(f"hit {hit} beyond the {pin.full} cached blocks pinned")
            pin.shared = hit
            self._owned[program] = pinned[:hit]
        else:
            blocks = []
            for i in range(hit):
                b = self._by_hash[(program, i)]
                del self._queue[b]  # touch: off the free list
                blocks.append(b)
            # cached blocks past the hit no longer match the new stream
            i = hit
            while (program, i) in self._by_hash:
                self._unhash(self._by_hash[(program, i)])
                i += 1
            self._owned[program] = blocks
        self.grow(program, new)

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
        blocks = self._owned.pop(program, [])
        self._free(program, blocks, min(full, len(blocks)), 0)

    def pin(self, program: str, full: int) -> None:
        if program in self._pins:
            raise ValueError(f"{program} already holds a pin")
        blocks = self._owned.pop(program, [])
        self._pins[program] = (blocks, _Pin(len(blocks), min(full, len(blocks))))

    def unpin(self, program: str) -> None:
        self.changes += 1
        blocks, pin = self._pins.pop(program)
        if pin.shared < 0:
            self._free(program, blocks, pin.full, 0)
        else:  # the next call keeps [0, shared); past it nothing matches its stream
            self._free(None, blocks, pin.full, pin.shared)

    def evicted_blocks(self) -> int:
        return self._evicted

    def _free(self, program: str | None, blocks: list[int], full: int, start: int) -> None:
        """vLLM's ``free_blocks(reversed(blocks[start:]))``: blocks [start, full) cached
        (as ``program``'s stream; None: nothing hits them) to the tail, last first; the
        rest to the head, the last block at the very head."""
        for i in range(start, full):
            b = blocks[i]
            if b in self._hash:
                self._unhash(b)
            if program is not None:
                key = (program, i)
                old = self._by_hash.get(key)
                if old is not None:  # an older copy no longer belongs to the stream
                    self._unhash(old)
                self._hash[b] = key
                self._by_hash[key] = b
        for b in reversed(blocks[start:full]):
            self._queue[b] = None
        for b in blocks[max(start, full) :]:
            if b in self._hash:  # not full now: whatever hash a hit left on it is stale
                self._unhash(b)
            self._queue[b] = None
            self._queue.move_to_end(b, last=False)

    def _unhash(self, block: int) -> None:
        key = self._hash.pop(block)
        if self._by_hash.get(key) == block:
            del self._by_hash[key]

    def check(self) -> None:
        owned = {b for v in self._owned.values() for b in v}
        pinned = {b for v, _ in self._pins.values() for b in v}
        loose = set(self._loose)
        assert len(self._queue) + len(owned | pinned) + len(loose) == self.num_blocks
        assert not (set(self._queue) & (owned | pinned | loose))
        assert not (loose & (owned | pinned))
