"""τ* in the shapes other engines take as a per-request KV retention hint.

Engines converge on "keep this request's KV for a while" hints supplied by the
client, and none of them computes the duration: ``ttlctl bundle query --as``
answers in their shape (docs/deploy.md). Each
function returns the JSON fragment to merge into that engine's request; τ = 0
("do not keep it") returns ``{}`` — no hint, the engine's default.

- ``dynamo``: ``nvext.cache_control`` ``{"type": "ephemeral", "ttl": "<n>"}``, the
  duration as a string of whole seconds (rounded up, so a pin is never shorter
  than τ*). Dynamo reads integer seconds or ``5m``/``1h`` and clamps the result to
  [300, 3600] s (an unrecognised string becomes 300 s): its
  ``CacheControl::ttl_seconds`` in dynamo-protocols 2.0.2, and the cache-pinning
  section of Dynamo's SGLang agentic guide (fern/pages/backends/sglang/agents.md). A
  12 s τ* is therefore a 300 s pin: :func:`clamped` says so;
- ``sglang``: ``retention_seconds``;
- ``trtllm``: ``kv_cache_retention_config`` — every token of the prompt
  (``token_start`` 0, ``token_end`` null) and the decoded tokens retained at
  priority 100, the top of TensorRT-LLM's 1–100 scale (default 35), for
  ``duration_ms``, after which the blocks fall back to the default priority.

Each target's bounds are in :data:`BOUNDS`; :func:`effective_ttl_s` is the TTL the
engine will apply to the hint, :func:`clamped` the one-line note when that differs from
τ* (rounded up as the shape rounds it). SGLang's ``retention_seconds`` and TensorRT-LLM's
``duration_ms`` have no clamp in what we read (the latter is whole milliseconds, so
τ* is rounded up to one). LMCache is not targeted: no per-request retention field of its
was found to shape the answer for. Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ttlctl.errors import ConfigError

#: TensorRT-LLM's highest block priority (its default is 35)
TRTLLM_PRIORITY = 100


def dynamo(ttl_s: float) -> dict[str, Any]:
    if ttl_s <= 0:
        return {}
    return {"nvext": {"cache_control": {"type": "ephemeral", "ttl": f"{math.ceil(ttl_s)}"}}}


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


@dataclass(frozen=True, slots=True)
class Bounds:
    """What an engine does to the duration it is given: the whole-unit step it rounds to
    (we round up to it) and the range it clamps to (None: no bound)."""

    step_s: float
    min_s: float | None
    max_s: float | None
    field: str


BOUNDS: dict[str, Bounds] = {
    "dynamo": Bounds(1.0, 300.0, 3600.0, "nvext.cache_control.ttl"),
    "sglang": Bounds(0.001, None, None, "retention_seconds"),
    "trtllm": Bounds(0.001, None, None, "kv_cache_retention_config duration_ms"),
}


def clamps(engine: str) -> bool:
    """Whether ``engine`` bounds the duration it is given (Dynamo does; SGLang and
    TensorRT-LLM, in what we read, take any), so that a hint may be clamped at all."""
    b = _bounds(engine)
    return b.min_s is not None or b.max_s is not None


def requested_ttl_s(engine: str, ttl_s: float) -> float:
    """The duration the hint asks for: τ* rounded up to the engine's step (0: no hint)."""
    if ttl_s <= 0:
        return 0.0
    step = _bounds(engine).step_s
    return math.ceil(round(ttl_s / step, 9)) * step


def effective_ttl_s(engine: str, ttl_s: float) -> float:
    """The TTL the engine will apply to the hint for τ* = ``ttl_s`` (0: no hint)."""
    asked = requested_ttl_s(engine, ttl_s)
    if asked <= 0:
        return 0.0
    b = _bounds(engine)
    if b.min_s is not None:
        asked = max(asked, b.min_s)
    if b.max_s is not None:
        asked = min(asked, b.max_s)
    return asked


def clamped(engine: str, ttl_s: float) -> str | None:
    """One line when the engine's bounds change the pin asked for; None when they do not."""
    asked, applied = requested_ttl_s(engine, ttl_s), effective_ttl_s(engine, ttl_s)
    if applied == asked:
        return None
    b = _bounds(engine)
    longer = "longer" if applied > asked else "shorter"
    return (
        f"{engine} clamps {b.field} to [{b.min_s:g}, {b.max_s:g}] s: τ* {ttl_s:.3g} s is "
        f"pinned for {applied:g} s ({longer} than τ*)"
    )


def _bounds(engine: str) -> Bounds:
    shape(engine, 0.0)  # an engine not targeted: refused, one line
    return BOUNDS[engine]


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
