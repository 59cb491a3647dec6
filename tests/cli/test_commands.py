"""The command line's shape: pipeline order in --help, and each shared option declared once
(the same help, default and flags in every command that has it)."""

from __future__ import annotations

import inspect
import io
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.validation.crosscheck import validate
from replay.validation.fleet import validate_fleet
from replay.validation.validate_request import ValidateRequest
from ttlctl.cli import COMMANDS, app, options, parsing

PIPELINE = [
    "ingest", "fit", "profile", "replay", "tune", "bundle", "serve", "validate", "refit",
    "report", "synth", "export",
]  # fmt: skip


def _commands() -> dict[str, Any]:
    """Every command (typer's click objects), the bundle group's as 'bundle build' …"""
    root: Any = typer.main.get_command(app)
    found: dict[str, Any] = {}
    ctx = typer.Context(root)
    for name in root.list_commands(ctx):
        cmd = root.get_command(ctx, name)
        assert cmd is not None
        if hasattr(cmd, "list_commands"):
            for sub in cmd.list_commands(ctx):
                found[f"{name} {sub}"] = cmd.commands[sub]
        else:
            found[name] = cmd
    return found


def test_help_lists_the_commands_in_pipeline_order() -> None:
    res = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    lines = [line.strip("│ ").split(" ")[0] for line in res.output.splitlines()]
    listed = [word for word in lines if word in PIPELINE]
    assert listed == PIPELINE
    assert [name for name, _, _ in COMMANDS] == PIPELINE


def test_every_shared_option_reads_the_same_in_every_command() -> None:
    by_flag: dict[str, list[tuple[str, Any]]] = defaultdict(list)
    for name, cmd in _commands().items():
        for param in cmd.params:
            for flag in param.opts:
                by_flag[flag].append((name, param))
    shared = {
        "--jps": ("replay", "validate"),
        "--concurrency": ("replay", "validate"),
        "--seed": ("replay", "validate"),
        "--kv-tokens": ("replay", "tune"),
        "--block-size": ("replay", "tune", "refit"),
        "--max-num-seqs": ("replay", "tune", "refit", "validate"),
        "--max-num-batched-tokens": ("profile", "replay", "tune", "refit", "validate"),
        "--max-model-len": ("replay", "tune", "refit"),
        "--long-prefill-token-threshold": ("replay", "tune", "refit", "validate"),
        "--long-prefill-token-threshold-adaptive": ("replay", "tune", "refit", "validate"),
        "--watermark": ("replay", "tune", "refit", "validate"),
        "--offload-tokens": ("replay", "tune"),
        "--truncate": ("replay", "tune"),
        "--trace-idle-gap-cap-seconds": ("replay", "tune", "validate"),
        "--backend": ("replay", "tune", "validate"),
        "--async-scheduling": ("replay", "tune", "validate"),
        "--client-tags": ("replay", "tune", "validate"),
        "--save-result": ("replay", "validate"),
        "--result-dir": ("replay", "validate"),
        "--label": ("replay", "validate"),
        "--json": ("ingest", "fit", "profile", "replay", "tune", "validate", "refit"),
        "--queue-delay-seconds": ("refit", "bundle inspect", "bundle query"),
        "--offload": ("bundle inspect", "bundle query"),
        "--fit": ("tune", "bundle build"),
        "--format": ("ingest", "refit"),
    }
    for flag, names in shared.items():
        seen = {name: param for name, param in by_flag[flag] if name in names}
        assert set(seen) == set(names), flag
        first = next(iter(seen.values()))
        for name, param in seen.items():
            assert param.param_type_name == first.param_type_name == "option"
            assert (param.help, param.opts, param.secondary_opts) == (
                first.help,
                first.opts,
                first.secondary_opts,
            ), f"{flag} differs in {name}"
            if flag not in ("--json",):  # --json's default is None everywhere
                assert param.default == first.default, f"{flag}'s default differs in {name}"
    # the load lists of tune and refit
    for flag in ("--jps", "--concurrency"):
        lists = [p for name, p in by_flag[flag] if name in ("tune", "refit")]
        assert len(lists) == 2 and lists[0].help == lists[1].help


def test_the_shared_defaults_are_the_libraries() -> None:
    engine = SimSchedulerConfig()
    assert engine.kv_tokens == options.KV_TOKENS
    assert engine.block_size == options.BLOCK_SIZE
    assert engine.max_num_batched_tokens == options.MAX_NUM_BATCHED_TOKENS
    assert engine.max_num_seqs == options.MAX_NUM_SEQS
    assert engine.max_model_len == options.MAX_MODEL_LEN
    assert engine.long_prefill_token_threshold == 0  # the flags' default: no cap
    assert engine.long_prefill_token_threshold_adaptive is False
    assert ReplayConfig().offload_tokens == options.OFFLOAD_TOKENS
    assert ReplayConfig().client_tags == options.CLIENT_TAGS_DEFAULT == "full"
    assert ValidateRequest().client_tags == options.CLIENT_TAGS_DEFAULT
    engine = SimSchedulerConfig()
    assert (
        engine.block_size,
        engine.max_num_batched_tokens,
        engine.max_num_seqs,
        engine.max_model_len,
    ) == (
        options.BLOCK_SIZE,
        options.MAX_NUM_BATCHED_TOKENS,
        options.MAX_NUM_SEQS,
        options.MAX_MODEL_LEN,
    )
    # the validations' library defaults are the CLI's (vLLM's GPU values), not its CPU ones
    request = ValidateRequest()
    sizes = (options.MAX_NUM_SEQS, options.MAX_NUM_BATCHED_TOKENS)
    assert (request.max_num_seqs, request.max_num_batched_tokens) == sizes
    for library in (validate, validate_fleet):
        params = inspect.signature(library).parameters
        given = (params["max_num_seqs"].default, params["max_num_batched_tokens"].default)
        assert given == sizes, library.__name__
    commands = _commands()
    profile = {p.name: p for p in commands["replay"].params}["profile"]
    assert profile.default == "llama-3.1-8b-h100"


@pytest.mark.parametrize(
    "command",
    [
        ["replay", "T", "--policy", "vllm"],
        ["tune", "T", "--fit", "T", "--profile", "tiny-cpu", "-o", "OUT"],
        ["validate", "T", "--url", "vllm=http://127.0.0.1:9"],
    ],
    ids=["replay", "tune", "validate"],
)
def test_a_client_tags_value_not_among_the_choices_is_one_line(
    command: list[str], tmp_path: Path
) -> None:
    """Refused alike by every command that takes it, before anything runs (exit 2)."""
    trace = tmp_path / "t.parquet"
    trace.write_bytes(b"PAR1")
    out = str(tmp_path / "b.json")
    args = [str(trace) if a == "T" else out if a == "OUT" else a for a in command]
    res = CliRunner().invoke(app, [*args, "--client-tags", "partial"])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == (
        "error: --client-tags must be one of full, tool, none, session, got 'partial'"
    ), res.stderr


#: help that speaks of a time in seconds
SECONDS = re.compile(r"(?<!\w)\(s\)|\bSeconds\b")


def test_every_command_reads_h_and_spells_a_time_with_its_unit() -> None:
    runner = CliRunner()
    for name, cmd in _commands().items():
        res = runner.invoke(app, [*name.split(), "-h"])
        assert res.exit_code == 0 and "Usage" in res.output, name
        for param in cmd.params:
            for flag in [*param.opts, *param.secondary_opts]:
                assert not flag.startswith("--no-no-"), (name, flag)
                words = flag.lstrip("-").split("-")
                # a flag whose help speaks of seconds names them: AIPerf's `-seconds`
                if param.param_type_name == "option" and SECONDS.search(param.help or ""):
                    assert words[-1] == "seconds", (name, flag, param.help)
                assert words[-1] != "s" or len(words) == 1, (name, flag)


def test_a_json_flag_is_a_path_and_dash_is_stdout() -> None:
    for name, cmd in _commands().items():
        for param in cmd.params:
            if "--json" in param.opts:
                assert not param.is_flag, name
                assert param.help == "Write the results as JSON here ('-': stdout).", name


def test_fits_allow_empty_says_what_fit_refuses() -> None:
    """fit stops on a trace with calls but no tool pause ("no tool pause to fit"), not on
    one with no calls: its --allow-empty says so, not ingest's words."""
    flags = {flag: param for param in _commands()["fit"].params for flag in param.opts}
    help_text = flags["--allow-empty"].help or ""
    assert "tool pause" in help_text and "no calls" not in help_text, help_text


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["replay", "t.parquet", "--policy", "vllm", "--jps", "nan"], "--jps"),
        (["tune", "t.parquet", "--fit", "f", "--profile", "p", "-o", "b", "--jps", "inf"], "--jps"),
        (["fit", "t.parquet", "-o", "f.json", "--abandon-seconds", "-inf"], "--abandon-seconds"),
        (["bundle", "query", "b.json", "--tool", "x", "--context-tokens", "1",
          "--queue-delay-seconds", "nan"], "--queue-delay-seconds"),
        (["fit", "t.parquet"], "'--output'"),
        (["replay", "t.parquet", "--policy", "vllm", "--kv-tokens", "abc"], "--kv-tokens"),
        # refused before validate starts a server (or a fleet) that the simulator then lacks
        (["validate", "t.parquet", "--model", "m", "--kv-tokens", "0"], "--kv-tokens"),
        (["validate", "t.parquet", "--model", "m", "--replicas", "2", "--router", "round_robin",
          "--kv-tokens", "-5"], "--kv-tokens"),
        (["validate", "t.parquet", "--engine-cmd", "false", "--replicas", "2", "--router",
          "round_robin", "--timeout-seconds", "-1"], "--timeout-seconds must be positive"),
        (["validate", "t.parquet", "--engine-cmd", "false", "--startup-timeout-seconds", "0"],
         "--startup-timeout-seconds must be positive"),
        (["nosuch"], "nosuch"),
        (["replay", "t.parquet", "--policy", "static-ttl", "--ttl-seconds", "-1"],
         "--ttl-seconds"),
        (["replay", "t.parquet", "--policy", "vllm", "--offload-tokens", "-5"], "--offload-tokens"),
        (["bundle", "inspect", "b.json", "--queue-delay-seconds", "-2"], "--queue-delay-seconds"),
        (["ingest", "logs", "-o", "t.parquet", "--format", "bogus"], "--format"),
        (["export", "t.parquet", "--to", "bogus", "-o", "x.jsonl"], "--to"),
        (["export", "t.parquet", "--to", "mooncake", "-o", "x.jsonl", "--block-size", "0"],
         "--block-size"),
        (["synth", "--workload", "swe", "--programs", "5", "-o", "t.parquet"], "--workload"),
        (["synth", "--workload", "bfcl", "--programs", "0", "-o", "t.parquet"], "--programs"),
        (["synth", "--workload", "bfcl", "--programs", "5", "--seed", "-1", "-o", "t.parquet"],
         "--seed"),
    ],
)  # fmt: skip
def test_a_usage_error_is_one_line_naming_the_flag(args: list[str], flag: str) -> None:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and flag in lines[0], res.stderr
    assert "Traceback" not in res.output


def _options_of(kind: type) -> Iterator[tuple[str, typer.Context, Any, bool]]:
    """Every command's parameters of type ``kind`` or a list of them: (command, a context
    of it, the parameter, whether it takes a list)."""
    for name, command in _commands().items():
        ctx = typer.Context(command)
        for param in command.params:
            annotation = param.type_descriptor.annotation
            if annotation is kind or annotation == list[kind]:  # type: ignore[valid-type]
                yield name, ctx, param, annotation != kind


def test_every_float_option_says_nan_is_not_a_number() -> None:
    """`--queue-delay-seconds nan` said "Input should be greater than or equal to 0": a float
    option with a range refused nan for its range, as if it were a number below it. Every
    float option says nan is not a number and ±inf is not a finite one; a number out of
    range still names the range, and an int option keeps its own words."""
    checked = 0
    for name, ctx, param, many in _options_of(float):
        checked += 1
        for word, said in [("nan", "nan is not a number"), ("NaN", "nan is not a number"),
                           ("inf", "inf is not a finite number"),
                           ("-inf", "-inf is not a finite number")]:  # fmt: skip
            value = [word] if many else word
            with pytest.raises(typer.BadParameter) as info:
                param.process_value(ctx, value)
            assert info.value.message == said, (name, param.name, word)
    assert checked >= 20
    query = ["bundle", "query", "b.json", "--tool", "nan", "--context-tokens"]
    for args, said in [
        ([*query, "1", "--queue-delay-seconds", "-1"], "greater than or equal to 0"),
        ([*query, "nan"], "--context-tokens': Input should be a valid integer"),
    ]:
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2 and said in res.stderr, res.stderr


def test_every_path_option_refuses_an_empty_path_naming_the_flag(tmp_path: Path) -> None:
    """Regression: `ingest small.jsonl -o ''` said 'error: .: is a directory, not a file to
    write' (an empty path is '.'), naming neither the flag nor the slip. Every path option
    and argument (one item of a list too) now says the path is empty, naming the flag."""
    checked = 0
    for name, ctx, param, many in _options_of(Path):
        checked += 1
        value = ["a", ""] if many else ""
        with pytest.raises(typer.BadParameter) as info:
            param.process_value(ctx, value)
        assert info.value.message == "the path is empty", (name, param.name)
        with pytest.raises(typer.BadParameter) as info:
            param.process_value(ctx, ["a", "  "] if many else " \t")
        assert info.value.message == "the path is blank", (name, param.name)
    assert checked >= 20
    trace = tmp_path / "t.jsonl"
    trace.write_text("")
    res = CliRunner().invoke(app, ["ingest", str(trace), "-o", ""])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == (
        "error: ttlctl ingest: invalid value for '-o' / '--output': the path is empty "
        "(see `ttlctl ingest --help`)"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]


def test_a_text_option_naming_a_file_refuses_an_empty_one(tmp_path: Path) -> None:
    """Regression: `--profile ''` said '.: is a directory, not a profile's JSON', report's
    `--bundle ''` said '--bundle : no such file in RUN_DIR', and `validate --model ''`
    started a server that failed on the empty name. Every --profile, --model and report's
    --bundle (text: a file, or a name in its place) says the path is empty, as a path
    option does; another text option is left to its own check."""
    named = {}
    for name, ctx, param, _ in _options_of(str):
        if not parsing.NAMES_A_FILE.isdisjoint(param.opts):
            with pytest.raises(typer.BadParameter) as info:
                param.process_value(ctx, "")
            assert info.value.message == "the path is empty", (name, param.name)
            named[name, param.opts[0]] = param.process_value(ctx, "tiny-cpu")
        elif param.opts == ["--tool"]:
            assert param.process_value(ctx, "") == ""
    assert named == dict.fromkeys(
        [("profile", "--model"), ("profile", "--profile"), ("replay", "--profile"),
         ("tune", "--profile"), ("validate", "--model"), ("validate", "--profile"),
         ("report", "--bundle"), ("bundle build", "--profile")],
        "tiny-cpu",
    )  # fmt: skip
    out = tmp_path / "b.json"
    res = CliRunner().invoke(
        app, ["bundle", "build", "--fit", "f.json", "--profile", "", "-o", str(out)]
    )
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == (
        "error: ttlctl bundle build: invalid value for '--profile': the path is empty "
        "(see `ttlctl bundle build --help`)"
    )
    assert list(tmp_path.iterdir()) == []


def test_an_old_spelling_still_works_with_a_warning(tmp_path: Path) -> None:
    assert parsing.renamed(["fit", "t", "--abandon-s=5", "--", "--abandon-s"], print) == [
        "fit", "t", "--abandon-seconds=5", "--", "--abandon-s",
    ]  # fmt: skip
    said: list[str] = []
    assert parsing.renamed(["bundle", "inspect", "--queue-delay", "2"], said.append)[2] == (
        "--queue-delay-seconds"
    )
    assert parsing.renamed(["replay", "--queue-delay", "2"], said.append)[1] == "--queue-delay"
    assert said == ["--queue-delay is now --queue-delay-seconds (the old spelling goes in a "
                    "later release)"]  # fmt: skip
    for command, table in parsing.RENAMED.items():
        flags = {f for p in _commands()[command].params for f in p.opts}
        assert set(table.values()) <= flags, command
        assert not set(table) & flags, command


def test_a_table_in_a_pipe_keeps_every_number() -> None:
    from rich.console import Console
    from rich.table import Table

    from ttlctl.cli.render.cells import show

    table = Table()
    table.add_column("program")
    for col in ("calls", "tokens"):
        table.add_column(col, justify="right")
    table.add_row("program-fcfs-with-a-very-long-name", "3,968,468,123", "12,345,678,901")
    for width in (20, 40, 200):
        console = Console(width=width, record=True, file=io.StringIO())
        show(console, table)
        text = console.export_text()
        assert "3,968,468,123" in text and "12,345,678,901" in text, width
        assert "…" not in text


def test_a_table_to_a_pipe_takes_its_width_or_columns() -> None:
    """Through a real pipe (the consoles are made at import): without COLUMNS a table takes
    the width it needs; with COLUMNS=60 it wraps names but keeps every number whole."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    cmd = [sys.executable, "-m", "ttlctl.cli", "profile", "--list"]
    wide = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    narrow = subprocess.run(
        cmd, env={**env, "COLUMNS": "60"}, capture_output=True, text=True, check=True
    ).stdout
    from profiles import shipped
    from profiles.profile_read import load

    numbers = []
    for name in shipped.names():
        prof = load(shipped.DATA / f"{name}.json")
        numbers += [f"{prof.kv_bytes_per_token:,}", f"{prof.prefill_s(32768):.3f} s"]
    for text in (wide, narrow):
        assert "…" not in text
        assert all(number in text for number in numbers)

    def table_width(text: str) -> int:
        return max(len(line) for line in text.splitlines() if line.startswith("┏"))

    assert table_width(narrow) < table_width(wide) and table_width(wide) > 100
