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


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("pool", ["runs", "blocks"])
def test_a_call_whose_first_token_is_its_last_finishes_in_its_prefill_step(
    pool: str, fast: bool
) -> None:
    """A call of one output token, its prompt chunked (300 tokens, 128 a step) beside a
    decoding call: the step that computes its last chunk samples its only token and
    finishes it there (the step's apply, ``replay/step_apply.py``), in both stepping
    modes, not one decode step later. B (32 + 40 tokens) is admitted first: step 0 runs
    B's prompt and A's first 96 tokens, step 1 B's decode and 127 more, step 2 B's
    decode and A's last 77, after which A is done."""
    work = Workload(
        (
            AgentProgram("B", 0.0, (Call(32, 40, 0, None, 0.0),)),
            AgentProgram("A", 0.0, (Call(300, 1, 0, None, 0.0),)),
        )
    )
    engine = SimSchedulerConfig(
        kv_tokens=16 * 40, block_size=16, max_num_batched_tokens=128, pool=pool, fast=fast
    )
    out = simulate(
        work, make(PolicySpec("vllm"), {}, lambda t, o: 0.0), COST, ReplayConfig(engine, check=True)
    )
    a, b = sorted(out.calls, key=lambda c: c.program)
    assert (a.program, b.program) == ("A", "B")
    assert a.finish_step == 2 and a.finish == a.first_token
    # B decodes alone after A is gone: one step per further token, none more
    assert b.finish_step == 39 and out.engine.stats.steps == 40
    p, d = COST.prefill_per_token_s, COST.decode_step_s
    # B's prompt and A's first chunk; then B's decode beside each of A's other chunks
    step_s = [128 * p + d, 127 * p + d, 77 * p + d]
    assert a.finish == pytest.approx(sum(step_s))
    assert b.finish == pytest.approx(sum(step_s) + 37 * d)
