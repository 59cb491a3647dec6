"""Refit on the engine logs of two replicas (issues 19 item 4 and 22): real logs, written by
the plugin on vLLM's own scheduler (in process, no model: ``tests/vllmsim/drive.py``), one
per replica, of different sizes, with the programs' calls alternating between them as a
round-robin router sends them. It used to fail with "duplicate (program, turn)"."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest

pytest.importorskip("vllm")

from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from replay.fleet.run import simulate_fleet_one
from replay.policies import PolicySpec
from replay.refit_replay import engines_doc, plan
from replay.refit_settings import RefitSettings
from replay.sim import ReplayConfig
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
    # replay as logged sizes every replica by its flags, and says so (refit sizes by the logs)
    replayed = run("replay", out, "--policy", "vllm", "--replicas", "2", "--router", "as-logged")
    assert replayed.exit_code == 0, replayed.output
    assert "--router as-logged: the trace's engine records size 2 replica(s)" in replayed.output


def test_refit_replays_the_fleet_as_logged(logs: dict[str, Path], tmp_path: Path) -> None:
    """Issue 19 item 4: the two logs replay as the fleet they came from: two replicas, each
    at its own size, every call on the replica that served it."""
    served = served_from(logs["r-small"], tmp_path / "srv")
    args = ["refit", *logs.values(), "--bundle", served, "--dry-run", "--seeds", "1"]
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert "replay sized from the engine log (replica r-big): 1,536 KV tokens" in result.stdout
    assert "replay sized from the engine log (replica r-small): 640 KV tokens" in result.stdout
    # the console says what the replay does: every call where it ran, one load over the
    # fleet (not each program on one replica, nor the load once per replica)
    assert "on 2 replicas, each call on the replica that served it, at " in result.stdout
    assert "programs at a time over the fleet" in result.stdout
    assert "replica r-small: 12 calls, 3 programs started there\n" in result.stdout
    assert "served most" not in result.stdout
    report: dict[str, Any] = json.loads(run(*args, "--json", "-").stdout)
    assert report["replay"]["fleet"]["name"] == "as-logged"
    assert report["replay"]["fleet"]["replicas"] == 2
    engines = {e["replica"]: e for e in report["replay"]["engines"]}
    assert {name: e["engine"]["kv_tokens"] for name, e in engines.items()} == {
        name: blocks * 16 for name, blocks in BLOCKS.items()
    }
    # program i's first call ran on replica i mod 2 (r-small for even i); calls alternate
    assert {name: (e["programs"], e["calls"]) for name, e in engines.items()} == {
        "r-small": (PROGRAMS // 2, PROGRAMS * TURNS // 2),
        "r-big": (PROGRAMS // 2, PROGRAMS * TURNS // 2),
    }
    assert report["ingest"]["programs"] == PROGRAMS and report["ingest"]["calls"] == 24
    assert report["replay"]["programs"] == PROGRAMS and report["replay"]["calls"] == 24
    assert report["jct"]["old"]["mean_s"] > 0 and report["jct"]["new"]["mean_s"] > 0


def test_the_fleet_replay_routes_each_call_where_it_ran(
    logs: dict[str, Path], tmp_path: Path
) -> None:
    """The replay refit judges on: each call on its logged replica, each replica its own
    engine size (the fleet's outcome, read directly)."""
    trace = tmp_path / "t.parquet"
    assert run("ingest", *logs.values(), "-o", trace).exit_code == 0
    frame = trace_io.read(trace)
    profile = resolve("llama-3.1-8b-h100")[0]
    part = plan(
        frame,
        trace_io.engines(trace),
        RefitSettings(trace=trace, seeds=(1,)),
        ReplayConfig(),
        "the simulator's defaults",
        {},  # type: ignore[arg-type]
        profile.to_json(),
    )
    fleet = part.ctx.fleet
    assert fleet is not None and fleet.engines is not None
    assert [e.kv_tokens for e in fleet.engines] == [1536, 640]  # r-big, r-small (sorted)
    out, _, _ = simulate_fleet_one(
        part.ctx.workload,
        PolicySpec("vllm"),
        ProfileCostModel(profile),
        part.ctx.config,
        part.ctx.loads[0],
        fleet,
    )
    names = ["r-big", "r-small"]
    logged = {
        (str(p), int(t)): str(r) for p, t, r in frame.select("program_id", "turn", "replica").rows()
    }
    ran = {
        (rec.program, rec.turn): names[i]
        for rec, i in zip(out.calls, out.call_replicas, strict=True)
    }
    assert ran == logged and len(ran) == PROGRAMS * TURNS
    assert [e.config.kv_tokens for e in out.engines] == [1536, 640]


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


def test_a_replica_counts_the_programs_whose_first_call_it_served(
    logs: dict[str, Path], tmp_path: Path
) -> None:
    """Each replica's line counts the programs that started there (their first call the log
    places), not those that ended there, and every call it served."""
    trace = tmp_path / "t.parquet"
    assert run("ingest", *logs.values(), "-o", trace).exit_code == 0
    profile = resolve("llama-3.1-8b-h100")[0].to_json()
    settings = RefitSettings(trace=trace, seeds=(1,))

    def served(first: str | None, second: str) -> dict[str | None, tuple[int, int]]:
        """Each program's first call on ``first``, its second on ``second``, the rest on
        r-small."""
        turn = pl.col("turn")
        where = pl.when(turn == 0).then(pl.lit(first)).when(turn == 1).then(pl.lit(second))
        frame = trace_io.read(trace).with_columns(replica=where.otherwise(pl.lit("r-small")))
        part = plan(frame, trace_io.engines(trace), settings, ReplayConfig(), "d", {}, profile)  # type: ignore[arg-type]
        return {e["replica"]: (e["programs"], e["calls"]) for e in engines_doc(part)}

    rest = PROGRAMS * (TURNS - 1)
    assert served("r-big", "r-small") == {"r-big": (PROGRAMS, PROGRAMS), "r-small": (0, rest)}
    # a first call the log does not place: the program started where its next one ran
    unplaced = served(None, "r-big")
    assert unplaced == {"r-big": (PROGRAMS, PROGRAMS), "r-small": (0, rest - PROGRAMS)}
