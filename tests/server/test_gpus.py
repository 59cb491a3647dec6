"""Replicas on GPUs of their own (ttlctl/server/gpus.py, ``validate --gpus-per-replica``):
the GPUs a process may use, the GPU sets, vLLM's parallel sizes against them, the fleet's
replicas each given theirs, and the refusals (one line, exit 2, nothing started). No GPU
here: the GPUs are named through ``CUDA_VISIBLE_DEVICES``, or listed by a stand-in
``nvidia-smi`` that prints what the driver's tool prints."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from replay.validation.servers import Sources, policy_fleet
from tests.live.traces import agent_trace
from tests.router_bin import router_or_skip
from ttlctl.cli import app
from ttlctl.server import gpus
from ttlctl.server.command import CommandError

SMI_LISTING = """GPU 0: NVIDIA H200 (UUID: GPU-0a1b)
GPU 1: NVIDIA H200 (UUID: GPU-2c3d)
GPU 2: NVIDIA H200 (UUID: GPU-7a8b)
"""
#: GPU 1 split into MIG devices (nvidia-smi -L lists them under it)
MIG_LISTING = """GPU 0: NVIDIA H200 (UUID: GPU-0a1b)
GPU 1: NVIDIA H200 (UUID: GPU-2c3d)
  MIG 1g.18gb     Device  0: (UUID: MIG-5e6f)
  MIG 1g.18gb     Device  1: (UUID: MIG-9a0b)
GPU 2: NVIDIA H200 (UUID: GPU-7a8b)
"""
#: the driver's answer to ``--query-gpu=index,uuid,mig.mode.current --format=csv,noheader``
#: (fields joined by ", "), GPU 1 in MIG mode
MIG_QUERY = """0, GPU-0a1b, Disabled
1, GPU-2c3d, Enabled
2, GPU-7a8b, Disabled
"""
#: a machine whose GPU 1 is in MIG mode with no MIG device created yet (``-L`` shows
#: nothing under it) and whose GPU 2 has no MIG support (``[N/A]``)
BARE_LISTING = """GPU 0: NVIDIA H200 (UUID: GPU-0a1b)
GPU 1: NVIDIA H200 (UUID: GPU-2c3d)
GPU 2: NVIDIA L4 (UUID: GPU-7a8b)
"""
BARE_QUERY = """0, GPU-0a1b, Disabled
1, GPU-2c3d, Enabled
2, GPU-7a8b, [N/A]
"""
#: what a driver without the MIG mode field prints (its exit status is not 0)
NO_FIELD = 'Field "mig.mode.current" is not a valid field to query.\n'


def _smi(folder: Path, listing: str, rc: int = 0, query: str | None = None) -> Path:
    """A folder holding an ``nvidia-smi`` that answers ``-L`` with ``listing`` (exit
    status ``rc``) and the MIG mode query with ``query`` (None: as a driver without that
    field does, an error)."""
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / "nvidia-smi"
    answer = f"printf '%s' '{query}'" if query is not None else f"printf '%s' '{NO_FIELD}'; exit 2"
    # shell builtins alone: PATH holds nothing else in these tests
    tool.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f"  -L) printf '%s' '{listing}'; exit {rc} ;;\n"
        f"  '--query-gpu=index,uuid,mig.mode.current --format=csv,noheader') {answer} ;;\n"
        "  *) exit 2 ;;\n"
        "esac\n"
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return folder


def test_the_visible_gpus_come_from_cuda_visible_devices_else_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 3,GPU-7a8b"}) == ("2", "3", "GPU-7a8b")
    assert gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == ()  # CUDA: none at all
    # CUDA sees none from the first invalid entry on: -1 is the usual way to hide them all
    assert gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == ()
    assert gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": "0,2,-1,1"}) == ("0", "2")
    monkeypatch.setenv("PATH", str(_smi(tmp_path / "bin", SMI_LISTING)))
    assert gpus.visible_gpus({}) == ("0", "1", "2")
    # every GPU is listed, one in MIG mode too: whether it may be used whole is asked of
    # the GPUs a replica is given (check_whole)
    monkeypatch.setenv("PATH", str(_smi(tmp_path / "mig", MIG_LISTING, query=MIG_QUERY)))
    assert gpus.visible_gpus({}) == ("0", "1", "2")
    mig = gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": "MIG-5e6f,MIG-9a0b"})
    assert gpus.gpu_sets(2, 1, mig) == (("MIG-5e6f",), ("MIG-9a0b",))
    with pytest.raises(CommandError, match="a process sees one MIG device only"):
        gpus.gpu_sets(1, 2, mig)
    monkeypatch.setenv("PATH", str(_smi(tmp_path / "bad", "", rc=9)))
    with pytest.raises(CommandError, match="nvidia-smi -L failed"):
        gpus.visible_gpus({})
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(CommandError, match=r"no GPU found \(CUDA_VISIBLE_DEVICES is unset"):
        gpus.visible_gpus({})


def test_a_gpu_in_mig_mode_is_refused_when_named_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU in MIG mode gives a process no usable device when named whole (by index or
    GPU UUID), with MIG devices created on it (``-L`` lists them) or none yet (the MIG
    mode query alone says so); its MIG devices' UUIDs pass, and so do the other GPUs."""
    refused = r"^--gpus-per-replica: GPU {} in MIG mode \(a process cannot use it whole\)"
    for folder, listing, query in (
        ("split", MIG_LISTING, MIG_QUERY),
        ("bare", BARE_LISTING, BARE_QUERY),
    ):
        monkeypatch.setenv("PATH", str(_smi(tmp_path / folder, listing, query=query)))
        for used, named in ((["0", "1"], "1"), (["GPU-2c3d"], "GPU-2c3d"), (["1", "1"], "1")):
            with pytest.raises(CommandError, match=refused.format(named)):
                gpus.check_whole(used)
        # CUDA reads a UUID's first characters as the whole UUID
        with pytest.raises(CommandError, match=refused.format("GPU-2c")):
            gpus.check_whole(["0", "GPU-2c"])
        gpus.check_whole(["0", "2", "GPU-0a1b", "GPU-7a8b"])  # Disabled or [N/A]: whole GPUs
        gpus.check_whole(["GPU-0a", "GPU-7"])
        gpus.check_whole(["MIG-5e6f", "MIG-9a0b"])
        gpus.check_whole([])
    # the message names what to do, on one line
    with pytest.raises(CommandError) as caught:
        gpus.check_whole(["1"])
    assert str(caught.value) == (
        "--gpus-per-replica: GPU 1 in MIG mode (a process cannot use it whole): set "
        "CUDA_VISIBLE_DEVICES to its MIG devices' UUIDs (MIG-…, nvidia-smi -L; create them "
        "first if it lists none), one per replica, or disable MIG mode"
    )
    # a driver without the MIG mode field: the MIG devices -L lists still tell
    monkeypatch.setenv("PATH", str(_smi(tmp_path / "old", MIG_LISTING)))
    for used in (["1"], ["GPU-2c3d"]):
        with pytest.raises(CommandError, match=refused.format(used[0])):
            gpus.check_whole(used)
    gpus.check_whole(["0", "2"])
    monkeypatch.setenv("PATH", str(_smi(tmp_path / "old-bare", BARE_LISTING)))
    gpus.check_whole(["1"])  # nothing tells: refused by nothing, as before
    # no nvidia-smi at all (CUDA_VISIBLE_DEVICES names the GPUs): nothing to ask, nothing
    # refused
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    gpus.check_whole(["0", "1", "GPU-2c3d"])


def test_each_replica_gets_gpus_of_its_own() -> None:
    assert gpus.gpu_sets(2, 1, ("0", "1")) == (("0",), ("1",))
    assert gpus.gpu_sets(2, 2, ("4", "5", "6", "7", "8")) == (("4", "5"), ("6", "7"))
    with pytest.raises(CommandError, match=r"--gpus-per-replica 1 with 2 replicas needs 2 "
                       r"GPUs; this process may use 1 \(CUDA_VISIBLE_DEVICES: 0\)"):  # fmt: skip
        gpus.gpu_sets(2, 1, ("0",))
    with pytest.raises(CommandError, match=r"with 1 replica needs 1 GPU; this process may "
                       r"use 0 \(CUDA_VISIBLE_DEVICES: none\)"):  # fmt: skip
        gpus.gpu_sets(1, 1, ())
    with pytest.raises(CommandError, match="at least 1"):
        gpus.gpu_sets(2, 0, ("0", "1"))
    assert gpus.placed_environment({"A": "1"}, ("2", "3")) == {
        "A": "1",
        "CUDA_VISIBLE_DEVICES": "2,3",
    }


def test_vllms_parallel_sizes_must_use_every_gpu_given() -> None:
    """One engine's GPUs are vLLM 0.32's world size: tensor × pipeline × prefill context
    parallel sizes (vllm/config/parallel.py), in every form vLLM's parser takes."""
    assert gpus.parallel_size(["--model", "m"]) == 1
    assert gpus.parallel_size(["-tp", "2", "--pipeline-parallel-size=2"]) == 4
    assert gpus.parallel_size(["--tensor-parallel-size", "4", "-tp=2"]) == 2  # the last
    assert gpus.parallel_size(["-tp", "2", "-pcp", "2"]) == 4
    assert gpus.parallel_size(["--prefill-context-parallel-size=3"]) == 3
    # vLLM's parser reads underscores in a long option's name as dashes
    assert gpus.parallel_size(["--tensor_parallel_size", "2", "--pipeline_parallel_size=2"]) == 4
    # and a proper prefix of a name as that option (argparse's abbreviations)
    assert gpus.parallel_size(["--tensor-par", "3", "--pipeline_p=2"]) == 6
    assert gpus.parallel_size(["-t", "2", "--prefill-context=2"]) == 4
    gpus.check_parallel(["--tensor-par=2"], 2)
    gpus.check_parallel(["-tp", "2"], 2)
    gpus.check_parallel(["-tp", "2", "-dp", "1"], 2)
    with pytest.raises(CommandError, match=r"--gpus-per-replica 2: each replica's vLLM uses 1"):
        gpus.check_parallel(["--model", "m"], 2)
    # the option named as it was given
    with pytest.raises(CommandError, match=r"^-tp takes a number, not 'x'"):
        gpus.parallel_size(["-tp", "x"])
    with pytest.raises(CommandError, match=r"^-t \(abbreviates -tp\) takes a number, not 'x'"):
        gpus.parallel_size(["--tensor-parallel-size", "2", "-t", "x"])
    with pytest.raises(CommandError, match=r"^--tensor-parallel-size takes a number, not 'x'"):
        gpus.parallel_size(["--tensor_parallel_size=x"])
    with pytest.raises(CommandError, match="takes a number, not ''"):
        gpus.parallel_size(["--pipeline-parallel-size"])


def test_a_data_parallel_replica_is_refused() -> None:
    """vLLM's data parallelism runs that many engines in one server, each with a KV cache
    of its own, balanced by the server (a dense model's ranks are independent: vLLM 0.32's
    v1/engine/core.py): not the one engine a simulated replica is."""
    for args in (["-dp", "2"], ["--data-parallel-size=2"], ["--data_parallel_size", "2"]):
        with pytest.raises(CommandError, match=r"^--data-parallel-size 2 runs 2 engines in "
                           r"each server.*run 2 servers instead"):  # fmt: skip
            gpus.check_parallel(args, 2)
    gpus.check_one_engine(["-dp", "1", "-tp", "2"])
    with pytest.raises(CommandError, match=r"^--data-parallel-size 3 runs 3 engines"):
        gpus.check_one_engine(["--data-parallel-si", "3"])


def test_the_sizes_in_a_config_file_count(tmp_path: Path) -> None:
    """vLLM reads a --config file's options before the command line's: its sizes count,
    the command line's win."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tensor_parallel_size: 2\npipeline-parallel-size: 2\ndtype: half\n")
    assert gpus.parallel_size(["--model", "m", "--config", str(cfg)]) == 4
    assert gpus.parallel_size(["--config", str(cfg), "-tp", "1"]) == 2
    cfg.write_text("data-parallel-size: 2\n")
    with pytest.raises(CommandError, match=r"^--data-parallel-size 2 runs 2 engines"):
        gpus.check_parallel(["--config", str(cfg)], 1)


def test_validate_refuses_data_parallel_servers_placed_or_not(tmp_path: Path) -> None:
    """Single-server validate and a fleet without --gpus-per-replica start their servers
    with the vLLM arguments as given: several engines per server are refused there too."""
    trace = agent_trace(tmp_path / "t.parquet", programs=2, calls=2)
    for fleet in ([], ["--replicas", "2", "--router", "round_robin"]):
        res = CliRunner().invoke(
            app, ["validate", str(trace), *fleet, "--model", str(tmp_path), "--", "-dp", "2"]
        )
        assert res.exit_code == 2, res.output
        assert res.stderr.strip() == (
            "error: --data-parallel-size 2 runs 2 engines in each server, each with a KV "
            "cache of its own, while validate simulates one engine per server: run 2 servers "
            "instead (--replicas)"
        )


def test_the_fleet_places_replica_i_on_set_i(tmp_path: Path) -> None:
    router_or_skip()
    made = policy_fleet(
        Sources(base_cmd=["python", "-m", "vllm.entrypoints.openai.api_server"], env={}),
        "vllm", None, tmp_path, "-t", replicas=2, router_policy="round_robin",
        gpu_sets=(("0", "1"), ("2", "3")), cpu_sets=((0,), (0,)),
    )  # fmt: skip
    for replica, want in zip(made.fleet.replicas, ("0,1", "2,3"), strict=True):
        assert replica.env["CUDA_VISIBLE_DEVICES"] == want
        assert replica.command[1:3] == ["-c", "0"]  # CPUs and GPUs placed together
    assert "CUDA_VISIBLE_DEVICES" not in made.fleet.router.env


def test_validate_refuses_a_placement_it_cannot_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    router_or_skip()
    trace = agent_trace(tmp_path / "t.parquet", programs=2, calls=2)
    fleet = ["validate", str(trace), "--replicas", "2", "--router", "round_robin",
             "--gpus-per-replica", "1", "--model", str(tmp_path), "--work-dir",
             str(tmp_path / "w")]  # fmt: skip
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    res = CliRunner().invoke(app, fleet)
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == (
        "error: --gpus-per-replica 1 with 2 replicas needs 2 GPUs; this process may use 1 "
        "(CUDA_VISIBLE_DEVICES: 0)"
    )
    assert not (tmp_path / "w").exists()  # nothing was started, no folder left
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    cfg = tmp_path / "vllm.yaml"
    cfg.write_text("tensor_parallel_size: 2\n")
    # as vLLM reads them: the name, an abbreviation of it, a --config file that sets it
    for extra in (["--tensor-parallel-size", "2"], ["--tensor-par", "2"], ["--config", str(cfg)]):
        res = CliRunner().invoke(app, [*fleet, "--", *extra])
        assert res.exit_code == 2, res.output
        assert "--gpus-per-replica 1: each replica's vLLM uses 2 GPU(s)" in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "w").exists()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    # (the last --gpus-per-replica counts)
    res = CliRunner().invoke(app, [*fleet, "--gpus-per-replica", "2", "--", "--tensor-par", "1"])
    assert res.exit_code == 2, res.output
    assert "--gpus-per-replica 2: each replica's vLLM uses 1 GPU(s)" in res.stderr
    res = CliRunner().invoke(app, [*fleet, "--", "--config", str(tmp_path / "none.yaml")])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines() == [
        f"error: --config {tmp_path / 'none.yaml'}: cannot read it (no such file or directory)"
    ]
    assert not (tmp_path / "w").exists()
    # a GPU in MIG mode with no MIG device yet, named by index or UUID: refused before
    # anything starts; one that no replica is given is not
    monkeypatch.setenv("PATH", f"{_smi(tmp_path / 'bin', BARE_LISTING, query=BARE_QUERY)}:"
                       f"{os.environ['PATH']}")  # fmt: skip
    for visible, named in (("0,1", "1"), ("GPU-2c3d,0", "GPU-2c3d")):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        res = CliRunner().invoke(app, fleet)
        assert res.exit_code == 2, res.output
        assert res.stderr.startswith(f"error: --gpus-per-replica: GPU {named} in MIG mode")
        assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "w").exists()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,2,1")
    res = CliRunner().invoke(app, [*fleet, "--", "--tensor-parallel-size", "2"])
    assert res.exit_code == 2, res.output  # past the GPUs, refused for vLLM's sizes
    assert "--gpus-per-replica 1: each replica's vLLM uses 2 GPU(s)" in res.stderr
    res = CliRunner().invoke(
        app,
        ["validate", str(trace), "--gpus-per-replica", "1", "--url", "vllm=http://127.0.0.1:9"],
    )
    assert res.exit_code == 2 and "--gpus-per-replica needs --replicas N" in res.stderr
