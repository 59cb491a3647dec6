"""Strict pins under memory pressure never stall the engine (the valve works).

Sixteen programs of four calls each run in lock step against a cache of 63
blocks while every finished call is pinned for a minute: their contexts need
three times the cache. Without a valve the pins would hold the memory the next
calls need (METHOD.md: 2.4 s became 257 s on a real engine). Each valve must
finish the workload in bounded time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bundles import write_bundle
from tests.engine.harness import Engine, make_engine

PROGRAMS, TURNS = 16, 4
BOUND_S = 60.0  # generous: the workload takes a few seconds on two CPU cores


@pytest.fixture(scope="module")
def bundle_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pressure") / "bundle.json"


@pytest.fixture(scope="module")
def eng(tiny_model: Path, bundle_path: Path) -> Iterator[Engine]:
    write_bundle(bundle_path, cold_start_ttl_s=60.0)
    env: dict[str, str | None] = {
        "TTLCTL_BUNDLE": str(bundle_path),
        "TTLCTL_BUNDLE_CHECK_S": "0",
        "TTLCTL_LOG": None,
    }
    from ttlctl.engine import TTLScheduler

    yield from make_engine(tiny_model, env, scheduler_cls=TTLScheduler)


def workload(eng: Engine) -> tuple[float, list[int]]:
    """Run the programs in lock step; (seconds, cached tokens of the later calls)."""
    streams = {f"p{i:02d}": eng.prompt(250) for i in range(PROGRAMS)}
    cached: list[int] = []
    t0 = time.monotonic()
    for turn in range(TURNS):
        names = sorted(streams)
        xargs: list[dict[str, Any]] = [
            {"program_id": n, "tool": "bash", "is_last": int(turn == TURNS - 1)} for n in names
        ]
        outs = eng.run([streams[n] for n in names], xargs)
        for n, out in zip(names, outs, strict=True):
            streams[n] = streams[n] + list(out.outputs[0].token_ids) + eng.prompt(40)
            if turn:
                cached.append(out.num_cached_tokens)
    return time.monotonic() - t0, cached


@pytest.mark.parametrize(
    "params",
    [
        {"valve": "head"},
        {"valve": "stall-only"},
        {"valve": "stall-only", "pin_cap": 0.5},
    ],
    ids=["head", "stall-only", "stall-only-cap"],
)
def test_strict_pins_never_stall(eng: Engine, bundle_path: Path, params: dict[str, Any]) -> None:
    write_bundle(bundle_path, cold_start_ttl_s=60.0, **params)
    eng.reset()
    before = eng.sched.ttl_stats()
    elapsed, cached = workload(eng)
    stats = eng.sched.ttl_stats()
    assert eng.sched.ttl.policy.params.valve == params["valve"]
    assert elapsed < BOUND_S
    assert stats["made"] > before["made"]
    assert stats["released"] + stats["refused"] > before["released"] + before["refused"]
    assert sum(1 for c in cached if c > 0) > 0  # some later calls still found their context
    assert stats["pinned_programs"] == 0  # every program ended with is_last
    if "pin_cap" in params:
        assert eng.sched.ttl.capacity_blocks * 0.5 >= max(0, eng.sched.ttl.pins.blocks)
