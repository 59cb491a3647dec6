"""`--study-name`, the optuna CLI's spelling, names the study as `--study` does: the
closing `optuna best-trial --study-name …` line invites users to type it, and a study they
name so must be the one tune runs, resumes and records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import typer
from typer.testing import CliRunner

from tests.tune.inputs import KV_TOKENS, PROFILE
from ttlctl import bundle
from ttlctl.cli import tune as tune_cli

app = typer.Typer()
app.command("tune")(tune_cli.tune)
app.command("noop")(lambda: None)  # two commands: typer keeps "tune" as a subcommand


def _tune(inputs: dict[str, Any], out: Path, *name: str) -> Any:
    return CliRunner().invoke(
        app,
        [
            "tune", str(inputs["trace"]), "--fit", str(inputs["fit"]), "--profile", PROFILE,
            "--concurrency", "6", "--kv-tokens", str(KV_TOKENS), "--seeds", "1",
            "--holdout-seeds", "1", "--trials", "2", "-o", str(out), *name,
        ],
    )  # fmt: skip


def test_study_name_names_the_study_and_resumes_it(
    tune_inputs: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "bundle.json"
    res = _tune(tune_inputs, out, "--study-name", "my-study")
    assert res.exit_code == 0, res.output
    assert bundle.read(out)["provenance"]["tuning"]["study"]["name"] == "my-study"
    storage = f"sqlite:///{(tmp_path / 'bundle.optuna.db').resolve()}"
    assert f"optuna best-trial --study-name my-study --storage {storage}" in res.output
    assert len(optuna.load_study(study_name="my-study", storage=storage).trials) == 2
    # `--study my-study` is the same study: resumed, nothing new run
    again = _tune(tune_inputs, out, "--study", "my-study")
    assert again.exit_code == 0, again.output
    assert len(optuna.load_study(study_name="my-study", storage=storage).trials) == 2
