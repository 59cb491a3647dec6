"""What a replay says of the calls its engine rejected (a prompt that reaches the model's
length, a call longer than the KV cache: :func:`replay.sim.fits_engine`): one line, for
``replay`` and for the verdicts of ``tune`` and ``refit``."""

from __future__ import annotations

from ttlctl.nouns import counted


def rejected_line(rejected: int, calls: int, truncate: bool) -> str:
    """Why calls were rejected, and what to do; --truncate is suggested only when not given
    (it clips prompts, never the output: a call whose output alone does not fit stays out)."""
    head = f"{rejected:,} of {counted(calls, 'call')} rejected"
    if truncate:
        return (
            f"{head} (the output alone is longer than the model or the KV cache; --truncate "
            "clips only prompts): their programs stop there"
        )
    return (
        f"{head} (a prompt that reaches the model's length, or a call longer than the KV "
        "cache): their programs stop there; "
        "--truncate clips them instead"
    )


def held_back_line(rejected: int, calls: int, truncate: bool) -> str:
    """:func:`rejected_line` of the held-back replays that judge a policy (the most one
    replay rejected): the verdict weighs only the programs that ran to their end."""
    return (
        f"held-back replays: {rejected_line(rejected, calls, truncate)}; the JCTs compared "
        "are of the programs that ran to their end"
    )
