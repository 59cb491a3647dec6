"""A routed call reaching its replica's scheduler (at the replica's step boundary)."""

from __future__ import annotations

from replay.fleet.books import CallRoute
from replay.fleet.parts import Fleet, make_tuple
from replay.fleet.replica import Replica
from replay.fleet.routers.base import RoutedCall
from replay.request import SimRequest
from replay.sim import fits_engine
from replay.sim_outcome import ProgramRun


def arrive(
    fleet: Fleet,
    rep: Replica,
    run: ProgramRun,
    at: float,
    sent: float,
    routed_call: RoutedCall,
    previous: int | None,
    previous_pin_expiry: float | None,
) -> None:
    """The program's next call, sent at ``sent`` (``routed_call`` as the router saw it;
    ``previous``: the replica of its program's previous call, whose pin expired at
    ``previous_pin_expiry``), reaches ``rep``'s scheduler at ``at``."""
    books = fleet.books
    config = rep.config
    pid = run.program.program_id
    turn = run.next_turn
    call, clipped = fits_engine(run.program.calls[turn], config)
    if call is None:
        # the engine refuses it (longer than the model or the cache): the agent stops
        books.routes[(pid, turn)] = make_tuple(
            CallRoute, (rep.index, previous, previous_pin_expiry, False, at)
        )
        books.rejected += len(run.program.calls) - turn
        run.cut_short = True
        fleet.view.done(rep.index, routed_call)
        if fleet.completes is not None:
            fleet.completes.completed(rep.index, routed_call, at)
        fleet.router_changed(at)
        fleet.clients.end(run, at)
        return
    books.truncated += clipped
    rid = books.rid
    if run.program_start is None:
        run.first_arrival = sent
        run.program_start = at
        run.first_rid = rid
    reuse = min(fleet.streams.reusable(rep.index, routed_call), call.reused_tokens) if turn else 0
    req = SimRequest(
        rid=rid,
        program=pid,
        turn=turn,
        arrival=at,
        program_start=run.program_start,
        prompt=call.input_tokens,
        output=call.output_tokens,
        reusable=reuse,
        tool=call.tool,
        is_last=turn == len(run.program.calls) - 1,
        program_seq=run.first_rid,
        sent=sent,
        shared=call.shared_keys(config.engine.block_size),
    )
    books.routed[rid] = (run, routed_call)
    fleet.view.arrived(routed_call, req)
    fleet.streams.held(pid, rep.index, turn)
    books.rid = rid + 1
    rep.engine.add(req, at)  # expires due pins first, then parks the program's own
    held = (
        previous_pin_expiry is not None
        and previous == rep.index
        and rep.pin_expiry(pid) is not None
    )
    books.routes[(pid, turn)] = make_tuple(
        CallRoute, (rep.index, previous, previous_pin_expiry, held, at)
    )
