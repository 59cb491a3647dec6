"""vLLM's block pool, every block on its own: the reference for the simulator's pool.

Follows ``vllm/v1/core/block_pool.py`` and ``kv_cache_utils.py``'s
``FreeKVCacheBlockQueue`` (0.32): an LRU free list of blocks, a hash per cached block.
The model, and the deliberate differences from vLLM, are described in :mod:`replay.kv`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field

from replay.kv.interface import Keys, OutOfBlocks, Pin

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
    _pins: dict[str, tuple[list[int], Pin]] = field(default_factory=dict)
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
        s = len(self._base.get(program, ()))  # its own blocks follow its shared ones
        n = s
        while (program, n) in self._by_hash:
            n += 1
        return n - s

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

    def _hand_back(self, program: str, full: int) -> tuple[list[int], list[int], int, Keys]:
        """Take the finished call's blocks off it (its full shared blocks cached first):
        (its shared copies, its own blocks, how many of those are full, its keys)."""
        if program in self._keys:
            self.cache_full(program, full)
        blocks = self._owned.pop(program, [])
        nk = self._nk.pop(program, 0)
        keys = self._keys.pop(program, ())
        own = blocks[nk:]
        return blocks[:nk], own, max(0, min(full - nk, len(own))), keys

    def release(self, program: str, full: int) -> None:
        self.changes += 1
        copies, own, own_full, keys = self._hand_back(program, full)
        self._free(program, own, own_full, 0, len(copies), keys)
        self._unref(copies)

    def pin(self, program: str, full: int) -> None:
        if program in self._pins:
            raise ValueError(f"{program} already holds a pin")
        copies, own, own_full, keys = self._hand_back(program, full)
        pin = Pin(len(own), own_full, -1, copies, keys)
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
