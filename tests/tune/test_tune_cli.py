"""`ttlctl tune` end to end (the command is mounted on a local app here; ttlctl.cli
registers the same function)."""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from pathlib import Path
from typing import Any

import optuna
import pytest
import typer
from optuna.trial import TrialState
from typer.testing import CliRunner

from replay.tune import first_trials
from tests.documents import conforms
from tests.tune.inputs import KV_TOKENS, PROFILE
from ttlctl import bundle, bundle_doc
from ttlctl.cli import tune as tune_cli

app = typer.Typer()
app.command("tune")(tune_cli.tune)
app.command("noop")(lambda: None)  # two commands: typer keeps "tune" as a subcommand


def _args(inputs: dict[str, Any], out: Path, *extra: str) -> list[str]:
    return [
        "tune",
        str(inputs["trace"]),
        "--fit",
        str(inputs["fit"]),
        "--profile",
        PROFILE,
        "--concurrency",
        "6",
        "--concurrency",
        "12",
        "--kv-tokens",
        str(KV_TOKENS),
        "--trials",
        "6",
        "--holdout-seeds",
        "2",
        "-o",
        str(out),
        *extra,
    ]


def test_tune_writes_bundle_summary_and_commands(
    tune_inputs: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "out" / "bundle.json"
    res = CliRunner().invoke(app, _args(tune_inputs, out))
    assert res.exit_code == 0, res.output
    doc = bundle.read(out)
    conforms(doc, bundle_doc.Bundle)
    tuning = doc["provenance"]["tuning"]
    assert tuning["guard"]["shipped"] == "tuned"
    assert doc["policy"] == tuning["best"]["policy"]
    assert doc["provenance"]["trace"]["sha256"] and doc["provenance"]["fit"]["sha256"]
    name = tuning["study"]["name"]
    assert name.startswith("ttlctl-tune-")
    summary = json.loads((out.parent / "tune.json").read_text())
    assert summary["bundle"]["sha256"] == doc["sha256"]
    assert len(summary["trials"]) == 6
    assert {"number", "params", "value", "state"} <= set(summary["trials"][0])
    db = out.parent / "bundle.optuna.db"
    assert db.exists()
    assert f"optuna-dashboard sqlite:///{db.resolve()}" in res.output
    assert f"optuna best-trial --study-name {name} --storage sqlite:///" in res.output
    assert "paper default" in res.output and "held-back" in res.output
    # 6 trials: no importances, and one line that says why instead
    assert summary["importance"] is None and tuning["importance"] is None
    assert tuning["importance_note"] == summary["importance_note"]
    line = next(x for x in res.output.splitlines() if x.startswith("importance:"))
    assert line.startswith(
        f"importance: not computed from {summary['counts']['complete']} completed trial(s)"
    )
    # the printed command is the one Optuna's CLI understands
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{db.resolve()}")
    assert study.metric_names == ["jct_mean_s"]
    assert study.user_attrs["ttlctl.provenance"]["inputs"]["trace"]["sha256"]
    # the same command again resumes the same (finished) study: nothing new runs; with
    # --json - the summary (as in tune.json) is all that stdout gets
    again = CliRunner().invoke(app, [*_args(tune_inputs, out), "--json", "-"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout) == json.loads((out.parent / "tune.json").read_text())
    assert json.loads(again.stdout)["ran_now"] == 0
    with sqlite3.connect(db) as con:
        assert con.execute("select count(*) from trials").fetchone() == (6,)


def test_tune_with_three_workers_on_the_default_sqlite_file(
    tune_inputs: dict[str, Any], tmp_path: Path
) -> None:
    """The default storage is enough for --workers on one machine: each trial (the
    enqueued defaults too) is run once, by one of the three workers (tests/tune/
    test_sqlite_workers.py strains the same file harder)."""
    out = tmp_path / "bundle.json"
    res = CliRunner().invoke(app, _args(tune_inputs, out, "--workers", "3"))
    assert res.exit_code == 0, res.output
    name = bundle.read(out)["provenance"]["tuning"]["study"]["name"]
    study = optuna.load_study(
        study_name=name, storage=f"sqlite:///{out.parent / 'bundle.optuna.db'}"
    )
    trials = study.get_trials()
    assert [t.number for t in trials] == list(range(6))
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
    assert len({t.user_attrs["worker"] for t in trials}) == 3
    for values in first_trials(tune_inputs["ctx"].eta_fitted):
        assert sum(t.params == values for t in trials) == 1


def test_guard_ships_a_never_pin_bundle_unless_forced(
    tune_inputs: dict[str, Any], tmp_path: Path
) -> None:
    """With memory for everyone, pins change nothing: the tuned policy only ties stock
    vLLM, which is not a win, so the bundle written never pins."""
    out = tmp_path / "b.json"
    args = _args(tune_inputs, out, "--storage", str(tmp_path / "j.log"))
    args[args.index("--kv-tokens") + 1] = "10000000"
    args[args.index("--trials") + 1] = "3"
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "does NOT beat stock vLLM" in res.output
    assert "--storage-class JournalFileBackend" in res.output
    doc = bundle.read(out)
    assert doc["policy"]["pins"] is False
    assert doc["provenance"]["tuning"]["guard"]["shipped"] == "never-pin"
    forced = CliRunner().invoke(app, [*args, "--force"])
    assert forced.exit_code == 0, forced.output
    assert bundle.read(out)["policy"]["pins"] is True


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("--fit", "missing.json"), "missing.json: no such file"),
        (("--storage", "STORAGE_DB"), "is a SQLite database"),
        (("--storage", "postgresql+psycopg2://u:hunter2@127.0.0.1:1/x"), "cannot open"),
        (("--trials", "0"), "error: --trials must be >= 1, not 0"),
        (("--seeds", "0"), "error: --seeds must be >= 1, not 0"),
        (("--holdout-seeds", "-2"), "error: --holdout-seeds must be >= 1, not -2"),
        # counts far past any study: refused (they overflowed, or built a list of workers
        # until the machine gave out)
        (("--seeds", "99999999999999999999"), "error: --seeds must be at most 10,000, not"),
        (("--workers", "99999999999999999999"), "error: --workers must be at most 1,024, not"),
        (("--heartbeat-seconds", "99999999999999999999"), "must be in 1 … 86,400 (a day)"),
        (("--jps", "-1"), "must be positive"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    tune_inputs: dict[str, Any], tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    db = tmp_path / "s.db"
    optuna.create_study(storage=f"sqlite:///{db}")
    args = _args(tune_inputs, tmp_path / "b.json")
    flag, value = change
    value = str(db) if value == "STORAGE_DB" else value
    if flag in args:
        args[args.index(flag) + 1] = value
    else:
        args += [flag, value]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert "Traceback" not in res.output and "hunter2" not in res.output


def _no_trial_finishes(inputs: dict[str, Any], out: Path, *extra: str) -> list[str]:
    """A KV cache smaller than any call (no --truncate): no program finishes, trial 0 fails."""
    args = _args(inputs, out, *extra)
    args[args.index("--kv-tokens") + 1] = "3000"
    return args


@pytest.mark.parametrize("workers", [1, 2])
def test_a_trial_error_is_one_line_and_leaves_no_new_study(
    tune_inputs: dict[str, Any],
    tmp_path: Path,
    optuna_log: list[logging.LogRecord],
    workers: int,
) -> None:
    out = tmp_path / "made" / "b.json"
    extra = ("--workers", "2", "--storage", str(out.parent / "j.log")) if workers == 2 else ()
    res = CliRunner().invoke(app, _no_trial_finishes(tune_inputs, out, *extra))
    assert res.exit_code == 2, res.output
    last = res.output.strip().splitlines()[-1]
    # with two workers, both stopped by their first trial: one line counts them
    several = r"2 of 2 tune workers failed; the first: " if workers == 2 else ""
    alike = r"; the other alike" if workers == 2 else ""
    pattern = rf"error: {several}trial \d+: no program finished in the replay .*{alike}"
    assert re.fullmatch(pattern, last), last
    assert "Traceback" not in res.output
    assert not [r for r in optuna_log if r.exc_info], "Optuna printed a trial's traceback"
    assert not (tmp_path / "made").exists()  # the study's file and the folder made for it


def test_a_trial_error_keeps_a_storage_that_existed(
    tune_inputs: dict[str, Any], tmp_path: Path
) -> None:
    db = tmp_path / "mine.db"
    optuna.create_study(storage=f"sqlite:///{db}", study_name="mine")
    args = _no_trial_finishes(tune_inputs, tmp_path / "b.json", "--storage", f"sqlite:///{db}")
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert "error: trial 0: no program finished" in res.output
    assert set(optuna.get_all_study_names(f"sqlite:///{db}")) >= {"mine"}


def test_two_bundles_tuned_into_one_folder_keep_a_summary_each(
    tune_inputs: dict[str, Any], tmp_path: Path
) -> None:
    """Regression: `tune -o run/bundle.json` then `tune -o run/b2.json` wrote both summaries
    to run/tune.json, and `ttlctl report run` showed b2's study beside bundle.json."""
    first, second = tmp_path / "bundle.json", tmp_path / "b2.json"
    assert CliRunner().invoke(app, _args(tune_inputs, first)).exit_code == 0
    res = CliRunner().invoke(app, _args(tune_inputs, second, "--kv-tokens", "20000"))
    assert res.exit_code == 0, res.output
    for out, summary in ((first, "tune.json"), (second, "b2.tune.json")):
        doc = json.loads((tmp_path / summary).read_text())
        assert doc["bundle"]["sha256"] == bundle.read(out)["sha256"], summary
