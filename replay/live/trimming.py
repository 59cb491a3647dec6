"""What of a workload a live run sends: the first programs, pauses capped, calls clipped.

A server takes requests up to its ``max_model_len`` (and its KV cache); a trace's
longer calls are clipped to fit (:func:`clip`), keeping the output and shortening
the prompt, and counted as truncated.
"""

from __future__ import annotations

from dataclasses import replace

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
    """(input, output) tokens of a call as sent to a server that takes ``limit`` tokens,
    and whether it was clipped."""
    inp, out = call.input_tokens, max(1, call.output_tokens)
    if limit is None or inp + out <= limit:
        return inp, out, False
    if out >= limit:
        out = max(1, limit // 2)
    return max(1, min(inp, limit - out)), out, True
