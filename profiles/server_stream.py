"""Streamed completions of fresh random prompts to one server, timed chunk by chunk
(:class:`Sender`, for :mod:`profiles.measure_server`).

A request is ``n`` fresh random token ids (no prefix-cache hit possible) generating exactly
``max_tokens`` (``ignore_eos``); each chunk that carries tokens is timed on arrival, the
count of tokens taken from the server's continuous usage stats where it sends them. The
prefix cache is emptied between measurements (``POST /reset_prefix_cache``) when the server
allows it (``VLLM_SERVER_DEV_MODE=1``); a warning says so, once, when it does not.
"""

from __future__ import annotations

import random
import time
import warnings
from collections.abc import Sequence
from typing import Any

from profiles.decode_pace import Stream
from profiles.server_target import ServerMeasureError, Target
from ttlctl.server import sse
from ttlctl.server.cache import reset_prefix_cache

#: the route every measurement goes to
COMPLETIONS = "/v1/completions"


class Sender:
    """Streamed completions of fresh random prompts to one server, timed chunk by chunk,
    and the prefix cache emptied between measurements when the server allows it."""

    def __init__(self, target: Target, pool: list[int], timeout_s: float) -> None:
        self.url = target.url
        self.model = target.model
        self.pool = pool
        self.timeout_s = timeout_s
        self.rng = random.Random()
        self.reset_ok = True

    def tokens(self, n: int) -> list[int]:
        """``n`` fresh random token ids."""
        return [self.rng.choice(self.pool) for _ in range(n)]

    def body(self, n: int, max_tokens: int, prefix: Sequence[int] = ()) -> dict[str, Any]:
        """A request of ``prefix`` then ``n`` fresh prompt tokens generating exactly
        ``max_tokens``."""
        return {
            "model": self.model,
            "prompt": [*prefix, *self.tokens(n)],
            "max_tokens": max_tokens,
            "min_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }

    def reset(self) -> None:
        """Empty the prefix cache (warn once, and stop trying, when the server cannot)."""
        if not self.reset_ok:
            return
        if not reset_prefix_cache(self.url, self.timeout_s):
            self.reset_ok = False
            warnings.warn(
                f"{self.url}: POST /reset_prefix_cache is not available (start the server "
                "with VLLM_SERVER_DEV_MODE=1); relying on fresh random prompts alone to "
                "avoid prefix-cache hits",
                RuntimeWarning,
                stacklevel=4,
            )

    def stream(self, body: dict[str, Any]) -> Stream:
        """POST a streamed /v1/completions and time each chunk that carries tokens, and
        the stream's end."""
        start = time.perf_counter()
        arrivals: list[tuple[float, int]] = []
        cached: int | None = None
        count = 0
        for now, chunk in sse.stream(self.url, COMPLETIONS, body, timeout_s=self.timeout_s):
            usage = chunk.get("usage") or {}
            details = usage.get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                cached = int(details["cached_tokens"])
            if not chunk.get("choices"):
                continue
            # continuous usage stats count tokens exactly; else one token a chunk
            seen = usage.get("completion_tokens")
            new = int(seen) if isinstance(seen, int) else count + 1
            if new > count:
                count = new
                arrivals.append((now, count))
        end = time.perf_counter()
        if not arrivals:
            n = len(body.get("prompt") or ())
            raise ServerMeasureError(
                f"{self.url}: the server returned no tokens for a {n}-token prompt"
            )
        return Stream(start, tuple(arrivals), cached, end)
