"""The tuning history chart: a trial's number is a whole number on its axis."""

from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg

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
