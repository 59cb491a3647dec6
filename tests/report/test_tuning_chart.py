"""The tuning history chart: a trial's number is a whole number on its axis."""

from __future__ import annotations

import html
import json
from pathlib import Path
from unittest.mock import patch

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg

from tests.report.runs import tune_doc
from ttlctl.report.page import build_report
from ttlctl.report.rundir import RunInputs
from ttlctl.report.tuning import history_chart, section


def test_a_short_studys_trials_are_ticked_by_whole_numbers() -> None:
    """Regression: `tune --trials 4` drew ticks at 0.5, 1.5 and 2.5 between its trials."""
    trials = [
        {"number": i, "value": v, "state": "COMPLETE"} for i, v in enumerate((97, 96, 97, 96))
    ]
    fig = history_chart(trials, maximize=False)
    assert fig is not None
    FigureCanvasAgg(fig).draw()
    ax = fig.axes[0]
    low, high = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if low <= t <= high]
    assert ticks and all(float(t).is_integer() for t in ticks)
    assert ax.get_title() and ax.get_xlabel() == "trial"


def test_no_completed_trial_draws_no_chart() -> None:
    assert history_chart([{"number": 0, "state": "FAIL", "value": None}], maximize=False) is None


def test_the_best_trial_and_held_back_tables_show_policy_and_router_in_full(
    tmp_path: Path,
) -> None:
    """The best trial's policy and router, and the held-back routers, read in full: nested
    records as dotted rows, a router as one phrase with its settings and worker URLs (the
    table cut their JSON at 200 characters, so a fleet's router and most of the policy were
    lost behind "…")."""
    router = {
        "name": "cache-aware",
        "replicas": 4,
        "settings": {"balance_abs_threshold": 64, "cache_threshold": 0.3},
        "worker_urls": [f"http://gpu-node-{i}.example:8000" for i in range(4)],
    }
    policy = {f"knob_{i:02d}": 1000 + i for i in range(30)} | {"eta": 0.5}
    tune = {
        "schema": "ttlctl.tune/1",
        "trials": [{"number": 0, "state": "COMPLETE", "value": 10.0}],
        "best": {"number": 0, "value": 10.0, "params": {"eta": 0.5}, "policy": policy,
                 "router": router},
        "held_back": {"routers": {"tuned": router, "vllm": router}, "gain_vs_vllm": 1.25},
    }  # fmt: skip
    (tmp_path / "tune.json").write_text(json.dumps(tune))
    page = build_report(tmp_path)
    assert "…" not in page[page.index("Best trial:") :]
    assert "<td>policy.knob_29</td>" in page and "<td>policy.eta</td>" in page
    phrase = (
        "cache-aware, 4 replicas: balance_abs_threshold 64, cache_threshold 0.3; worker_urls "
        + json.dumps(router["worker_urls"])
    )
    for row in ("router", "routers.tuned", "routers.vllm"):
        assert f"<tr><td>{row}</td><td>{html.escape(phrase)}</td></tr>" in page
    assert "<td>1.250x</td>" in page


def test_the_studys_counts_direction_and_importance_are_said(tmp_path: Path) -> None:
    """The trials by state, the direction, the importance bars least to most important (the
    most on top) with the quantile they were taken of, or why there are none."""
    tune = tune_doc() | {"importance_quantile": 0.1}
    run = RunInputs(tmp_path, tune=tune)
    with patch.object(Axes, "barh", autospec=True, side_effect=Axes.barh) as barh:
        text = section(run)
    assert "20 trial(s) (COMPLETE: 19, FAIL: 1); objective minimised." in text
    (call,) = barh.call_args_list
    assert list(call.args[1]) == ["valve", "pin_cap", "eta"] and list(call.args[2]) == [
        0.1, 0.2, 0.7
    ]  # fmt: skip
    assert "what the top 10% of the completed trials share" in text
    run = RunInputs(tmp_path, tune=tune | {"direction": "maximize", "importance": {}})
    run.tune["importance_note"] = "fewer than 10 completed trials"
    text = section(run)
    assert "objective maximised." in text
    assert "Parameter importance: fewer than 10 completed trials." in text
    fig = history_chart(tune["trials"], maximize=True)
    assert fig is not None
    (best,) = fig.axes[0].get_lines()
    done = [t["value"] for t in tune["trials"] if t["value"] is not None]
    assert list(best.get_ydata()) == list(np.maximum.accumulate(done))
