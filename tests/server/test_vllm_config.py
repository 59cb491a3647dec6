"""ttlctl/server/vllm_config.py: vLLM's arguments with their --config file read, as vLLM's
parser reads it (that vLLM's own ``load_config_file`` agrees: test_vllm_parser.py), and a
file vLLM could not read refused in one line naming it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ttlctl.server.vllm_config import VllmArgs, VllmConfigError, config_args, read


def test_without_config_the_arguments_are_as_given() -> None:
    given = read(["--model", "m", "-tp", "2"], ())
    assert given == VllmArgs(("--model", "m", "-tp", "2"))
    assert given.parsed == ("--model", "m", "-tp", "2")
    assert list(given.origins()) == [(None, ("--model", "m", "-tp", "2"))]


def test_the_files_options_come_first_so_the_command_line_wins(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tensor-parallel-size: 4\nport: 9000\n")
    given = read(["--model", "m", "--config", str(cfg), "-tp", "2"], ())
    assert given.command_line == ("--model", "m", "-tp", "2")
    assert given.config == str(cfg)
    assert given.from_config == ("--tensor-parallel-size", "4", "--port", "9000")
    assert given.parsed == (*given.from_config, *given.command_line)
    assert list(given.origins())[1] == (str(cfg), given.from_config)
    assert given.sets("--port") and given.sets("--tensor-parallel-size")
    assert not given.sets("--host")


def test_an_options_value_is_the_last_one_vllm_parses(tmp_path: Path) -> None:
    """The file's value, unless the command line gives one (the last one wins), as given:
    ``=``, underscores, an abbreviation (named as given)."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("block_size: 64\n")
    assert read(["--config", str(cfg)], ()).value("--block-size") == ("--block-size", "64")
    given = read(["--config", str(cfg), "--block_size=16", "--block-s", "32"], ())
    assert given.value("--block-size") == ("--block-s (abbreviates --block-size)", "32")
    assert read(["--dtype", "half"], ()).value("--block-size") is None
    assert read(["--block-size"], ()).value("--block-size") == ("--block-size", "")


def test_each_value_is_written_as_vllm_writes_it() -> None:
    doc = {
        "max_num_seqs": 8,  # the key as written: vLLM reads its underscores later
        "enforce-eager": True,
        "async-scheduling": False,  # --no-… only where that is an option (of the caller's)
        "enable-chunked-prefill": False,
        "served-model-name": ["a", "b"],
        "middleware": [],  # an empty list sets nothing
        "compilation-config": {"level": 3, "pass_config": {"x": True}},
        "gpu-memory-utilization": 0.5,
        "seed": None,
    }
    assert config_args(doc, ("--no-async-scheduling",)) == [
        "--max_num_seqs", "8", "--enforce-eager", "--no-async-scheduling",
        "--served-model-name", "a", "b",
        "--compilation-config", '{"level": 3, "pass_config": {"x": true}}',
        "--gpu-memory-utilization", "0.5", "--seed", "None",
    ]  # fmt: skip


def _refused(args: list[str]) -> str:
    with pytest.raises(VllmConfigError) as info:
        read(args, ())
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_file_vllm_could_not_read_is_one_line_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    assert _refused(["--config", str(missing)]) == (
        f"--config {missing}: cannot read it (no such file or directory)"
    )
    assert _refused(["--config", str(tmp_path)]).startswith(f"--config {tmp_path}: ")
    text = tmp_path / "c.json"
    text.write_text("{}")
    assert _refused(["--config", str(text)]) == (
        f"--config {text}: vLLM reads a config file only as .yaml or .yml"
    )
    bad = tmp_path / "bad.yml"
    bad.write_text("port: [1, 2\n")
    message = _refused(["--config", str(bad)])
    assert message.startswith(f"--config {bad}: not YAML (") and "line" in message
    for body, kind in (("", "empty"), ("- 1\n- 2\n", "found: list"), ("8000\n", "found: int")):
        bad.write_text(body)
        assert _refused(["--config", str(bad)]) == (
            f"--config {bad}: not a mapping of vLLM options to values ({kind})"
        )
    bad.write_text("1: x\n")
    assert _refused(["--config", str(bad)]) == (f"--config {bad}: the key 1 is not an option name")
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00port")
    assert _refused(["--config", str(binary)]).startswith(f"--config {binary}: ")


def test_config_is_read_only_as_vllm_reads_it(tmp_path: Path) -> None:
    """vLLM 0.32 reads a file for the argument ``--config`` alone, once, followed by the
    file; ``--config=FILE`` sets an option it never reads (the file's options would be
    dropped without a word)."""
    assert _refused(["--model", "m", "--config"]) == (
        "--config needs a file (a YAML file of vLLM options)"
    )
    assert _refused(["--config", "a.yaml", "--config", "b.yaml"]) == (
        "--config is given 2 times: vLLM reads one file"
    )
    assert _refused(["--config=c.yaml"]) == (
        "--config=c.yaml: vLLM reads a config file given as `--config FILE` only (it ignores "
        "this form): write --config c.yaml"
    )
    # another option that starts alike is not the config file
    assert read(["--config-format", "hf"], ()).config is None


def test_without_pyyaml_a_config_file_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyYAML comes with vLLM; ttlctl's own installs do not need it until a file is read."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("port: 1\n")
    monkeypatch.setitem(sys.modules, "yaml", None)  # as if it were not installed
    assert read(["--port", "1"], ()).config is None
    assert _refused(["--config", str(cfg)]) == (
        f"--config {cfg}: reading it needs PyYAML, which vLLM installs (pip install pyyaml)"
    )
