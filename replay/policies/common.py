"""What the policies share: queue keys and the pressure valve over pins."""

from __future__ import annotations

from replay.request import SimRequest
from replay.scheduler import SimScheduler


def fcfs_key(req: SimRequest) -> tuple[float, ...]:
    """vLLM's FCFS: preempted requests go back to the front (latest first), then arrival."""
    if req.preempted:
        return (0.0, -float(req.preempt_seq), 0.0)
    return (1.0, req.arrival, float(req.rid))


def program_key(req: SimRequest, engine: SimScheduler, *, pin_first: bool) -> tuple[float, ...]:
    """The priority tuple of docs/method.md: preempted, then (optionally) a live pin, then
    the program's first arrival."""
    pinned = 0.0 if (pin_first and req.program in engine.pins) else 1.0
    return (
        0.0 if req.preempted else 1.0,
        pinned,
        req.program_start,
        float(req.program_seq),
        req.arrival,
        float(req.rid),
    )


def release_until_fits(engine: SimScheduler, head: SimRequest, stalled: bool) -> None:
    """Release pins, latest program arrival first, until the head fits (or none are left);
    the head's own pin last, and only when nothing runs."""
    order = sorted(
        (p for p in engine.pins.values() if p.program != head.program),
        key=lambda p: (-p.program_start, -p.program_seq, p.program),
    )
    if stalled and head.program in engine.pins:
        order.append(engine.pins[head.program])
    for pin in order:
        if engine.fits(head):
            return
        engine.release_pin(pin.program, pressure=True)


def apply_valve(valve: str, engine: SimScheduler, head: SimRequest, stalled: bool) -> None:
    """``head``: free pins whenever the head cannot be admitted; ``stall-only``: only
    when the engine would otherwise have nothing to run."""
    if valve == "head" or (valve == "stall-only" and stalled):
        release_until_fits(engine, head, stalled)


def under_cap(engine: SimScheduler, req: SimRequest, pin_cap: float) -> bool:
    """Whether pinning ``req`` keeps pins within ``pin_cap`` of the KV cache."""
    return engine.pinned_blocks + req.blocks <= pin_cap * engine.config.num_blocks
