"""Routing a call: at its send time the router picks its replica, which takes it at its
next step boundary (at once if idle)."""

from __future__ import annotations

from replay.fleet.books import CallRoute
from replay.fleet.parts import Fleet
from replay.fleet.routers.base import RoutedCall
from replay.fleet.stepping import run_deferred
from replay.sim import ProgramRun, SimulationError


def route(fleet: Fleet, run: ProgramRun, sent: float) -> None:
    """Route the program's next call, sent at ``sent``."""
    books = fleet.books
    view = fleet.view
    router = fleet.router
    pid = run.program.program_id
    turn = run.next_turn
    book = fleet.streams.prompts[pid]
    logged = fleet.logged_replicas
    call = RoutedCall(
        pid,
        turn,
        book.prompts[turn],
        book.sizes[turn],
        None if logged is None else logged.get((pid, turn)),
    )
    target = router.route(call, view, sent)
    if not 0 <= target < len(fleet.replicas):
        raise SimulationError(f"router {router.name} chose replica {target}")
    previous = view.previous_replica(pid)
    expiry = books.last_pin.pop(pid, None)
    if expiry is not None and previous != target:
        books.pins_wasted += 1
    books.routes[(pid, turn)] = CallRoute(target, previous, expiry)
    view.sent(target, call)
    books.in_flight[pid] = call
    rep = fleet.replicas[target]
    if rep.deferred_from is not None:
        # its waiting run of decode steps stops before this call (as one engine's
        # stops before its next arrival)
        run_deferred(fleet, rep, min(rep.deferred_horizon, sent))
    rep.inbox.append((run, sent))
    if not rep.busy and (rep.wake is None or rep.wake > sent):
        fleet.queue.wake(rep, sent)
