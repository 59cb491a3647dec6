"""A named study made for other settings (``--replicas``, ``--router``, ``--worker-urls``,
or no fleet at all) is refused before tune says what it will run: one line on stderr,
exit 2, no "study … in …: N trials" line first, nothing replayed and the study untouched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
import typer
from typer.testing import CliRunner

from tests.tune.inputs import KV_TOKENS, PROFILE
from ttlctl.cli import tune as tune_cli

app = typer.Typer()
app.command("tune")(tune_cli.tune)
app.command("noop")(lambda: None)  # two commands: typer keeps "tune" as a subcommand

FLEET = ["--replicas", "4", "--router", "cache-aware"]
URLS = [arg for i in range(4) for arg in ("--worker-urls", f"http://10.0.0.{i + 1}:8000")]


def _tune(inputs: dict[str, Any], db: Path, *extra: str) -> Any:
    return CliRunner().invoke(
        app,
        [
            "tune", str(inputs["trace"]), "--fit", str(inputs["fit"]), "--profile", PROFILE,
            "--concurrency", "8", "--kv-tokens", str(KV_TOKENS), "--seeds", "1",
            "--holdout-seeds", "1", "--trials", "1", "--storage", f"sqlite:///{db}",
            "--study", "fleetstudy", "-o", str(db.parent / "bundle.json"), "--force", *extra,
        ],
    )  # fmt: skip


@pytest.fixture(scope="module")
def study(tune_inputs: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("study") / "named.db"
    res = _tune(tune_inputs, db, *FLEET)
    assert res.exit_code == 0, res.output
    return db


@pytest.mark.parametrize(
    ("args", "here"),
    [
        (["--replicas", "2", "--router", "cache-aware"], "fleet.replicas"),
        (["--replicas", "4", "--router", "kv-aware"], "fleet.router, fleet.routers"),
        ([*FLEET, *URLS], "fleet.worker_urls"),
        ([], "fleet"),
    ],
    ids=["replicas", "router", "worker-urls", "no fleet"],
)
def test_a_study_for_other_settings_is_refused_before_it_is_announced(
    tune_inputs: dict[str, Any], study: Path, args: list[str], here: str
) -> None:
    trials = len(optuna.load_study(study_name="fleetstudy", storage=f"sqlite:///{study}").trials)
    res = _tune(tune_inputs, study, *args)
    assert res.exit_code == 2, res.output
    assert res.stdout == "", res.stdout
    assert res.stderr.strip() == (
        f"error: study 'fleetstudy' in sqlite:///{study} was made for other inputs or settings "
        "(trace, fit, profile, loads, seeds, KV size, p95 limit or fleet; here: "
        f"{here}); pick another --study"
    ), res.stderr
    after = optuna.load_study(study_name="fleetstudy", storage=f"sqlite:///{study}").trials
    assert len(after) == trials


def test_the_same_settings_resume_it(tune_inputs: dict[str, Any], study: Path) -> None:
    res = _tune(tune_inputs, study, *FLEET)
    assert res.exit_code == 0, res.output
    assert res.stderr.startswith("study fleetstudy in sqlite:///"), res.stderr
