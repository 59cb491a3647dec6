"""A replica's stepping: its step event takes the calls that reached it and runs one
engine step, whose requests finish at its end event (the router sees a response end
when it ends, never before).

A replica that has only decode steps to take and nothing it can admit waits: its run of
decode steps, planned when it starts waiting
(:meth:`~replay.scheduler.SimScheduler.merge_end`), is taken when a call is routed to it
(every step that starts before the call, as one engine's run stops before its next
arrival: :func:`cut_run`) or, as planned, at the run's end
(:meth:`~replay.scheduler.SimScheduler.take_run`). With one replica a normal step may
also run into decode steps up to the next send, as one engine's step does (every send is
known then).
"""

from __future__ import annotations

import math

from replay.fleet.arrival import arrive
from replay.fleet.finishing import finish
from replay.fleet.parts import Fleet
from replay.fleet.replica import Replica
from replay.invariants import check_invariants
from replay.scheduler import SimScheduler
from replay.sim_error import SimulationError


def check(rep: Replica, end: float) -> None:
    """The fast backend's invariants after a step (``ReplayConfig.check``; vLLM's engine
    has its own)."""
    engine = rep.engine
    if isinstance(engine, SimScheduler):
        check_invariants(engine, end)


def cut_run(fleet: Fleet, rep: Replica, at: float) -> None:
    """A call is routed to ``rep`` at ``at`` while it waits on its run of decode steps:
    the steps of the run that start before the call are taken (the whole run when its
    horizon comes first), and the replica is busy until they end, when the call reaches
    its scheduler. A call routed at the instant the wait began leaves no step of the
    run: the engine steps from there as it would have."""
    start = rep.deferred_from
    assert start is not None
    rep.deferred_from = None
    if at > start:
        duration, finished = rep.engine.take_run(start, at)
    else:
        duration, finished = rep.engine.step(start, at)
    if duration <= 0:
        raise SimulationError(f"replica {rep.index}: a planned run of decode steps did not run")
    # its requests finish at its end, when its end event comes
    rep.now = end = start + duration
    if rep.checked:
        check(rep, end)
    rep.pending = finished
    rep.busy = True
    fleet.queue.wake(rep, end)


def step(fleet: Fleet, rep: Replica, t: float) -> None:
    """The replica's step event at ``t``."""
    queue = fleet.queue
    sends = queue.sends
    start = rep.deferred_from
    if start is not None:
        # its run of decode steps ends undisturbed, now (the end event it queued): taken
        # as planned, its calls finish at once
        rep.deferred_from = None
        duration, finished = rep.engine.take_run(start)
        rep.now = start + duration
        if rep.now != t:
            raise SimulationError(f"replica {rep.index}: a run of decode steps moved its end")
        if rep.checked:
            check(rep, t)
    else:
        finished = rep.pending
    if finished:
        # the step ended: its calls finish now; the replica steps again once the calls
        # sent at this instant are routed (sends come before steps)
        rep.pending = []
        rep.unreported = True
        finish(fleet, rep, finished, t)
        books, tally = fleet.books, fleet.tally
        if len(books.records) >= tally.next_at:
            tally.told_at(len(books.records), len(books.records) + books.rejected)
        if sends and sends[0][0] <= t:
            queue.wake(rep, t)
            return
    rep.busy = False
    now = rep.now
    if t > now:
        rep.now = now = t
    rep.wake = None
    engine = rep.engine
    if rep.inbox:
        arrive(fleet, rep, now)
    if sends and sends[0][0] <= now:
        # a call refused on arrival ended its program and started the next one now:
        # route it first (one engine's replay takes it before stepping too)
        queue.wake(rep, now)
        return
    unreported, rep.unreported = rep.unreported, False
    while True:
        if engine.idle:
            if unreported:  # the engine core's turn that reports the finishes
                engine.expire_pins(now)
                engine.tick(now)  # the change is on the timeline at once
            return  # an idle engine does not step: pins due later stay until the next call
        end = engine.merge_end(now)
        if end is not None:
            # decode steps only, and nothing can be admitted: wait for a call routed
            # here (the run then stops before it) or the run's end
            rep.deferred_from = now
            queue.wake(rep, end)
            return
        # a step, and the decode steps it may run into up to the next call that can
        # reach this replica. With one replica that is the next send: every send is
        # known, as sends are made at this replica's own step ends (one engine's replay
        # stops there too). With several, a call can come from a finish on another
        # replica that is not known yet: no run of decode steps is taken here; the
        # next boundary plans one that waits for the next call routed here.
        if fleet.several:
            horizon = now
        else:
            horizon = engine.next_expiry()
            if sends and sends[0][0] < horizon:
                horizon = sends[0][0]
        stats = engine.stats
        preempted = stats.preemptions
        duration, finished = engine.step(now, horizon)
        if duration <= 0:
            if stats.preemptions > preempted and rep.retakes:
                continue  # a step that only preempted: vLLM's engine core schedules again
            # nothing could run (the async engine has already taken the steps that only
            # preempted, and returns nothing only when nothing can happen before the next
            # call or pin expiry): wait for a call routed here or a pin's expiry
            expiry = engine.next_expiry()
            if expiry < math.inf and expiry > now:
                queue.wake(rep, expiry)
            return
        # the step is taken: its requests finish at its end event (as :func:`cut_run`'s)
        rep.now = end = now + duration
        if rep.checked:
            check(rep, end)
        rep.pending = finished
        rep.busy = True
        queue.wake(rep, end)
        return
