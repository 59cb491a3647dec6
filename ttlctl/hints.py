"""τ* in the shapes other engines take as a per-request KV retention hint.

Engines converge on "keep this request's KV for a while" hints supplied by the
client, and none of them computes the duration: ``ttlctl bundle query --as``
answers in their shape (docs/deploy.md). Each
function returns the JSON fragment to merge into that engine's request; τ = 0
("do not keep it") returns ``{}`` — no hint, the engine's default.

- ``dynamo``: ``nvext.cache_control`` ``{"type": "ephemeral", "ttl": "<n>s"}``, the
  duration as a string of whole seconds (rounded up, so a pin is never shorter
  than τ*);
- ``sglang``: ``retention_seconds``;
- ``trtllm``: ``kv_cache_retention_config`` — every token of the prompt
  (``token_start`` 0, ``token_end`` null) and the decoded tokens retained at
  priority 100, the top of TensorRT-LLM's 1–100 scale (default 35), for
  ``duration_ms``, after which the blocks fall back to the default priority.

LMCache is not targeted: no per-request retention field of its was found to
shape the answer for. Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ttlctl.errors import ConfigError

#: TensorRT-LLM's highest block priority (its default is 35)
TRTLLM_PRIORITY = 100


def dynamo(ttl_s: float) -> dict[str, Any]:
    if ttl_s <= 0:
        return {}
    return {"nvext": {"cache_control": {"type": "ephemeral", "ttl": f"{math.ceil(ttl_s)}s"}}}


def sglang(ttl_s: float) -> dict[str, Any]:
    if ttl_s <= 0:
        return {}
    return {"retention_seconds": round(ttl_s, 3)}


def trtllm(ttl_s: float) -> dict[str, Any]:
    if ttl_s <= 0:
        return {}
    ms = max(1, math.ceil(ttl_s * 1000))
    return {
        "kv_cache_retention_config": {
            "token_range_retention_configs": [
                {
                    "token_start": 0,
                    "token_end": None,
                    "priority": TRTLLM_PRIORITY,
                    "duration_ms": ms,
                }
            ],
            "decode_retention_priority": TRTLLM_PRIORITY,
            "decode_duration_ms": ms,
        }
    }


SHAPES: dict[str, Callable[[float], dict[str, Any]]] = {
    "dynamo": dynamo,
    "sglang": sglang,
    "trtllm": trtllm,
}
#: asked for by name but not built, with the reason
NOT_BUILT = {"lmcache": "no per-request retention field of LMCache's was found to target"}


def shape(engine: str, ttl_s: float) -> dict[str, Any]:
    """The hint for ``engine``; :class:`ValueError` for an engine not targeted."""
    fn = SHAPES.get(engine)
    if fn is None:
        why = NOT_BUILT.get(engine)
        choices = ", ".join(SHAPES)
        raise ConfigError(
            f"--as {engine}: {why}" if why else f"--as takes {choices}, not {engine!r}"
        )
    return fn(ttl_s)
