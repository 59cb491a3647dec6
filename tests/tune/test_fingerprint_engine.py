"""A study's name and fingerprint read the engine's settings as they were before engines
learnt which step sizes they have run (``SimSchedulerConfig.sizes_run``): unset, the key is
absent, so studies made before keep their names and are resumed; set, it is part of them.
Regression: the fingerprint listed every dataclass field, and gained ``"sizes_run": null``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from replay.fleet.routers import RouterSettings
from replay.fleet.run import FleetSpec
from replay.policy_runs import Load
from replay.tune.context import TuneContext, TuneError
from replay.tune.opening import check_study, open_study
from replay.tune.storage import Storage, default_study_name

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


@pytest.mark.parametrize(
    ("change", "here"),
    [
        (lambda c: replace(c, seeds=(0, 1, 2)), "seeds"),
        (lambda c: replace(c, loads=(Load(concurrency=6),)), "loads"),
        (lambda c: replace(c, p95_max_s=30.0), "p95_max_s"),
        (lambda c: replace(c, config=replace(c.config, truncate=True)), "truncate"),
        (lambda c: replace(c, config=replace(c.config, offload_tokens=1000)), "offload_tokens"),
        (lambda c: replace(c, config=replace(c.config, client_tags="tool")), "client_tags"),
        (
            lambda c: replace(
                c, config=replace(c.config, engine=replace(c.config.engine, kv_tokens=60_000))
            ),
            "engine.kv_tokens",
        ),
        (lambda c: replace(c, fleet=FleetSpec(2, RouterSettings())), "fleet"),
    ],
    ids=["seeds", "loads", "p95", "truncate", "offload", "client-tags", "kv", "fleet"],
)
def test_a_study_is_resumed_only_with_the_settings_it_was_made_for(
    tune_inputs: dict[str, Any],
    tmp_path: Path,
    change: Callable[[TuneContext], TuneContext],
    here: str,
) -> None:
    """docs/tuning.md: a study made for other inputs or settings (loads, seeds, KV size,
    p95 limit, the fleet, the client tags …) is refused, naming what differs; the same
    settings resume it. Also the default study name: another setting, another study."""
    ctx: TuneContext = tune_inputs["ctx"]
    storage, inputs = Storage(str(tmp_path / "s.log")), {"trace": "t", "fit": "f"}
    check_study(ctx, storage, "s", inputs)  # no study yet: nothing refused, nothing made
    assert not (tmp_path / "s.log").exists()
    open_study(ctx, storage, "s", seed=0, trials=1, inputs=inputs, provenance={})
    check_study(ctx, storage, "s", inputs)  # the same settings: resumed
    other = change(ctx)
    with pytest.raises(TuneError, match=rf"here: {here}\); pick another --study"):
        check_study(other, storage, "s", inputs)
    with pytest.raises(TuneError, match=rf"here: {here}\); pick another --study"):
        open_study(other, storage, "s", seed=0, trials=1, inputs=inputs, provenance={})
    with pytest.raises(TuneError, match=r"here: inputs.trace\)"):
        check_study(ctx, storage, "s", {**inputs, "trace": "another"})
    assert default_study_name(other, inputs) != default_study_name(ctx, inputs)
