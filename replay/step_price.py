"""A step's price: its seconds from the cost model (the model runner's part of a step),
and what a step that starts after the engine sat idle pays on top (:func:`wake_after`)."""

from __future__ import annotations

from profiles.cost import CostModel
from replay.request import SimRequest
from replay.step_plan import StepPlan


def price_step(plan: StepPlan, cost: CostModel) -> tuple[float, bool]:
    """(seconds, whether every request of the step decodes): the seconds the step of
    ``plan`` takes, its prefill chunks and its decodes (how many, and the KV they read) on
    ``cost``, plus the reload of admitted prefixes from the offload tier. Read before the
    step is applied (the requests' counts as scheduled). A request decodes when its prompt
    is computed and one token remains; any other computes a chunk. A request's first
    chunk since it arrived (never preempted, nothing computed past what it found cached
    or reloaded) also pays for the prompt tokens it found (:func:`first_chunk_cached`)."""
    chunks: list[tuple[int, int]] = []
    num_decodes = plan.num_decodes_in_set
    kv_tokens = plan.decode_set_kv_tokens
    cached = 0
    for req, num_new_tokens, num_computed_tokens, _ in plan.scheduled:
        if req.num_tokens - num_computed_tokens > 1 or num_computed_tokens < req.prompt:
            chunks.append((num_computed_tokens, num_new_tokens))
            cached += first_chunk_cached(req, num_computed_tokens)
        else:
            num_decodes += 1
            kv_tokens += num_computed_tokens
    return cost.step_s(chunks, num_decodes, kv_tokens, cached) + plan.reload_s, not chunks


def first_chunk_cached(req: SimRequest, num_computed_tokens: int) -> int:
    """The prompt tokens ``req`` found in the prefix cache (or reloaded) when its chunk
    computed from ``num_computed_tokens`` is its first since it arrived, else 0: what its
    admission still costs is paid once (a request resumed after a preemption was read and
    hashed when it first arrived, as vLLM keeps a request's block hashes)."""
    if req.preemptions or num_computed_tokens != req.hit_tokens + req.loaded_tokens:
        return 0
    return num_computed_tokens


def wake_after(cost: CostModel, last_end: float, start: float) -> float:
    """What a step that computes something and starts at ``start`` pays on top of its
    price because the engine has had nothing to run since its last such step ended at
    ``last_end`` (-inf: it never ran; an engine starts long idle): the cost model's
    :meth:`~profiles.cost.CostModel.wake_s` of the idle spell, 0 when it starts as the
    step before it ends. Every backend charges a wake through this rule."""
    return cost.wake_s(start - last_end) if start > last_end else 0.0
