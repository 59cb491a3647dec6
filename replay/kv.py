"""vLLM v1's KV block pool for agent programs: prefix caching, LRU free list, runs of blocks.

Mirrors ``vllm/v1/core/block_pool.py`` and ``kv_cache_manager.py`` (0.32) as far
as agent programs exercise them:

- blocks of ``block_size`` tokens; a full block is hashed from its chain, so a
  program's next call, which repeats the previous prompt and output, hits every
  full block of that stream up to the point where it diverges;
- freed blocks go to the tail of a free list in LRU order, a request's blocks in
  reverse (its last block nearest the head, evicted first); a cached block is
  evicted only when the free list hands it out again;
- a hit touches the blocks (takes them off the free list) before new blocks are
  allocated, and is capped at ``num_tokens − 1`` (the last token is recomputed).

Two pools implement one interface: :class:`RunPool`, which keeps runs of a
program's consecutive blocks as one entry (fast), and :class:`BlockPool`, which
keeps every block (the reference the tests compare it with).

Deliberate differences from vLLM, both harmless for eviction order and hit
lengths: a program's chain has one identity per block index (prefix sharing
across programs, e.g. a common system prompt, is not modelled), and when a new
call diverges from the cached stream (fewer reused tokens than cached) the
blocks past the divergence become anonymous free blocks instead of keeping a
hash nothing will ever match again.
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

    @property
    def free_blocks(self) -> int: ...

    def held(self, program: str) -> int:
        """Blocks held for ``program`` (by its running request or its pin)."""
        ...

    def cached_prefix(self, program: str) -> int:
        """Leading blocks of the program's stream that a new call could hit now."""
        ...

    def room_for(self, program: str, hit: int, new: int) -> bool:
        """Whether :meth:`admit` with this hit and ``new`` further blocks would succeed."""
        ...

    def admit(self, program: str, hit: int, new: int) -> None:
        """Take the first ``hit`` cached blocks (from the free list, or from the held
        blocks of a pin being handed over) and ``new`` blocks from the free list."""
        ...

    def grow(self, program: str, new: int) -> None:
        """``new`` more blocks for the program's running request."""
        ...

    def grow_each(self, programs: list[str]) -> None:
        """One more block for each of ``programs`` (in that order)."""
        ...

    def grow_batch(self, wants: list[tuple[str, int]]) -> None:
        """``n`` more blocks for each (program, n), in that order."""
        ...

    def release(self, program: str, full: int) -> None:
        """Free every held block: the first ``full`` are cached (hashed), the rest
        (a partial last block) are anonymous."""
        ...

    def evicted_blocks(self) -> int:
        """Cached blocks handed out again so far (for reports and tests)."""
        ...


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
    """Free list of runs; a program's cached blocks are one run [0, hi)."""

    num_blocks: int
    block_size: int
    _runs: OrderedDict[int, _BlockRun] = field(default_factory=OrderedDict)
    _free: int = 0
    _next_id: int = 0
    _cached: dict[str, int] = field(default_factory=dict)  # program -> run id
    _held: dict[str, int] = field(default_factory=dict)
    _evicted: int = 0

    def __post_init__(self) -> None:
        if self.num_blocks <= 0 or self.block_size <= 0:
            raise ValueError("num_blocks and block_size must be positive")
        self._append(None, 0, self.num_blocks)

    @property
    def free_blocks(self) -> int:
        return self._free

    def held(self, program: str) -> int:
        return self._held.get(program, 0)

    def cached_prefix(self, program: str) -> int:
        held = self._held.get(program, 0)
        if held:
            return held
        rid = self._cached.get(program)
        return self._runs[rid].hi if rid is not None else 0

    def room_for(self, program: str, hit: int, new: int) -> bool:
        held = self._held.get(program, 0)
        if held:  # a handover gives back the pinned blocks past the hit first
            return new <= self._free + max(0, held - hit)
        return new <= self._free - hit

    def admit(self, program: str, hit: int, new: int) -> None:
        held = self._held.get(program, 0)
        if held and hit > held:
            raise ValueError(f"hit {hit} beyond the {held} blocks held for {program}")
        if not self.room_for(program, hit, new):
            raise OutOfBlocks(program)
        if held:
            # a pin handed over: keep [0, hit), free the rest of the old stream
            if hit < held:
                self._append(None, hit, held)
            self._held[program] = hit
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

    def grow_each(self, programs: list[str]) -> None:
        if len(programs) > self._free:
            raise OutOfBlocks(programs[0])
        self._take(len(programs))
        held = self._held
        for program in programs:
            held[program] = held.get(program, 0) + 1

    def grow_batch(self, wants: list[tuple[str, int]]) -> None:
        total = sum(n for _, n in wants)
        if total > self._free:
            raise OutOfBlocks(wants[0][0])
        self._take(total)
        held = self._held
        for program, n in wants:
            held[program] = held.get(program, 0) + n

    def release(self, program: str, full: int) -> None:
        held = self._held.pop(program, 0)
        full = min(full, held)
        if held > full:
            self._append(None, full, held)  # the partial last block: nearest the head
        if full:
            self._cached[program] = self._append(program, 0, full)

    def evicted_blocks(self) -> int:
        return self._evicted

    # internals

    def _append(self, owner: str | None, lo: int, hi: int) -> int:
        rid = self._next_id
        self._next_id += 1
        self._runs[rid] = _BlockRun(owner, lo, hi)
        self._free += hi - lo
        return rid

    def _take(self, count: int) -> None:
        """Hand out ``count`` blocks from the head (each run from its high end)."""
        self._free -= count
        while count:
            rid, run = next(iter(self._runs.items()))
            n = min(count, run.size)
            run.hi -= n
            count -= n
            if run.owner is not None:
                self._evicted += n
            if run.size == 0:
                del self._runs[rid]
                if run.owner is not None:
                    self._cached.pop(run.owner, None)

    def check(self) -> None:
        """Block conservation: free + held = total; runs are well formed."""
        free = sum(r.size for r in self._runs.values())
        assert free == self._free, (free, self._free)
        assert all(r.size > 0 for r in self._runs.values())
        assert self._free + sum(self._held.values()) == self.num_blocks
        for program, rid in self._cached.items():
            run = self._runs[rid]
            assert run.owner == program and run.lo == 0


# ---------------------------------------------------------------------- blocks


@dataclass(slots=True)
class BlockPool:
    """Every block on its own, as vLLM keeps them: the reference for :class:`RunPool`."""

    num_blocks: int
    block_size: int
    _queue: OrderedDict[int, None] = field(default_factory=OrderedDict)  # free, LRU first
    _hash: dict[int, tuple[str, int]] = field(default_factory=dict)  # block -> (program, idx)
    _by_hash: dict[tuple[str, int], int] = field(default_factory=dict)
    _owned: dict[str, list[int]] = field(default_factory=dict)
    _evicted: int = 0

    def __post_init__(self) -> None:
        for b in range(self.num_blocks):
            self._queue[b] = None

    @property
    def free_blocks(self) -> int:
        return len(self._queue)

    def held(self, program: str) -> int:
        return len(self._owned.get(program, ()))

    def cached_prefix(self, program: str) -> int:
        if self._owned.get(program):
            return len(self._owned[program])
        n = 0
        while (program, n) in self._by_hash:
            n += 1
        return n

    def room_for(self, program: str, hit: int, new: int) -> bool:
        owned = self._owned.get(program)
        if owned:  # a handover gives back the pinned blocks past the hit first
            return new <= len(self._queue) + max(0, len(owned) - hit)
        return new <= len(self._queue) - hit

    def admit(self, program: str, hit: int, new: int) -> None:
        owned = self._owned.get(program)
        if owned and hit > len(owned):
            raise ValueError(f"hit {hit} beyond the {len(owned)} blocks held for {program}")
        if not self.room_for(program, hit, new):
            raise OutOfBlocks(program)
        if owned:
            keep, drop = owned[:hit], owned[hit:]
            for b in reversed(drop):  # past the divergence: no longer part of the stream
                if b in self._hash:
                    self._unhash(b)
                self._queue[b] = None
            self._owned[program] = keep
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

    def grow_each(self, programs: list[str]) -> None:
        if len(programs) > len(self._queue):
            raise OutOfBlocks(programs[0])
        for program in programs:
            self.grow(program, 1)

    def grow_batch(self, wants: list[tuple[str, int]]) -> None:
        if sum(n for _, n in wants) > len(self._queue):
            raise OutOfBlocks(wants[0][0])
        for program, n in wants:
            self.grow(program, n)

    def release(self, program: str, full: int) -> None:
        blocks = self._owned.pop(program, [])
        full = min(full, len(blocks))
        for i in range(full):
            key = (program, i)
            self._hash[blocks[i]] = key
            self._by_hash[key] = blocks[i]
        for b in blocks[full:]:  # not full now: whatever hash a hit left on it is stale
            if b in self._hash:
                self._unhash(b)
        for b in reversed(blocks):  # tail blocks nearest the head: evicted first
            self._queue[b] = None

    def evicted_blocks(self) -> int:
        return self._evicted

    def _unhash(self, block: int) -> None:
        key = self._hash.pop(block)
        if self._by_hash.get(key) == block:
            del self._by_hash[key]

    def check(self) -> None:
        held = sum(len(v) for v in self._owned.values())
        assert len(self._queue) + held == self.num_blocks
