"""An optional CPU offload tier: an LRU of programs' KV, capacity in tokens.

Write-through at finish (what vLLM's offloading connectors do): the finished
request's full blocks are stored; a later call whose GPU prefix hit falls short
loads the rest from here at the profile's reload cost instead of prefilling it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from profiles.cost import CostModel


@dataclass(slots=True)
class OffloadTier:
    capacity_tokens: int
    cost: CostModel
    block_size: int = 16
    _lru: OrderedDict[str, int] = field(default_factory=OrderedDict)
    _used: int = 0

    def store(self, program: str, tokens: int) -> None:
        if program in self._lru:
            self._used -= self._lru.pop(program)
        if tokens <= 0 or tokens > self.capacity_tokens:
            return
        self._lru[program] = tokens
        self._used += tokens
        while self._used > self.capacity_tokens:
            _, dropped = self._lru.popitem(last=False)
            self._used -= dropped

    def prefix(self, program: str, reusable: int, cap: int) -> int:
        """Tokens of the program's stream the tier can give back (whole blocks)."""
        stored = self._lru.get(program)
        if stored is None:
            return 0
        self._lru.move_to_end(program)
        tokens = min(stored, reusable, cap)
        return tokens - tokens % self.block_size

    def reload_s(self, tokens: int) -> float:
        return self.cost.reload_s(tokens)
