"""The plugin on vLLM's async path (issue 11, item 4), on vLLM's own ``AsyncScheduler``.

Under async scheduling vLLM schedules step N+1 before step N's output is applied. If
step N+1 preempts a request whose last output token is still in flight, step N's
output later reaches it as stale output and stops it: vLLM then calls
``_free_request`` first and only afterwards ``waiting.remove_requests``.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

from tests.vllmsim.drive import Driver, driver, static_params

TTL_S = 5.0


def _stale_stop(tmp_path: Path) -> tuple[Driver, Any]:
    """A (program a) and R (program r, one output token) fill all 4 blocks; the next step
    needs a fifth block for A while R's only token is in flight, so vLLM preempts R (the
    tail of the running list); applying the first step's output stops R on that token."""
    d = driver(tmp_path, static_params(TTL_S), blocks=4)
    d.add("A", "a", 32, 20)
    d.add("R", "r", 32, 1)
    first = d.schedule()
    second = d.schedule()
    assert second[0].preempted_req_ids == {"R"}
    assert d.sched.requests["R"].num_stale_output_tokens > 0
    d.now = 1.0
    d.update(first)
    assert "R" not in d.sched.requests  # finished (length) on the stale token
    assert not any(r.request_id == "R" for r in d.sched.waiting)
    return d, second


def _run(d: Driver, queue: deque[Any]) -> None:
    """The engine core's batch-queue loop (depth 2) until nothing is left."""
    for _ in range(1000):
        if not d.sched.has_requests() and not queue:
            return
        if d.sched.has_requests():
            queue.appendleft(d.schedule())
            if len(queue) < 2:
                continue
        d.now += 0.01
        d.update(queue.pop())
    raise AssertionError("the engine did not drain")


def test_a_request_stopped_on_stale_output_leaves_no_waiting_count(tmp_path: Path) -> None:
    d, _ = _stale_stop(tmp_path)
    assert not d.sched._ttl_queue.has_program("r")


def test_later_pins_of_that_program_still_expire(tmp_path: Path) -> None:
    d, second = _stale_stop(tmp_path)
    _run(d, deque([second]))
    d.add("R2", "r", 16, 1)  # program r comes back; its call is pinned for TTL_S
    _run(d, deque())
    pin = d.sched.ttl.pins.get("r")
    assert pin is not None and pin.n_blocks > 0
    d.now = pin.expiry + 1.0
    d.sched.schedule()  # the next step starts: expired pins go
    assert "r" not in d.sched.ttl.pins
    assert d.sched.ttl_stats()["expired"] >= 1


def test_no_pin_of_zero_blocks(tmp_path: Path) -> None:
    """R's blocks went back at its preemption: finishing it holds nothing, so no pin is made
    (one would give its program queue priority and count as a hit later)."""
    d, _ = _stale_stop(tmp_path)
    assert "r" not in d.sched.ttl.pins
    assert d.sched.ttl_stats()["made"] == 0
