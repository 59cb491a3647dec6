"""The TTL scheduler inside a real vLLM (in process): pins, expiry, handover, queue, reloads.

One engine for the module, loaded by name (``ttlctl.engine.TTLScheduler``, as
``--scheduler-cls`` would) with ``TTLCTL_BUNDLE`` and ``TTLCTL_LOG``; each test
rewrites the bundle it needs (``TTLCTL_BUNDLE_CHECK_S=0``: the file is looked at
on every step) and starts from an empty cache. Probes are sequential, as
../shared/docs/VLLM_CPU.md advises: hit after a pin, no hit after a flood
without one, no hit after the pin expired.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.bundles import write_bundle
from tests.engine.harness import CAPACITY_TOKENS, Engine, make_engine
from ttlctl.engine.enginelog import EngineLog
from ttlctl.engine.queue import ProgramQueue
from ttlctl.ingest.pipeline import ingest

PROMPT = 390  # 12 full blocks of 32 and a partial one
FULL = PROMPT // 32 * 32


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("live")
    return {"bundle": root / "bundle.json", "log": root / "engine.jsonl", "root": root}


@pytest.fixture(scope="module")
def eng(tiny_model: Path, paths: dict[str, Path]) -> Iterator[Engine]:
    write_bundle(paths["bundle"], cold_start_ttl_s=30.0)
    env: dict[str, str | None] = {
        "TTLCTL_BUNDLE": str(paths["bundle"]),
        "TTLCTL_LOG": str(paths["log"]),
        "TTLCTL_BUNDLE_CHECK_S": "0",
    }
    yield from make_engine(tiny_model, env)


def use(eng: Engine, paths: dict[str, Path], **params: Any) -> None:
    """Serve with a new bundle from the next arrival on, from an empty cache."""
    reloads = eng.sched.ttl_watcher.reloads
    write_bundle(paths["bundle"], **params)
    eng.reset()
    eng.one(eng.prompt(40))  # its arrival polls the file
    assert eng.sched.ttl_watcher.reloads == reloads + 1
    assert eng.sched.ttl.policy.params.cold_start_ttl_s == params.get("cold_start_ttl_s")


def test_loaded_by_name_with_the_bundle(eng: Engine) -> None:
    assert type(eng.sched).__name__ == "TTLScheduler"
    assert isinstance(eng.sched.waiting, ProgramQueue)
    assert eng.sched.ttl.policy is not None and eng.sched.ttl_warnings == []


def test_pinned_program_hits_after_a_flood_an_unpinned_peer_does_not(
    eng: Engine, paths: dict[str, Path]
) -> None:
    use(eng, paths, cold_start_ttl_s=30.0)
    pinned, peer = eng.prompt(PROMPT), eng.prompt(PROMPT)
    first = eng.run([pinned, peer], [{"program_id": "A", "tool": "bash"}, {}])
    assert [o.num_cached_tokens for o in first] == [0, 0]
    assert eng.sched.ttl_stats()["pinned_programs"] == 1
    eng.flood(2 * CAPACITY_TOKENS)  # twice the cache, 3 prompts at a time
    again = eng.run(
        [pinned + eng.prompt(20), peer + eng.prompt(20)], [{"program_id": "A", "tool": "bash"}, {}]
    )
    assert again[0].num_cached_tokens >= FULL
    assert again[1].num_cached_tokens == 0
    stats = eng.sched.ttl_stats()
    assert stats["hit"] >= 1 and stats["released"] == 0


def test_no_hit_after_the_ttl(eng: Engine, paths: dict[str, Path]) -> None:
    use(eng, paths, cold_start_ttl_s=0.5)
    p = eng.prompt(PROMPT)
    eng.one(p, program_id="E", tool="bash")
    pin = eng.sched.ttl.pins.get("E")
    assert pin is not None and pin.ttl_s == 0.5
    expired = eng.sched.ttl_stats()["expired"]
    time.sleep(0.7)
    eng.flood(2 * CAPACITY_TOKENS)
    assert eng.sched.ttl_stats()["expired"] == expired + 1
    assert eng.one(p + eng.prompt(20), program_id="E").num_cached_tokens == 0


def test_program_that_never_comes_back_leaves_no_pin(eng: Engine, paths: dict[str, Path]) -> None:
    use(eng, paths, cold_start_ttl_s=1.0)
    with eng.clock.held():  # none expires while the five run, however slow their steps
        eng.run(
            [eng.prompt(200) for _ in range(5)],
            [{"program_id": f"gone-{i}", "tool": "web"} for i in range(5)],
        )
        assert eng.sched.ttl_stats()["pinned_programs"] == 5
        eng.clock.advance(1.1)
        eng.one(eng.prompt(40))  # any traffic: the step releases what expired
    stats = eng.sched.ttl_stats()
    assert stats["pinned_programs"] == 0 and stats["pinned_blocks"] == 0
    assert not eng.sched.ttl.live and not eng.sched._ttl_pin_ttl


def test_aborted_requests_are_never_pinned_and_release_their_programs_pin(
    eng: Engine, paths: dict[str, Path]
) -> None:
    use(eng, paths, cold_start_ttl_s=30.0)
    p = eng.prompt(PROMPT)
    eng.one(p, program_id="Q", tool="bash")
    assert "Q" in eng.sched.ttl.pins
    made = eng.sched.ttl_stats()["made"]
    waiting = eng.add(p + eng.prompt(10), program_id="Q", tool="bash")
    eng.engine.abort_request([waiting])  # the follow-up is aborted before it runs
    assert "Q" not in eng.sched.ttl.pins
    running = eng.add(eng.prompt(100), max_tokens=200, program_id="R", tool="bash")
    for _ in range(3):
        eng.engine.step()
    assert any(r.request_id.startswith(running) for r in eng.sched.running)
    eng.engine.abort_request([running])
    eng.drain()
    stats = eng.sched.ttl_stats()
    assert stats["made"] == made and stats["pinned_blocks"] == 0
    assert not eng.sched.ttl.live


def test_pinned_programs_next_call_jumps_the_queue(eng: Engine, paths: dict[str, Path]) -> None:
    use(eng, paths, cold_start_ttl_s=30.0)
    p = eng.prompt(PROMPT)
    eng.one(p, program_id="P", tool="bash")
    others = [eng.add(eng.prompt(350), program_id=f"x{i}", tool="bash") for i in range(5)]
    mine = eng.add(p + eng.prompt(20), program_id="P", tool="bash")
    order = [eng.sched.ttl.live[r.request_id].tags.program for r in eng.sched.waiting]
    assert order == ["P", "x0", "x1", "x2", "x3", "x4"]  # P arrived last
    eng.engine.step()
    running = {eng.sched.ttl.live[r.request_id].tags.program for r in eng.sched.running}
    assert "P" in running
    done = eng.drain()
    assert done[mine].num_cached_tokens >= FULL
    assert all(done[o].num_cached_tokens == 0 for o in others)


def test_bundle_replaced_while_serving(eng: Engine, paths: dict[str, Path]) -> None:
    use(eng, paths, cold_start_ttl_s=30.0)
    eng.one(eng.prompt(200), program_id="B1", tool="bash")
    assert eng.sched.ttl.pins.get("B1").ttl_s == 30.0
    # a bundle with pins off: program-level scheduling only, a tagged peer loses its context
    use(eng, paths, cold_start_ttl_s=None, pins=False)
    p = eng.prompt(PROMPT)
    eng.one(p, program_id="B2", tool="bash")
    assert "B2" not in eng.sched.ttl.pins
    eng.flood(2 * CAPACITY_TOKENS)
    assert eng.one(p + eng.prompt(20), program_id="B2").num_cached_tokens == 0
    # a damaged replacement: the policy in force stays, one warning
    in_force = eng.sched.ttl.policy
    text = paths["bundle"].read_text()
    paths["bundle"].write_text(text[: len(text) // 2])
    eng.one(eng.prompt(40))
    eng.one(eng.prompt(40))
    assert eng.sched.ttl.policy is in_force
    refused = [w for w in eng.sched.ttl_warnings if "new bundle refused" in w]
    assert len(refused) == 1
    use(eng, paths, cold_start_ttl_s=12.0)
    eng.one(eng.prompt(200), program_id="B3", tool="bash")
    assert eng.sched.ttl.pins.get("B3").ttl_s == 12.0


def test_engine_log_ingests(eng: Engine, paths: dict[str, Path]) -> None:
    use(eng, paths, cold_start_ttl_s=30.0)
    log = paths["root"] / "workload.jsonl"
    eng.sched.ttl_log = EngineLog(str(log), eng.sched._ttl_warn)
    streams = {f"w{i}": eng.prompt(300) for i in range(3)}
    for turn in range(3):
        names = sorted(streams)
        xargs = [
            {"program_id": n, "tool": "grep" if turn < 2 else None, "is_last": int(turn == 2)}
            for n in names
        ]
        extra = [eng.prompt(100) for _ in range(2)] if turn == 0 else []
        outs = eng.run([streams[n] for n in names] + extra, xargs + [{} for _ in extra])
        for n, out in zip(names, outs, strict=False):
            streams[n] = streams[n] + list(out.outputs[0].token_ids) + eng.prompt(30)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 11
    for line in lines:
        assert line["arrival_unix_s"] <= line["first_token_unix_s"] <= line["finish_unix_s"]
        assert line["output_tokens"] == 4 and line["finish_reason"] == "length"
    later = [x for x in lines if x["program_id"] and x["cached_tokens"] and x["tool"] != "grep"]
    assert later, "the last turns should hit the pinned context"
    assert all(x["ttl_s"] == 0.0 for x in lines if x["is_last"])
    out = paths["root"] / "trace.parquet"
    report = ingest([log], out, fmt="engine-log")
    assert report.records == 11 and report.rows == 11 and report.rejected == 0
    trace = pl.read_parquet(out)
    per_program = trace.group_by("program_id").agg(pl.len().alias("calls"))
    assert sorted(per_program["calls"].to_list()) == [1, 1, 3, 3, 3]
    w0 = trace.filter(pl.col("program_id") == "w0").sort("turn")
    assert w0["is_last"].to_list() == [False, False, True]
    assert w0["tool"].to_list()[:2] == ["grep", "grep"]
    assert w0["gap_s"].null_count() == 1  # the last call has no next call


def test_pins_balance_after_a_client_that_went_away(eng: Engine, paths: dict[str, Path]) -> None:
    """Issue 22: a client killed mid-run leaves its calls aborted (some running, some still
    waiting). Every pin made ends as a hit, an expiry, a valve release or a drop; once the
    survivors' pins expire no block is pinned; the log holds the aborted calls with the
    tokens they made (0 for those aborted before their first token), and ingest keeps them
    as calls and counts them."""
    use(eng, paths, cold_start_ttl_s=0.5)
    log = paths["root"] / "aborted.jsonl"
    eng.sched.ttl_log = EngineLog(str(log), eng.sched._ttl_warn)
    before = eng.sched.ttl_stats()
    streams = {f"k{i}": eng.prompt(200) for i in range(4)}
    # the TTL clock held: k0 and k1 come back within their 0.5 s however slow the steps
    # (on a loaded machine real time could expire them first), and k3 expires when the
    # clock is moved past its TTL, not after a sleep
    with eng.clock.held():
        eng.run(list(streams.values()), [{"program_id": n, "tool": "bash"} for n in streams])
        assert eng.sched.ttl_stats()["pinned_programs"] == 4
        # the client comes back for k0 and k1 (they run), sends k2's call and dies before
        # it is scheduled; k3 never comes back
        ids = [
            eng.add(streams[n] + eng.prompt(20), max_tokens=200, program_id=n, tool="bash")
            for n in ("k0", "k1")
        ]
        for _ in range(2):
            eng.engine.step()
        assert len(eng.sched.running) == 2
        ids.append(eng.add(streams["k2"] + eng.prompt(20), max_tokens=200, program_id="k2"))
        eng.engine.abort_request(ids)
        eng.drain()
        assert eng.sched.ttl_stats()["pinned_programs"] == 1  # k3's pin, not yet expired
        eng.clock.advance(0.6)
        eng.one(eng.prompt(40))  # the next step releases what expired
    stats = eng.sched.ttl_stats()
    d = {k: stats[k] - before.get(k, 0) for k in ("made", "hit", "expired", "released", "dropped")}
    assert d["made"] == 4 and d["made"] == d["hit"] + d["expired"] + d["released"] + d["dropped"]
    assert (d["hit"], d["dropped"], d["expired"]) == (2, 1, 1)
    assert stats["pinned_blocks"] == 0 and stats["pinned_programs"] == 0
    assert not eng.sched.ttl.live and not eng.sched._ttl_pin_ttl
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    aborted = [x for x in lines if x["finish_reason"] == "abort"]
    assert len(aborted) == 3 and all(x["ttl_s"] == 0.0 for x in aborted)
    outputs = {x["program_id"]: x["output_tokens"] for x in aborted}
    assert outputs["k2"] == 0 and 0 < outputs["k0"] < 200 and 0 < outputs["k1"] < 200
    report = ingest([log], paths["root"] / "aborted.parquet", fmt="engine-log")
    assert (report.rows, report.rejected, report.aborted) == (len(lines), 0, 3)
    assert report.in_flight == 4  # the client never sent their last calls
