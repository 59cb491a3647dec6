"""The calls routed to a replica reaching its scheduler (at the replica's step boundary)."""

from __future__ import annotations

from replay.fleet.books import CallRoute
from replay.fleet.parts import Fleet, make_tuple
from replay.fleet.replica import Replica
from replay.fleet.routers.base import RoutedCall
from replay.sim import arriving, fits_engine
from replay.sim_outcome import ProgramRun


def arrive(fleet: Fleet, rep: Replica, at: float) -> None:
    """The calls routed to ``rep`` since its last boundary (its inbox, in routing order)
    reach its scheduler at ``at``; the inbox is emptied."""
    books, view, streams = fleet.books, fleet.view, fleet.streams
    config = rep.config
    engine = rep.engine
    index = rep.index
    block_size = config.engine.block_size
    for run, sent, routed_call, previous, previous_pin_expiry in rep.inbox:
        engine.tick(at)
        pid = run.program.program_id
        turn = run.next_turn
        call, clipped = fits_engine(run.program.calls[turn], config)
        if call is None:
            refuse(fleet, index, run, routed_call, previous, previous_pin_expiry, at)
            continue
        books.truncated += clipped
        rid = books.rid
        reuse = min(streams.reusable(index, routed_call), call.reused_tokens) if turn else 0
        req = arriving(run, call, rid, at, sent, reuse, block_size, config.client_tags)
        books.routed[rid] = (run, routed_call)
        view.arrived(routed_call, req)
        streams.held(pid, index, turn)
        books.rid = rid + 1
        # expires due pins first (as vLLM's add_request), then parks the program's own
        engine.add(req, at)
        held = (
            previous_pin_expiry is not None
            and previous == index
            and rep.pin_expiry(pid) is not None
        )
        books.routes[(pid, turn)] = make_tuple(
            CallRoute, (index, previous, previous_pin_expiry, held, at)
        )
    rep.inbox.clear()


def refuse(
    fleet: Fleet,
    index: int,
    run: ProgramRun,
    routed_call: RoutedCall,
    previous: int | None,
    previous_pin_expiry: float | None,
    at: float,
) -> None:
    """Replica ``index``'s engine refuses the program's next call at ``at`` (longer than
    the model or the cache): the agent stops, its calls left are rejected, and the router
    sees the call end."""
    books = fleet.books
    turn = run.next_turn
    books.routes[(run.program.program_id, turn)] = make_tuple(
        CallRoute, (index, previous, previous_pin_expiry, False, at)
    )
    books.rejected += len(run.program.calls) - turn
    run.cut_short = True
    fleet.view.done(index, routed_call)
    if fleet.completes is not None:
        fleet.completes.completed(index, routed_call, at)
    fleet.router_changed(at)
    fleet.clients.end(run, at)
