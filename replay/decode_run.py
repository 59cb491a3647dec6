"""How many decode-only steps can be taken together (the trick of splitwise-sim).

When every running request decodes and nothing can change until an event arrives, a
request finishes or a block runs short, the coming decode steps are one event: the
scheduler takes them at once (:meth:`replay.scheduler.SimScheduler.step`). This module
says how many; it changes nothing.
"""

from __future__ import annotations

from typing import NamedTuple

from profiles.cost import CostModel
from replay.decoders import DecodeSet


class DecodeRun(NamedTuple):
    #: decode steps taken together
    steps: int
    #: blocks they need, all told
    blocks: int
    #: the decode set's ``decode_steps`` once its first member finishes
    first_finish: int
    #: the members and their computed tokens at the first step (what the run is priced on)
    seqs: int
    kv_tokens: int
    #: the run's seconds (``cost.decode_run_s``): a replica waiting on the run ends its
    #: wait then, and taking the run prices it so, without reading the set again
    seconds: float


def plan_decode_run(
    decoders: DecodeSet, cost: CostModel, free_blocks: int, now: float, horizon: float
) -> DecodeRun | None:
    """The run of decode steps of ``decoders`` from ``now`` (None: no step can be
    merged): every step that starts before ``horizon`` (the next arrival or pin expiry,
    which the replay sees between steps), up to and including the first step in which a
    member finishes, and short of a step whose blocks ``free_blocks`` cannot meet."""
    seqs = len(decoders.members)
    if horizon <= now or not seqs:
        return None
    first_finish = decoders.next_finish()
    if first_finish is None:
        return None
    steps = first_finish - decoders.decode_steps
    if steps <= 0:
        return None
    kv0 = decoders.kv_tokens()
    # a step that starts before the horizon runs before the event is seen (the replay
    # takes arrivals between steps), so the run takes every step that starts before it
    if now + cost.decode_run_s(seqs, kv0, steps - 1) >= horizon:
        lo, hi = 0, steps - 1
        guess = cost.decode_steps_within(seqs, kv0, horizon - now)
        if guess is not None:
            # a closed form: narrow the search to its neighbourhood (rounding)
            lo, hi = max(0, min(steps - 1, guess) - 2), min(steps - 1, guess + 2)
            if lo and now + cost.decode_run_s(seqs, kv0, lo) > horizon:
                lo, hi = 0, lo  # the guess was off: search below it
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if now + cost.decode_run_s(seqs, kv0, mid) <= horizon:
                lo = mid
            else:
                hi = mid - 1
        # lo steps end by the horizon; one more starts before it unless they end on it
        steps = lo + 1 if now + cost.decode_run_s(seqs, kv0, lo) < horizon else lo
    # the blocks the steps need; stop before a step whose needs the pool cannot meet
    # (that step preempts, request by request in running order: the next step's)
    steps, blocks = decoders.blocks_for(steps, free_blocks)
    if steps <= 0:
        return None
    return DecodeRun(steps, blocks, first_finish, seqs, kv0, cost.decode_run_s(seqs, kv0, steps))


def run_seconds(cost: CostModel, run: DecodeRun) -> tuple[float, float]:
    """(seconds, the longest step's seconds) of ``run``; the longest is the first or the
    last (the price is linear in KV)."""
    seqs, kv_tokens = run.seqs, run.kv_tokens
    longest = max(
        cost.decode_s(seqs, kv_tokens), cost.decode_s(seqs, kv_tokens + seqs * (run.steps - 1))
    )
    return run.seconds, longest
