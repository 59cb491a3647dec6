"""A step's output applied to the requests it scheduled one by one (vLLM's
``update_from_output()``, nano-vllm's ``postprocess()``), at the step's end.

Each request computes its scheduled tokens; one whose tokens reach the end of its
stream samples one token (its first token's time is the step's end); one that sampled
its last output token finishes, the others grow by the token sampled. What finishing
frees or pins, and where a sampling request goes next (the decode set), is the
scheduler's: :func:`advance` only says which requests finished and which sampled.
"""

from __future__ import annotations

from collections.abc import Iterable

from replay.request import SimRequest
from replay.step_plan import ScheduledRequest


def advance(
    scheduled: Iterable[ScheduledRequest], end: float
) -> tuple[list[SimRequest], list[SimRequest]]:
    """Apply the step ending at ``end`` to ``scheduled``; returns (requests finished,
    requests that sampled a token and run on), each in scheduled order."""
    finished: list[SimRequest] = []
    sampled: list[SimRequest] = []
    for r, num_new_tokens, _, _ in scheduled:
        r.num_computed_tokens += num_new_tokens
        if r.num_computed_tokens < r.num_tokens:
            continue  # a prefill chunk that did not reach the end
        r.generated += 1
        if r.first_token is None:
            r.first_token = end
        if r.generated >= r.output:
            finished.append(r)
        else:
            r.num_tokens += 1
            sampled.append(r)
    return finished, sampled
