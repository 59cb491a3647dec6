"""replay/replay_run.py and replay/loads.py: the replay document built without the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.loads import SEEDS_MAX, check_seeds, load_list, one_load
from replay.policy_runs import Load
from replay.replay_run import ReplayRequest, policy_names, replay_doc
from replay.scheduler import SimSchedulerConfig
from tests.tune.inputs import KV_TOKENS, PROFILE, write_trace
from ttlctl.errors import ConfigError


def test_one_load_and_its_refusals() -> None:
    assert one_load(None, 4, 3) == Load(concurrency=4, seed=3)
    for jps, conc, message in ((1.0, 2, "not both"), (-1.0, None, "--jps"), (None, 0, "--conc")):
        with pytest.raises(ConfigError, match=message):
            one_load(jps, conc)
    assert load_list([2.0], [3]) == (Load(jps=2.0), Load(concurrency=3))
    with pytest.raises(ConfigError, match="positive"):
        load_list([], [0])


def test_a_count_of_seeds_runs_from_1_to_seeds_max() -> None:
    check_seeds("--seeds", 1)
    check_seeds("--holdout-seeds", SEEDS_MAX)
    with pytest.raises(ConfigError, match="--seeds must be >= 1, not 0"):
        check_seeds("--seeds", 0)
    with pytest.raises(ConfigError, match="--holdout-seeds must be at most 10,000, not 10,001"):
        check_seeds("--holdout-seeds", SEEDS_MAX + 1)


def test_policy_names_split_and_expand() -> None:
    assert policy_names(["vllm, continuum"], "fast") == ["vllm", "continuum"]
    every = policy_names(["all"], "fast")
    assert "oracle" in every and "infercept" in every
    assert set(policy_names(["all"], "vllm")) < set(every)
    with pytest.raises(ConfigError, match="unknown policy"):
        policy_names(["nope"], "fast")


def test_replay_doc_records_what_made_it(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.parquet", programs=6)
    req = ReplayRequest(
        trace=trace,
        policies=["vllm,unlimited-kv"],
        load=Load(concurrency=3, seed=1),
        engine=SimSchedulerConfig(kv_tokens=KV_TOKENS),
        profile=PROFILE,
        timed=False,
    )
    doc = replay_doc(req)
    assert [r["policy"] for r in doc["results"]] == ["vllm", "unlimited-kv"]
    assert doc["trace"]["programs"] == 6 and doc["bundle"] is None
    assert doc["config"]["concurrency"] == 3 and doc["config"]["seed"] == 1
    assert doc["config"]["engine"]["kv_tokens"] == KV_TOKENS
    assert all(r["wall_s"] is None for r in doc["results"])
    assert replay_doc(req) == doc  # the same request, the same document
    with pytest.raises(ConfigError, match="--valve"):
        replay_doc(ReplayRequest(trace, ["vllm"], Load(), SimSchedulerConfig(), valve="x"))
