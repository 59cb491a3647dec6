"""τ* as other engines' retention hints (ttlctl/hints.py)."""

from __future__ import annotations

import pytest

from ttlctl import hints


@pytest.mark.parametrize("engine", sorted(hints.SHAPES))
def test_no_pin_is_no_hint(engine: str) -> None:
    assert hints.shape(engine, 0.0) == {}


def test_shapes_never_shorten_the_pin() -> None:
    # whole seconds as Dynamo parses them (integer seconds, or 5m/1h: "3s" is not one)
    assert hints.dynamo(2.01) == {"nvext": {"cache_control": {"type": "ephemeral", "ttl": "3"}}}
    assert hints.dynamo(3.0)["nvext"]["cache_control"]["ttl"] == "3"
    assert hints.sglang(1.23456) == {"retention_seconds": 1.235}
    cfg = hints.trtllm(0.0004)["kv_cache_retention_config"]
    assert cfg["decode_duration_ms"] == 1 and cfg["decode_retention_priority"] == 100
    (span,) = cfg["token_range_retention_configs"]
    assert span == {"token_start": 0, "token_end": None, "priority": 100, "duration_ms": 1}
    assert hints.trtllm(2.5)["kv_cache_retention_config"]["decode_duration_ms"] == 2500


def test_engines_not_targeted_say_why() -> None:
    with pytest.raises(ValueError, match="lmcache: no per-request retention field"):
        hints.shape("lmcache", 1.0)
    with pytest.raises(ValueError, match="takes dynamo, sglang, trtllm"):
        hints.shape("mystery", 1.0)


def test_dynamos_clamp_is_the_effective_ttl_and_said_once() -> None:
    """Dynamo clamps cache_control.ttl to [300, 3600] s (dynamo-protocols 2.0.2
    CacheControl::ttl_seconds; Dynamo's SGLang agentic guide)."""
    assert hints.effective_ttl_s("dynamo", 12.0) == 300.0
    assert hints.effective_ttl_s("dynamo", 298.9) == 300.0
    assert hints.clamped("dynamo", 299.2) is None  # rounded up to 300 s by the hint itself
    assert hints.clamped("dynamo", 298.9) == (
        "dynamo clamps nvext.cache_control.ttl to [300, 3600] s: τ* 299 s is pinned for "
        "300 s (longer than τ*)"
    )
    assert hints.effective_ttl_s("dynamo", 1200.4) == 1201.0
    assert hints.clamped("dynamo", 1200.4) is None
    assert hints.clamped("dynamo", 300.0) is None and hints.clamped("dynamo", 3600.0) is None
    assert hints.effective_ttl_s("dynamo", 5000.0) == 3600.0
    assert "shorter than τ*" in (hints.clamped("dynamo", 5000.0) or "")
    assert hints.effective_ttl_s("dynamo", 0.0) == 0.0 and hints.clamped("dynamo", 0.0) is None


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_engines_without_a_clamp_apply_tau_rounded_up_to_their_unit(engine: str) -> None:
    assert hints.effective_ttl_s(engine, 12.0) == 12.0
    assert hints.effective_ttl_s(engine, 0.0004) == pytest.approx(0.001)
    assert hints.clamped(engine, 0.0004) is None and hints.clamped(engine, 1e6) is None
    with pytest.raises(ValueError, match="lmcache"):
        hints.effective_ttl_s("lmcache", 1.0)
