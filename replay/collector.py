"""Python's cyclic garbage collector during a replay: one regime for every replay loop.

A replay builds many objects that live as long as it does (the workload's programs and
calls, the engines' requests, pins and pools, a fleet's routes and router tree) and
makes little cyclic garbage in its loop (a finished request's records are freed by
reference counting). Under the collector's default settings (a young collection every
700 net allocations) those long-lived objects are traversed again and again by the
middle and full collections, which find nothing to free: about 0.05 s of one engine's
replay of the fleet bench's workload and 0.15-0.19 s of a 16-replica fleet's, whose
records per call and per replica are more.

:func:`replay_collector` sets, for one replay loop, the regime vLLM's engine itself
takes after start-up (``gc.freeze()`` once its model is loaded):

- what exists when the replay starts (the workload, the engines as built) is frozen:
  no collection traverses it;
- a young collection runs every :data:`YOUNG_THRESHOLD` net allocations instead of 700,
  so that most of the loop's short-lived objects are freed before one runs.

Both are restored when the loop ends. The single-engine loop
(:func:`replay.sim.simulate`) and the fleet's (:func:`replay.fleet.loop.drive`) take it
alike. It changes no result: the collector frees only unreachable objects, and the
replay reads no object identity or address.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["YOUNG_THRESHOLD", "replay_collector"]

#: net allocations between two young collections during a replay (Python's default: 700)
YOUNG_THRESHOLD = 10_000


@contextmanager
def replay_collector() -> Iterator[None]:
    """Freeze what exists and collect the young generation less often, until the block
    ends. A caller that froze objects already keeps them as it froze them (nothing is
    frozen or thawed here then); a disabled collector stays disabled."""
    thresholds = gc.get_threshold()
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if freeze:
            gc.unfreeze()
