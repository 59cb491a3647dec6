"""Random small workloads for the plugin under async scheduling, and the invariants checked.

:class:`Checker` watches a vLLM-backend replay step by step (an observer of the
harness): at every step start, no pin is held past its expiry unless its program has
a request waiting (looked up in vLLM's queue itself, not in the plugin's counts), no
pin holds zero blocks, and the plugin's per-program waiting counts equal vLLM's
queue; it aborts the calls it was told to (at a step boundary, possibly while their
step is in flight) and replaces the bundle once, mid-run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from vllm.v1.request import RequestStatus

from fitting.policy_params import PolicyParams
from replay.policies import PolicySpec
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.workload import AgentProgram, Call, Workload
from tests.vllmsim.drive import write_bundle

#: drawn runs of the vLLM backend: each takes its time (no deadline), the same draws every run
DRAWN = settings(
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def program_of(request: Any) -> str | None:
    extra = request.sampling_params.extra_args or {}
    value = extra.get("program_id")
    return None if value is None else str(value)


def workload(programs: list[list[tuple[int, int, float]]], *, align: int = 1) -> Workload:
    """Programs of (new prompt tokens, output tokens, pause) per call, all starting at 0; each
    prompt repeats the previous call's prompt and output, and is rounded up to a multiple of
    ``align`` (whole blocks: the first decode needs a new block, the way to preemptions)."""
    out = []
    for p, calls in enumerate(programs):
        seq: list[Call] = []
        total = 0
        for i, (new, output, pause) in enumerate(calls):
            prompt = total + new
            prompt += -prompt % align
            seq.append(Call(prompt, output, total, None if i == len(calls) - 1 else "bash", pause))
            total = prompt + output
        out.append(AgentProgram(f"p{p}", 0.0, tuple(seq)))
    return Workload(tuple(out))


@dataclass
class Checker:
    #: (program, turn) of the calls to abort, at the first step boundary they are in flight
    aborts: frozenset[tuple[str, int]] = frozenset()
    #: replace the bundle after this many updates (None: never) with these parameters
    swap_at: int | None = None
    swap_to: PolicyParams | None = None
    updates: int = 0
    aborted: set[tuple[str, int]] = field(default_factory=set)
    #: how often each interesting thing was seen
    seen: Counter[str] = field(default_factory=Counter)
    harness: Any = None
    #: requests seen preempted with output in flight (they may stop on it)
    _stale: set[str] = field(default_factory=set)
    _aborted_ids: set[str] = field(default_factory=set)

    def scheduled(self, harness: Any, output: Any) -> None:
        self.harness = harness
        sched = harness.scheduler
        now = harness.now
        queued = [*sched.waiting._items, *sched.kv_holding_waiting]  # no re-sort: no side effect
        waiting = Counter(p for p in map(program_of, queued) if p is not None)
        for pin in sched.ttl.pins.pins.values():
            assert pin.n_blocks > 0, f"a pin of no blocks for {pin.program}"
            if pin.expiry <= now:
                assert waiting[pin.program] > 0, (
                    f"pin of {pin.program} held at t={now} past its expiry {pin.expiry} "
                    "with nothing of its program waiting"
                )
                self.seen["kept_for_follow_up"] += 1
        assert dict(sched._ttl_queue._programs) == dict(waiting)
        self.seen["preemptions"] += len(output.preempted_req_ids)
        for rid, request in sched.requests.items():
            if request.status == RequestStatus.PREEMPTED and request.num_stale_output_tokens:
                self.seen["stale_in_flight"] += 1
                self._stale.add(rid)

    def updated(self, harness: Any) -> None:
        self.updates += 1
        sched = harness.scheduler
        for rid in list(self._stale):
            request = sched.requests.get(rid)
            if request is None:
                if rid not in self._aborted_ids:
                    self.seen["stopped_on_stale_output"] += 1
                self._stale.discard(rid)
            elif request.status != RequestStatus.PREEMPTED:
                self._stale.discard(rid)
        for rid, call in list(harness.calls.items()):
            key = (call.run.program.program_id, call.turn)
            if key in self.aborts and key not in self.aborted:
                self.aborted.add(key)
                in_flight = call.request.num_in_flight_tokens > 0
                self.seen["aborted_in_flight" if in_flight else "aborted"] += 1
                self._aborted_ids.add(rid)
                harness.abort(rid)
        if self.swap_at is not None and self.updates == self.swap_at and self.swap_to:
            write_bundle(Path(harness.scheduler.ttl_watcher.path), self.swap_to)
            self.seen["bundle_written"] += 1


def setup(case: dict[str, Any]) -> tuple[Workload, PolicySpec, ReplayConfig, Load]:
    """A drawn case's workload, policy, engine (16-token blocks, a 256-token budget, 8
    seats, its ``blocks``) and load (its ``concurrency``, or the recorded starts)."""
    spec = PolicySpec(str(case["policy"]), ttl_s=float(case["ttl_s"]), valve=str(case["valve"]))
    config = ReplayConfig(
        engine=SimSchedulerConfig(
            kv_tokens=16 * int(case["blocks"]),
            block_size=16,
            max_num_batched_tokens=256,
            max_num_seqs=8,
            max_model_len=1024,
        ),
        truncate=True,
    )
    concurrency = case["concurrency"]
    load = Load(concurrency=concurrency if isinstance(concurrency, int) else None)
    align = case.get("align", 1)
    work = workload(case["programs"], align=align if isinstance(align, int) else 1)
    return work, spec, config, load


def check_end(end: float, sched: Any, max_ttl_s: float, programs: int) -> None:
    """After the run (which ended at ``end``): nothing of any request is left, per-program
    state is bounded, and the step after the last pin's expiry leaves no pin and every
    block free."""
    assert not sched.requests and not sched.waiting and not sched.running
    assert not sched.ttl.live
    assert not sched._ttl_queue._programs and not sched._ttl_queue._owner
    assert len(sched.ttl.book) <= min(programs, sched.ttl.book.cap)
    pins = sched.ttl.pins
    assert len(pins._heap) <= 2 * len(pins) + 64
    sched.ttl_watcher.path = None  # the replay's bundle file is gone with its run
    sched.ttl_clock = lambda: end + max_ttl_s + 1.0
    sched.schedule()
    assert len(pins) == 0 and pins.blocks == 0
    pool = sched.kv_cache_manager.block_pool
    assert pool.get_num_free_blocks() == pool.num_gpu_blocks - 1
