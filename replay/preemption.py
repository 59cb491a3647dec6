"""vLLM's running loop when blocks run short, for a step decided in aggregate.

The fast path (:meth:`replay.sched_fast.FastPath._schedule_fast`) knows every running
request's block needs up front. When they exceed the free blocks, :func:`preempt_until_fits`
walks the requests that need blocks in running order; while one's need exceeds what is
free, the tail of the running list is preempted (recompute). A request that preempts
itself ends the walk (everything after it was the tail, already gone).

The blocks are granted in one batch afterwards: allocations come from the head of the
free list, a victim's cached blocks go to its tail and its partial block to its head,
where the request that preempted it takes it first (it needs at least as many blocks as
the victims freed partial ones), so the same cached blocks are evicted as when vLLM
interleaves.
"""

from __future__ import annotations

from collections.abc import Callable

from replay.request import SimRequest
from replay.step_plan import ScheduledRequest


def preempt_until_fits(
    scheduled: list[ScheduledRequest],
    due: list[SimRequest],
    running: list[SimRequest],
    free_blocks: int,
    preempt: Callable[[SimRequest], int],
) -> tuple[list[ScheduledRequest], list[SimRequest]]:
    """Preempt from the tail of ``running`` until the needs of ``scheduled`` (new blocks)
    and ``due`` (decode-set members needing one block) met in running order fit; returns
    the requests and due members still scheduled. ``preempt`` frees a victim and returns
    the blocks that went free: fewer than it held where another request still holds a
    block of a shared prefix (vLLM's reference counts)."""
    needy: list[tuple[int, SimRequest, int]] = [
        (r.run_seq, r, need) for r, _, _, need in scheduled if need
    ]
    needy.extend((r.run_seq, r, 1) for r in due)
    needy.sort(key=lambda item: item[0])
    gone: set[int] = set()
    free = free_blocks
    for _, r, need in needy:
        if r.rid in gone:
            continue
        while need > free:
            victim = running.pop()
            gone.add(victim.rid)
            free += preempt(victim)
            if victim is r:
                break
        else:
            free -= need
            continue
        break
    # victims always come from the tail, after the request being served, so none of
    # them had been counted as served; what remains is scheduled as planned
    kept = [s for s in scheduled if s[0].rid not in gone]
    return kept, [r for r in due if r.rid not in gone]
