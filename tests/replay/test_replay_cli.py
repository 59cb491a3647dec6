"""`ttlctl replay` end to end, and the messy cases of real traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from replay.figures import ReplayDoc
from tests.documents import conforms
from ttlctl.cli import app
from ttlctl.trace import io as trace_io


def _trace(path: Path, programs: list[list[dict[str, Any]]]) -> Path:
    rows = []
    for p, calls in enumerate(programs):
        for t, c in enumerate(calls):
            rows.append(
                {
                    "program_id": f"p{p}",
                    "turn": t,
                    "arrival_s": float(p) if t == 0 else None,
                    "input_tokens": c["input"],
                    "output_tokens": c.get("output", 50),
                    "tool": None if t == len(calls) - 1 else "bash",
                    "tool_s": None if t == len(calls) - 1 else c.get("pause", 1.0),
                    "gap_s": None if t == len(calls) - 1 else c.get("pause", 1.0),
                    "is_last": t == len(calls) - 1,
                }
            )
    trace_io.write(pl.DataFrame(rows).lazy(), path)
    return path


def _growing(
    n: int, start: int = 1000, step: int = 800, pause: float = 1.0
) -> list[dict[str, Any]]:
    return [{"input": start + step * i, "pause": pause} for i in range(n)]


def test_replay_all_policies_json(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.parquet", [_growing(6) for _ in range(12)])
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        app,
        [
            "replay",
            str(trace),
            "--policy",
            "all",
            "--kv-tokens",
            "20000",
            "--json",
            str(out),
            "--check",
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    conforms(doc, ReplayDoc)
    names = [r["policy"] for r in doc["results"]]
    assert names == [
        "vllm",
        "program-fcfs",
        "static-ttl",
        "continuum",
        "infercept",
        "autellix",
        "oracle",
        "unlimited-kv",
    ]
    keys = {
        "policy",
        "programs",
        "llm_calls",
        "jct_mean_s",
        "jct_p50_s",
        "jct_p95_s",
        "jct_p99_s",
        "makespan_s",
        "throughput_programs_per_s",
        "ttft_mean_s",
        "prefix_hit_rate",
        "preemptions",
        "pinned_token_seconds",
        "wall_s",
        "sim_calls_per_s",
        "gap_closed",
    }
    for r in doc["results"]:
        assert keys <= set(r)
        assert r["programs"] == 12 and r["llm_calls"] == 72
        assert r["jct_p99_s"] is None  # 12 programs: too few for a p99
    # the two bounds, and only they (docs/replay.md, "Policies")
    assert [r["evaluation_only"] for r in doc["results"]] == [False] * 6 + [True] * 2
    by = {r["policy"]: r for r in doc["results"]}
    assert by["unlimited-kv"]["preemptions"] == 0
    assert by["vllm"]["gap_closed"] == 0.0 and by["unlimited-kv"]["gap_closed"] == 1.0
    assert doc["trace"]["sha256"] and doc["config"]["engine"]["kv_tokens"] == 20000
    assert "continuum" in res.output and "gap closed" in res.output
    assert "* evaluation only" in res.output  # oracle and unlimited-kv are starred
    assert "no gap closed" not in res.output


def test_no_gap_closed_where_memory_does_not_limit_the_load(tmp_path: Path) -> None:
    """With KV for every context, vLLM is as fast as unlimited KV: no share of a gap is
    given (a dash and null), and a line under the table says why."""
    trace = _trace(tmp_path / "t.parquet", [_growing(4) for _ in range(6)])
    out = tmp_path / "r.json"
    args = ["replay", str(trace), "--kv-tokens", "2000000", "--json", str(out)]
    for name in ("vllm", "continuum", "unlimited-kv"):
        args += ["--policy", name]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    results = json.loads(out.read_text())["results"]
    assert [r["gap_closed"] for r in results] == [None, None, None]
    assert "no gap closed: unlimited KV is not 1% faster than vLLM" in " ".join(res.output.split())


def test_the_evaluation_only_footnote_only_under_a_starred_row(tmp_path: Path) -> None:
    """The footnote explains the star of oracle and unlimited-kv; a table without either
    has no star and no footnote. Regression: it was printed under every table."""
    trace = _trace(tmp_path / "t.parquet", [_growing(3) for _ in range(3)])
    res = CliRunner().invoke(app, ["replay", str(trace), "--policy", "vllm"])
    assert res.exit_code == 0, res.output
    assert "vllm" in res.output and "*" not in res.output


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.parquet", [_growing(5) for _ in range(10)])
    outputs = []
    for i, seed in enumerate((3, 3, 4)):
        out = tmp_path / f"r{i}.json"
        res = CliRunner().invoke(
            app,
            [
                "replay",
                str(trace),
                "--policy",
                "vllm,continuum",
                "--jps",
                "0.5",
                "--seed",
                str(seed),
                "--kv-tokens",
                "15000",
                "--no-timing",
                "--json",
                str(out),
            ],
        )
        assert res.exit_code == 0, res.output
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    assert outputs[0] != outputs[2]


def test_too_long_calls_are_rejected_with_a_count_or_truncated(tmp_path: Path) -> None:
    programs = [_growing(3), [{"input": 500}, {"input": 50_000}, {"input": 51_000}]]
    trace = _trace(tmp_path / "t.parquet", programs)
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        app, ["replay", str(trace), "--policy", "vllm", "--kv-tokens", "16000", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    r = json.loads(out.read_text())["results"][0]
    assert r["rejected_calls"] == 2 and r["programs_cut_short"] == 1
    assert r["llm_calls"] == 4 and r["programs"] == 1
    assert "2 of 6 calls rejected" in res.output
    res = CliRunner().invoke(
        app,
        [
            "replay",
            str(trace),
            "--policy",
            "vllm",
            "--kv-tokens",
            "16000",
            "--truncate",
            "--json",
            str(out),
        ],
    )
    r = json.loads(out.read_text())["results"][0]
    assert r["rejected_calls"] == 0 and r["truncated_calls"] == 2 and r["llm_calls"] == 6


def test_long_programs_and_no_pauses(tmp_path: Path) -> None:
    long_one = [{"input": 200 + 10 * i, "output": 5, "pause": 0.0} for i in range(2000)]
    trace = _trace(tmp_path / "t.parquet", [long_one, _growing(4, pause=0.0)])
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        app,
        [
            "replay",
            str(trace),
            "--policy",
            "vllm,continuum",
            "--kv-tokens",
            "40000",
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    for r in json.loads(out.read_text())["results"]:
        assert r["llm_calls"] == 2004 and r["programs"] == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "nope"], "unknown policy"),
        (["--policy", "vllm", "--jps", "1", "--concurrency", "2"], "not both"),
        (["--policy", "vllm", "--valve", "sometimes"], "--valve"),
        (["--policy", "vllm", "--kv-tokens", "3"], "--kv-tokens"),
        (["--policy", "continuum", "--bundle", "missing.json"], "no such file"),
    ],
)
def test_bad_arguments(tmp_path: Path, args: list[str], message: str) -> None:
    trace = _trace(tmp_path / "t.parquet", [_growing(2)])
    res = CliRunner().invoke(app, ["replay", str(trace), *args])
    assert res.exit_code == 2, res.output
    assert message in res.output


@pytest.mark.parametrize(
    "args",
    [
        ["--result-dir", "out"],
        ["--label", "mine"],
        ["--live", "http://127.0.0.1:1", "--result-dir", "out"],
        ["--save-result", "--result-dir", "out"],  # nothing live to save
    ],
)
def test_result_dir_and_label_need_save_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """vLLM's pair: alone, --result-dir (or --label) would be ignored unsaid, and so would
    --save-result in a simulated replay; refused in one line, before anything is run or
    written."""
    trace = _trace(tmp_path / "t.parquet", [_growing(2)])
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["replay", str(trace), "--policy", "vllm", *args])
    assert res.exit_code == 2, res.output
    (line,) = res.stderr.strip().splitlines()
    if "--save-result" in args:
        assert line == "error: --save-result needs --live (it saves a live run's benchmark result)"
    else:
        assert line == f"error: {args[-2]} needs --save-result"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


def test_a_prefill_chunk_cap_is_replayed_as_vllm_caps_it(tmp_path: Path) -> None:
    """``--long-prefill-token-threshold`` (vLLM's): long prompts prefill in chunks of the cap
    while other calls run, so the replay takes more steps; the engine's record says so; a
    cap past the model's length is refused, naming the flag."""
    trace = _trace(tmp_path / "t.parquet", [[{"input": 3000, "output": 1}] for _ in range(4)])

    def replay(*more: str) -> dict[str, Any]:
        out = tmp_path / "r.json"
        args = ["replay", str(trace), "--policy", "vllm", "--concurrency", "4"]
        res = CliRunner().invoke(app, [*args, "--json", str(out), *more])
        assert res.exit_code == 0, res.output
        return dict(json.loads(out.read_text()))

    plain = replay()
    capped = replay("--long-prefill-token-threshold", "256")
    adaptive = replay(
        "--long-prefill-token-threshold", "256", "--long-prefill-token-threshold-adaptive"
    )
    assert "long_prefill_token_threshold" not in plain["config"]["engine"]
    engine = capped["config"]["engine"]
    assert engine["long_prefill_token_threshold"] == 256
    assert "long_prefill_token_threshold_adaptive" not in engine
    assert adaptive["config"]["engine"]["long_prefill_token_threshold_adaptive"] is True
    steps = [d["results"][0]["engine_steps"] for d in (plain, capped, adaptive)]
    # four prompts of 3,000 tokens at once (one output token each): two steps uncapped (a
    # budget of 8,192), twelve capped at 256 (3,000 / 256, rounded up), two again
    # where adaptive floors the cap at the budget's share (8192 // 4 = 2,048)
    assert steps == [2, 12, 2], steps
    res = CliRunner().invoke(
        app,
        ["replay", str(trace), "--policy", "vllm", "--long-prefill-token-threshold", "999999"],
    )
    assert res.exit_code == 2
    assert "--long-prefill-token-threshold must be from 0 (no cap) to --max-model-len" in (
        res.output
    )
