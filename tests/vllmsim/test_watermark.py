"""vLLM's ``--watermark`` in the fast simulator, against vLLM's own scheduler.

vLLM keeps ``int(watermark × num_blocks)`` blocks free when ``allocate_slots`` admits a
waiting or preempted request while another request runs (``has_scheduled_reqs``:
``self.running`` is not empty, this step's admissions included). The random cases of
``test_differential.py::test_a_watermark_call_by_call`` compare every call; here, the
block count and one case small enough to read.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from replay.policies import PolicySpec
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.vllmsim.build import build, quiet_vllm
from replay.workload import AgentProgram, Call, Workload
from tests.vllmsim.differential import Case, compare, run_both

COST = ProfileCostModel(resolve("llama-3.1-8b-h100")[0])


@pytest.mark.parametrize(("blocks", "share"), [(99, 0.01), (98, 0.01), (1000, 0.05), (299, 0.34)])
def test_the_blocks_kept_free_are_vllms(blocks: int, share: float) -> None:
    """The simulator's count is the one vLLM's ``KVCacheManager`` takes (its block count
    includes the null block)."""
    engine = SimSchedulerConfig(
        kv_tokens=blocks * 16, block_size=16, max_model_len=2048, watermark=share
    )
    with quiet_vllm():
        scheduler = build(engine, async_scheduling=False, bundle=None).scheduler
    assert scheduler.kv_cache_manager.watermark_blocks == engine.watermark_blocks


def test_a_second_call_waits_for_the_watermark_while_the_first_runs() -> None:
    """Two programs of one call, a prompt of 6 blocks each, in a cache of 12: without the
    watermark both are admitted in the first step; keeping 3 blocks free (a quarter of 13,
    the null block counted) while the first runs, the second waits for it to finish. Both
    backends agree call by call."""
    work = Workload(
        (
            AgentProgram("a", 0.0, (Call(96, 16, 0, None, 0.0),)),
            AgentProgram("b", 0.0, (Call(96, 16, 0, None, 0.0),)),
        )
    )
    engine = SimSchedulerConfig(kv_tokens=12 * 16, block_size=16, max_model_len=2048)
    admitted = {}
    for share in (0.0, 0.25):
        case = Case(
            work, ReplayConfig(engine=replace(engine, watermark=share)), Load(), PolicySpec("vllm")
        )
        fast, ours = run_both(case, COST)
        calls, diffs = compare(fast, ours)
        assert calls == 2 and not diffs, diffs
        admitted[share] = {r.program: (r.admitted_step, r.finish_step) for r in fast.calls}
    assert admitted[0.0]["a"][0] == admitted[0.0]["b"][0] == 0
    assert admitted[0.25]["a"][0] == 0 and admitted[0.25]["b"][0] > admitted[0.25]["a"][1]
