"""``--backend vllm`` on the command line: replay, validate and tune."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import vllm
from typer.testing import CliRunner

from fitting.fit import FitConfig, fit_trace
from replay.vllmsim import fleet as vllm_fleet
from tests.tune.inputs import write_trace
from ttlctl.cli import app
from ttlctl.trace import io as trace_io

REPO = Path(__file__).resolve().parents[2]
MAPPED = ["vllm", "program-fcfs", "static-ttl", "continuum", "unlimited-kv"]


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_trace(tmp_path_factory.mktemp("cli") / "t.parquet", programs=6, seed=3)


def _replay(trace: Path, *args: str) -> tuple[int, str, dict[str, Any] | None]:
    res = CliRunner().invoke(
        app, ["replay", str(trace), "--kv-tokens", "12000", "--json", "-", *args]
    )
    doc = json.loads(res.stdout) if res.exit_code == 0 else None
    return res.exit_code, res.output, doc


def test_vllm_backend_json_has_the_fast_keys_and_names_the_backend(trace: Path) -> None:
    common = ["--policy", "all", "--concurrency", "3", "--no-timing"]
    code, fast_out, fast = _replay(trace, *common)
    assert code == 0, fast_out
    code, out, ours = _replay(trace, *common, "--backend", "vllm")
    assert code == 0, out
    assert fast is not None and ours is not None
    assert (ours["backend"], ours["async_scheduling"]) == ("vllm", False)
    assert ours["vllm_version"] == vllm.__version__ and fast["vllm_version"] is None
    assert fast["backend"] == "fast"
    assert set(fast) == set(ours)
    assert [r["policy"] for r in ours["results"]] == MAPPED  # all: the policies that map
    # and says which it left out, and why (regression: dropped silently), in one line
    (line,) = [x for x in out.splitlines() if x.startswith("warning: ")]
    assert line.startswith(
        "warning: --policy all on --backend vllm: infercept, autellix, oracle not run"
    )
    assert "--backend fast runs them" in line
    assert "warning: " not in fast_out  # the fast backend runs them all
    fast_keys = set(fast["results"][0])
    for r in ours["results"]:
        assert fast_keys <= set(r)
        assert r["llm_calls"] == fast["results"][0]["llm_calls"]
        assert r["scheduler"] == (
            "Scheduler" if r["policy"] in ("vllm", "unlimited-kv") else "TTLScheduler"
        )
    by = {r["policy"]: r for r in ours["results"]}
    # six programs, three at a time, in 12k tokens: unlimited KV is 0.06% faster than vLLM,
    # no gap to share (ttlctl.gap), on either backend
    assert by["unlimited-kv"]["jct_mean_s"] < by["vllm"]["jct_mean_s"]
    assert [r["gap_closed"] for r in ours["results"] + fast["results"]] == [None] * 13
    assert by["program-fcfs"]["pins"]["made"] == 0 and by["static-ttl"]["pins"]["made"] > 0


@pytest.mark.parametrize("mode", [[], ["--async-scheduling"]])
def test_same_seed_same_bytes(trace: Path, mode: list[str]) -> None:
    runs = []
    for seed in ("5", "5", "6"):
        code, out, _ = _replay(
            trace,
            "--policy",
            "vllm,continuum",
            "--backend",
            "vllm",
            "--jps",
            "0.5",
            "--seed",
            seed,
            "--no-timing",
            *mode,
        )
        assert code == 0, out
        runs.append(out)
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    assert json.loads(runs[0])["async_scheduling"] is bool(mode)


@pytest.mark.parametrize("policy", ["infercept", "autellix", "oracle"])
def test_policies_that_do_not_map_are_refused(trace: Path, policy: str) -> None:
    code, out, _ = _replay(trace, "--policy", policy, "--backend", "vllm")
    assert code == 2
    lines = [x for x in out.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "does not map onto vLLM's scheduler" in lines[0], out


def test_without_vllm_one_line_and_exit_2(trace: Path, tmp_path: Path) -> None:
    """vLLM made unimportable (a sitecustomize that refuses it): the fast backend still
    runs; the vLLM backend says so in one line, exit 2."""
    block = tmp_path / "block"
    block.mkdir()
    (block / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoVllm:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'vllm' or name.startswith('vllm.'):\n"
        "            raise ImportError(f'No module named {name!r} (blocked)')\n"
        "        return None\n"
        "sys.meta_path.insert(0, _NoVllm())\n"
    )
    env = dict(os.environ, PYTHONPATH=f"{block}{os.pathsep}{REPO}")
    base = [sys.executable, "-m", "ttlctl.cli", "replay", str(trace), "--kv-tokens", "12000"]
    res = subprocess.run(
        [*base, "--policy", "vllm", "--backend", "vllm"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 2, res.stderr
    lines = [x for x in res.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "--backend vllm needs vLLM installed" in lines[0], res.stderr
    ok = subprocess.run(
        [*base, "--policy", "vllm"], capture_output=True, text=True, env=env, timeout=300
    )
    assert ok.returncode == 0, ok.stderr


def test_validate_takes_the_flag(trace: Path) -> None:
    res = CliRunner().invoke(app, ["validate", str(trace), "--backend", "gpu"])
    assert res.exit_code == 2 and "--backend must be one of fast, vllm" in res.output
    res = CliRunner().invoke(app, ["validate", str(trace), "--backend", "vllm"])
    assert res.exit_code == 2 and "no server for vllm" in res.output  # past the backend check


def test_tune_on_the_vllm_backend(trace: Path, tmp_path: Path) -> None:

    fit = tmp_path / "fit.json"
    doc = fit_trace(trace_io.scan(trace), FitConfig(min_samples=5, bootstrap=20))
    fit.write_text(json.dumps(doc))
    out = tmp_path / "bundle.json"
    args = [
        "tune",
        str(trace),
        "--fit",
        str(fit),
        "--profile",
        "llama-3.1-70b-a100",
        "--concurrency",
        "3",
        "--kv-tokens",
        "12000",
        "--trials",
        "2",
        "--seeds",
        "1",
        "--holdout-seeds",
        "1",
        "-o",
        str(out),
        "--backend",
        "vllm",
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "tune.json").read_text())
    assert summary["objective"]["backend"] == "vllm"
    live = CliRunner().invoke(
        app, [*args, "--live", "http://127.0.0.1:9", "--live-bundle", str(out)]
    )
    assert live.exit_code == 2 and "--live is the fast backend's" in live.output


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_tune_a_vllm_fleet(
    trace: Path, tmp_path: Path, async_scheduling: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tune --replicas 2 --backend vllm``: every trial and the held-back comparison
    replay vLLM's schedulers behind the router (with ``--async-scheduling``, vLLM's
    ``AsyncScheduler``); the study in a real SQLite file, the bundle with its router."""
    schedulers: list[str] = []
    simulate = vllm_fleet.simulate

    def counted(*args: Any, **kwargs: Any) -> vllm_fleet.VllmFleetOutcome:
        ran = simulate(*args, **kwargs)
        schedulers.extend(e.scheduler_name for e in ran.engines)
        return ran

    monkeypatch.setattr(vllm_fleet, "simulate", counted)
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps(fit_trace(trace_io.scan(trace), FitConfig(min_samples=5))))
    out = tmp_path / "bundle.json"
    db = tmp_path / "study.db"
    # fmt: off
    args = [
        "tune", str(trace), "--fit", str(fit), "--profile", "llama-3.1-70b-a100",
        "--concurrency", "3", "--kv-tokens", "12000", "--trials", "2", "--seeds", "1",
        "--holdout-seeds", "1", "--replicas", "2", "--router", "pin-aware",
        "--router", "round-robin", "--backend", "vllm", "--storage", f"sqlite:///{db}",
        "-o", str(out), "--force",
    ]
    # fmt: on
    if async_scheduling:
        args.append("--async-scheduling")
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "tune.json").read_text())
    assert summary["objective"]["backend"] == "vllm"
    assert summary["objective"]["async_scheduling"] is async_scheduling
    assert len(summary["trials"]) == 2
    assert all(t["state"] == "COMPLETE" for t in summary["trials"])
    best = summary["best"]
    assert best["router"]["name"] in ("pin-aware", "round-robin")
    assert best["router"]["replicas"] == 2
    assert summary["held_back"]["routers"]["vllm"]["name"] == "cache-aware"
    doc = json.loads(out.read_text())
    assert doc["router"] == best["router"]
    # 2 trials + 4 held-back replays (tuned, default, never-pin, stock), 2 replicas each
    assert len(schedulers) >= 2 * 6
    assert all(("Async" in name) == async_scheduling for name in schedulers), schedulers
    with sqlite3.connect(db) as con:
        names = {r[0] for r in con.execute("select param_name from trial_params")}
    assert {"router", "eta"} <= names
