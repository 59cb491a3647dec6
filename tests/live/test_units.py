"""The parts of serve, live replay and validate that need no vLLM server (the pure
statistics of validate: test_validation_stats.py; the door: tests/server)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest
import typer
from typer.testing import CliRunner

from fitting.percentile import percentile
from replay import live
from replay import validation as validate
from replay.live import LiveCallRecord, ProgramRecord
from replay.live.records import logprob_ids
from replay.live.sampler import Sampler
from replay.policy_runs import Load
from replay.validation.sizing import kv_tokens_of, same_servers
from replay.workload import AgentProgram, Call, Workload
from tests.bench_script import bench_script
from tests.bundles import write_bundle
from tests.http_stub import serving as stub_serving
from tests.live.server_info import server_info
from ttlctl.cli import serve as serve_cli
from ttlctl.cli import validate as validate_cli
from ttlctl.series import PIN_COUNTERS, PINNED_BLOCKS, pin_counter_total
from ttlctl.server import prom, serving
from ttlctl.server.client import ServerError
from ttlctl.server.command import CommandError, base_command

REPO = Path(__file__).resolve().parents[2]


def _app(command: Callable[..., None], settings: dict[str, Any]) -> typer.Typer:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command(context_settings=settings)(command)
    return app


# ----------------------------------------------------------------------------- serve


def test_serve_command_is_the_module_with_the_scheduler_and_extra_args_last() -> None:
    cmd = serving.build_command(
        "/models/m", host="127.0.0.1", port=8123, extra=["--max-model-len", "4096", "--port=9"]
    )
    assert cmd[:5] == [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/m",
    ]
    # a --port after -- replaces serve's own: said once
    assert cmd[5:9] == ["--scheduler-cls", "ttlctl.engine.TTLScheduler", "--host", "127.0.0.1"]
    assert cmd[9:] == ["--max-model-len", "4096", "--port=9"]  # verbatim
    assert "--host" not in serving.build_command("m", port=1)
    own = serving.build_command("m", host="h", port=8123, extra=["--host", "0.0.0.0"])
    assert own.count("--host") == 1 and own[-4:] == ["--port", "8123", "--host", "0.0.0.0"]


@pytest.mark.parametrize("flag", ["--model", "--scheduler-cls", "--scheduler-cls=x.Y"])
def test_serve_refuses_the_flags_it_sets(flag: str) -> None:
    with pytest.raises(CommandError, match="set by ttlctl serve"):
        serving.build_command("m", extra=[flag, "x"])


def test_serve_reads_the_vllm_arguments_as_vllm_does(tmp_path: Path) -> None:
    """Abbreviations and a --config file set the options vLLM's parser would set: a
    --port there replaces serve's own, --scheduler-cls there is refused."""
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("port: 9000\nmax-model-len: 4096\n")
    for extra in (["--config", str(cfg)], ["--por", "9000"]):
        cmd = serving.build_command("m", port=8123, extra=extra)
        assert "8123" not in cmd and cmd[-len(extra) :] == extra
    cfg.write_text("scheduler-cls: x.Y\n")
    with pytest.raises(CommandError, match=rf"^--scheduler-cls is set by ttlctl serve .*{cfg}"):
        serving.build_command("m", extra=["--config", str(cfg)])


def test_serve_cli_refuses_what_vllm_would_read_as_its_own_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One line, exit 2, nothing started: an abbreviation of --scheduler-cls, a --config
    file that sets it, a --config file that cannot be read."""
    started: list[object] = []
    monkeypatch.setattr(serve_cli, "run_foreground", lambda *a: started.append(a) or 0)
    app = _app(serve_cli.serve, serve_cli.CONTEXT_SETTINGS)
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("max-model-len: 4096\nscheduler_cls: x.Y\n")
    missing = tmp_path / "missing.yaml"
    owner = "is set by ttlctl serve (MODEL and the TTL scheduler)"
    for extra, line in [
        (["--scheduler-c", "x.Y"],
         f"--scheduler-c (abbreviates --scheduler-cls) {owner}; remove it from the vLLM arguments"),
        (["--dtype", "half", "--config", str(cfg)],
         f"--scheduler-cls {owner}; remove it from {cfg} (--config)"),
        (["--config", str(missing)],
         f"--config {missing}: cannot read it (no such file or directory)"),
    ]:  # fmt: skip
        res = CliRunner().invoke(app, ["model-dir", "--allow-stock", "--", *extra])
        assert res.exit_code == 2, res.output
        assert res.stderr.strip().splitlines() == [f"error: {line}"]
    assert started == []


def test_serve_cli_prints_the_command_and_checks_the_bundle(tmp_path: Path) -> None:
    app = _app(serve_cli.serve, serve_cli.CONTEXT_SETTINGS)
    good = write_bundle(tmp_path / "bundle.json", cold_start_ttl_s=5.0)
    runner = CliRunner()
    res = runner.invoke(
        app,
        ["model-dir", "--bundle", str(good), "--port", "8001", "--dev-mode", "--print-command",
         "--", "--max-model-len", "2048", "--block-size", "32"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    line = res.stdout.strip()
    assert line.startswith(f"TTLCTL_BUNDLE={good.resolve()} VLLM_SERVER_DEV_MODE=1 ")
    # the Prometheus folder too: without it a container loses the ttlctl:* series
    prom = serving.printed_metrics_dir(None, os.environ)[0]
    assert f" PROMETHEUS_MULTIPROC_DIR={prom} " in line
    if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        assert "make it, empty, before starting the server" in res.stderr
    assert line.endswith(
        "-m vllm.entrypoints.openai.api_server --model model-dir --scheduler-cls "
        "ttlctl.engine.TTLScheduler --port 8001 --max-model-len 2048 --block-size 32"
    )

    args = ["m", "--bundle", str(good), "--replica", "gpu-3", "--print-command"]
    named = runner.invoke(app, args)
    assert named.exit_code == 0, named.output
    assert f"TTLCTL_BUNDLE={good.resolve()} TTLCTL_REPLICA=gpu-3 " in named.stdout

    damaged = tmp_path / "damaged.json"
    damaged.write_text(good.read_text()[:100])
    res = runner.invoke(app, ["model-dir", "--bundle", str(damaged), "--print-command"])
    assert res.exit_code == 2
    assert "damaged.json" in res.stderr and "--allow-stock" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and res.stdout == ""

    res = runner.invoke(app, ["model-dir", "--print-command"])
    assert res.exit_code == 2 and "no --bundle given" in res.stderr

    res = runner.invoke(app, ["m", "--bundle", str(damaged), "--allow-stock", "--print-command"])
    assert res.exit_code == 0 and "serving as stock vLLM" in res.stderr
    assert "--scheduler-cls ttlctl.engine.TTLScheduler" in res.stdout

    res = runner.invoke(app, ["--help"])
    assert res.exit_code == 0 and "--allow-stock" in res.stdout

    given = tmp_path / "prom"
    res = runner.invoke(
        app,
        ["m", "--bundle", str(good), "--metrics-dir", str(given), "--print-command",
         "--", "--port", "9000"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert f"PROMETHEUS_MULTIPROC_DIR={given} " in res.stdout and "note:" not in res.stderr
    assert res.stdout.count("--port") == 1 and res.stdout.strip().endswith("--port 9000")


# ----------------------------------------------------------------------------- live


def test_clip_keeps_the_output_and_shortens_the_prompt() -> None:
    assert live.clip(Call(100, 10, 0, None, 0.0), 2048) == (100, 10, False)
    assert live.clip(Call(2100, 10, 0, None, 0.0), 2048) == (2038, 10, True)
    assert live.clip(Call(100, 3000, 0, None, 0.0), 2048) == (100, 1024, True)
    assert live.clip(Call(5000, 10, 0, None, 0.0), None) == (5000, 10, False)
    # a call recorded with no output asks for one token, with a limit or without
    assert live.clip(Call(100, 0, 0, None, 0.0), 2048) == (100, 1, False)
    assert live.clip(Call(100, 0, 0, None, 0.0), None) == (100, 1, False)
    assert server_info(kv_tokens=1024).token_limit() == 1024
    assert server_info(max_model_len=None, kv_tokens=None).token_limit() is None


def test_cap_pauses_and_first_programs() -> None:
    calls = (Call(10, 1, 0, "bash", 30.0), Call(20, 1, 11, None, 0.0))
    w = Workload(tuple(AgentProgram(f"p{i}", float(i), calls) for i in range(3)))
    capped = live.cap_pauses(w, 5.0)
    assert [c.pause_s for c in capped.programs[0].calls] == [5.0, 0.0]
    assert live.cap_pauses(w, None) is w
    assert [p.program_id for p in live.first_programs(w, 2).programs] == ["p0", "p1"]
    assert live.first_programs(w, None) is w


def test_streamed_chunks_tell_the_first_token_the_ids_and_the_usage() -> None:
    """A chunk with tokens (ids, or text from a server that returns none) is timed; the
    first one is the first token; the usage chunk sets the prompt, output and cached
    tokens; a call is done (``ok``) only once it ended, and has no TPOT with one token."""
    r = LiveCallRecord("p", 0, None, True, 0, 1.0)
    generated: list[int] = []
    r.take({"choices": [{"token_ids": [5, 6]}]}, 1.2, generated)
    r.take({"choices": [{"text": "x"}]}, 1.3, generated)
    r.take({"choices": [{"token_ids": []}]}, 1.35, generated)
    usage = {"prompt_tokens": 90, "completion_tokens": 3}
    r.take({"choices": [], "usage": usage | {"prompt_tokens_details": {"cached_tokens": 64}}},
           1.4, generated)  # fmt: skip
    assert generated == [5, 6]
    assert r.first_token_s == 1.2 and r.chunk_s == [1.2, 1.3]
    assert (r.prompt_tokens, r.output_tokens, r.cached_tokens) == (90, 3, 64)
    assert r.ttft_s == pytest.approx(0.2)
    assert not r.ok and r.tpot_s is None
    r.end_s = 1.5
    assert r.ok and r.tpot_s == pytest.approx((0.5 - 0.2) / 2)
    one = LiveCallRecord("p", 1, None, True, 0, 2.0, end_s=2.5, first_token_s=2.1)
    one.output_tokens = 1
    assert one.tpot_s is None


def test_a_chunks_ids_are_read_from_its_logprobs_where_it_has_no_token_ids() -> None:
    """A server started with --return-tokens-as-token-ids writes each token of ``logprobs``
    as ``token_id:N`` (the ids a client tagging by its header alone reads); tokens written
    as text give no ids, and the chunk is still timed."""
    r = LiveCallRecord("p", 0, None, True, 0, 1.0)
    generated: list[int] = []
    r.take({"choices": [{"text": "ab", "logprobs": {"tokens": ["token_id:7", "token_id:9"]}}]},
           1.2, generated)  # fmt: skip
    r.take({"choices": [{"text": "c", "logprobs": {"tokens": ["c"]}}]}, 1.3, generated)
    r.take({"choices": [{"text": "d", "logprobs": {"tokens": ["token_id:x"]}}]}, 1.4, generated)
    assert generated == [7, 9] and r.chunk_s == [1.2, 1.3, 1.4]
    assert logprob_ids(None) is None and logprob_ids({"tokens": []}) is None


def _records() -> tuple[list[LiveCallRecord], list[ProgramRecord]]:
    a0 = LiveCallRecord("a", 0, "bash", False, 1_000_000_000, 10.0, end_s=10.5, first_token_s=10.1)
    a0.chunk_s = [10.1, 10.3, 10.5]
    a0.prompt_tokens, a0.output_tokens, a0.cached_tokens = 100, 5, 0
    a1 = LiveCallRecord("a", 1, None, True, 2_000_000_000, 11.0, end_s=11.2, first_token_s=11.05)
    a1.chunk_s = [11.05, 11.2]
    a1.prompt_tokens, a1.output_tokens, a1.cached_tokens = 200, 5, 96
    a1.reused_tokens, a1.requested_output, a1.clipped = 105, 8, True
    b0 = LiveCallRecord(
        "b", 0, "bash", False, 1_500_000_000, 10.5, error="HTTP 400", http_status=400
    )
    b0.prompt_tokens = 50
    programs = [
        ProgramRecord("a", 2, first_send_s=10.0, last_finish_s=11.2, done=True),
        ProgramRecord("b", 2, first_send_s=10.5, cut_short=True),
    ]
    return [a0, a1, b0], programs


def test_summarize_has_the_simulators_keys_from_server_counters() -> None:
    records, programs = _records()
    before = prom.counters({prom.QUERIES: 10.0, prom.HITS: 0.0, prom.PREEMPTIONS: 1.0})
    after = prom.counters({prom.QUERIES: 310.0, prom.HITS: 96.0, prom.PREEMPTIONS: 3.0})
    samples = [(0.0, {PINNED_BLOCKS: 2.0}), (1.0, {PINNED_BLOCKS: 4.0}), (3.0, {})]
    r = live.summarize(
        "vllm", records, programs, server_info(), before, after, samples, wall_s=2.0, reset=True
    )
    assert (r["programs"], r["programs_cut_short"], r["llm_calls"], r["rejected_calls"]) == (
        1, 1, 2, 1,
    )  # fmt: skip
    assert r["jct_mean_s"] == pytest.approx(1.2) and r["jct_p95_s"] is None
    assert r["ttft_mean_s"] == pytest.approx((0.1 + 0.05) / 2)
    assert r["prefix_hit_rate"] == pytest.approx(96 / 300)
    assert r["preemptions"] == 2
    assert r["pinned_token_seconds"] == pytest.approx(2 * 32 * 1.0)  # the last sample has none
    assert r["server"]["client_hit_rate"] == pytest.approx(96 / 300)
    assert r["server"]["errors"] == ["HTTP 400"]
    sim_keys = {
        "policy", "programs", "llm_calls", "jct_mean_s", "jct_p50_s", "jct_p95_s", "jct_p99_s",
        "makespan_s", "throughput_programs_per_s", "ttft_mean_s", "prefix_hit_rate",
        "preemptions", "pinned_token_seconds", "wall_s", "sim_calls_per_s",
    }  # fmt: skip
    assert sim_keys <= set(r)


def test_summarize_percentiles_makespan_gauges_and_pins_of_a_hundred_programs() -> None:
    """JCT (first send to last end, a late start not counted) of the programs that ran
    to their end, its p50/p95/p99 and TTFT's p95 by the shared percentile rule; makespan
    from the first send; the pins named as the simulator names them, only from a server
    with the TTL series; the pinned timeline in tokens from the first sample; the gauges'
    maxima; late starts over a quarter second."""
    programs: list[ProgramRecord] = []
    records: list[LiveCallRecord] = []
    for i in range(1, 101):
        start, span = float(i), i * i / 100
        programs.append(
            ProgramRecord(f"p{i}", 1, start, start + span, done=True, late_start_s=0.5 * (i % 2))
        )
        call = LiveCallRecord(f"p{i}", 0, None, True, 0, start, start + span, start + i / 1000)
        call.clipped = i <= 3
        records.append(call)
    programs.append(ProgramRecord("stopped", 3, 0.5, 0.9))  # ended, not done: not a JCT
    pins = {name: float(k + 1) for k, name in enumerate(PIN_COUNTERS)}
    after = prom.counters({pin_counter_total(n): v for n, v in pins.items()})
    before = prom.counters({pin_counter_total(n): 0.0 for n in pins})
    samples = [
        (5.0, {PINNED_BLOCKS: 1.0, prom.KV_USAGE: 0.2, prom.WAITING: 3.0}),
        (6.0, {PINNED_BLOCKS: 2.0, prom.KV_USAGE: 0.7, prom.WAITING: 1.0}),
        (6.5, {prom.KV_USAGE: 0.4}),
    ]
    info = server_info(ttl_metrics=True)
    r = live.summarize("continuum", records, programs, info, before, after, samples,
                       wall_s=1.0, reset=False)  # fmt: skip
    jct = [i * i / 100 for i in range(1, 101)]
    assert (r["programs"], r["programs_cut_short"], r["truncated_calls"]) == (100, 1, 3)
    assert r["jct_mean_s"] == pytest.approx(sum(jct) / 100)
    assert (r["jct_p50_s"], r["jct_p95_s"], r["jct_p99_s"]) == pytest.approx(
        (percentile(jct, 50), percentile(jct, 95), percentile(jct, 99))
    )
    assert r["ttft_p95_s"] == pytest.approx(percentile([i / 1000 for i in range(1, 101)], 95))
    assert r["makespan_s"] == pytest.approx(100 + 100.0 - 0.5)
    assert r["pins"] == {
        "made": 1, "hit": 2, "expired": 3, "released_under_pressure": 4, "dropped": 5,
        "refused": 6, "deferred": 7,
    }  # fmt: skip
    assert r["pinned_timeline"] == {"t_s": [0.0, 1.0], "pinned_tokens": [32.0, 64.0]}
    server = r["server"]
    assert (server["kv_cache_usage_max"], server["num_requests_waiting_max"]) == (0.7, 3.0)
    assert server["late_starts"] == 50 and server["metrics_samples"] == 3
    stock = live.summarize("vllm", records, programs, server_info(), before, after, samples,
                           wall_s=1.0, reset=False)  # fmt: skip
    assert stock["pins"] is None


def test_benchmark_result_and_aiperf_records(tmp_path: Path) -> None:
    records, _ = _records()
    result = {"policy": "vllm", "jct_mean_s": 1.2, "config": {"jps": None, "concurrency": 4}}
    doc = live.benchmark_result(result, records, server_info(), "lbl")
    assert (doc["num_prompts"], doc["completed"], doc["failed"]) == (3, 2, 1)
    assert doc["total_input_tokens"] == 300 and doc["total_output_tokens"] == 10
    assert doc["duration"] == pytest.approx(11.2 - 10.0)
    assert doc["mean_ttft_ms"] == pytest.approx(75.0)
    assert doc["mean_e2el_ms"] == pytest.approx(350.0)
    assert doc["mean_tpot_ms"] == pytest.approx(((0.4 / 4) + (0.15 / 4)) / 2 * 1000)
    assert doc["p99_itl_ms"] > 0 and doc["request_rate"] == "inf"
    assert doc["ttlctl"]["jct_mean_s"] == 1.2
    name = live.result_name(doc, Load(concurrency=4))
    assert name.startswith("lbl-trace-concurrency4-m-") and name.endswith(".json")

    path = tmp_path / "records.jsonl"
    live.write_records(path, records, "vllm")
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(x["metadata"]["conversation_id"], x["metadata"]["turn_index"]) for x in lines] == [
        ("a", 0), ("b", 0), ("a", 1),
    ]  # fmt: skip
    first = lines[0]
    assert first["metadata"]["request_start_ns"] == 1_000_000_000
    assert first["metadata"]["request_end_ns"] == 1_500_000_000
    assert first["metrics"]["time_to_first_token"] == {"value": pytest.approx(100.0), "unit": "ms"}
    assert first["metrics"]["inter_chunk_latency"]["value"] == pytest.approx([200.0, 200.0])
    assert first["error"] is None and first["ttlctl"]["tool"] == "bash"
    assert lines[1]["error"]["code"] == 400 and lines[1]["metrics"] == {
        "error_isl": {"value": 50, "unit": "tokens"}
    }
    assert lines[2]["metrics"]["cached_tokens"]["value"] == 96


def test_aiperf_records_name_each_call_and_give_its_figures_in_ms(tmp_path: Path) -> None:
    """AIPerf's ``profile_export.jsonl``: one session number per program, the request id
    (program, turn), the first-token and end times in ns, the figures AIPerf computes
    (latency, ITL = (latency − TTFT) / (output − 1), 1 / ITL per user) and ttlctl's own."""
    records, _ = _records()
    path = tmp_path / "records.jsonl"
    live.write_records(path, records, "continuum")
    a0, b0, a1 = (json.loads(x) for x in path.read_text().splitlines())
    assert [x["metadata"]["session_num"] for x in (a0, b0, a1)] == [0, 1, 0]
    meta = a1["metadata"]
    assert (meta["x_request_id"], meta["x_correlation_id"], meta["conversation_id"]) == (
        "a:1", "a", "a",
    )  # fmt: skip
    assert meta["request_start_ns"] == 2_000_000_000
    assert meta["request_ack_ns"] == 2_050_000_000 and meta["request_end_ns"] == 2_200_000_000
    m = {k: v["value"] for k, v in a0["metrics"].items()}
    assert m["request_latency"] == pytest.approx(500.0)
    assert m["inter_token_latency"] == pytest.approx(100.0)  # (500 − 100) / (5 − 1)
    assert m["output_token_throughput_per_user"] == pytest.approx(10.0)
    assert (m["input_sequence_length"], m["output_sequence_length"]) == (100, 5)
    assert m["output_token_count"] == 5 and m["cached_tokens"] == 0  # none cached is told
    assert a1["metrics"]["input_sequence_length"]["value"] == 200
    assert a1["metrics"]["inter_token_latency"]["value"] == pytest.approx(37.5)  # 150 / 4
    assert a1["metrics"]["output_sequence_length"]["value"] == 5  # sent, not asked for
    assert a1["ttlctl"] == {
        "policy": "continuum", "tool": None, "is_last": True, "reused_tokens": 105,
        "cached_tokens": 96, "clipped": True,
    }  # fmt: skip
    assert b0["error"] == {"code": 400, "type": "LiveReplayError", "message": "HTTP 400"}


def test_benchmark_result_throughputs_and_lists_are_vllms(tmp_path: Path) -> None:
    """``vllm bench serve``'s figures: throughputs over the ended calls, the stats of the
    per-chunk ITL (not TPOT), a list entry per call sent (failed ones too), ttlctl's own
    result less its files and timeline; the file named ``{label}-{rate}jps-{model}``."""
    records, _ = _records()
    result = {"policy": "vllm", "files": {}, "pinned_timeline": {}, "config": {"jps": 2.5,
              "concurrency": 4}}  # fmt: skip
    doc = live.benchmark_result(result, records, server_info(model="org/tiny/"), "lbl")
    assert doc["request_throughput"] == pytest.approx(2 / 1.2)
    assert doc["output_throughput"] == pytest.approx(10 / 1.2)
    assert doc["total_token_throughput"] == pytest.approx(310 / 1.2)
    assert (doc["request_rate"], doc["max_concurrency"]) == (2.5, 4)
    assert doc["mean_itl_ms"] == pytest.approx((200 + 200 + 150) / 3)
    assert doc["median_itl_ms"] == pytest.approx(200.0)
    # the failed call's: 0.0, not null, as vLLM writes them (RequestFuncOutput's defaults)
    assert doc["ttfts"] == pytest.approx([0.1, 0.05, 0.0])
    assert doc["latencies"] == pytest.approx([0.5, 0.2, 0.0])
    assert doc["errors"] == ["", "", "HTTP 400"]
    assert (doc["input_lens"], doc["output_lens"]) == ([100, 200, 50], [5, 5, 0])
    assert doc["ttlctl"] == {"policy": "vllm", "config": {"jps": 2.5, "concurrency": 4}}
    name = live.result_name(doc, Load(jps=2.5))
    assert name.startswith("lbl-2.5jps-tiny-") and name.endswith(".json")
    assert live.result_name(doc, Load(jps=2.5, concurrency=3)).startswith(
        "lbl-2.5jps-concurrency3-tiny-"
    )


def test_a_failed_calls_entries_are_vllms_own_defaults() -> None:
    """What the result writes for a call with no first token and no end (failed) is what
    the installed vLLM's ``RequestFuncOutput`` holds for one, as ``vllm bench serve``
    writes its ``ttfts`` and ``latencies`` from it."""
    vllm_bench = pytest.importorskip(
        "vllm.benchmarks.lib.endpoint_request_func", reason="vLLM is not installed"
    )
    records, _ = _records()
    doc = live.benchmark_result({"policy": "vllm"}, records, server_info(), "lbl")
    failed = [i for i, error in enumerate(doc["errors"]) if error]
    assert failed, doc["errors"]
    unset = vllm_bench.RequestFuncOutput()
    for i in failed:
        assert (doc["ttfts"][i], doc["latencies"][i]) == (unset.ttft, unset.latency)


class _Metrics(BaseHTTPRequestHandler):
    """``/metrics``: a server error to the first read, then the three gauges and a counter."""

    reads: ClassVar[list[float]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        _Metrics.reads.append(time.perf_counter())
        if len(_Metrics.reads) == 1:
            self.send_error(500)
            return
        body = (
            f"{PINNED_BLOCKS} 3\n{prom.KV_USAGE} 0.5\n{prom.WAITING} 2\n{prom.QUERIES} 9\n"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_the_sampler_keeps_the_gauges_of_each_read_that_answered() -> None:
    """A read that fails is skipped, not kept empty; only the gauges are kept, each with
    the time of its read; a period of 0 reads nothing."""
    _Metrics.reads = []
    with stub_serving(_Metrics) as url:
        with Sampler(url, 0.0) as none:
            time.sleep(0.05)
        assert none.samples == [] and _Metrics.reads == []
        with Sampler(url, 0.02) as sampler:
            deadline = time.perf_counter() + 5.0
            while len(_Metrics.reads) < 3 and time.perf_counter() < deadline:
                time.sleep(0.01)
    samples = list(sampler.samples)
    gauges = {PINNED_BLOCKS: 3.0, prom.KV_USAGE: 0.5, prom.WAITING: 2.0}
    assert len(samples) == len(_Metrics.reads) - 1 and samples
    assert all(values == gauges for _, values in samples)
    times = [t for t, _ in samples]
    assert times == sorted(times) and times[0] < _Metrics.reads[1]


def test_live_results_wants_one_policy() -> None:
    w = Workload((AgentProgram("p", 0.0, (Call(10, 1, 0, None, 0.0),)),))
    with pytest.raises(live.LiveError, match="one --policy"):
        live.live_results("http://127.0.0.1:1", w, ["vllm", "continuum"])


def test_an_unreachable_server_is_one_line() -> None:
    from tests.vllm_server import free_port

    w = Workload((AgentProgram("p", 0.0, (Call(10, 1, 0, None, 0.0),)),))
    with pytest.raises(ServerError, match="connection refused") as exc:
        live.run_live(f"127.0.0.1:{free_port()}/v1", w, "vllm")
    assert "\n" not in str(exc.value)


# ----------------------------------------------------------------------------- validate


def test_server_command_per_policy() -> None:
    base = base_command("/m", ["--max-model-len", "2048"])
    stock = validate.server_command(base, "vllm", 9001)
    assert stock[:5] == [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/m",
    ]
    assert "--scheduler-cls" not in stock
    assert stock[-5:] == ["--enable-prompt-tokens-details", "--host", "127.0.0.1", "--port", "9001"]
    ttl = validate.server_command([*base, "--enable-prompt-tokens-details"], "continuum", 9002)
    assert ttl.count("--enable-prompt-tokens-details") == 1
    assert ttl[-6:] == [
        "--scheduler-cls", "ttlctl.engine.TTLScheduler", "--host", "127.0.0.1", "--port", "9002",
    ]  # fmt: skip
    with pytest.raises(CommandError, match="scheduler-cls is set by validate"):
        validate.server_command([*base, "--scheduler-cls", "x.Y"], "vllm", 1)


def test_server_environment(tmp_path: Path) -> None:
    bundle = tmp_path / "b.json"
    env = validate.server_environment({"TTLCTL_BUNDLE": "/x"}, "vllm", bundle, tmp_path)
    assert "TTLCTL_BUNDLE" not in env and env["VLLM_SERVER_DEV_MODE"] == "1"
    assert Path(env["PROMETHEUS_MULTIPROC_DIR"]).is_dir()
    env = validate.server_environment({}, "continuum", bundle, tmp_path)
    assert env["TTLCTL_BUNDLE"] == str(bundle.resolve())
    assert env["PROMETHEUS_MULTIPROC_DIR"] != str(tmp_path / "vllm-prometheus")


def test_sim_engine_config_is_sized_like_the_server() -> None:
    e = validate.sim_engine_config(
        server_info(), kv_tokens=None, max_num_seqs=128, max_num_batched_tokens=2048
    )
    assert (e.kv_tokens, e.block_size, e.max_model_len) == (255 * 32, 32, 2048)
    assert (e.max_num_seqs, e.max_num_batched_tokens) == (128, 2048)
    e = validate.sim_engine_config(
        server_info(), kv_tokens=4096, max_num_seqs=8, max_num_batched_tokens=512
    )
    assert e.kv_tokens == 4096 and e.long_prefill_token_threshold == 0
    e = validate.sim_engine_config(
        server_info(), kv_tokens=None, max_num_seqs=8, max_num_batched_tokens=512,
        prefill_cap=(128, True),
    )  # fmt: skip
    assert (e.long_prefill_token_threshold, e.long_prefill_token_threshold_adaptive) == (128, True)
    e = validate.sim_engine_config(  # past the server's max_model_len (2,048): cut to it
        server_info(), kv_tokens=None, max_num_seqs=8, max_num_batched_tokens=512,
        prefill_cap=(4096, False),
    )  # fmt: skip
    assert e.long_prefill_token_threshold == 2048
    e = validate.sim_engine_config(
        server_info(), kv_tokens=None, max_num_seqs=8, max_num_batched_tokens=512, watermark=0.1
    )
    assert e.watermark == 0.1 and e.watermark_blocks == 25  # 0.1 x (255 + vLLM's null block)
    with pytest.raises(validate.ValidateError, match="cache_config_info"):
        validate.sim_engine_config(
            server_info(num_gpu_blocks=None, kv_tokens=None),
            kv_tokens=None,
            max_num_seqs=1,
            max_num_batched_tokens=1,
        )
    # a KV that holds no block: refused naming the flag (not the simulator's own check)
    for info, kv, line in [
        (server_info(num_gpu_blocks=1), None, "http://127.0.0.1:1 has 1 KV block of 32 tokens (one "
         "is vLLM's null block): no usable KV block; give its KV cache more memory"),
        (server_info(num_gpu_blocks=None, kv_tokens=16), None, "http://127.0.0.1:1 has 16 KV "
         "tokens in blocks of 32: no usable KV block"),
        (server_info(), 31, "--kv-tokens 31 holds no KV block: http://127.0.0.1:1 has blocks of 32 "
         "tokens (--block-size); give at least 32"),
    ]:  # fmt: skip
        with pytest.raises(validate.ValidateError) as refused:
            validate.sim_engine_config(info, kv_tokens=kv, max_num_seqs=1, max_num_batched_tokens=1)
        assert str(refused.value).startswith(line)


def test_one_usable_kv_block_is_enough_and_servers_must_agree_on_their_length() -> None:
    # two blocks, one of them vLLM's null block: one block of KV to simulate
    assert kv_tokens_of(server_info(num_gpu_blocks=2), None) == 32
    assert kv_tokens_of(server_info(num_gpu_blocks=None, kv_tokens=32), None) == 32
    first = server_info()
    assert same_servers({"vllm": first, "continuum": server_info(url="http://h:2")}) is first
    for other in (
        server_info(max_model_len=4096),
        server_info(block_size=16),
        server_info(kv_tokens=4096),
    ):
        with pytest.raises(validate.ValidateError, match="the servers differ"):
            same_servers({"vllm": first, "continuum": other})


def test_validate_cli_argument_errors(tmp_path: Path) -> None:
    from tests.live.traces import agent_trace

    trace = agent_trace(tmp_path / "t.parquet", programs=2, calls=2)
    bad_model = tmp_path / "model"  # a local model folder whose config is damaged
    bad_model.mkdir()
    (bad_model / "config.json").write_text("{")
    app = _app(validate_cli.validate, validate_cli.CONTEXT_SETTINGS)
    runner = CliRunner()
    cases = [
        ([str(trace)], "no server for vllm, continuum"),
        ([str(trace), "--url", "vllm"], "--url takes POLICY=URL"),
        ([str(trace), "--jps", "1", "--concurrency", "2", "--model", "m"], "not both"),
        ([str(trace), "--model", "m", "--engine-cmd", "x"], "not both"),
        (
            [str(trace), "--policy", "oracle", "--model", "m"],
            "validate compares vllm and continuum",
        ),
        ([str(trace), "--", "--max-model-len", "8"], "need --model or --engine-cmd"),
        ([str(tmp_path / "missing.parquet"), "--model", "m"], "no such file"),
        ([str(trace), "--model", "m", "--repeats", "0"], "--repeats must be at least 1"),
        (  # a watermark vLLM refuses: before any server starts (or any --url server's runs)
            [
                str(trace),
                "--url",
                "vllm=http://x:1",
                "--url",
                "continuum=http://x:2",
                "--watermark",
                "1",
            ],
            "--watermark must be a share from 0 to below 1, not 1",
        ),
        ([str(trace), "--model", "m", "--watermark", "nan"], "--watermark must be a share"),
        ([str(trace), "--model", str(bad_model)], "config.json: line 1 column 2: not valid JSON"),
    ]
    for args, message in cases:
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert message in res.stderr, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1


def _gpu_live_check() -> Any:
    """bench/gpu_live_check.py, loaded as a module (bench/ is no package)."""
    return bench_script("gpu_live_check")


def test_gpu_live_check_writes_a_servable_model_folder_without_weights(tmp_path: Path) -> None:
    """bench/gpu_live_check.py serves a real-size config with --load-format dummy: the
    folder holds the preset's config and a tokenizer that knows every id of its
    vocabulary (the live replay sends random ids and reads them back)."""
    from transformers import AutoTokenizer

    from profiles.models import PRESETS

    module = _gpu_live_check()
    folder = module.write_model(tmp_path / "model", "tiny")
    config = json.loads((folder / "config.json").read_text())
    vocab = PRESETS["tiny"]["vocab_size"]
    assert config["vocab_size"] == vocab and config["architectures"] == ["LlamaForCausalLM"]
    assert not list(folder.glob("*.safetensors"))
    tok = AutoTokenizer.from_pretrained(str(folder))
    assert len(tok) == vocab and tok.eos_token_id == config["eos_token_id"] == 1
    ids = [3, vocab // 2, vocab - 1]
    assert tok(tok.decode(ids), add_special_tokens=False)["input_ids"] == ids


def test_gpu_live_check_places_a_fleet_on_the_gpus_it_sees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bench/gpu_live_check.py --replicas N: a GPU each where N are visible, else the
    replicas share the first, each given its share of the memory; a CPU each dry."""
    module = _gpu_live_check()
    args: list[str] = ["--load-format", "dummy"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert module.placement(2, False, args) == ["--gpus-per-replica", "1"]
    assert args == ["--load-format", "dummy"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert module.placement(2, False, args) == []
    assert args[-2:] == ["--gpu-memory-utilization", "0.45"]
    assert module.placement(2, True, []) == ["--cpus-per-replica", "1"]
