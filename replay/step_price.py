"""A step's price: its seconds from the cost model (the model runner's part of a step),
what a step that starts after the engine sat idle pays on top (:func:`wake_after`), and
what the first step of a size the engine has not run pays on top (:func:`new_size_extra`)."""

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


def step_tokens(plan: StepPlan) -> int:
    """The tokens the step of ``plan`` schedules (vLLM's ``total_num_scheduled_tokens``):
    its prefill chunks and one a decode."""
    return plan.num_decodes_in_set + sum(n for _, n, _, _ in plan.scheduled)


def new_size_extra(cost: CostModel, sizes: set[int], tokens: int) -> float:
    """What a step of ``tokens`` scheduled tokens pays on top of its price on an engine that
    has run the step sizes ``sizes``: the cost model's
    :meth:`~profiles.cost.CostModel.new_shape_s` the first time (``tokens`` is then added to
    ``sizes``), 0 after. An engine that has served for long has run every size and keeps no
    set (the caller asks only with one). Every backend charges a new size through this rule."""
    if tokens in sizes or tokens <= 0:
        return 0.0
    sizes.add(tokens)
    return cost.new_shape_s(tokens)
