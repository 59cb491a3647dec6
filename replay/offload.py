"""An optional CPU offload tier: an LRU of KV, capacity in tokens.

Write-through at finish (what vLLM's offloading connectors do): the finished
request's full blocks are stored; a later call whose GPU prefix hit falls short
loads the rest from here at the profile's reload cost instead of prefilling it.

Follows vLLM 0.32's CPU offloading manager (``vllm/v1/kv_offload/cpu/manager.py``),
which keys stored blocks by their hash: a block already stored is not stored again
(``prepare_store`` stores only the keys it lacks), a lookup counts the leading blocks
stored, and eviction takes the least recently used. So a block several programs share
(their prompts' leading blocks, :meth:`replay.workload.Call.shared_keys`) is stored once,
counted once against the capacity, and loaded by any program whose prompt starts with it.
A program's own blocks follow its shared ones (in vLLM their hashes chain on them): they
load only while every one of the call's shared blocks is stored and the call starts with
the same shared blocks as the stream stored.

Deliberate differences from vLLM: a program's own blocks are one LRU entry (its stream
as last stored, replaced by the next store, evicted whole), not a block each, so the
tier never holds half a stream; a store larger than the whole tier is skipped (vLLM's
``prepare_store`` fails when it cannot make room). Without shared blocks (traces without
``prefix_hashes``) the tier is the per-program LRU it always was, at the same cost.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field

from profiles.cost import CostModel
from replay.kv import Keys

#: tags a shared block's LRU entry, ``(SHARED, key)``: never equal to a program's name
SHARED = "shared"


@dataclass(slots=True)
class OffloadTier:
    capacity_tokens: int
    cost: CostModel
    block_size: int = 16
    #: programs' own streams (name -> its tokens past its shared blocks) and shared blocks
    #: (``(SHARED, key)`` -> ``block_size``), least recently used first
    _lru: OrderedDict[Hashable, int] = field(default_factory=OrderedDict)
    _used: int = 0
    #: the shared keys a stored stream follows, for the programs whose stream has some
    _after: dict[str, Keys] = field(default_factory=dict)

    @property
    def used_tokens(self) -> int:
        """Tokens stored: each shared block once, each program's own stream once."""
        return self._used

    def store(self, program: str, tokens: int, keys: Keys = ()) -> None:
        """Store the program's stream of ``tokens`` (whole blocks) whose first blocks are
        the shared ``keys``: the shared blocks not yet stored, then its own blocks."""
        lru = self._lru
        if program in lru:
            self._used -= lru.pop(program)
        if self._after:
            self._after.pop(program, None)
        if keys:
            tokens = self._store_shared(program, tokens, keys)
        if 0 < tokens <= self.capacity_tokens:
            lru[program] = tokens
            self._used += tokens
        while self._used > self.capacity_tokens:
            entry, dropped = lru.popitem(last=False)
            self._used -= dropped
            if self._after and isinstance(entry, str):
                self._after.pop(entry, None)

    def _store_shared(self, program: str, tokens: int, keys: Keys) -> int:
        """Store the shared blocks of a stream of ``tokens``; returns its own tokens."""
        lru = self._lru
        bs = self.block_size
        shared = keys[: max(0, tokens) // bs]
        for key in shared:
            block = (SHARED, key)
            if block in lru:
                lru.move_to_end(block)
            else:
                lru[block] = bs
                self._used += bs
        own = tokens - len(shared) * bs
        if 0 < own <= self.capacity_tokens:
            self._after[program] = shared
        return own

    def prefix(self, program: str, reusable: int, cap: int, keys: Keys = ()) -> int:
        """Tokens of a call's prompt the tier can give back (whole blocks): the call's
        shared blocks ``keys`` stored by any program, then, once all are, the program's
        own stream (up to ``reusable``); at most ``cap``."""
        if keys:
            return self._shared_prefix(program, reusable, cap, keys)
        stored = self._lru.get(program)
        if stored is None or (self._after and program in self._after):
            return 0  # none, or its stream follows shared blocks this call lacks
        self._lru.move_to_end(program)
        tokens = min(stored, reusable, cap)
        return tokens - tokens % self.block_size

    def _shared_prefix(self, program: str, reusable: int, cap: int, keys: Keys) -> int:
        lru = self._lru
        bs = self.block_size
        limit = min(len(keys), cap // bs)
        n = 0
        while n < limit and (SHARED, keys[n]) in lru:
            lru.move_to_end((SHARED, keys[n]))
            n += 1
        tokens = n * bs
        if n == len(keys):
            stored = lru.get(program)
            if stored is not None and self._after.get(program) == keys:
                lru.move_to_end(program)
                tokens = max(tokens, min(tokens + stored, reusable))
        tokens = min(tokens, cap)
        return tokens - tokens % bs

    def reload_s(self, tokens: int) -> float:
        return self.cost.reload_s(tokens)
