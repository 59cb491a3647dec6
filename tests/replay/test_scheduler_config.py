"""The simulated engine's settings as a document: each setting read back as written."""

from __future__ import annotations

from dataclasses import fields

import pytest

from replay.scheduler_config import SimSchedulerConfig
from ttlctl.errors import ConfigError


def test_every_setting_is_read_back_as_written() -> None:
    """A setting added to the dataclass without a type rule in from_json would be refused
    as "not a setting of the simulated engine" here (from_json lists the types by hand)."""
    config = SimSchedulerConfig(
        kv_tokens=32_000,
        block_size=32,
        max_num_batched_tokens=2048,
        max_num_seqs=64,
        max_model_len=16_384,
        pool="blocks",
        fast=False,
        reserve_full_prompt=False,
        long_prefill_token_threshold=512,
        long_prefill_token_threshold_adaptive=True,
        watermark=0.05,
        sizes_run=frozenset({1, 64}),
    )
    changed = {f.name for f in fields(config) if getattr(config, f.name) != f.default}
    assert changed == {f.name for f in fields(config)}  # every setting taken out of default
    assert SimSchedulerConfig.from_json(config.to_json()) == config


def test_a_setting_of_the_wrong_type_is_named() -> None:
    with pytest.raises(ConfigError, match=r'^engine\.fast is "yes"; a switch, true or false$'):
        SimSchedulerConfig.from_json({"fast": "yes"})


def test_the_prefill_cap_is_left_out_of_the_document_while_off() -> None:
    """A document of an engine without the cap reads as one written before it was modelled
    (bundles, replay results), and one without the keys reads as no cap."""
    doc = SimSchedulerConfig().to_json()
    assert "long_prefill_token_threshold" not in doc
    assert "long_prefill_token_threshold_adaptive" not in doc
    assert SimSchedulerConfig.from_json(doc) == SimSchedulerConfig()
    on = SimSchedulerConfig(long_prefill_token_threshold=256).to_json()
    assert on["long_prefill_token_threshold"] == 256
    assert "long_prefill_token_threshold_adaptive" not in on


@pytest.mark.parametrize(
    ("threshold", "adaptive", "eligible", "cap"),
    [
        (0, False, 5, 0),  # off
        (0, True, 5, 0),  # adaptive alone caps nothing
        (512, False, 1, 0),  # the only request: nobody to starve
        (512, False, 2, 512),
        (512, True, 2, 4096),  # 8192 // 2: the budget's fair share is larger
        (512, True, 16, 512),  # 8192 // 16 = 512
        (512, True, 64, 512),  # the share is smaller: the threshold holds
        (100, True, 3, 2730),
    ],
)
def test_a_prefill_is_capped_as_vllm_caps_it(
    threshold: int, adaptive: bool, eligible: int, cap: int
) -> None:
    """vLLM's ``schedule()``: the threshold applies only with more than one request running
    or waiting, and adaptive floors it at ``max_num_batched_tokens`` // their number."""
    config = SimSchedulerConfig(
        max_num_batched_tokens=8192,
        long_prefill_token_threshold=threshold,
        long_prefill_token_threshold_adaptive=adaptive,
    )
    assert config.prefill_cap(eligible) == cap


@pytest.mark.parametrize("threshold", [-1, 16_385])
def test_a_threshold_outside_the_model_length_is_refused(threshold: int) -> None:
    with pytest.raises(ConfigError, match=r"^--long-prefill-token-threshold must be from 0"):
        SimSchedulerConfig(max_model_len=16_384, long_prefill_token_threshold=threshold)
    with pytest.raises(ConfigError, match=r"^engine\.long_prefill_token_threshold must be"):
        SimSchedulerConfig.from_json(
            {"max_model_len": 16_384, "long_prefill_token_threshold": threshold}
        )


def test_a_kv_cache_of_one_block_is_taken() -> None:
    assert SimSchedulerConfig(kv_tokens=16, block_size=16).num_blocks == 1


@pytest.mark.parametrize("key", ["kv_tokens", "watermark"])
def test_a_switch_is_no_size_nor_share(key: str) -> None:
    """JSON's true is no number, though Python's bool is an int."""
    with pytest.raises(ConfigError, match=rf"^engine\.{key} is true; a "):
        SimSchedulerConfig.from_json({key: True})


def test_a_threshold_as_long_as_the_model_is_kept() -> None:
    config = SimSchedulerConfig(max_model_len=16_384, long_prefill_token_threshold=16_384)
    assert config.long_prefill_token_threshold == 16_384


def test_a_kept_threshold_past_a_shorter_model_length_is_cut_to_it() -> None:
    """``resized``: a bundle's record of an engine with a longer model length, sized by a
    flag's shorter one, caps no prompt either way; a threshold given with it is kept."""
    recorded = SimSchedulerConfig(long_prefill_token_threshold=100_000)
    assert recorded.resized(max_model_len=4096).long_prefill_token_threshold == 4096
    given = recorded.resized(max_model_len=4096, long_prefill_token_threshold=512)
    assert given.long_prefill_token_threshold == 512


def test_the_watermark_is_a_share_below_one_left_out_while_off() -> None:
    """vLLM's range (0 to below 1); a document without it reads as none (written before it
    was modelled), one with it keeps it."""
    assert "watermark" not in SimSchedulerConfig().to_json()
    assert SimSchedulerConfig(watermark=0.1).to_json()["watermark"] == 0.1
    for share in (-0.01, 1.0):
        with pytest.raises(ConfigError, match=r"^--watermark must be a share from 0 to below 1"):
            SimSchedulerConfig(watermark=share)
    with pytest.raises(ConfigError, match=r'^engine\.watermark is "a"; a share'):
        SimSchedulerConfig.from_json({"watermark": "a"})
    with pytest.raises(ConfigError, match=r"^engine\.watermark must be a share"):
        SimSchedulerConfig.from_json({"watermark": 1})


@pytest.mark.parametrize(
    ("kv_blocks", "share", "kept"),
    [(99, 0.0, 0), (99, 0.01, 1), (98, 0.01, 0), (1000, 0.05, 50), (299, 0.34, 102)],
)
def test_the_watermark_counts_the_null_block_as_vllm_does(
    kv_blocks: int, share: float, kept: int
) -> None:
    """vLLM keeps ``int(watermark × num_blocks)`` free, its block count taking in the null
    block: one more than the blocks that hold KV (99 of them at 1%: 100 × 0.01 = 1)."""
    config = SimSchedulerConfig(kv_tokens=kv_blocks * 16, block_size=16, watermark=share)
    assert config.watermark_blocks == kept
