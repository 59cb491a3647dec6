"""Golden cases for :class:`replay.scheduler.SimScheduler`, ported from vLLM's scheduler tests.

The scenarios of ``tests/v1/core/test_scheduler.py`` (token budget and chunked
prefill, ``max_num_seqs``, preemption of the running tail and its recompute,
no admission in a step that preempted, head-of-line blocking, queue order)
restated on small configurations with :class:`ConstantCostModel`. Each runs on
both pools, step by step (``fast=False``) so that one ``step`` is one vLLM step.
"""

from __future__ import annotations

from typing import Any

import pytest

from profiles.cost import ConstantCostModel
from replay.policies import PolicySpec, make
from replay.policies.common import fcfs_key
from replay.policies.simple import VLLM, ProgramFCFS
from replay.request import SimRequest
from replay.scheduler import SimScheduler, SimSchedulerConfig
from replay.sim import ReplayConfig, simulate
from replay.workload import AgentProgram, Call, Workload

INF = float("inf")

pools = pytest.mark.parametrize("pool", ["runs", "blocks"])


def request(
    rid: int,
    program: str,
    prompt: int,
    output: int,
    *,
    arrival: float = 0.0,
    program_start: float | None = None,
    turn: int = 0,
) -> SimRequest:
    start = arrival if program_start is None else program_start
    return SimRequest(rid, program, turn, arrival, start, prompt, output, 0, None, True)


class AdmitLog:
    """The engine's pool, recording every admit as (program, hit blocks, new blocks)."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self.admits: list[tuple[str, int, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def admit(self, program: str, hit: int, new: int, keys: tuple[Any, ...] = ()) -> None:
        self.admits.append((program, hit, new))
        self._pool.admit(program, hit, new, keys)


class Driver:
    """Steps an engine by hand and reports what each step scheduled."""

    def __init__(self, config: SimSchedulerConfig, policy: Any = None) -> None:
        self.engine = SimScheduler(config, ConstantCostModel(), policy or VLLM())
        self.log = AdmitLog(self.engine.pool)
        self.engine.pool = self.log  # type: ignore[assignment]
        self.now = 0.0
        self.requests: dict[str, SimRequest] = {}

    def add(self, req: SimRequest) -> SimRequest:
        self.requests[req.program] = req
        self.engine.add(req, self.now)
        return req

    def step(self) -> dict[str, int]:
        """One step; returns the tokens each request computed in it (a request admitted
        in the step counts from its hit)."""
        before = {r.program: r.num_computed_tokens for r in self.engine.running}
        seen = len(self.log.admits)
        duration, _ = self.engine.step(self.now, INF)
        assert duration > 0, "nothing could run"
        self.now += duration
        bs = self.engine.config.block_size
        start = before | {p: hit * bs for p, hit, _ in self.log.admits[seen:]}
        done = {p: self.requests[p].num_computed_tokens - n for p, n in start.items()}
        return {p: n for p, n in done.items() if n > 0}  # a preempted request drops to 0

    def run_until_finished(self, program: str, limit: int = 1000) -> None:
        for _ in range(limit):
            if self.requests[program].finish is not None:
                return
            self.step()
        raise AssertionError(f"{program} did not finish")

    @property
    def running(self) -> list[str]:
        return [r.program for r in self.engine.running]

    @property
    def waiting(self) -> list[str]:
        return [r.program for r in self.engine._sorted_waiting()]


def config(pool: str, **kw: Any) -> SimSchedulerConfig:
    return SimSchedulerConfig(pool=pool, fast=False, **kw)


# ------------------------------------------------------------------ token budget


@pools
def test_token_budget_chunks_prefill_and_serves_decodes_first(pool: str) -> None:
    """vLLM test_schedule_concurrent_partial_requests: three 800-token prompts and a
    1024-token budget. Step 1: A's whole prompt, 224 tokens of B, C waits (no budget
    left). Step 2: A's decode first, then B's remaining 576, then 447 of C.
    Step 3: two decodes and the last 353 of C."""
    d = Driver(config(pool, kv_tokens=16 * 200, block_size=16, max_num_batched_tokens=1024))
    for i, name in enumerate("ABC"):
        d.add(request(i, name, 800, 5, arrival=0.0))
    assert d.step() == {"A": 800, "B": 224}
    assert d.running == ["A", "B"] and d.waiting == ["C"]
    assert d.requests["A"].first_token is not None
    assert d.requests["B"].first_token is None  # a chunk that does not end the prompt
    assert d.step() == {"A": 1, "B": 576, "C": 447}
    assert d.step() == {"A": 1, "B": 1, "C": 353}
    assert d.engine.stats.preemptions == 0


@pools
def test_budget_smaller_than_the_decodes_leaves_the_tail_unscheduled(pool: str) -> None:
    """With a budget of 2 tokens and three requests decoding, the first two in the
    running list decode and the third waits for the next step; nobody is admitted."""
    d = Driver(config(pool, kv_tokens=16 * 50, block_size=16, max_num_batched_tokens=2))
    for i, name in enumerate("ABC"):
        d.add(request(i, name, 1, 5, arrival=0.0))
    assert d.step() == {"A": 1, "B": 1}
    assert d.step() == {"A": 1, "B": 1}  # running first: C's prefill still waits
    assert d.waiting == ["C"]


@pools
def test_max_num_seqs_caps_admissions(pool: str) -> None:
    d = Driver(config(pool, kv_tokens=16 * 50, block_size=16, max_num_seqs=2))
    for i, name in enumerate("ABC"):
        d.add(request(i, name, 10, 3, arrival=0.0))
    assert d.step() == {"A": 10, "B": 10}
    assert d.running == ["A", "B"] and d.waiting == ["C"]
    d.step()
    d.step()  # A and B take their third token and finish
    assert d.requests["A"].finish is not None and d.requests["B"].finish is not None
    assert d.requests["C"].admitted is None
    assert d.step() == {"C": 10}


# ------------------------------------------------------------------ preemption


@pools
def test_preempt_tail_requeue_front_and_recompute_with_own_prefix(pool: str) -> None:
    """8 blocks of 4 tokens; A and B (8-token prompts, 12 tokens out) decode side by
    side until, at 16 tokens each, A needs a 5th block and none is free:

    - B, the tail of the running list, is preempted: its 4 full blocks are freed
      (cached) and A's new block is the head of the free list, B's last block;
    - D, which arrived before that step and would fit, is not admitted in it;
    - B goes back to the front of the queue, before D;
    - B does not fit while A runs (its hit comes out of the free list) and blocks D
      behind it (head-of-line);
    - when A finishes, B is recomputed with a hit on its own 3 surviving blocks."""
    d = Driver(config(pool, kv_tokens=32, block_size=4, max_num_batched_tokens=64))
    d.add(request(0, "A", 8, 12, arrival=0.0))
    d.add(request(1, "B", 8, 12, arrival=0.0))
    assert d.step() == {"A": 8, "B": 8}
    for _ in range(8):
        assert d.step() == {"A": 1, "B": 1}
    a, b = d.requests["A"], d.requests["B"]
    assert (a.num_computed_tokens, a.blocks, b.num_computed_tokens, b.blocks) == (16, 4, 16, 4)
    assert d.engine.pool.free_blocks == 0
    b_first_token = b.first_token

    dreq = d.add(request(2, "D", 3, 1, arrival=d.now))
    assert d.step() == {"A": 1}
    assert d.engine.stats.preemptions == 1
    assert d.running == ["A"]
    assert b.preempted and b.preemptions == 1 and b.num_computed_tokens == 0 and b.blocks == 0
    assert d.engine.pool.cached_prefix("B") == 3
    assert d.engine.fits(dreq)  # D would have fit ...
    assert dreq.admitted is None  # ... but nothing is admitted in a step that preempted
    assert d.waiting == ["B", "D"]

    assert not d.engine.fits(b)
    assert d.step() == {"A": 1}  # head-of-line: B does not fit, D is not tried
    assert dreq.admitted is None

    d.run_until_finished("A")
    admits_before = len(d.log.admits)
    d.step()
    assert d.log.admits[admits_before:] == [("B", 3, 2), ("D", 0, 1)]
    assert b.first_token == b_first_token  # the recompute does not sample again
    d.run_until_finished("B")
    assert b.generated == 12
    d.engine.pool.check()  # type: ignore[attr-defined]


@pools
def test_preemption_takes_the_running_tail_not_the_request_that_grows(pool: str) -> None:
    """Three requests decoding; the first needs a block and none is free: the last
    one (C) is preempted, not B; B keeps its blocks and decodes in the same step."""
    d = Driver(config(pool, kv_tokens=4 * 6, block_size=4, max_num_batched_tokens=64))
    for i, name in enumerate("ABC"):
        d.add(request(i, name, 8, 10, arrival=0.0))
    assert d.step() == {"A": 8, "B": 8, "C": 8}
    assert d.engine.pool.free_blocks == 0
    assert d.step() == {"A": 1, "B": 1}  # A needs a 3rd block: C goes; B reuses C's
    assert d.running == ["A", "B"]
    assert d.requests["C"].preempted
    assert d.waiting == ["C"]


@pools
def test_a_request_that_cannot_grow_alone_preempts_itself(pool: str) -> None:
    """The only running request needs a block and none is free: it is preempted
    itself (vLLM: the victim is the request being scheduled) and nothing runs."""
    d = Driver(config(pool, kv_tokens=8, block_size=4, max_num_batched_tokens=64))
    d.add(request(0, "A", 8, 5, arrival=0.0))
    assert d.step() == {"A": 8}
    duration, finished = d.engine.step(d.now, INF)
    assert (duration, finished) == (0.0, [])
    assert d.requests["A"].preempted and d.engine.running == []


# ------------------------------------------------------------------ admission order


@pools
@pytest.mark.parametrize("policy", [VLLM, ProgramFCFS])
def test_head_of_line_blocks_requests_that_would_fit(pool: str, policy: type) -> None:
    """A waiting request that does not fit stops admission: the smaller one behind
    it waits although memory could hold it."""
    d = Driver(config(pool, kv_tokens=40, block_size=4), policy())
    d.add(request(0, "R", 24, 3, arrival=0.0))
    d.step()
    d.now = 0.1
    big = d.add(request(1, "W1", 20, 1, arrival=0.1))
    d.now = 0.2
    small = d.add(request(2, "W2", 4, 1, arrival=0.2))
    assert d.engine.fits(small) and not d.engine.fits(big)
    assert d.step() == {"R": 1}
    assert big.admitted is None and small.admitted is None
    assert d.step() == {"R": 1}  # R finishes: its blocks are free at the next step
    assert d.step() == {"W1": 20, "W2": 4}


@pools
@pytest.mark.parametrize(("policy", "first"), [(VLLM, "newer-program"), (ProgramFCFS, "old")])
def test_fcfs_by_request_or_by_program(pool: str, policy: type, first: str) -> None:
    """vllm orders the queue by the request's arrival; program-fcfs by the arrival of
    the program's first call. A follow-up of a program that started at 0 s (arriving
    at 5 s) against the first call of a program that started at 3 s."""
    d = Driver(config(pool, kv_tokens=16 * 20, block_size=16, max_num_seqs=1), policy())
    d.now = 5.0
    d.add(request(0, "old", 10, 2, arrival=5.0, program_start=0.0, turn=1))
    d.add(request(1, "newer-program", 10, 2, arrival=3.0, program_start=3.0))
    assert d.step() == {first: 10}


@pytest.mark.parametrize(
    ("name", "order"),
    [
        ("vllm", ["A0", "B0", "C0", "A1", "B1", "C1"]),
        ("program-fcfs", ["A0", "A1", "B0", "B1", "C0", "C1"]),
        ("continuum", ["A0", "A1", "B0", "B1", "C0", "C1"]),
    ],
)
def test_programs_started_together_are_ordered_by_first_arrival(
    name: str, order: list[str]
) -> None:
    """Three programs start at the same instant (a client that opens them all at
    once). A real engine still receives their first calls one after another, so
    program-level FCFS has a strict order: A's follow-up goes before B's and C's
    first calls. (Ordering ties by the request's arrival instead, as the simulator
    once did, makes program-fcfs behave exactly like vllm here.)"""
    workload = Workload(
        tuple(
            AgentProgram(p, 0.0, (Call(8, 2, 0, "t", 0.0), Call(12, 2, 10, None, 0.0)))
            for p in "ABC"
        )
    )
    cfg = ReplayConfig(
        engine=SimSchedulerConfig(kv_tokens=64, block_size=4, max_num_seqs=1), check=True
    )
    policy = make(PolicySpec(name), {}, lambda t, o: 0.0)
    out = simulate(workload, policy, ConstantCostModel(), cfg)
    assert [f"{c.program}{c.turn}" for c in sorted(out.calls, key=lambda c: c.finish)] == order


@pools
@pytest.mark.parametrize("policy", [VLLM, ProgramFCFS])
def test_preempted_requests_go_first(pool: str, policy: type) -> None:
    """A preempted request is queued before a waiting one that comes first by
    arrival and by program start (vLLM prepends preempted requests)."""
    d = Driver(config(pool, kv_tokens=4 * 6, block_size=4, max_num_seqs=8), policy())
    for i, name in enumerate("ABC"):
        d.add(request(i, name, 8, 10, arrival=1.0 + i))
    d.now = 3.0
    d.step()
    d.add(request(3, "E", 4, 1, arrival=0.5, program_start=0.0, turn=1))
    assert d.step() == {"A": 1, "B": 1}  # A grows: C is preempted, E is not admitted
    assert d.requests["C"].preempted
    assert d.waiting == ["C", "E"]


def test_vllms_queue_puts_the_latest_preempted_request_first() -> None:
    """vLLM prepends each preempted request to the waiting queue: the one preempted last
    goes first, then the earlier one, then the requests never preempted by arrival (ties
    by request id)."""
    early, late = request(0, "A", 8, 1), request(1, "B", 8, 1)
    for seq, req in enumerate((early, late), 1):
        req.preempted, req.preempt_seq = True, seq
    fresh, tied = request(2, "C", 8, 1, arrival=0.5), request(3, "D", 8, 1, arrival=0.5)
    keys = [fcfs_key(r) for r in (late, early, fresh, tied)]
    assert keys == sorted(keys) and len(set(keys)) == 4


# ------------------------------------------------------------------ pins, end to end


def test_pin_keeps_the_prefix_across_a_pause() -> None:
    """P's first call caches 5 blocks; during P's 1 s pause Q then R (5 blocks each)
    pass through a 10-block cache. Without a pin, R's allocation takes Q's partial block
    (the free list's head) and then P's last 4 blocks (cached blocks in LRU order): P's
    next call hits 1 block (4 tokens; vLLM's own scheduler gives the same). With a 2 s
    TTL they stay held, R takes Q's freed blocks, and P's next call is handed its 5
    blocks (20 tokens)."""
    workload = Workload(
        (
            AgentProgram("P", 0.0, (Call(20, 1, 0, "t", 1.0), Call(25, 1, 21, None, 0.0))),
            AgentProgram("Q", 0.2, (Call(19, 1, 0, None, 0.0),)),
            AgentProgram("R", 0.5, (Call(19, 1, 0, None, 0.0),)),
        )
    )
    cfg = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=40, block_size=4), check=True)
    hits = {}
    for name in ("vllm", "static-ttl"):
        policy = make(PolicySpec(name, ttl_s=2.0), {}, lambda t, o: 0.0)
        out = simulate(workload, policy, ConstantCostModel(), cfg)
        hits[name] = {(c.program, c.turn): c.hit_tokens for c in out.calls}
        if name == "static-ttl":
            assert out.engine.stats.pins_hit == 1
    assert hits["vllm"][("P", 1)] == 4
    assert hits["static-ttl"][("P", 1)] == 20


class Stuck(Exception):
    """The simulation made no progress."""


@pytest.mark.parametrize("pool", ["runs", "blocks"])
def test_handover_that_needs_the_pins_partial_block(
    pool: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """5 blocks of 4 tokens. P's first call (6 tokens) is pinned: 1 full block + 1
    partial. Its next call (19 + 1 tokens: the whole cache) keeps the full block and
    needs 4 more; handing over frees the partial one, so it fits exactly.
    Regression: it never fitted, the valve spares the head's own pin, and once the
    pin's expiry had passed simulate() spun forever (guarded here by a step limit)."""
    steps = 0
    original = SimScheduler.step

    def guarded(self: SimScheduler, now: float, horizon: float) -> Any:
        nonlocal steps
        steps += 1
        if steps > 10_000:
            raise Stuck(f"no progress at t={now}")
        return original(self, now, horizon)

    monkeypatch.setattr(SimScheduler, "step", guarded)
    workload = Workload(
        (AgentProgram("P", 0.0, (Call(6, 1, 0, "t", 0.1), Call(19, 1, 7, None, 0.0))),)
    )
    cfg = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=20, block_size=4, pool=pool), check=True)
    policy = make(PolicySpec("static-ttl", ttl_s=2.0), {}, lambda t, o: 0.0)
    out = simulate(workload, policy, ConstantCostModel(), cfg)
    assert [(c.turn, c.hit_tokens) for c in out.calls] == [(0, 0), (1, 4)]


@pytest.mark.parametrize("valve", ["head", "stall-only"])
@pytest.mark.parametrize("pool", ["runs", "blocks"])
def test_a_head_blocked_by_its_own_pin_gets_it_released_when_nothing_runs(
    pool: str, valve: str
) -> None:
    """P's pin holds 1 full and 1 partial block of 5; P's next call keeps the full one and
    needs 4 more, which are not free while the pin holds the partial one. Nothing runs:
    the valve releases the head's own pin last (the plugin's rule), and the call is
    admitted at once with its hit, instead of waiting for Q, 5 s later."""
    workload = Workload(
        (
            AgentProgram("P", 0.0, (Call(6, 1, 0, "t", 0.1), Call(19, 1, 7, None, 0.0))),
            AgentProgram("Q", 5.0, (Call(4, 1, 0, None, 0.0),)),
        )
    )
    cfg = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=20, block_size=4, pool=pool), check=True)
    policy = make(PolicySpec("static-ttl", ttl_s=2.0, valve=valve), {}, lambda t, o: 0.0)
    out = simulate(workload, policy, ConstantCostModel(), cfg)
    second = next(c for c in out.calls if (c.program, c.turn) == ("P", 1))
    assert second.admitted < 1.0 and second.hit_tokens == 4
    stats = out.engine.stats
    assert (stats.pins_made, stats.pins_hit, stats.pins_released) == (1, 0, 1)
