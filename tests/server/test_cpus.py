"""Replicas on CPUs of their own (ttlctl/server/cpus.py, ``validate --cpus-per-replica``):
the CPU sets, the pinned command and environment, a real process held to its set, the
fleet's replicas each given theirs, and the refusals (one line, exit 2, nothing started)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from replay.validation.servers import Sources, policy_fleet
from tests.live.traces import agent_trace
from tests.router_bin import router_or_skip
from ttlctl.cli import app
from ttlctl.server import cpus
from ttlctl.server.command import CommandError


def test_each_replica_gets_cpus_of_its_own() -> None:
    assert cpus.cpu_sets(2, 1, [0, 1]) == ((0,), (1,))
    assert cpus.cpu_sets(2, 2, [0, 1, 2, 3, 4]) == ((0, 1), (2, 3))
    assert cpus.cpu_sets(3, 1, [4, 6, 9]) == ((4,), (6,), (9,))  # the CPUs it may use
    with pytest.raises(CommandError, match=r"--cpus-per-replica 2 with 2 replicas needs 4 CPUs; "
                       r"this process may use 2 \(0,1\)"):  # fmt: skip
        cpus.cpu_sets(2, 2, [0, 1])
    with pytest.raises(CommandError, match=r"with 1 replica needs 1 CPU; this process may use 0"):
        cpus.cpu_sets(1, 1, [])
    with pytest.raises(CommandError, match="at least 1"):
        cpus.cpu_sets(2, 0, [0, 1])
    assert cpus.available_cpus() == tuple(sorted(os.sched_getaffinity(0)))


def test_a_pinned_command_runs_on_its_cpus_only() -> None:
    one = (cpus.available_cpus()[-1],)
    probe = "import os, json; print(json.dumps([sorted(os.sched_getaffinity(0)), " \
        "os.environ['VLLM_CPU_OMP_THREADS_BIND']]))"  # fmt: skip
    cmd = cpus.pinned_command([sys.executable, "-c", probe], one)
    assert cmd[1:3] == ["-c", str(one[0])] and Path(cmd[0]).name == "taskset"
    env = cpus.pinned_environment({"PATH": os.environ["PATH"]}, one)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == str(one[0]) and env["PATH"] == os.environ["PATH"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30, check=True)
    assert json.loads(done.stdout) == [list(one), str(one[0])]


def test_a_pinned_command_without_taskset_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(CommandError, match="needs taskset"):
        cpus.pinned_command(["x"], (0,))


def test_the_fleet_pins_replica_i_to_set_i(tmp_path: Path) -> None:
    router_or_skip()
    made = policy_fleet(
        Sources(base_cmd=["python", "-m", "vllm.entrypoints.openai.api_server"], env={}),
        "vllm",
        None,
        tmp_path,
        "-t",
        replicas=2,
        router_policy="round_robin",
        cpu_sets=((0,), (1,)),
    )
    for replica, want in zip(made.fleet.replicas, ("0", "1"), strict=True):
        assert replica.command[1:3] == ["-c", want] and replica.command[3] == "python"
        assert replica.env["VLLM_CPU_OMP_THREADS_BIND"] == want
    # the router is not pinned: it shares every CPU
    assert "taskset" not in made.fleet.router.command[0]
    unpinned = policy_fleet(
        Sources(base_cmd=["python"], env={}), "vllm", None, tmp_path, "-u",
        replicas=2, router_policy="round_robin",
    )  # fmt: skip
    assert all(r.command[0] == "python" for r in unpinned.fleet.replicas)
    assert all("VLLM_CPU_OMP_THREADS_BIND" not in r.env for r in unpinned.fleet.replicas)


def test_validate_refuses_a_pinning_it_cannot_do(tmp_path: Path) -> None:
    trace = agent_trace(tmp_path / "t.parquet", programs=2, calls=2)
    many = len(cpus.available_cpus()) + 1
    res = CliRunner().invoke(
        app,
        ["validate", str(trace), "--replicas", "2", "--router", "round_robin",
         "--cpus-per-replica", str(many), "--model", str(tmp_path),
         "--work-dir", str(tmp_path / "w")],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert f"--cpus-per-replica {many} with 2 replicas needs {2 * many} CPUs" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not list((tmp_path / "w").glob("*.log"))  # nothing was started
    res = CliRunner().invoke(
        app,
        ["validate", str(trace), "--cpus-per-replica", "1", "--url", "vllm=http://127.0.0.1:9"],
    )
    assert res.exit_code == 2 and "--cpus-per-replica needs --replicas N" in res.stderr
