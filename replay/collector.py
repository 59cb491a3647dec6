"""Python's cyclic garbage collector during a replay: one regime for every replay loop.

A replay builds many objects that live as long as it does (the workload's programs and
calls, the engines' requests, pins and pools, a fleet's routes and router tree) and
makes little cyclic garbage in its loop (a finished request and its pin rules' record
are unlinked, :meth:`replay.pinning.Pinning.finish`, and go by reference counting).
Under the collector's default settings (a young collection every 700 net allocations)
the middle and full collections traverse those long-lived objects again and again and
find nothing to free: on the fleet bench's workload, 97 young and 8 middle collections
(about 0.03 s) in one engine's replay, 214 young, 19 middle and a full one (0.13-0.15 s)
in a 16-replica fleet's, whose records per call and per replica are more.

:func:`replay_collector` sets, for one replay loop, the regime vLLM's engine core takes
once it is built (``freeze_gc_heap`` in ``vllm/utils/gc_utils.py``, called from
``vllm/v1/engine/core.py``, vLLM 0.32: everything that exists then is frozen):

- what exists when the replay starts (the workload) is frozen: no collection traverses
  it; what the replay builds before its loop (the engines, the programs' runs, a
  fleet's prompts: on the fleet bench, about 45k prompt and run tuples) is frozen with
  it once built (:func:`freeze_built`);
- a young collection runs every :data:`YOUNG_THRESHOLD` net allocations instead of 700,
  so that most of the loop's short-lived objects are freed before one runs (the
  replay's peak allocations stay within 0.5 MB of the default's).

Both are restored when the loop ends. Deliberate differences from vLLM's: no collection
runs before the freeze (cyclic garbage that exists when a replay starts, say a previous
tuning trial's, is frozen with the rest and freed after the replay); the freeze is undone
when the last replay ends, which thaws objects that other code froze during the replay
too (nothing in ttlctl freezes the heap while a replay runs; a caller that froze it
before is left alone); a young threshold of 0 (automatic collection off) is kept.

The single-engine loop (:func:`replay.sim.simulate`) and the fleet's
(:func:`replay.fleet.loop.drive`) take it alike. It changes no result: the collector
frees only unreachable objects, and no result depends on when a collection runs or where
an object lies in memory.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["YOUNG_THRESHOLD", "freeze_built", "replay_collector"]

#: net allocations between two young collections during a replay (Python's default: 700)
YOUNG_THRESHOLD = 50_000

_lock = threading.Lock()
#: replays under way (in this process), and what the first one found: the collector's
#: thresholds and whether it froze the heap
_depth = 0
_found: tuple[tuple[int, ...], bool] = ((), False)


@contextmanager
def replay_collector() -> Iterator[None]:
    """Freeze what exists and collect the young generation less often, until the block
    ends. The collector is process-wide: replays under way at once (nested, or in
    threads) share one regime, set by the first and restored by the last. A caller that
    froze objects already keeps them as it froze them (nothing is frozen or thawed here
    then); a disabled collector stays disabled."""
    global _depth, _found
    with _lock:
        if _depth == 0:
            thresholds = gc.get_threshold()
            _found = (thresholds, gc.get_freeze_count() == 0)
            if _found[1]:
                gc.freeze()
            if thresholds[0] != 0:  # 0: automatic collection is off, and stays off
                gc.set_threshold(YOUNG_THRESHOLD, *thresholds[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                found, froze = _found
                gc.set_threshold(*found)
                if froze:
                    gc.unfreeze()


def freeze_built() -> None:
    """What a replay built before its loop (a fleet's prompts, its engines and runs) is
    frozen with the workload, when the regime froze it: built inside the regime (a
    young collection every :data:`YOUNG_THRESHOLD`) and frozen once built, it is
    traversed by no collection, as what the regime found was (built before it, under
    the default thresholds, it would be traversed by a young collection every 700
    allocations instead). Outside a replay, or where a caller had frozen the heap, it
    does nothing (the regime froze nothing then, and freezes nothing now). What it
    freezes stays frozen until the last replay under way ends, as the workload does: the
    set-up's own leftovers among it (and, with replays under way at once, another replay's
    objects) are freed then, not before."""
    with _lock:
        if _depth > 0 and _found[1]:
            gc.freeze()
