"""The command line's shape: pipeline order in --help, and each shared option declared once
(the same help, default and flags in every command that has it)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import typer
from typer.testing import CliRunner

from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from ttlctl.cli import COMMANDS, app, options

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
        "--max-num-seqs": ("replay", "tune", "refit"),
        "--max-num-batched-tokens": ("replay", "tune", "refit"),
        "--max-model-len": ("replay", "tune", "refit"),
        "--offload-tokens": ("replay", "tune"),
        "--truncate": ("replay", "tune"),
        "--trace-idle-gap-cap-seconds": ("replay", "tune", "validate"),
        "--backend": ("replay", "tune", "validate"),
        "--async-scheduling": ("replay", "tune", "validate"),
        "--save-result": ("replay", "validate"),
        "--result-dir": ("replay", "validate"),
        "--label": ("replay", "validate"),
        "--json": ("replay", "validate"),
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
    assert SimSchedulerConfig().kv_tokens == options.KV_TOKENS
    assert ReplayConfig().offload_tokens == options.OFFLOAD_TOKENS
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
    commands = _commands()
    profile = {p.name: p for p in commands["replay"].params}["profile"]
    assert profile.default == "llama-3.1-8b-h100"
