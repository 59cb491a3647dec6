"""What a router reads of a call: its prompt as runs of content.

A router that scores prefixes (``cache-aware``) needs each call's prompt, not only its
length. A prompt is a tuple of runs ``(content id, tokens)``; a content id names one
stretch of tokens wherever it appears (the same id always sits at the same place after
the same content), so two prompts share a prefix exactly as long as their runs agree
from the start:

- first the blocks the call shares with other programs (a system prompt, tool
  definitions: :meth:`replay.workload.Call.shared_keys`), one run per engine block keyed
  as the backends key it;
- then the program's own stream, as the replay models it: call k's prompt repeats the
  first ``reused_tokens`` of call k−1's prompt and output, then carries fresh tokens;
  a call whose shared keys differ from call k−1's repeats none of it (its stream
  followed other tokens: as :mod:`replay.vllmsim.tokens` builds vLLM's prompts, and the
  pools hit a program's own blocks only under the same shared keys), so a replica that
  held an older turn's stream finds none of it reused past such a change.
  Unlike the ``(program, block index)`` keys of :meth:`~replay.workload.Call.block_keys`,
  the runs tell a rewritten history from the one it replaced, and a prompt of thousands
  of blocks stays a few runs long.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from itertools import count

from replay.workload import AgentProgram

Runs = tuple[tuple[Hashable, int], ...]


@dataclass(frozen=True, slots=True)
class ProgramPrompts:
    """Per call of one program: its prompt, and its output's run (the call's stream is
    the prompt then the output: :meth:`stream`)."""

    prompts: tuple[Runs, ...]
    outputs: tuple[tuple[Hashable, int], ...]
    #: each prompt's tokens
    sizes: tuple[int, ...]

    def stream(self, turn: int) -> Runs:
        """Call ``turn``'s prompt and output (built when asked: most calls never need it)."""
        return (*self.prompts[turn], self.outputs[turn])


def truncated(runs: Runs, tokens: int) -> Runs:
    """The first ``tokens`` tokens of ``runs``."""
    out: list[tuple[Hashable, int]] = []
    left = tokens
    for run in runs:
        if left <= 0:
            break
        n = run[1]
        out.append(run if n <= left else (run[0], left))  # a whole run: the same tuple
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


def skipped(runs: Runs, tokens: int) -> Runs:
    """``runs`` without their first ``tokens`` tokens."""
    out: list[tuple[Hashable, int]] = []
    left = tokens
    for run in runs:
        n = run[1]
        if left >= n:
            left -= n
            continue
        out.append((run[0], n - left) if left else run)
        left = 0
    return tuple(out)


def program_prompts(program: AgentProgram, ids: count[int], block_size: int) -> ProgramPrompts:
    """The prompts and streams of ``program``'s calls (content ids drawn from ``ids``; the
    shared blocks keyed at the engine's ``block_size``)."""
    prompts: list[Runs] = []
    outputs: list[tuple[Hashable, int]] = []
    previous: Runs = ()  # the program's own stream, from its first token
    held = 0  # its tokens
    empty_runs = False  # an output of no tokens is in the stream (a run of length 0)
    keys: tuple[Hashable, ...] = ()  # the previous call's shared keys
    for turn, call in enumerate(program.calls):
        shared = call.shared_keys(block_size)
        # a call whose shared keys are not its predecessor's repeats none of its stream
        # (that stream followed other tokens: the pools, vLLM's token streams and the live
        # driver hit none of it either)
        reused = min(call.reused_tokens, held) if turn and shared == keys else 0
        keys = shared
        # all of it: the same runs (truncating would drop a trailing empty one)
        own = previous if reused == held and not empty_runs else truncated(previous, reused)
        fresh = call.input_tokens - reused
        if fresh > 0:
            own = (*own, (next(ids), fresh))
        held = max(reused, call.input_tokens) + call.output_tokens
        if shared or empty_runs:
            head = tuple((key, block_size) for key in shared)
            prompt = head + skipped(own, len(shared) * block_size)  # (drops empty runs)
        else:
            prompt = own  # what skipping nothing gives, without the copy
        prompts.append(prompt)
        output = (next(ids), call.output_tokens)
        empty_runs = empty_runs or call.output_tokens <= 0
        previous = (*own, output)
        outputs.append(output)
    return ProgramPrompts(
        tuple(prompts), tuple(outputs), tuple(c.input_tokens for c in program.calls)
    )


def tokens(runs: Runs) -> int:
    return sum(n for _, n in runs)
