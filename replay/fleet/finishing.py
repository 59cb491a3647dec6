"""Finishing a step's calls at its end: the record, the pin left, the router told."""

from __future__ import annotations

from replay.fleet.parts import Fleet
from replay.fleet.replica import Replica
from replay.request import SimRequest
from replay.sim_outcome import SimCallRecord


def finish(fleet: Fleet, rep: Replica, finished: list[SimRequest], now: float) -> None:
    """The requests ``finished`` (served by ``rep``, in one step or run of decode steps)
    finish at ``now``, in order."""
    books = fleet.books
    routed, records, call_replicas, last_pin = (
        books.routed,
        books.records,
        books.call_replicas,
        books.last_pin,
    )
    index = rep.index
    step = rep.engine.applied_step()  # the step whose output finished them all
    view, completes, clients = fleet.view, fleet.completes, fleet.clients
    for req in finished:
        run, call = routed.pop(req.rid)
        records.append(SimCallRecord.of(req, now, step))
        call_replicas.append(index)
        expiry = rep.pin_expiry(req.program)
        if expiry is not None:
            last_pin[req.program] = expiry
        view.done(index, call)
        if completes is not None:
            completes.completed(index, call, now)
        if fleet.holding is not None:
            fleet.router_changed(now)
        clients.answered(run, req.turn, now)
