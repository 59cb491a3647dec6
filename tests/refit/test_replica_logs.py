"""Refit on the engine logs of two replicas (issues 19 item 4 and 22): real logs, written by
the plugin on vLLM's own scheduler (in process, no model: ``tests/vllmsim/drive.py``), one
per replica, of different sizes, with the programs' calls alternating between them as a
round-robin router sends them. It used to fail with "duplicate (program, turn)"."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

from tests.refit.test_refit import run, served_from
from tests.vllmsim.drive import Driver, driver, static_params
from ttlctl.trace import io as trace_io

PROGRAMS, TURNS = 6, 4
#: each replica's usable KV blocks (of 16 tokens)
BLOCKS = {"r-small": 40, "r-big": 96}


def _drain(d: Driver) -> None:
    for _ in range(500):
        if not d.sched.has_requests():
            return
        d.update(d.schedule())
    raise AssertionError("the engine did not drain")


def _serve(root: Path, rerun: bool = False) -> dict[str, Path]:
    """Two replicas; turn t of program i runs on replica (i + t) mod 2, a real pause of
    0.15 s between turns. ``rerun``: the same programs again, ids reused."""
    logs = {name: root / f"{name}.jsonl" for name in BLOCKS}
    drivers = [
        driver(
            root / name,
            static_params(30.0),
            blocks=blocks,
            async_scheduling=False,
            env={"TTLCTL_LOG": str(logs[name]), "TTLCTL_REPLICA": name},
        )
        for name, blocks in BLOCKS.items()
    ]
    for run_no in range(2 if rerun else 1):
        for turn in range(TURNS):
            for i in range(PROGRAMS):
                d = drivers[(i + turn) % 2]
                d.now = time.time()  # the plugin logs arrivals on the request's clock
                d.add(f"p{i}-{run_no}-{turn}", f"p{i}", 60 + 10 * turn, 6, last=turn == TURNS - 1)
            for d in drivers:
                _drain(d)
            time.sleep(0.15)
    return logs


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _serve(tmp_path_factory.mktemp("replicas"))


def test_ingest_merges_each_program_across_the_replicas(
    logs: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "t.parquet"
    result = run("ingest", *logs.values(), "-o", out)
    assert result.exit_code == 0, result.output
    trace = trace_io.read(out).sort("program_id", "turn")
    assert trace.height == PROGRAMS * TURNS and trace["program_id"].n_unique() == PROGRAMS
    p0 = trace.filter(trace["program_id"] == "p0")
    assert p0["turn"].to_list() == list(range(TURNS))
    assert p0["replica"].to_list() == ["r-small", "r-big", "r-small", "r-big"]
    assert p0["is_last"].to_list() == [False, False, False, True]
    engines = {e["replica"]: e for e in trace_io.engines(out)}
    assert {name: e["kv_tokens"] for name, e in engines.items()} == {
        name: blocks * 16 for name, blocks in BLOCKS.items()
    }
    assert sum(e["calls"] for e in engines.values()) == PROGRAMS * TURNS


def test_refit_replays_each_replica_at_its_own_size(logs: dict[str, Path], tmp_path: Path) -> None:
    served = served_from(logs["r-small"], tmp_path / "srv")
    args = ["refit", *logs.values(), "--bundle", served, "--dry-run", "--seeds", "1"]
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert "replay sized from the engine log (replica r-big): 1,536 KV tokens" in result.stdout
    assert "replay sized from the engine log (replica r-small): 640 KV tokens" in result.stdout
    report: dict[str, Any] = json.loads(run(*args, "--json", "-").stdout)
    engines = {e["replica"]: e for e in report["replay"]["engines"]}
    assert {name: e["engine"]["kv_tokens"] for name, e in engines.items()} == {
        name: blocks * 16 for name, blocks in BLOCKS.items()
    }
    assert sum(e["programs"] for e in engines.values()) == PROGRAMS
    assert report["ingest"]["programs"] == PROGRAMS and report["ingest"]["calls"] == 24
    assert report["jct"]["old"]["p95_s"] is None  # not the weighted p95s of the parts


def test_the_same_programs_run_again_refit_as_new_programs(tmp_path: Path) -> None:
    logs = _serve(tmp_path / "twice", rerun=True)
    served = served_from(logs["r-small"], tmp_path / "srv")
    args = ["--bundle", served, "--dry-run", "--seeds", "1", "--json", "-"]
    result = run("refit", *logs.values(), *args)
    assert result.exit_code == 0, result.output
    ingest = json.loads(result.stdout)["ingest"]
    assert (ingest["programs"], ingest["calls"]) == (2 * PROGRAMS, 2 * PROGRAMS * TURNS)
    text = run("ingest", *logs.values(), "-o", tmp_path / "t.parquet").output
    assert f"{PROGRAMS} program id(s) used again" in text
