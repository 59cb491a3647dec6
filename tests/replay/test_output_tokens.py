"""A call makes exactly its output tokens: the first in the step that computes the last of
its prompt, each further one in a decode step of its own (vLLM's count; no step more)."""

from __future__ import annotations

import pytest

from profiles.cost import ConstantCostModel
from replay.policies import PolicySpec, make
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig, simulate
from replay.workload import AgentProgram, Call, Workload

COST = ConstantCostModel()


@pytest.mark.parametrize("output", [1, 2, 5])
def test_a_call_takes_one_step_per_output_token(output: int) -> None:
    work = Workload((AgentProgram("A", 0.0, (Call(80, output, 0, None, 0.0),)),))
    cfg = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=16 * 20, block_size=16), check=True)
    out = simulate(work, make(PolicySpec("vllm"), {}, lambda t, o: 0.0), COST, cfg)
    (call,) = out.calls
    assert out.engine.stats.steps == output
    # the prompt's step ends with the first token; then one decode step per token
    assert call.first_token == pytest.approx(80 * COST.prefill_per_token_s + COST.decode_step_s)
    assert call.finish - call.first_token == pytest.approx((output - 1) * COST.decode_step_s)
