"""The simulated engine's counters over one replay."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Stats:
    steps: int = 0
    preemptions: int = 0
    prompt_tokens: int = 0
    hit_tokens: int = 0
    loaded_tokens: int = 0
    pinned_block_seconds: float = 0.0
    pins_made: int = 0
    pins_hit: int = 0
    pins_expired: int = 0
    pins_released: int = 0
    #: released on a program's last call, an abort, a replacement or a cache reset
    pins_dropped: int = 0
    #: still held when the replay ended (in a fleet: a pin whose program went on, and
    #: ended, on another replica before it expired)
    pins_held: int = 0
    #: not made: the pin cap
    pins_refused: int = 0
    busy_s: float = 0.0
    #: the longest single step so far (a call sent during a step reaches the scheduler
    #: at its end: at most this long after it was sent)
    longest_step_s: float = 0.0
