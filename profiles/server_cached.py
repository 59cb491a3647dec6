"""A prefill on top of a cached prefix, as :mod:`profiles.measure_server` times it
(:func:`measure_cached_prefill`).

An agent's follow-up call finds most of its prompt in the prefix cache and computes only
the rest. A fit on fresh prompts prices that as its quadratic's increment: the new tokens,
and their attention over the cached ones at ``2q`` a pair. The engine does other work:
the server still reads every prompt token and the engine hashes every block of it (vLLM
computes a request's block hashes when it arrives), and the new tokens attend over a
cached prefix through the paged KV cache, not as a fresh prompt's tokens attend over each
other, at a cost of its own per pair (on vLLM's CPU engine with the 55M test model, a
fraction of what the fresh-prompt quadratic says at long prompts; docs/results-log.md).

Timed here: for a few prefix lengths (:func:`cached_plan`: shares of the longest prompt
the profile times, less the most :data:`NEW_TOKENS`) and each number of new tokens, the
cache emptied, the prefix sent alone (``max_tokens`` 1: its whole blocks are then cached),
then the same prefix and that many fresh tokens, timed to the first token, with the cached
tokens the server reports for it (``usage.prompt_tokens_details.cached_tokens``: the server
needs ``--enable-prompt-tokens-details``). :func:`profiles.engine_fit.fit_samples` fits
what each such TTFT takes beyond the fresh-prompt fit's price of its new tokens alone:
per cached token (``prefill.per_cached_token_s``) and per (new, cached) pair
(``prefill.per_context_pair_s``). Where the server reports no cached tokens, or cached
none, nothing is timed and the measurement says why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from profiles.server_stream import Sender

#: fresh tokens a timed request adds to its cached prefix: two numbers, so that what a
#: cached token costs and what attending over it costs can be told apart
NEW_TOKENS = (64, 256)
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
    f"{MIN_PREFIX} tokens beside {max(NEW_TOKENS)} new ones"
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
    room = max(ctxs) - max(NEW_TOKENS)
    return sorted({int(room * s) for s in CACHED_SHARES if int(room * s) >= MIN_PREFIX})


def measure_cached_prefill(
    sender: Sender,
    ctxs: Sequence[int],
    repeats: int,
    report: Callable[[str, int, int], None],
) -> CachedPrefill:
    """Each prefix of :func:`cached_plan` timed ``repeats`` times, round robin (see the
    module's docstring); stops at the first request whose cached tokens are not reported."""
    plan = [(length, new) for length in cached_plan(ctxs) for new in NEW_TOKENS]
    if not plan:
        return CachedPrefill((), NO_ROOM)
    ttfts: dict[tuple[int, int], list[float]] = {}
    total = len(plan) * repeats
    done = 0
    for _ in range(repeats):
        for length, new in plan:
            sender.reset()
            prefix = sender.tokens(length)
            sender.stream(sender.body(0, 1, prefix))
            timed = sender.stream(sender.body(new, 1, prefix))
            if timed.cached_tokens is None:
                return CachedPrefill((), NOT_REPORTED)
            if timed.cached_tokens > 0:
                key = (length + new, timed.cached_tokens)
                ttfts.setdefault(key, []).append(timed.ttft_s)
            done += 1
            report("cached prefill", done, total)
    if not ttfts:
        return CachedPrefill((), NONE_CACHED)
    return CachedPrefill(tuple((p, c, tuple(ttfts[p, c])) for p, c in sorted(ttfts)))
