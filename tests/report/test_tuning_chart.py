"""The tuning history chart: a trial's number is a whole number on its axis."""

from __future__ import annotations

import html
import json
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg

from ttlctl.report.page import build_report
from ttlctl.report.tuning import history_chart


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
