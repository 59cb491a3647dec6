"""What of a workload a live run sends: the first programs, pauses capped, calls clipped.

A server takes requests up to its ``max_model_len`` (and its KV cache); a trace's
longer calls are clipped to fit (:func:`clip`: the prompt shortened, an output that alone
does not fit halved, as a replay's ``--truncate`` clips them), and counted as truncated.
"""

from __future__ import annotations

from dataclasses import replace

from replay.clip import clip as clip_call
from replay.workload import Call, Workload


def cap_pauses(workload: Workload, cap_s: float | None) -> Workload:
    """Every recorded pause capped at ``cap_s`` (AIPerf's --trace-idle-gap-cap-seconds)."""
    if cap_s is None:
        return workload
    return Workload(
        tuple(
            replace(p, calls=tuple(replace(c, pause_s=min(c.pause_s, cap_s)) for c in p.calls))
            for p in workload.programs
        )
    )


def first_programs(workload: Workload, n: int | None) -> Workload:
    """The first ``n`` programs (in the workload's start order)."""
    if n is None or n >= len(workload.programs):
        return workload
    return Workload(workload.programs[: max(0, n)])


def clip(call: Call, limit: int | None) -> tuple[int, int, bool]:
    """(input, output) tokens of a call as sent to a server that takes ``limit`` tokens
    (None: any), and whether it was clipped (:func:`replay.clip.clip`, the rule of a
    replay's ``--truncate`` too); at least one output token is asked for."""
    sent = replace(call, output_tokens=max(1, call.output_tokens))
    if limit is None:
        return sent.input_tokens, sent.output_tokens, False
    kept, clipped = clip_call(sent, limit)
    return kept.input_tokens, kept.output_tokens, clipped
