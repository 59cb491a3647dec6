"""The run pool's free list: runs handed out from the head, freed to either end.

vLLM's ``FreeKVCacheBlockQueue`` (``vllm/v1/core/kv_cache_utils.py``) and
``BlockPool.get_new_blocks``/``free_blocks`` (``block_pool.py``) at a cost per run: new
blocks come off the head, each run from its high end (a program's cached run evicted block
by block, shared copies past their holes); a request's partial last block goes back to the
head, reused first, its cached blocks to the tail as one run owned by the program.
"""

from __future__ import annotations

from replay.kv.interface import Keys, OutOfBlocks
from replay.kv.run_state import RunPoolState, _BlockRun, _Copies


class FreeList(RunPoolState):
    """The free list of runs (a part of :class:`~replay.kv.run_pool.RunPool`)."""

    __slots__ = ()

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

    def evicted_blocks(self) -> int:
        return self._evicted

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
        cached, later, at = self._copies, self._later, self._copy_at
        while count and run.hi > run.lo:
            pos = run.hi - 1
            run.hi = pos
            if holes and pos in holes:
                holes.remove(pos)
                continue
            cid = copies.cids[pos]
            del at[cid]
            key = copies.keys[pos]
            if key in later or cached[key] != cid:
                self._uncache(key, cid)
            else:  # its only copy
                del cached[key]
            self._evicted += 1
            count -= 1
        while holes and run.hi - 1 in holes:
            holes.remove(run.hi - 1)
            run.hi -= 1
        if run.hi <= run.lo:
            del self._runs[rid]
        return count
