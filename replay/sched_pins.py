"""The scheduler's clock and its pins: pinned memory integrated over simulated time, and
the pins' expiry when a step starts.

The pin rules are the vLLM plugin's own (:class:`ttlctl.engine.retention.Retention`,
through :mod:`replay.pinning`); what the plugin does at the start of vLLM's ``schedule()``
(release the pins whose time is up, unless their program's call waits) is
:meth:`~PinClock.expire_pins` here. :meth:`~PinClock.tick` is the simulator's own: it
integrates the pinned blocks over time (``pinned_block_seconds``) and samples them for
the timeline, and is called before anything changes the pins.
"""

from __future__ import annotations

import math

from replay.sched_state import SchedulerState


class PinClock(SchedulerState):
    """The clock and the pins' expiry (a part of :class:`~replay.scheduler.SimScheduler`)."""

    __slots__ = ()

    @property
    def pinned_blocks(self) -> int:
        return self.pinning.pinned_blocks if self.pinning is not None else 0

    def tick(self, now: float) -> None:
        """Integrate pinned memory up to ``now`` (call before any pin changes)."""
        pins = self._pins
        pinned = pins.blocks if pins is not None else 0
        if now > self.clock:
            self.stats.pinned_block_seconds += pinned * (now - self.clock)
            self.clock = now
        if pinned != self._last_sampled:
            self.timeline.append((now, pinned))
            self._last_sampled = pinned

    def expire_pins(self, now: float) -> None:
        """A step starts: pins whose time is up go, unless their program's call waits."""
        if self.pinning is not None and self._pins is not None and self._pins.any_due(now):
            self.pinning.step_starts(now, self.waiting_programs.__contains__)

    def next_expiry(self) -> float:
        """The next time a pin can expire (pins parked for a waiting call do not count)."""
        pins = self._pins
        if pins is None or not pins.pins:
            return math.inf
        at = pins.next_expiry()
        return math.inf if at is None else at

    def pin_counters(self) -> None:
        """Copy the pin rules' counters into :attr:`stats`."""
        if self.pinning is not None:
            c, s = self.pinning.retention.counters, self.stats
            s.pins_made, s.pins_hit, s.pins_expired = c.made, c.hit, c.expired
            s.pins_released, s.pins_dropped, s.pins_held = c.released, c.dropped, c.pinned_programs
            s.pins_refused = c.refused
