"""A running vLLM server as :mod:`profiles.measure_server` measures it, and what to time.

What the server is (:func:`probe_target`: its model, its longest request, its KV cache
capacity, its version, its KV bytes per token from the model config or from its
``vllm:cache_config_info`` metric) and the prompt lengths prefill is timed at
(:func:`contexts_to_time`: those asked, checked against the server, or the default grid up
to what it takes, and within the tokens one of its steps computes when the server says:
a longer prompt's time to first token would span several steps, which the fit of a
prompt's prefill as one step cannot tell apart). Both run before any time is spent
measuring; a refusal is a :class:`ServerMeasureError`, one line naming the URL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from profiles.grid import engine_contexts
from profiles.models import kv_bytes_per_token as config_kv_bytes_per_token
from ttlctl.errors import TtlctlError
from ttlctl.server.facts import probe, step_budget

#: tokens kept free below ``max_model_len`` beside the generated ones
CONTEXT_MARGIN = 16


class ServerMeasureError(TtlctlError, ValueError):
    """The server cannot be measured as asked: one line naming the URL."""


@dataclass(frozen=True, slots=True)
class Target:
    """The server as measured: what it serves, how long a request may be, its KV cache."""

    url: str
    model: str
    #: longest request (0: unknown)
    max_model_len: int
    #: KV cache capacity in tokens (None: unknown)
    kv_capacity: int | None
    version: str | None
    kv_bytes: int
    kv_from: str
    #: the tokens one engine step computes (``max_num_batched_tokens``; None: unknown)
    step_budget: int | None = None


def probe_target(url: str, model_config: dict[str, Any] | None, timeout_s: float) -> Target:
    """Probe the server; its KV bytes per token from the model config or its metrics
    (fails before any time is spent measuring)."""
    info = probe(url, timeout_s)
    if info.max_model_len:
        max_model_len = info.max_model_len
    elif model_config is not None:
        max_model_len = int(model_config.get("max_position_embeddings") or 0)
    else:
        max_model_len = 0
    if model_config is not None:
        kv_bytes = config_kv_bytes_per_token(model_config)
        kv_from = "model config"
    else:
        memory, capacity = info.kv_cache_memory_bytes, info.kv_tokens
        if memory is None or capacity is None:
            raise ServerMeasureError(
                f"{url}: the server does not tell its KV bytes per token; "
                "pass the model's config with --model"
            )
        kv_bytes = memory // capacity
        kv_from = "server metrics: kv_cache_memory_bytes / kv_cache_size_tokens"
    return Target(
        url,
        info.model,
        max_model_len,
        info.kv_tokens,
        info.version,
        kv_bytes,
        kv_from,
        step_budget(url, timeout_s),
    )


def contexts_to_time(
    target: Target,
    contexts: Sequence[int] | None,
    output_tokens: int,
    max_context: int | None = None,
) -> list[int]:
    """The prompt lengths prefill is timed at: ``contexts``, checked against the server
    and ``max_context``, or the default grid up to what the server takes (and up to its
    step budget, when it tells it: each timed prefill one step; and up to ``max_context``,
    which keeps the prompts of a server that does not tell its budget within it)."""
    url, max_model_len, kv_capacity = target.url, target.max_model_len, target.kv_capacity
    budget = target.step_budget
    limit = (max_model_len or 0) - output_tokens - CONTEXT_MARGIN
    if kv_capacity is not None:
        limit = min(limit, kv_capacity - output_tokens - CONTEXT_MARGIN)
    if budget is not None:
        limit = min(limit, budget)
    if max_context is not None:
        limit = min(limit, max_context)
    if contexts is None:
        if max_model_len <= 0:
            raise ServerMeasureError(
                f"{url}: the server does not report max_model_len; pass contexts or --model"
            )
        ctxs = engine_contexts(limit)
    else:
        ctxs = sorted({int(c) for c in contexts})
        for c in ctxs:
            if c < 1:
                raise ServerMeasureError(f"{url}: context lengths must be positive, got {c}")
            if max_context is not None and c > max_context:
                raise ServerMeasureError(f"{url}: context {c} is over max_context {max_context}")
            if max_model_len > 0 and c + output_tokens > max_model_len:
                raise ServerMeasureError(
                    f"{url}: context {c} + {output_tokens} output tokens does not fit "
                    f"max_model_len {max_model_len}"
                )
            if kv_capacity is not None and c + output_tokens > kv_capacity:
                raise ServerMeasureError(
                    f"{url}: context {c} + {output_tokens} output tokens does not fit "
                    f"the server's KV cache ({kv_capacity} tokens)"
                )
            if budget is not None and c > budget:
                raise ServerMeasureError(
                    f"{url}: context {c} is over the server's max_num_batched_tokens "
                    f"({budget}): its prefill would take several steps, which the fit "
                    "takes as one; time contexts within it"
                )
    if len(ctxs) < 3:
        raise ServerMeasureError(
            f"{url}: need at least 3 context lengths to fit prefill, got {ctxs} "
            f"(max_model_len {max_model_len})"
        )
    return ctxs
