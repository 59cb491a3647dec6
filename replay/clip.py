"""A call clipped to fit a server's token limit, as a replay's client clips it: the one rule
of ``--truncate`` and of every live run (whose client sends nothing the server would refuse).

The prompt is shortened to make room for the output; an output that alone reaches the limit
is halved first (the prompt then takes what is left, at least a token). So a clipped call is
never refused for its length, where vLLM refuses a prompt that reaches ``max_model_len`` and
cuts an output past it (:func:`replay.sim.fits_engine` without ``--truncate``).
"""

from __future__ import annotations

from dataclasses import replace

from replay.workload import Call


def clip(call: Call, limit: int) -> tuple[Call, bool]:
    """``call`` as sent to a server that takes ``limit`` tokens (prompt + output), and
    whether it was clipped; its reused prefix never longer than the prompt kept."""
    inp, out = call.input_tokens, call.output_tokens
    if inp + out <= limit:
        return call, False
    if out >= limit:
        out = max(1, limit // 2)
    inp = max(1, min(inp, limit - out))
    kept = replace(
        call, input_tokens=inp, output_tokens=out, reused_tokens=min(call.reused_tokens, inp)
    )
    return kept, True
