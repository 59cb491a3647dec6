"""The simulator's invariants, checked after every step with ``--check``
(``ReplayConfig.check``); a broken one raises :class:`~replay.sim_error.SimulationError`.

:func:`check_invariants` holds one engine (:class:`~replay.scheduler.SimScheduler`, in
the single-engine loop :func:`replay.sim.simulate` and on each replica of the fleet's,
:mod:`replay.fleet.stepping`) to what its classes state: block conservation counting each
holder of a shared block, the running list's order, a clock never ahead of the replay's,
the decode set, each request's blocks and hit, the waiting queue's keys, and no pinned
program running.
"""

from __future__ import annotations

from typing import Any

from replay.math_utils import cdiv
from replay.scheduler import SimScheduler
from replay.sim_error import SimulationError


def check_invariants(engine: SimScheduler, now: float) -> None:
    """The invariants stated on :class:`SimScheduler`, :class:`SimRequest`, the pool and
    the pin rules (``--check``)."""

    def fail(what: str) -> None:
        raise SimulationError(f"invariant broken at t={now}: {what}")

    pool: Any = engine.pool
    pool.check()
    bs = engine.config.block_size
    for req in engine.running:
        engine.decoders.sync(req)
    # a shared block is counted by each request and pin that holds it
    held = sum(r.blocks for r in engine.running) + engine.pinned_blocks - pool.overlap()
    if held + pool.free_blocks != engine.config.num_blocks:
        fail(
            f"blocks not conserved: running+pinned {held} + free {pool.free_blocks} "
            f"!= {engine.config.num_blocks}"
        )
    seqs = [r.run_seq for r in engine.running]
    if seqs != sorted(seqs):
        fail("the running list is out of order")
    if engine.clock > now + 1e-9 * max(1.0, now):  # the same sums, in another order
        fail(f"the engine's clock {engine.clock} ran ahead of the replay's")
    decoding = {
        r.rid
        for r in engine.running
        if r.num_computed_tokens >= r.prompt and r.num_tokens - r.num_computed_tokens == 1
    }
    prefilling = {r.rid for r in engine._prefilling}
    members = set(engine.decoders.members)
    # a request recomputing after a preemption may end a chunk one token short of its
    # stream: it decodes that token as a prefill chunk of one, and joins the set after
    if engine.config.fast and not (members <= decoding and decoding <= members | prefilling):
        fail("the decode set is not the running requests with one token to compute")
    if engine.config.fast and members & prefilling:
        fail("a request is both decoding and prefilling")
    for req in engine.running:
        if req.admitted is not None and req.admitted < req.arrival:
            fail(f"request {req.rid} ran before it arrived")
        if (
            not req.num_computed_tokens <= req.num_tokens
            or cdiv(req.num_computed_tokens, bs) != req.blocks
        ):
            fail(f"request {req.rid}: {req.num_computed_tokens} computed, {req.blocks} blocks")
        if req.hit_tokens % bs or (req.hit_tokens and req.hit_tokens >= req.prompt):
            fail(f"request {req.rid} hit {req.hit_tokens} of {req.prompt}")
    for req in engine.waiting:
        if req.blocks:
            fail(f"waiting request {req.rid} holds {req.blocks} blocks")
        if engine.waiting_programs.get(req.program) is not req:
            fail(f"waiting request {req.rid} is not its program's")
    if len(engine.waiting_programs) != len(engine.waiting):
        fail("waiting_programs does not match the queue")
    if len({r.qkey for r in engine.waiting}) != len(engine.waiting):
        # the queue puts new and re-keyed requests in place one by one (as a stable sort
        # would only when no two keys tie)
        fail("two waiting requests share a queue key")
    if engine.pinning is not None:
        retention = engine.pinning.retention
        retention.check()
        running = {r.program for r in engine.running}
        pinned = set(retention.pins.pins)
        if running & pinned:
            fail(f"pinned programs run: {sorted(running & pinned)}")
