"""A seed numpy cannot take is one line naming --seed, exit 2, before any work.

`fit --seed -1`, `replay --seed -1 --jps 1` and `tune --seed -1` (or 2**32, past the TPE
sampler's range) ended in numpy's traceback (`ValueError: expected non-negative integer`,
`Seed must be between 0 and 2**32 - 1`), exit 1. Every command that takes `--seed` refuses
such a seed the way it refuses a bad count; the largest one each takes still runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.cli.refusal import refused
from ttlctl.cli import app

SEED = "error: --seed "


def test_fit_refuses_a_negative_seed(small_inputs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "fit.json"
    args = ["fit", str(small_inputs["trace"]), "-o", str(out)]
    assert refused([*args, "--seed", "-1"], out, SEED) == "error: --seed must be >= 0, not -1"
    big = [*args, "--bootstrap", "5", "--seed", str(2**64)]
    assert CliRunner().invoke(app, big).exit_code == 0 and out.exists()


@pytest.mark.parametrize("load", [["--jps", "1"], ["--concurrency", "2"], []])
def test_replay_refuses_a_negative_seed(
    small_inputs: dict[str, Path], tmp_path: Path, load: list[str]
) -> None:
    out = tmp_path / "replay.json"
    args = ["replay", str(small_inputs["trace"]), "--policy", "vllm", "--json", str(out), *load]
    assert refused([*args, "--seed", "-1"], out, SEED) == "error: --seed must be >= 0, not -1"
    assert CliRunner().invoke(app, [*args, "--seed", str(2**64)]).exit_code == 0
    assert out.exists()


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_tune_refuses_a_seed_its_sampler_cannot_take(
    small_inputs: dict[str, Path], tmp_path: Path, seed: int
) -> None:
    out = tmp_path / "bundle.json"
    args = ["tune", str(small_inputs["trace"]), "--fit", str(small_inputs["fit"]), "-o", str(out)]
    args += ["--profile", "llama-3.1-8b-h100", "--trials", "1", "--concurrency", "2"]
    line = refused([*args, "--seed", str(seed)], out, SEED)
    assert line == (
        f"error: --seed must be in 0 … {2**32 - 1} (the TPE sampler's seeds), not {seed}"
    )
    assert not list(tmp_path.iterdir())  # no study storage left behind either
    largest = [*args, "--holdout-seeds", "1", "--seed", str(2**32 - 1)]
    assert CliRunner().invoke(app, largest).exit_code == 0 and out.exists()
