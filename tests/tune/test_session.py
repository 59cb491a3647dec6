"""replay/tune/request.py (the options' rules, the live ones' too) and replay/tune/session.py (the
default loads, the engine's size)."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.tune import TuneError
from replay.tune.request import TuneRequest, check
from replay.tune.session import default_loads, engine_size


def test_default_loads_are_a_quarter_and_a_half_capped() -> None:
    assert default_loads(20) == (Load(concurrency=5), Load(concurrency=10))
    assert default_loads(1000) == (Load(concurrency=64),)
    assert default_loads(2) == (Load(concurrency=1),)
    assert default_loads(20, live_programs=8) == (Load(concurrency=4),)
    assert default_loads(3, live_programs=8) == (Load(concurrency=1),)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"trials": 0}, "--trials"),
        ({"heartbeat_s": 0}, "--heartbeat-seconds"),
        ({"live_bundle": Path("b.json")}, "goes with --live"),
        ({"live": "http://x"}, "needs --live-bundle"),
        ({"idle_gap_cap_s": -1.0}, "--trace-idle-gap-cap-seconds"),
    ],
)
def test_each_refusal_is_one_tune_error(change: dict[str, object], message: str) -> None:
    base = {"trace": Path("t"), "fit": Path("f"), "profile": "p", "output": Path("o")}
    with pytest.raises(TuneError, match=message):
        check(TuneRequest(**base, **change))  # type: ignore[arg-type]


def _request(**sizes: int) -> TuneRequest:
    return TuneRequest(Path("t"), Path("f"), "p", Path("o"), **sizes)  # type: ignore[arg-type]


def test_the_engine_is_sized_as_the_traces_engine_log_states() -> None:
    """Issue 22: tune on a trace from one server's engine log replays an engine of that
    server's size (one line says so); a flag given wins, a disagreeing one is reported; a
    trace from several replicas or without facts keeps the flags and defaults."""
    facts = {"replica": None, "kv_tokens": 4096, "block_size": 32, "max_num_seqs": 8,
             "max_num_batched_tokens": 2048, "max_model_len": 1024, "calls": 10}  # fmt: skip
    warned: list[str] = []
    engine, line = engine_size(_request(), [facts], warned.append)
    assert (engine.kv_tokens, engine.block_size, engine.max_num_seqs) == (4096, 32, 8)
    assert (engine.max_num_batched_tokens, engine.max_model_len) == (2048, 1024)
    assert line is not None and line.startswith("replay sized from the engine log: 4,096 KV")
    assert warned == []
    engine, _ = engine_size(_request(kv_tokens=8192), [facts], warned.append)
    assert (engine.kv_tokens, engine.block_size) == (8192, 32)
    assert len(warned) == 1 and "--kv-tokens 8,192 disagrees" in warned[0]
    two = [facts, dict(facts, replica="b")]
    engine, line = engine_size(_request(max_num_seqs=4), two, warned.append)
    assert line is None and engine == SimSchedulerConfig(max_num_seqs=4)
    assert "2 replicas" in warned[-1] and "tune replays one engine" in warned[-1]
    # tune --replicas replays a fleet: the warning says so (all of one size, not the logs')
    engine, line = engine_size(_request(replicas=3), two, warned.append)
    assert line is None and engine == SimSchedulerConfig()
    assert "tune replays 3 replica(s) of one size (--replicas)" in warned[-1]
    assert "one engine" not in warned[-1]
    assert engine_size(_request(), [], warned.append) == (SimSchedulerConfig(), None)


def test_the_watermark_is_the_flags_else_the_engine_logs() -> None:
    """vLLM's --watermark: tune takes the flag (a disagreeing log said), else what one
    replica's engine log states; on a trace of several replicas, the flag (or none)."""
    facts = {"replica": None, "kv_tokens": 4096, "block_size": 32, "max_num_seqs": 8,
             "max_num_batched_tokens": 2048, "max_model_len": 1024, "calls": 10,
             "watermark": 0.05}  # fmt: skip
    warned: list[str] = []
    engine, line = engine_size(_request(), [facts], warned.append)
    assert engine.watermark == 0.05 and warned == []
    assert line is not None and line.endswith("watermark 0.05 (6 blocks kept free)")
    engine, line = engine_size(_request(watermark=0.2), [facts], warned.append)
    assert engine.watermark == 0.2 and line is not None and "(flags given win)" in line
    assert warned == ["--watermark 0.2 disagrees with the log's engine (0.05): the flag wins"]
    two = [facts, dict(facts, replica="b")]
    assert engine_size(_request(watermark=0.2), two, warned.append)[0].watermark == 0.2
    assert engine_size(_request(), two, warned.append)[0].watermark == 0.0


def test_the_prefill_cap_is_the_flags_else_the_engine_logs() -> None:
    """vLLM's --long-prefill-token-threshold: tune takes the flag, else what one replica's
    engine log states; on a trace of several replicas, the flag (or none)."""
    facts = {"replica": None, "kv_tokens": 4096, "block_size": 32, "max_num_seqs": 8,
             "max_num_batched_tokens": 2048, "max_model_len": 1024, "calls": 10,
             "long_prefill_token_threshold": 256}  # fmt: skip
    warned: list[str] = []
    engine, line = engine_size(_request(), [facts], warned.append)
    assert engine.long_prefill_token_threshold == 256 and line is not None
    assert line.endswith("long_prefill_token_threshold 256") and warned == []
    engine, _ = engine_size(
        _request(long_prefill_token_threshold=64, long_prefill_token_threshold_adaptive=True),
        [facts],
        warned.append,
    )
    assert engine.long_prefill_token_threshold == 64
    assert engine.long_prefill_token_threshold_adaptive is True
    assert warned == [
        "--long-prefill-token-threshold 64 disagrees with the log's engine (256): the flag wins",
        "--long-prefill-token-threshold-adaptive on disagrees with the log's engine (off): "
        "the flag wins",
    ]
    two = [facts, dict(facts, replica="b")]
    engine, _ = engine_size(_request(long_prefill_token_threshold=64), two, warned.append)
    assert engine.long_prefill_token_threshold == 64
    engine, _ = engine_size(_request(), two, warned.append)
    assert engine.long_prefill_token_threshold == 0
