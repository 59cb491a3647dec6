"""The decode set's block accounting against a step-by-step count (replay/decoders.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from replay.decoders import DecodeSet
from replay.kv import RunPool
from replay.request import SimRequest

BS = 4

#: members: (computed tokens at join, output tokens); then runs of steps with a free count
members = st.lists(st.tuples(st.integers(1, 40), st.integers(2, 60)), min_size=1, max_size=6)
#: each run: steps, free blocks, a member to join first (computed tokens, or 0: none), and
#: which member leaves after it (-1: none)
runs = st.lists(
    st.tuples(st.integers(0, 20), st.integers(0, 12), st.integers(0, 40), st.integers(-1, 7)),
    min_size=1,
    max_size=8,
)


def _request(rid: int, computed: int, output: int) -> SimRequest:
    r = SimRequest(rid, f"p{rid}", 0, 0.0, 0.0, computed, output, 0, None, False)
    r.num_computed_tokens = computed
    r.num_tokens = computed + 1
    r.generated = 1
    r.blocks = -(-computed // BS)
    return r


def _needs(computed: list[int], steps: int, free: int) -> tuple[int, int]:
    """Step by step: a request holding c computed tokens needs a block when c is a
    multiple of the block size; stop before a step whose needs exceed what is free."""
    taken = 0
    for s in range(steps):
        need = sum(1 for c in computed if (c + s) % BS == 0)
        if taken + need > free:
            return s, taken
        taken += need
    return steps, taken


@settings(max_examples=300, derandomize=True, deadline=None)
@given(members, runs)
def test_blocks_by_phase_match_a_step_by_step_count(
    joined: list[tuple[int, int]], sequence: list[tuple[int, int, int, int]]
) -> None:
    """``due`` is the members whose computed tokens fill their blocks, ``blocks_for`` the
    steps and blocks a step-by-step walk finds, and ``sync`` leaves every member holding
    ⌈computed / block size⌉ blocks with the pool conserving blocks, as members join and
    leave between runs."""
    pool = RunPool(10_000, BS)
    dec = DecodeSet(BS, pool)
    reqs = [_request(i, c, out) for i, (c, out) in enumerate(joined)]
    for r in reqs:
        pool.admit(r.program, 0, r.blocks)
        dec.join(r)
    left: list[SimRequest] = []
    for steps, free, newcomer, leaving in sequence:
        if newcomer:
            r = _request(len(reqs) + len(left), newcomer, 50)
            pool.admit(r.program, 0, r.blocks)
            dec.join(r)
            reqs.append(r)
        now = {r.rid: r.num_computed_tokens + (dec.decode_steps - r.synced_step) for r in reqs}
        assert {r.rid for r in dec.due()} == {rid for rid, c in now.items() if c % BS == 0}
        want = _needs(list(now.values()), steps, free)
        got = dec.blocks_for(steps, free)
        assert got == want
        s, blocks = got
        pool.take(blocks)
        dec.decode_steps += s
        for r in reqs:
            dec.sync(r)
            assert r.blocks == -(-r.num_computed_tokens // BS)
            assert r.num_computed_tokens == now[r.rid] + s
        everyone = reqs + left
        assert pool.free_blocks + sum(pool.held(r.program) for r in everyone) == pool.num_blocks
        if 0 <= leaving < len(reqs):
            gone = reqs.pop(leaving)
            dec.leave(gone)  # its blocks stay its program's (as at a finish, before the free)
            assert gone.blocks == -(-gone.num_computed_tokens // BS) == pool.held(gone.program)
            left.append(gone)
    for r in list(reqs):
        dec.leave(r)
    assert not dec.members and not dec.due() and dec.blocks_for(5, 0) == (5, 0)
