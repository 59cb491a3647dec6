"""The fast path's walk when blocks run short (:func:`replay.preemption.preempt_until_fits`),
as vLLM's running loop does it: the requests that need blocks are served in running order,
each preempting the running list's tail while its need exceeds what is free; a request
that preempts itself ends the walk."""

from __future__ import annotations

from replay.preemption import preempt_until_fits
from replay.request import SimRequest
from replay.step_plan import ScheduledRequest


def _running(*names: str) -> list[SimRequest]:
    reqs = []
    for i, name in enumerate(names):
        r = SimRequest(i, name, 0, 0.0, 0.0, 64, 8, 0, None, False)
        r.run_seq = i
        reqs.append(r)
    return reqs


def _walk(
    running: list[SimRequest], needs: dict[str, int], free: int, *, due: tuple[str, ...] = ()
) -> tuple[list[str], list[str], list[str]]:
    """(the requests still scheduled, the due members still scheduled, the victims in
    order); each victim frees 1 block. ``needs`` is given in an order of its own."""
    by_name = {r.program: r for r in running}
    scheduled: list[ScheduledRequest] = [(by_name[n], 16, 0, need) for n, need in needs.items()]
    victims: list[str] = []

    def preempt(victim: SimRequest) -> int:
        victims.append(victim.program)
        return 1

    kept, due_kept = preempt_until_fits(
        scheduled, [by_name[n] for n in due], running, free, preempt
    )
    return [r.program for r, *_ in kept], [r.program for r in due_kept], victims


def test_a_need_as_large_as_the_free_blocks_preempts_nothing() -> None:
    assert _walk(_running("A", "B"), {"A": 2}, 2) == (["A"], [], [])


def test_the_needs_are_met_in_running_order_not_the_order_given() -> None:
    """A (first in the running list) takes the 2 free blocks; B then needs 2 more and is
    the tail itself: it preempts itself and the walk ends, A kept."""
    assert _walk(_running("A", "B"), {"B": 2, "A": 2}, 2) == (["A"], [], ["B"])


def test_a_request_that_preempts_itself_ends_the_walk() -> None:
    """B, the tail, needs 3 with 1 free: preempting itself frees 1, still short, but the
    walk ends there; A, before it, is not preempted."""
    assert _walk(_running("A", "B"), {"B": 3}, 1) == ([], [], ["B"])
    assert _walk(_running("A", "B"), {"A": 0, "B": 3}, 1) == (["A"], [], ["B"])


def test_a_decoder_due_a_block_needs_one() -> None:
    """A decode-set member at a block boundary needs one block: with none free it preempts
    the tail."""
    assert _walk(_running("A", "B"), {}, 0, due=("A",)) == ([], ["A"], ["B"])
