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
    assert base == ["serve", "a b", "-x", *sized] and config is None
    small = ValidateRequest(trace, model="m", max_num_seqs=8, max_num_batched_tokens=512)
    base, _ = server_base(small)
    assert base is not None and base[-4:] == [
        "--max-num-seqs",
        "8",
        "--max-num-batched-tokens",
        "512",
    ]
    for extra in (["--max-num-seqs", "4"], ["--max-num-batched-tokens=64"]):
        with pytest.raises(ValidateError, match=r"is set by validate .*before `--`"):
            server_base(ValidateRequest(trace, model="m", extra=extra))


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
