"""The JCT columns of the replay, refit and tune tables group thousands as the other number
columns do. Regression: a contended replay printed `1778.35` in its JCT column beside
`15,803` in its calls/s column."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from typer.testing import CliRunner

from tests.cli.test_tables import cells
from ttlctl.cli import app
from ttlctl.cli.render import refit_report, replay_table, tune_table

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "engine-log" / "engine.jsonl"
#: a JCT past a thousand seconds, as a contended replay gives
SLOW = 1778.354


def rows(draw: Any, *args: Any) -> list[list[str]]:
    """The body rows of the first table ``draw`` prints."""
    console = Console(record=True, width=400)
    draw(console, *args)
    return cells(console.export_text().splitlines())


def test_the_replay_table_groups_thousands_of_seconds() -> None:
    result = {
        "policy": "vllm", "programs": 60, "llm_calls": 663, "jct_mean_s": SLOW,
        "jct_p50_s": SLOW * 2, "jct_p95_s": SLOW * 3, "ttft_mean_s": SLOW / 10,
        "prefix_hit_rate": 0.5, "preemptions": 2, "pinned_token_seconds": 0.0,
        "gap_closed": None, "sim_calls_per_s": 15803.0, "rejected_calls": 0,
    }  # fmt: skip
    (row,) = rows(replay_table, [result], 663)
    assert row[3:7] == [f"{SLOW:,.2f}", f"{SLOW * 2:,.2f}", f"{SLOW * 3:,.2f}", "177.835"], row
    assert row[-1] == "15,803", row


def test_the_refit_table_groups_thousands_of_seconds(tmp_path: Path) -> None:
    runner = CliRunner()
    trace, fit, bundle = tmp_path / "t.parquet", tmp_path / "f.json", tmp_path / "b.json"
    for args in (
        ["ingest", str(SAMPLE), "-o", str(trace)],
        ["fit", str(trace), "-o", str(fit)],
        ["bundle", "build", "--fit", str(fit), "--profile", "llama-3.1-8b-h100", "-o", str(bundle)],
    ):
        assert runner.invoke(app, args).exit_code == 0
    res = runner.invoke(app, ["refit", str(SAMPLE), "--bundle", str(bundle), "--json", "-"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    for n, key in enumerate(("old", "new", "vllm"), 1):
        report["jct"][key] = {"mean_s": SLOW * n, "p95_s": SLOW * n * 2}
    shown = [row for row in rows(refit_report, report) if row[0].endswith(("bundle", "(stock)"))]
    assert [row[1:3] for row in shown] == [
        [f"{SLOW * n:,.2f}", f"{SLOW * n * 2:,.2f}"] for n in (1, 2, 3)
    ], shown


def test_the_tune_table_groups_thousands_of_seconds() -> None:
    held: dict[str, Any] = {"seeds": [100], "gain_vs_default": 1.0, "diff_vs_default_s": 0.0}
    held["diff_sem_vs_default_s"] = None
    for n, key in enumerate(("vllm", "default", "never_pin", "tuned"), 1):
        held[f"{key}_jct_mean_s"], held[f"{key}_jct_p95_s"] = SLOW * n, SLOW * n * 2
    result = {
        "held_back": held,
        "counts": {"complete": 2, "pruned": 0, "fail": 0},
        "best": {"number": 1, "params": {}},
        "importance": None,
        "guard": {"beats_vllm": False, "message": "kept"},
    }
    shown = rows(tune_table, result)
    assert [row[1:3] for row in shown] == [
        [f"{SLOW * n:,.2f}", f"{SLOW * n * 2:,.2f}"] for n in (1, 2, 3, 4)
    ], shown


def test_an_evaluation_only_policy_is_starred_and_the_star_explained() -> None:
    result = {
        "policy": "unlimited-kv", "programs": 2, "llm_calls": 4, "jct_mean_s": 1.0,
        "jct_p50_s": 1.0, "jct_p95_s": 1.0, "ttft_mean_s": 0.1, "prefix_hit_rate": 0.5,
        "preemptions": 0, "pinned_token_seconds": 0.0, "gap_closed": None,
        "sim_calls_per_s": 10.0, "rejected_calls": 0,
    }  # fmt: skip
    console = Console(record=True, width=400)
    replay_table(console, [{**result, "policy": "vllm"}, {**result, "evaluation_only": True}], 8)
    text = console.export_text()
    assert [row[0] for row in cells(text.splitlines())] == ["vllm", "unlimited-kv *"]
    assert "* evaluation only: reads what no engine can know" in text
