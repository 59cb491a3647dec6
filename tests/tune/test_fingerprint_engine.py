"""A study's name and fingerprint read the engine's settings as they were before engines
learnt which step sizes they have run (``SimSchedulerConfig.sizes_run``): unset, the key is
absent, so studies made before keep their names and are resumed; set, it is part of them.
Regression: the fingerprint listed every dataclass field, and gained ``"sizes_run": null``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from replay.tune.storage import default_study_name

#: the engine's settings a study's fingerprint held before sizes_run (replay.scheduler_config)
ENGINE_KEYS = {
    "kv_tokens", "block_size", "max_num_batched_tokens", "max_num_seqs", "max_model_len",
    "pool", "fast", "reserve_full_prompt",
}  # fmt: skip


def test_an_unset_sizes_run_leaves_the_fingerprint_as_it_was(tune_inputs: dict[str, Any]) -> None:
    ctx = tune_inputs["ctx"]
    assert set(ctx.fingerprint()["engine"]) == ENGINE_KEYS
    engine = replace(ctx.config.engine, sizes_run=frozenset({3, 1}))
    fresh = replace(ctx, config=replace(ctx.config, engine=engine))
    assert fresh.fingerprint()["engine"]["sizes_run"] == [1, 3]
    inputs = {"trace": "t"}
    assert default_study_name(fresh, inputs) != default_study_name(ctx, inputs)
