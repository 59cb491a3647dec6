"""vLLM's own ``BlockPool`` behind the simulator's pool interface (``replay.kv.KVPool``).

Each program is one token stream; its block ``i`` is hashed by vLLM's request block
hasher from the stream's first ``(i + 1) · block_size`` tokens, so a cached prefix is
what vLLM's prefix cache finds for the stream. A call that hits fewer blocks than are
cached diverges: its stream continues with fresh tokens. The operations are the engine's:
a hit ``touch``es the cached blocks, new blocks come from ``get_new_blocks``, a release
hashes the full blocks (``cache_full_blocks``) and ``free_blocks`` them in reverse, a pin
keeps them referenced until ``unpin`` frees them the same way (the plugin's deferred
free). One null block is added, as vLLM's pool has one.

Shared prefixes: a call whose prompt starts with shared keys sends, for each key, the same
``block_size`` token ids wherever the key occurs, then its program's stream (only when its
previous call had the same keys: the stream followed those tokens), as the vLLM backend
does (``replay/vllmsim/tokens.py``). ``cache_full`` caches the request's full blocks as
vLLM's ``allocate_slots`` does; vLLM keeps a block computed twice as two cached blocks.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.request import Request

_ids = itertools.count(1000)


@dataclass
class _Stream:
    tokens: list[int] = field(default_factory=list)
    #: blocks held by the program's running request, and how many of them are hashed
    owned: list[Any] = field(default_factory=list)
    hashed: int = 0
    #: a pin's blocks and its full ones
    pin: list[Any] | None = None
    #: the shared keys the stream starts with
    keys: tuple[Hashable, ...] = ()


class VllmPool:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.pool = BlockPool(num_blocks + 1, enable_caching=True, hash_block_size=block_size)
        hash_fn = get_hash_fn_by_name("sha256")
        init_none_hash(hash_fn)
        self._hasher = get_request_block_hasher(block_size, hash_fn)
        self._streams: dict[str, _Stream] = {}
        self._shared: dict[Hashable, list[int]] = {}

    def _stream(self, program: str) -> _Stream:
        return self._streams.setdefault(program, _Stream())

    def _hashes(self, program: str, blocks: int) -> list[Any]:
        s = self._stream(program)
        need = blocks * self.block_size
        if len(s.tokens) < need:
            s.tokens += [next(_ids) for _ in range(need - len(s.tokens))]
        request = Request(
            "r", s.tokens[:need], SamplingParams(max_tokens=1), None, block_hasher=self._hasher
        )
        return list(request.block_hashes)

    def _cached_blocks(self, program: str) -> list[Any]:
        out = []
        s = self._stream(program)
        limit = max(len(s.tokens) // self.block_size, len(s.pin or ()))
        for h in self._hashes(program, limit):
            found = self.pool.get_cached_block(h, [0])
            if not found:
                break
            out.append(found[0])
        return out

    def _prompt_tokens(self, program: str, keys: tuple[Hashable, ...]) -> list[int]:
        """The shared keys' tokens, then the stream's own (when it followed the same keys)."""
        s = self._stream(program)
        head: list[int] = []
        for key in keys:
            if key not in self._shared:
                self._shared[key] = [next(_ids) for _ in range(self.block_size)]
            head += self._shared[key]
        if s.keys == keys:
            return head + s.tokens[len(head) :]
        return head

    def _lookup(self, tokens: list[int], limit: int) -> list[Any]:
        """The leading cached blocks of ``tokens`` (at most ``limit``)."""
        blocks = min(limit, len(tokens) // self.block_size)
        if not blocks:
            return []
        request = Request(
            "r",
            tokens[: blocks * self.block_size],
            SamplingParams(max_tokens=1),
            None,
            block_hasher=self._hasher,
        )
        out = []
        for h in request.block_hashes:
            found = self.pool.get_cached_block(h, [0])
            if not found:
                break
            out.append(found[0])
        return out

    def prefix_hit(self, program: str, keys: tuple[Hashable, ...], reusable: int, cap: int) -> int:
        n = len(keys)
        hit = len(self._lookup(self._prompt_tokens(program, keys), cap))
        if hit <= n:
            return hit
        return min(hit, max(n, reusable))

    def cache_full(self, program: str, full: int) -> None:
        s = self._stream(program)
        full = min(full, len(s.owned))
        if full > s.hashed:
            self._hash_full(program, full)
            s.hashed = full

    # -- the interface -------------------------------------------------------

    @property
    def free_blocks(self) -> int:
        return int(self.pool.get_num_free_blocks())

    def held(self, program: str) -> int:
        s = self._stream(program)
        return len({id(b) for b in s.owned} | {id(b) for b in s.pin or ()})

    def cached_prefix(self, program: str) -> int:
        """The stream's leading cached blocks, shared keys included: vLLM's lookup knows no
        program's own blocks, so this matches the pools' figure only for a program without
        shared keys (the only one the simulator asks; the suites compare ``prefix_hit``)."""
        s = self._stream(program)
        if s.owned:
            return 0
        return len(self._cached_blocks(program))

    def room_for(self, program: str, hit: int, new: int, keys: tuple[Hashable, ...] = ()) -> bool:
        if keys or self._stream(program).keys:
            blocks = self._lookup(self._prompt_tokens(program, keys), hit)
        else:
            blocks = self._cached_blocks(program)[:hit]
        evictable = sum(1 for b in blocks if b.ref_cnt == 0)
        return new + evictable <= self.free_blocks

    def admit(self, program: str, hit: int, new: int, keys: tuple[Hashable, ...] = ()) -> None:
        s = self._stream(program)
        if keys or s.keys:
            tokens = self._prompt_tokens(program, keys)
            cached = self._lookup(tokens, hit)
            assert hit <= len(cached)
            self.pool.touch(cached)
            # the shared part stays the keys' tokens; the own part past the hit diverges
            s.tokens = tokens[: max(hit, len(keys)) * self.block_size]
            s.keys = keys
            s.owned = cached + self.pool.get_new_blocks(new)
            s.hashed = hit
            return
        cached = self._cached_blocks(program)
        assert hit <= len(cached)
        self.pool.touch(cached[:hit])
        if hit < len(cached):  # the call diverges from the cached stream past its hit
            s.tokens = s.tokens[: hit * self.block_size]
        s.owned = cached[:hit] + self.pool.get_new_blocks(new)
        s.hashed = hit

    def grow(self, program: str, new: int) -> None:
        self._stream(program).owned += self.pool.get_new_blocks(new)

    def _hash_full(self, program: str, full: int) -> None:
        s = self._stream(program)
        assert full >= s.hashed, "the engine never releases fewer full blocks than it hit"
        if full <= s.hashed:
            return
        self._hashes(program, len(s.owned))  # the stream has tokens for every block
        request = Request(
            "r",
            s.tokens[: full * self.block_size],
            SamplingParams(max_tokens=1),
            None,
            block_hasher=self._hasher,
        )
        self.pool.cache_full_blocks(request, s.owned, s.hashed, full, self.block_size, 0)

    def release(self, program: str, full: int) -> None:
        s = self._stream(program)
        self._hash_full(program, max(full, s.hashed))
        self.pool.free_blocks(reversed(s.owned))
        s.owned, s.hashed = [], 0

    def pin(self, program: str, full: int) -> None:
        s = self._stream(program)
        self._hash_full(program, max(full, s.hashed))
        s.pin, s.owned, s.hashed = s.owned, [], 0

    def unpin(self, program: str) -> None:
        s = self._stream(program)
        assert s.pin is not None
        self.pool.free_blocks(reversed(s.pin))
        s.pin = None
