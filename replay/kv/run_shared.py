"""The run pool's shared copies: blocks whose keys other programs' calls share, kept one
by one.

vLLM's ``BlockPool.cache_full_blocks``, ``touch`` and ``free_blocks`` for the blocks of a
shared prefix (``vllm/v1/core/block_pool.py``): a copy is cached as soon as it is full,
referenced by every request and pin that holds it, and freed to the tail with the copies
its holder lets go of together (one run of :class:`~replay.kv.run_state._Copies`); a hit
takes the oldest copy of a key, off the free list if it was there (leaving a hole in its
run).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable

from replay.kv.interface import Keys
from replay.kv.run_state import _AT, RunPoolState, _BlockRun, _Copies


class SharedCopies(RunPoolState):
    """The shared copies (a part of :class:`~replay.kv.run_pool.RunPool`)."""

    __slots__ = ()

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
