"""Finishing a step's calls at its end: the record, the pin left, the router told."""

from __future__ import annotations

from replay.fleet.parts import Fleet
from replay.fleet.replica import Replica
from replay.request import SimRequest
from replay.sim_outcome import SimCallRecord


def finish(fleet: Fleet, rep: Replica, req: SimRequest, now: float) -> None:
    """``req`` (served by ``rep``) finishes at ``now``."""
    books = fleet.books
    index = rep.index
    run, call = books.routed.pop(req.rid)
    books.records.append(SimCallRecord.of(req, now, rep.engine.applied_step()))
    books.call_replicas.append(index)
    expiry = rep.pin_expiry(req.program)
    if expiry is not None:
        books.last_pin[req.program] = expiry
    fleet.view.done(index, call)
    completes = fleet.completes
    if completes is not None:
        completes.completed(index, call, now)
    if fleet.holding is not None:
        fleet.router_changed(now)
    fleet.clients.answered(run, req.turn, now)
