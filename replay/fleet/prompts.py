"""What a router reads of a call: its prompt as runs of content, and a session id.

A router that scores prefixes (``cache-aware``, ``kv-aware``, ``pin-aware``) needs each
call's prompt, not only its length. Until the trace carries prefixes shared across
programs, a program's prompts are derived from its own stream, as the replay already
models it: call k's prompt repeats the first ``reused_tokens`` of call k−1's prompt and
output, then carries fresh tokens. A prompt is a tuple of runs ``(content id, tokens)``;
a content id names one stretch of tokens wherever it appears (the same id always sits at
the same place after the same content), so two prompts share a prefix exactly as long as
their runs agree from the start. This is the one place to change when shared prefixes
land (:func:`program_prompts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count

from replay.workload import AgentProgram

Runs = tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class ProgramPrompts:
    """Per call of one program: its prompt, and its stream (prompt then output)."""

    prompts: tuple[Runs, ...]
    streams: tuple[Runs, ...]


def truncated(runs: Runs, tokens: int) -> Runs:
    """The first ``tokens`` tokens of ``runs``."""
    out: list[tuple[int, int]] = []
    left = tokens
    for cid, n in runs:
        if left <= 0:
            break
        out.append((cid, min(n, left)))
        left -= n
    return tuple(out)


def common_prefix(a: Runs, b: Runs) -> int:
    """Tokens that ``a`` and ``b`` share from their start."""
    total = 0
    for (ca, na), (cb, nb) in zip(a, b, strict=False):
        if ca != cb:
            break
        total += min(na, nb)
        if na != nb:
            break
    return total


def program_prompts(program: AgentProgram, ids: count[int]) -> ProgramPrompts:
    """The prompts and streams of ``program``'s calls (content ids drawn from ``ids``)."""
    prompts: list[Runs] = []
    streams: list[Runs] = []
    previous: Runs = ()
    for turn, call in enumerate(program.calls):
        reused = min(call.reused_tokens, sum(n for _, n in previous)) if turn else 0
        prompt = truncated(previous, reused)
        fresh = call.input_tokens - reused
        if fresh > 0:
            prompt = (*prompt, (next(ids), fresh))
        prompts.append(prompt)
        previous = (*prompt, (next(ids), call.output_tokens))
        streams.append(previous)
    return ProgramPrompts(tuple(prompts), tuple(streams))


def tokens(runs: Runs) -> int:
    return sum(n for _, n in runs)
