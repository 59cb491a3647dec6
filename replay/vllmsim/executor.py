"""The stand-in for vLLM's model executor: what a step computes, samples and costs.

For each request vLLM scheduled, the step computes ``n`` tokens on top of the
``c`` it had (``Request.num_computed_tokens`` already counts the step: the
scheduler advances it in ``_update_after_schedule``). A request samples one token
when the step reaches the end of its known tokens (``not is_prefill_chunk``, as
vLLM sets it); the sampled token is the call's next output token, at output index
``c + n − num_prompt_tokens``, the same id on every path (a stale output after a
preemption included). Requests that do not sample get no token, as a model
runner returns for a partial prefill.

The step's price is the fast backend's cost model on the same classification:
a decode is one token computed past the prompt that samples (its KV context
``c``); anything else is a prefill chunk ``(c, n)``; and the prompt tokens that the
requests scheduled for the first time found in the prefix cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.outputs import ModelRunnerOutput

from profiles.cost import CostModel
from replay.scheduler_stats import Stats
from replay.step_price import new_size_extra, wake_after


@dataclass(frozen=True, slots=True)
class Step:
    output: ModelRunnerOutput
    #: (context before, tokens) of each prefill chunk
    chunks: list[tuple[int, int]]
    decodes: int
    #: KV context of the decodes
    kv_tokens: int
    #: prompt tokens found cached by the requests this step schedules for the first time
    cached: int = 0

    def seconds(self, cost: CostModel) -> float:
        if not self.chunks and not self.decodes:
            return 0.0
        return cost.step_s(self.chunks, self.decodes, self.kv_tokens, self.cached)


def book_step(
    step: Step,
    scheduled: SchedulerOutput,
    cost: CostModel,
    stats: Stats,
    last_end: float,
    start: float,
    sizes: set[int] | None,
) -> tuple[float, int]:
    """The step's seconds and its index among the engine's computing steps (−1: it computed
    nothing), booked into ``stats``: its count, busy seconds and longest step, and the
    requests it preempted. A computing step that starts after the engine's last one ended
    (``start > last_end``: the engine sat idle) also pays the wake
    (:func:`replay.step_price.wake_after`), and one of a size not in ``sizes`` (the step
    sizes the engine has run; None: every size) the new size's
    (:func:`replay.step_price.new_size_extra`). One booking for both drivers of vLLM's
    scheduler (a single engine's :mod:`replay.vllmsim.harness`, a fleet replica's
    :mod:`replay.vllmsim.engine`)."""
    seconds = step.seconds(cost)
    index = -1
    tokens = scheduled.total_num_scheduled_tokens
    if tokens > 0:
        if start > last_end:  # the first step after an idle spell
            seconds += wake_after(cost, last_end, start)
        if sizes is not None:
            seconds += new_size_extra(cost, sizes, tokens)
        index = stats.steps
        stats.steps += 1
        stats.busy_s += seconds
        if seconds > stats.longest_step_s:
            stats.longest_step_s = seconds
    stats.preemptions += len(scheduled.preempted_req_ids or ())
    return seconds, index


class HasOutputs(Protocol):
    #: the call's output token ids
    outputs: list[int]


def execute(
    scheduled: SchedulerOutput,
    requests: Mapping[str, Any],
    calls: Mapping[str, HasOutputs],
    filler: int,
) -> Step:
    """What the model would return for ``scheduled`` (``requests``: vLLM's, by id;
    ``calls``: each request's output token ids; ``filler``: the id for a position
    past them, which vLLM never keeps)."""
    req_ids: list[str] = []
    sampled: list[list[int]] = []
    chunks: list[tuple[int, int]] = []
    decodes = kv = 0
    for req_id, n in scheduled.num_scheduled_tokens.items():
        request = requests[req_id]
        after = int(request.num_computed_tokens)
        before = after - n
        samples = not request.is_prefill_chunk
        prompt = int(request.num_prompt_tokens)
        if samples and n == 1 and before >= prompt:
            decodes += 1
            kv += before
        else:
            chunks.append((before, n))
        req_ids.append(req_id)
        if samples:
            ids = calls[req_id].outputs
            index = after - prompt
            sampled.append([ids[index] if 0 <= index < len(ids) else filler])
        else:
            sampled.append([])
    output = runner_output(req_ids, sampled)
    return Step(output, chunks, decodes, kv, first_scheduled_cached(scheduled, requests))


#: 0.32 and 0.33 also take each request's index in ``req_ids``; 0.34 derives it
INDEXED = "req_id_to_index" in {f.name for f in fields(ModelRunnerOutput)}


def runner_output(req_ids: list[str], sampled: list[list[int]]) -> ModelRunnerOutput:
    """What a model runner returns for a step: the requests run, in order, and the token
    each sampled (none for a partial prefill)."""
    if INDEXED:
        index = {r: i for i, r in enumerate(req_ids)}
        return ModelRunnerOutput(req_ids=req_ids, req_id_to_index=index, sampled_token_ids=sampled)
    return ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=sampled)  # type: ignore[call-arg]


def first_scheduled_cached(scheduled: SchedulerOutput, requests: Mapping[str, Any]) -> int:
    """The prompt tokens found in the prefix cache by the requests ``scheduled`` runs for
    the first time (vLLM's ``scheduled_new_reqs``, each with the tokens it found as its
    ``num_computed_tokens``; one resumed after a preemption, which a model runner may
    also receive there, paid when it first arrived): what admitting them still costs."""
    return sum(
        int(new.num_computed_tokens)
        for new in scheduled.scheduled_new_reqs
        if not requests[new.req_id].num_preemptions
    )
