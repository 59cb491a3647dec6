"""A step's price: its seconds from the cost model (the model runner's part of a step)."""

from __future__ import annotations

from profiles.cost import CostModel
from replay.step_plan import StepPlan


def price_step(plan: StepPlan, cost: CostModel) -> tuple[float, bool]:
    """(seconds, whether every request of the step decodes): the seconds the step of
    ``plan`` takes, its prefill chunks and its decodes (how many, and the KV they read) on
    ``cost``, plus the reload of admitted prefixes from the offload tier. Read before the
    step is applied (the requests' counts as scheduled). A request decodes when its prompt
    is computed and one token remains; any other computes a chunk."""
    chunks: list[tuple[int, int]] = []
    num_decodes = plan.num_decodes_in_set
    kv_tokens = plan.decode_set_kv_tokens
    for req, num_new_tokens, num_computed_tokens, _ in plan.scheduled:
        if req.num_tokens - num_computed_tokens > 1 or num_computed_tokens < req.prompt:
            chunks.append((num_computed_tokens, num_new_tokens))
        else:
            num_decodes += 1
            kv_tokens += num_computed_tokens
    return cost.step_s(chunks, num_decodes, kv_tokens) + plan.reload_s, not chunks
