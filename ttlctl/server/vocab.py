"""Token ids for fresh prompt tokens, drawn from the served model's vocabulary.

Live replay and the engine profiler send prompts as token ids, so that the server's
prefix cache sees exactly the tokens sent. Those ids must be ones the server's
tokenizer knows (vLLM refuses a prompt holding an id past its tokenizer's largest:
"Token id N is out of vocabulary"). With the model's ``vocab_size`` (its
config.json) the pool is ``[LOW_IDS, vocab_size)``; without it, the largest id is
found from the server itself: ``POST /detokenize`` turns a known id into text and an
unknown one into nothing, so a doubling search and a bisection (about 30 small
requests, no model step) find where the vocabulary ends.
"""

from __future__ import annotations

from ttlctl.server import client
from ttlctl.server.client import ServerError

#: token ids never used for fresh prompt tokens (BOS/EOS/PAD of most small vocabularies)
LOW_IDS = 3
#: fewest distinct ids a pool must hold
MIN_POOL = 32
#: no vocabulary is searched past this id
MAX_ID = 1 << 24


def token_pool(
    url: str, model: str, vocab_size: int | None = None, timeout_s: float = 30.0
) -> list[int]:
    """Token ids for fresh prompt tokens: ``[LOW_IDS, vocab_size)``, the largest id found
    with ``/detokenize`` when ``vocab_size`` is not given (:class:`ServerError`: neither)."""
    top = vocab_size - 1 if vocab_size else _largest_id(url, model, timeout_s)
    if top + 1 - LOW_IDS < MIN_POOL:
        raise ServerError(
            f"{url}: the vocabulary has too few token ids ({top + 1}) for random prompts"
        )
    return list(range(LOW_IDS, top + 1))


def _known(url: str, model: str, token: int, timeout_s: float) -> bool:
    """Whether the server's tokenizer turns ``token`` into text."""
    try:
        answer = client.json_answer(
            url,
            "/detokenize",
            {"model": model, "tokens": [token]},
            method="POST",
            timeout_s=timeout_s,
        )
    except ServerError as exc:
        raise ServerError(
            f"cannot find the served model's vocabulary ({exc}); give its vocab_size "
            "(the model's config.json: --model)"
        ) from None
    return isinstance(answer, dict) and bool(answer.get("prompt"))


def _largest_id(url: str, model: str, timeout_s: float) -> int:
    """The largest token id the server's tokenizer knows (ids below it assumed known)."""
    low = LOW_IDS + MIN_POOL - 1
    if not _known(url, model, low, timeout_s):
        raise ServerError(
            f"{url}: /detokenize knows no token id {low}: too small a vocabulary for random prompts"
        )
    high = 2 * (low + 1)
    while _known(url, model, high, timeout_s):  # double until an unknown id
        low = high
        if high >= MAX_ID:
            return high
        high *= 2
    while high - low > 1:  # low is known, high is not
        mid = (low + high) // 2
        if _known(url, model, mid, timeout_s):
            low = mid
        else:
            high = mid
    return low
