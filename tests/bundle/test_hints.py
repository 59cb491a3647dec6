"""τ* as other engines' retention hints (ttlctl/hints.py)."""

from __future__ import annotations

import pytest

from ttlctl import hints


@pytest.mark.parametrize("engine", sorted(hints.SHAPES))
def test_no_pin_is_no_hint(engine: str) -> None:
    assert hints.shape(engine, 0.0) == {}


def test_shapes_never_shorten_the_pin() -> None:
    assert hints.dynamo(2.01) == {"nvext": {"cache_control": {"type": "ephemeral", "ttl": "3s"}}}
    assert hints.dynamo(3.0)["nvext"]["cache_control"]["ttl"] == "3s"
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
