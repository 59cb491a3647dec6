"""Merged decode runs: the simulator's own, not vLLM's (splitwise-sim's trick).

When a step is decode-only and the waiting head cannot be admitted (or nothing waits),
nothing can change until an event arrives, a request finishes or a block runs short:
the following decode steps, each exactly as vLLM would take it, are taken together as
one event (:func:`~replay.decode_run.plan_decode_run` says how many, and
:func:`~replay.decode_run.run_seconds` what they cost). No run is merged at a batch size
the engine has not run (its first step pays the new size's cost, taken alone). A fleet
replica plans its run first (:meth:`~DecodeRuns.merge_end`, which says when it would end)
and takes that plan as it is (:meth:`~DecodeRuns.take_run`): whole at its end, or the steps
that start before a call routed to it meanwhile.
"""

from __future__ import annotations

import math

from replay.decode_run import DecodeRun, plan_decode_run, run_seconds
from replay.request import SimRequest
from replay.sched_state import SchedulerState
from replay.sim_error import SimulationError


class DecodeRuns(SchedulerState):
    """Merged decode runs (a part of :class:`~replay.scheduler.SimScheduler`)."""

    __slots__ = ()

    def _merge_decodes(self, now: float, horizon: float) -> tuple[float, list[SimRequest]]:
        """Take the coming decode-only steps together (as many as :func:`plan_decode_run`
        says; a request finishing in the last finishes at the run's end); returns
        (seconds, finished). Nothing else can change meanwhile: the waiting head was
        blocked (the pool only shrinks, and the valve had nothing left to release) or
        nothing waits, and no step before the last one finishes anything."""
        run = self._decode_run(now, horizon)
        if run is None:
            return 0.0, []
        return self._apply_run(run, now)

    def take_run(self, start: float, horizon: float = math.inf) -> tuple[float, list[SimRequest]]:
        """Take the run :meth:`merge_end` planned from ``start``: whole when the replica
        waited on it to its end (or ``horizon`` is no earlier than the plan's), else its
        steps that start before ``horizon`` (a call routed here then; after ``start``).
        Nothing reached the engine meanwhile, so this is what
        :meth:`~replay.scheduler.SimScheduler.step` would take from ``start`` to
        ``horizon`` (no pin falls due before the plan's horizon, and the state the plan
        read is unchanged), without deciding again; returns (seconds, finished)."""
        planned, self._planned = self._planned, None
        if planned is None:
            raise SimulationError("no run of decode steps is planned (none, or dropped since)")
        if planned[0] != start:
            raise SimulationError(
                f"the run of decode steps was planned from t={planned[0]:.6f} s, "
                f"not t={start:.6f} s"
            )
        _, until, run = planned
        if horizon < until:
            cut = plan_decode_run(self.decoders, self.cost, self.pool.free_blocks, start, horizon)
            if cut is None:
                raise SimulationError(
                    f"no decode step starts between t={start:.6f} s and {horizon:.6f} s"
                )
            run = cut
        # as the step would: the pinned memory integrated to ``start`` (no pin is due then:
        # the plan's horizon is the next expiry, later than ``start``, so none expires)
        self.tick(start)
        duration, finished = self._apply_run(run, start)
        self._last_end = start + duration
        return duration, finished

    def _apply_run(self, run: DecodeRun, now: float) -> tuple[float, list[SimRequest]]:
        """Apply ``run`` from ``now``: its blocks, steps and seconds; the requests that
        finish in its last step finish at its end (returned with its seconds)."""
        decoders = self.decoders
        if run.blocks:
            self.pool.take(run.blocks)
        total, longest = run_seconds(self.cost, run)
        decoders.decode_steps += run.steps
        stats = self.stats
        stats.steps += run.steps
        stats.busy_s += total
        if longest > stats.longest_step_s:
            stats.longest_step_s = longest
        end = now + total
        self.tick(end)
        if run.first_finish > decoders.decode_steps:
            return total, []
        return total, self._finish_all([], end)

    def merge_end(self, now: float) -> float | None:
        """When the run of decode steps that :meth:`~replay.scheduler.SimScheduler.step`
        from ``now`` would open with ends, before the next pin expiry
        (:meth:`~replay.sched_pins.PinClock.next_expiry`, the run's horizon) or where it
        must stop (None: the step would not open with one, or a pin is due at ``now``:
        the step expires it first, which may let the waiting head in). Changes no result:
        it keeps the plan (and may put the waiting queue in order, as any step would); a
        fleet replica waits until then unless a call is routed here before
        (:mod:`replay.fleet.stepping`), and takes the plan (:meth:`take_run`)."""
        if self._prefilling or not self.decoders.members:
            return None
        horizon = self.next_expiry()
        if horizon <= now:  # no run (a pin due at ``now`` is at or past the horizon)
            return None
        if self.waiting and not self._head_stays_blocked():
            return None
        if not self._size_run(len(self.decoders.members)):
            return None  # a new batch size: its first step is taken (and priced) alone
        run = self._decode_run(now, horizon)
        if run is None:
            return None
        self._planned = (now, horizon, run)
        return now + run.seconds

    def _size_run(self, tokens: int) -> bool:
        """Whether the engine has run a step of ``tokens`` scheduled tokens (a run of decode
        steps is merged only at a batch size it has run: the first step of a new one pays
        :func:`~replay.step_price.new_size_extra`, taken alone)."""
        return self._sizes is None or tokens in self._sizes

    def _decode_run(self, now: float, horizon: float) -> DecodeRun | None:
        """The merged run from ``now`` (None: none; every running request must decode)."""
        if len(self.decoders.members) != len(self.running):
            return None
        return plan_decode_run(self.decoders, self.cost, self.pool.free_blocks, now, horizon)
