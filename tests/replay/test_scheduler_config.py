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
        sizes_run=frozenset({1, 64}),
    )
    changed = {f.name for f in fields(config) if getattr(config, f.name) != f.default}
    assert changed == {f.name for f in fields(config)}  # every setting taken out of default
    assert SimSchedulerConfig.from_json(config.to_json()) == config


def test_a_setting_of_the_wrong_type_is_named() -> None:
    with pytest.raises(ConfigError, match=r'^engine\.fast is "yes"; a switch, true or false$'):
        SimSchedulerConfig.from_json({"fast": "yes"})
