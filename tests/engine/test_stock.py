"""A damaged bundle: the engine serves as stock vLLM and says so once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm.v1.core.sched.request_queue import FCFSRequestQueue

from tests.bundles import write_bundle
from tests.engine.harness import CAPACITY_TOKENS, Engine, make_engine


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("stock")
    bundle = write_bundle(root / "bundle.json", cold_start_ttl_s=30.0)
    doc = json.loads(bundle.read_text())
    doc["policy"]["cold_start_ttl_s"] = 3000.0  # edited after sealing
    bundle.write_text(json.dumps(doc))
    return {"bundle": bundle, "log": root / "engine.jsonl"}


@pytest.fixture(scope="module")
def eng(tiny_model: Path, files: dict[str, Path]) -> Iterator[Engine]:
    env: dict[str, str | None] = {
        "TTLCTL_BUNDLE": str(files["bundle"]),
        "TTLCTL_LOG": str(files["log"]),
        "TTLCTL_BUNDLE_CHECK_S": "0",
    }
    yield from make_engine(tiny_model, env)


def test_damaged_bundle_serves_stock_with_one_warning(eng: Engine, files: dict[str, Path]) -> None:
    assert len(eng.sched.ttl_warnings) == 1
    assert "refused" in eng.sched.ttl_warnings[0] and "checksum" in eng.sched.ttl_warnings[0]
    assert eng.sched.ttl.policy is None
    assert type(eng.sched.waiting) is FCFSRequestQueue  # vLLM's own queue
    p = eng.prompt(390)
    assert eng.one(p, program_id="A", tool="bash").num_cached_tokens == 0
    again = eng.one(p + eng.prompt(20), program_id="A", tool="bash")
    assert again.num_cached_tokens >= 384  # stock prefix caching still works
    eng.flood(2 * CAPACITY_TOKENS)
    assert eng.one(p + eng.prompt(20), program_id="A").num_cached_tokens == 0  # nothing pinned
    assert eng.sched.ttl_stats()["made"] == 0
    assert len(eng.sched.ttl_warnings) == 1  # still one, after traffic and polls
    facts, *lines = [json.loads(x) for x in files["log"].read_text().splitlines()]
    assert len(lines) == 3 + 12 and all(x["ttl_s"] is None for x in lines)
    # the engine's facts come first: stock behaviour, so no bundle in force
    assert facts["kind"] == "engine" and facts["bundle_sha256"] is None
    assert (facts["block_size"], facts["kv_tokens"]) == (32, 63 * 32)
