"""Async scheduling's rarest path against vLLM: a request preempted while the step that
samples its last token runs finishes from the waiting queue when that (stale) output
arrives (``AsyncSimScheduler._finish_waiting``). The random cases of
``test_differential.py`` seldom reach it; this seeded workload does, and both backends
agree on every call."""

from __future__ import annotations

import pytest

from replay.async_sched import AsyncSimScheduler
from replay.policies import PolicySpec
from replay.policy_runs import Load
from replay.request import SimRequest
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from tests.replay.test_equivalence import workload
from tests.vllmsim.differential import Case, compare, run_both
from tests.vllmsim.test_differential import COST


def test_a_stale_last_token_finishes_the_call_as_in_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    stale: list[int] = []
    finish_waiting = AsyncSimScheduler._finish_waiting

    def counted(self: AsyncSimScheduler, req: SimRequest, now: float) -> None:
        stale.append(req.rid)
        finish_waiting(self, req, now)

    monkeypatch.setattr(AsyncSimScheduler, "_finish_waiting", counted)
    engine = SimSchedulerConfig(kv_tokens=16 * 40, max_num_batched_tokens=256, max_num_seqs=16)
    case = Case(
        workload(1), ReplayConfig(engine=engine, truncate=True), Load(), PolicySpec("continuum")
    )
    fast, ours = run_both(case, COST, async_scheduling=True)
    assert stale, "the workload no longer reaches the path"
    calls, diffs = compare(fast, ours)
    assert calls == len(fast.calls) > 150
    shown = "\n".join(f"  {d.call} {d.metric}: fast {d.fast}, vllm {d.vllm}" for d in diffs[:12])
    assert not diffs, shown
