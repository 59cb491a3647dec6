"""A prefill on top of a cached prefix, as :mod:`profiles.measure_server` times it
(:func:`measure_cached_prefill`).

An agent's follow-up call finds most of its prompt in the prefix cache and computes only
the rest, but the server still reads every prompt token and the engine still hashes every
block of it (vLLM computes a request's block hashes when it arrives). A fit on fresh
prompts folds that work into its per-token term, and so prices a cached prefix at
nothing: measured on the 55M test model on one CPU, 1,792 cached tokens added 8–22 ms to
prefills of 32–224 new tokens, where the fresh-prompt fit's attention term said 1–7 ms.

Timed here: for a few prefix lengths (:func:`cached_plan`: shares of the longest prompt
the profile times, less :data:`NEW_TOKENS`), the cache emptied, the prefix sent alone
(``max_tokens`` 1: its whole blocks are then cached), then the same prefix and
:data:`NEW_TOKENS` fresh tokens, timed to the first token, with the cached tokens the
server reports for it (``usage.prompt_tokens_details.cached_tokens``: the server needs
``--enable-prompt-tokens-details``). :func:`profiles.engine_fit.fit_samples` prices what
each such TTFT exceeds the fresh-prompt fit's price of its new tokens on top of the cached
ones, per cached token (``prefill.per_cached_token_s``). Where the server reports no
cached tokens, or cached none, nothing is timed and the measurement says why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from profiles.server_stream import Sender

#: fresh tokens each timed request adds to its cached prefix
NEW_TOKENS = 256
#: the prefixes timed, as shares of the room the longest prompt leaves
CACHED_SHARES = (0.25, 0.5, 1.0)
#: the shortest prefix timed (a few blocks of any block size)
MIN_PREFIX = 64

NOT_REPORTED = (
    "not measured: the server does not report cached prompt tokens (start it with "
    "--enable-prompt-tokens-details)"
)
NONE_CACHED = "not measured: the server found nothing cached (is prefix caching off?)"
NO_ROOM = (
    f"not measured: the longest prompt timed leaves no room for a cached prefix of "
    f"{MIN_PREFIX} tokens beside {NEW_TOKENS} new ones"
)


@dataclass(frozen=True, slots=True)
class CachedPrefill:
    """The timings: (prompt tokens, cached tokens, TTFTs in seconds) per point, or why
    there are none."""

    points: tuple[tuple[int, int, tuple[float, ...]], ...]
    #: why nothing was timed ("" when something was)
    note: str = ""


def cached_plan(ctxs: Sequence[int]) -> list[int]:
    """The prefix lengths to time: :data:`CACHED_SHARES` of what the longest prompt the
    profile times leaves beside :data:`NEW_TOKENS`, none shorter than :data:`MIN_PREFIX`."""
    room = max(ctxs) - NEW_TOKENS
    return sorted({int(room * s) for s in CACHED_SHARES if int(room * s) >= MIN_PREFIX})


def measure_cached_prefill(
    sender: Sender,
    ctxs: Sequence[int],
    repeats: int,
    report: Callable[[str, int, int], None],
) -> CachedPrefill:
    """Each prefix of :func:`cached_plan` timed ``repeats`` times, round robin (see the
    module's docstring); stops at the first request whose cached tokens are not reported."""
    prefixes = cached_plan(ctxs)
    if not prefixes:
        return CachedPrefill((), NO_ROOM)
    ttfts: dict[tuple[int, int], list[float]] = {}
    total = len(prefixes) * repeats
    done = 0
    for _ in range(repeats):
        for length in prefixes:
            sender.reset()
            prefix = sender.tokens(length)
            sender.stream(sender.body(0, 1, prefix))
            timed = sender.stream(sender.body(NEW_TOKENS, 1, prefix))
            if timed.cached_tokens is None:
                return CachedPrefill((), NOT_REPORTED)
            if timed.cached_tokens > 0:
                key = (length + NEW_TOKENS, timed.cached_tokens)
                ttfts.setdefault(key, []).append(timed.ttft_s)
            done += 1
            report("cached prefill", done, total)
    if not ttfts:
        return CachedPrefill((), NONE_CACHED)
    return CachedPrefill(tuple((p, c, tuple(ttfts[p, c])) for p, c in sorted(ttfts)))
