"""``tune --client-tags``: what the replayed clients tag each call with is part of what a
study is made for. A study made with other tags is refused (one line, exit 2, nothing
run); the summary and the bundle's provenance record the tags; a study with every call
tagged keeps the fingerprint it had before the option (no ``client_tags`` key)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
from typer.testing import CliRunner

from tests.tune.inputs import KV_TOKENS, PROFILE
from ttlctl.cli import app


def _tune(inputs: dict[str, Any], db: Path, out: Path, *extra: str) -> Any:
    return CliRunner().invoke(
        app,
        [
            "tune", str(inputs["trace"]), "--fit", str(inputs["fit"]), "--profile", PROFILE,
            "--concurrency", "8", "--kv-tokens", str(KV_TOKENS), "--seeds", "1",
            "--holdout-seeds", "1", "--trials", "1", "--storage", f"sqlite:///{db}",
            "--study", "tagged", "-o", str(out), "--force", *extra,
        ],
    )  # fmt: skip


@pytest.fixture(scope="module")
def study(tune_inputs: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tags")
    res = _tune(tune_inputs, root / "s.db", root / "bundle.json", "--client-tags", "tool")
    assert res.exit_code == 0, res.output
    return root


def test_the_tags_are_recorded(study: Path) -> None:
    summary = json.loads((study / "tune.json").read_text())
    assert summary["objective"]["client_tags"] == "tool"
    bundle = json.loads((study / "bundle.json").read_text())
    assert bundle["provenance"]["tuning"]["objective"]["client_tags"] == "tool"


@pytest.mark.parametrize("tags", [(), ("--client-tags", "none")], ids=["full", "none"])
def test_a_study_made_with_other_tags_is_refused(
    tune_inputs: dict[str, Any], study: Path, tags: tuple[str, ...]
) -> None:
    db = study / "s.db"
    before = len(optuna.load_study(study_name="tagged", storage=f"sqlite:///{db}").trials)
    res = _tune(tune_inputs, db, study / "other.json", *tags)
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().startswith(
        f"error: study 'tagged' in sqlite:///{db} was made for other inputs or settings"
    ), res.stderr
    assert "here: client_tags)" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    after = optuna.load_study(study_name="tagged", storage=f"sqlite:///{db}").trials
    assert len(after) == before and not (study / "other.json").exists()


def test_the_same_tags_resume_it(tune_inputs: dict[str, Any], study: Path) -> None:
    res = _tune(tune_inputs, study / "s.db", study / "again.json", "--client-tags", "tool")
    assert res.exit_code == 0, res.output


def test_full_tags_keep_the_fingerprint_they_had(tune_inputs: dict[str, Any]) -> None:
    ctx = tune_inputs["ctx"]
    assert ctx.config.client_tags == "full" and "client_tags" not in ctx.fingerprint()
