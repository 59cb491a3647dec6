"""The run pool's prefix lookup: how many of a call's blocks are cached, and whether the
rest fit.

vLLM's ``KVCacheManager.get_computed_blocks`` (``vllm/v1/core/kv_cache_manager.py``) and
the free-block check of ``allocate_slots``: a call's shared keys hit while a copy of each is
cached, then its program's own blocks while they follow the same shared keys; a hit on
blocks in the free list takes them off it, so they do not count as room.
"""

from __future__ import annotations

from replay.kv.interface import Keys
from replay.kv.run_state import RunPoolState


class PrefixLookup(RunPoolState):
    """The prefix lookup (a part of :class:`~replay.kv.run_pool.RunPool`)."""

    __slots__ = ()

    def cached_prefix(self, program: str) -> int:
        pin = self._pins.get(program)
        if pin is not None:
            return pin.full if pin.shared < 0 else 0
        rid = self._cached.get(program)
        if rid is None:
            return 0
        run = self._runs[rid]
        return run.hi - run.lo  # its own blocks (the run starts after its shared ones)

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
