"""`ttlctl replay` shows each policy's calls done on a terminal, and nothing elsewhere; its
output (``--json -``, the tables) is byte-identical with the bar and without it, one engine
and a fleet alike.

Through real pipes, as tests/cli/test_stderr_in_a_pipe.py: the consoles are made at
import. ``TTY_COMPATIBLE=1`` is rich's switch for a terminal (the bar is drawn)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from tests.conftest import make_trace
from tests.terminal_env import cli_env
from ttlctl.cli import app, kit
from ttlctl.cli.replay import ReplayBar

FLEETS = [[], ["--replicas", "2"]]


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_trace(tmp_path_factory.mktemp("bar") / "t.parquet", programs=30)


def replay(trace: Path, *args: str, terminal: bool) -> subprocess.CompletedProcess[str]:
    env = cli_env(terminal=terminal)
    cmd = [sys.executable, "-m", "ttlctl.cli", "replay", str(trace), "--policy", "vllm,continuum"]
    cmd += ["--concurrency", "4", "--no-timing", "--json", "-", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("fleet", FLEETS, ids=["one engine", "fleet"])
def test_the_bar_counts_calls_on_a_terminal_and_the_json_is_the_same(
    trace: Path, fleet: list[str]
) -> None:
    piped = replay(trace, *fleet, terminal=False)
    shown = replay(trace, *fleet, terminal=True)
    assert piped.returncode == shown.returncode == 0, piped.stderr + shown.stderr
    assert piped.stderr == ""  # off a terminal: no bar, and no blank line either
    assert shown.stdout == piped.stdout
    calls = pl.read_parquet(trace).height  # one row per call
    for policy in ("vllm (1/2)", "continuum (2/2)"):
        assert policy in shown.stderr, shown.stderr
    assert f"{calls}/{calls}" in shown.stderr, shown.stderr


@pytest.mark.parametrize("fleet", FLEETS, ids=["one engine", "fleet"])
def test_the_tables_are_the_same_under_the_bar(
    trace: Path, fleet: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["replay", str(trace), "--policy", "vllm,continuum", "--concurrency", "4"]
    args += ["--no-timing", *fleet]
    plain = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    # stderr a terminal, as rich would have found at import: the bar is drawn
    monkeypatch.setattr(kit.err, "_force_terminal", True)
    monkeypatch.setattr(kit.err, "is_interactive", True)
    barred = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert plain.exit_code == barred.exit_code == 0, plain.output + barred.output
    assert "vllm (1/2)" in barred.stderr and "vllm (1/2)" not in plain.stderr
    assert barred.stdout == plain.stdout


def test_the_live_bar_names_the_policy() -> None:
    """`replay --live`'s bar said "live" beside its count, not which policy it measures."""
    shown = ReplayBar.make("replaying")
    shown.live("continuum", 3, 9)
    task = shown.bar.tasks[0]
    assert "continuum" in task.description and (task.completed, task.total) == (3, 9)
