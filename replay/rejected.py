"""What a replay says of the calls its engine rejected (a prompt that reaches the model's
length, a call longer than the KV cache: :func:`replay.sim.fits_engine`): one line, for
``replay`` and for the verdicts of ``tune`` and ``refit``."""

from __future__ import annotations

from ttlctl.nouns import counted


def rejected_line(rejected: int, calls: int) -> str:
    """Why calls were rejected, and what to do (``--truncate`` clips every call to fit:
    with it none is rejected for its length)."""
    return (
        f"{rejected:,} of {counted(calls, 'call')} rejected (a prompt that reaches the model's "
        "length, or a call longer than the KV cache): their programs stop there; "
        "--truncate clips them instead"
    )


def held_back_line(rejected: int, calls: int) -> str:
    """:func:`rejected_line` of the held-back replays that judge a policy (the most one
    replay rejected): the verdict weighs only the programs that ran to their end."""
    return (
        f"held-back replays: {rejected_line(rejected, calls)}; the JCTs compared "
        "are of the programs that ran to their end"
    )
