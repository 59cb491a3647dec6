"""vLLM's own ``BlockPool`` behind the simulator's pool interface (``replay.kv.KVPool``).

Each program is one token stream; its block ``i`` is hashed by vLLM's request block
hasher from the stream's first ``(i + 1) · block_size`` tokens, so a cached prefix is
what vLLM's prefix cache finds for the stream. A call that hits fewer blocks than are
cached diverges: its stream continues with fresh tokens. The operations are the engine's:
a hit ``touch``es the cached blocks, new blocks come from ``get_new_blocks``, a release
hashes the full blocks (``cache_full_blocks``) and ``free_blocks`` them in reverse, a pin
keeps them referenced until ``unpin`` frees them the same way (the plugin's deferred
free). One null block is added, as vLLM's pool has one.
"""

from __future__ import annotations

import itertools
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


class VllmPool:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.pool = BlockPool(num_blocks + 1, enable_caching=True, hash_block_size=block_size)
        hash_fn = get_hash_fn_by_name("sha256")
        init_none_hash(hash_fn)
        self._hasher = get_request_block_hasher(block_size, hash_fn)
        self._streams: dict[str, _Stream] = {}

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

    # -- the interface -------------------------------------------------------

    @property
    def free_blocks(self) -> int:
        return int(self.pool.get_num_free_blocks())

    def held(self, program: str) -> int:
        s = self._stream(program)
        return len({id(b) for b in s.owned} | {id(b) for b in s.pin or ()})

    def cached_prefix(self, program: str) -> int:
        s = self._stream(program)
        if s.owned:
            return 0
        return len(self._cached_blocks(program))

    def room_for(self, program: str, hit: int, new: int) -> bool:
        blocks = self._cached_blocks(program)[:hit]
        evictable = sum(1 for b in blocks if b.ref_cnt == 0)
        return new + evictable <= self.free_blocks

    def admit(self, program: str, hit: int, new: int) -> None:
        s = self._stream(program)
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
        self._hash_full(program, full)
        self.pool.free_blocks(reversed(s.owned))
        s.owned, s.hashed = [], 0

    def pin(self, program: str, full: int) -> None:
        s = self._stream(program)
        self._hash_full(program, full)
        s.pin, s.owned, s.hashed = s.owned, [], 0

    def unpin(self, program: str) -> None:
        s = self._stream(program)
        assert s.pin is not None
        self.pool.free_blocks(reversed(s.pin))
        s.pin = None
