"""Routing a call: at its send time the router picks its replica, which takes it at its
next step boundary (at once if idle). A router that retains calls (:data:`HOLD`,
Program scheduling's request pool) sends them later: :func:`release`."""

from __future__ import annotations

from replay.fleet.parts import Fleet, make_tuple
from replay.fleet.routers.base import HOLD, HoldingRouter, RoutedCall
from replay.fleet.stepping import cut_run
from replay.sim_error import SimulationError
from replay.sim_outcome import ProgramRun


def route(fleet: Fleet, run: ProgramRun, sent: float) -> None:
    """Route the program's next call, sent at ``sent``."""
    pid = run.program.program_id
    turn = run.next_turn
    book = fleet.streams.prompts[pid]
    logged = fleet.logged_replicas
    call: RoutedCall = make_tuple(
        RoutedCall,
        (
            pid,
            turn,
            book.prompts[turn],
            book.sizes[turn],
            None if logged is None else logged.get((pid, turn)),
        ),
    )
    target = fleet.router.route(call, fleet.view, sent)
    if target == HOLD and fleet.holding is not None:
        fleet.held[pid] = (run, sent, call)
    else:
        dispatch(fleet, run, sent, call, target, sent)
    if fleet.holding is not None:
        release(fleet, fleet.holding, sent)


def release(fleet: Fleet, holding: HoldingRouter, now: float) -> None:
    """The retained calls ``holding`` (the fleet's router) sends at ``now``, and its next
    wake."""
    for session, target in holding.released():
        run, sent, call = fleet.held.pop(session)
        dispatch(fleet, run, sent, call, target, now)
    wake_at = holding.next_wake(now)
    if wake_at is not None and (fleet.router_wake is None or wake_at < fleet.router_wake):
        fleet.router_wake = wake_at
        fleet.queue.router_due(wake_at)


def router_due(fleet: Fleet, now: float) -> None:
    """The router's own event at ``now``: a wake it asked for (its periodic decisions),
    or a response end; then the calls it releases."""
    holding = fleet.holding
    if holding is None:
        return
    if fleet.router_wake == now:
        fleet.router_wake = None
        holding.tick(now, fleet.view)
    release(fleet, holding, now)


def dispatch(
    fleet: Fleet, run: ProgramRun, sent: float, call: RoutedCall, target: int, now: float
) -> None:
    """Send ``call`` (sent by its client at ``sent``) to replica ``target`` at ``now``."""
    books = fleet.books
    view = fleet.view
    pid = call.program
    replicas = fleet.replicas
    if not 0 <= target < len(replicas):
        raise SimulationError(f"router {fleet.router.name} chose replica {target}")
    previous = view.previous_replica(pid)
    expiry = books.last_pin.pop(pid, None)
    if expiry is not None and previous != target:
        books.pins_wasted += 1
    view.sent(target, call)
    rep = replicas[target]
    if rep.deferred_from is not None:
        # its waiting run of decode steps stops before this call (as one engine's
        # stops before its next arrival)
        cut_run(fleet, rep, now)
    rep.inbox.append((run, sent, call, previous, expiry))
    if not rep.busy:
        wake = rep.wake
        if wake is None or wake > now:
            fleet.queue.wake(rep, now)
