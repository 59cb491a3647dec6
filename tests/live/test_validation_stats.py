"""replay/validation/stats.py: the pure statistics of ``ttlctl validate`` (no server)."""

from __future__ import annotations

import pytest

from replay.validation import stats as validate
from ttlctl.cli import render
from ttlctl.cli.kit import out


def test_compare_and_rankings() -> None:
    sim = {"jct_mean_s": 11.0, "jct_p95_s": None, "ttft_mean_s": 0.5, "prefix_hit_rate": 0.6,
           "preemptions": 3}  # fmt: skip
    real = {"jct_mean_s": 10.0, "jct_p95_s": 20.0, "ttft_mean_s": 1.0, "prefix_hit_rate": 0.5,
            "preemptions": 5}  # fmt: skip
    rows = {r["metric"]: r for r in validate.compare(sim, real)}
    assert rows["jct_mean_s"]["error"] == pytest.approx(0.1)
    assert rows["jct_p95_s"]["error"] is None
    assert rows["ttft_mean_s"]["error"] == pytest.approx(-0.5)
    assert rows["prefix_hit_rate"]["error"] == pytest.approx(10.0)
    assert rows["preemptions"]["error"] == -2.0

    def r(**jct: float) -> dict[str, dict[str, float]]:
        return {k: {"jct_mean_s": v} for k, v in jct.items()}

    assert validate.ranking(r(vllm=2.0, continuum=1.0)) == [["continuum"], ["vllm"]]
    assert validate.ranking(r(vllm=1.01, continuum=1.0)) == [["continuum", "vllm"]]
    assert validate.ranking({"vllm": {"jct_mean_s": None}}) is None
    a, b, tie = [["continuum"], ["vllm"]], [["vllm"], ["continuum"]], [["continuum", "vllm"]]
    assert validate.same_ranking(a, a) is True
    assert validate.same_ranking(a, b) is False
    assert validate.same_ranking(a, tie) is True
    assert validate.same_ranking(None, a) is None


def test_repeated_live_runs_merge_into_means_and_ranges(capsys: pytest.CaptureFixture[str]) -> None:
    """--repeats: the simulator is compared with the mean of the live runs; each row
    carries the runs' range; a metric missing from one run is missing from the mean."""
    runs = [
        {"jct_mean_s": 10.0, "jct_p95_s": None, "ttft_mean_s": 1.0, "prefix_hit_rate": 0.25,
         "preemptions": 0, "programs": 8},
        {"jct_mean_s": 14.0, "jct_p95_s": 20.0, "ttft_mean_s": 2.0, "prefix_hit_rate": 0.35,
         "preemptions": 2, "programs": 8},
    ]  # fmt: skip
    one = validate.merge_runs(runs[:1])
    assert one == runs[0] and "live_range" not in one
    merged = validate.merge_runs(runs)
    assert merged["jct_mean_s"] == pytest.approx(12.0)
    assert merged["prefix_hit_rate"] == pytest.approx(0.30)
    assert merged["jct_p95_s"] is None and merged["live_range"]["jct_p95_s"] is None
    assert merged["live_range"]["prefix_hit_rate"] == [0.25, 0.35]
    assert merged["repeats"] == 2 and merged["runs"] == runs and merged["programs"] == 8
    # a per-run figure that is not averaged is not passed off as the runs' figure
    varied = [{**r, "makespan_s": 60.0 + i} for i, r in enumerate(runs)]
    assert "makespan_s" not in validate.merge_runs(varied)
    sim = {"jct_mean_s": 13.2, "jct_p95_s": None, "ttft_mean_s": 1.5, "prefix_hit_rate": 0.33,
           "preemptions": 1}  # fmt: skip
    rows = {r["metric"]: r for r in validate.compare(sim, merged)}
    assert rows["jct_mean_s"]["error"] == pytest.approx(0.1)
    assert rows["prefix_hit_rate"]["error"] == pytest.approx(3.0)
    assert rows["jct_mean_s"]["live_range"] == [10.0, 14.0]
    assert validate.compare(sim, runs[0])[0]["live_range"] is None

    doc = {
        "programs": 8, "calls": 85, "policies": ["vllm"], "rows": {"vllm": list(rows.values())},
        "ranking": {"same": True, "sim": [["vllm"]], "live": [["vllm"]], "tie_within": 0.02},
        "goals": {"vllm": {"jct_within_10pct": True, "hit_rate_within_5_points": True}},
        "profile": {"source": "given"}, "work_dir": "w", "config": {"repeats": 2},
    }  # fmt: skip
    render.validate_table(out, doc)
    shown = capsys.readouterr().out
    assert "2 live runs per policy" in shown and "live range" in shown
    assert "10.000 s – 14.000 s" in shown and "25.0% – 35.0%" in shown


def test_goals_are_met_within_their_bounds_and_unknown_without_a_figure() -> None:
    rows = validate.compare(
        {"jct_mean_s": 10.9, "prefix_hit_rate": 0.56}, {"jct_mean_s": 10.0, "prefix_hit_rate": 0.5}
    )
    assert validate.goals(rows) == {"jct_within_10pct": True, "hit_rate_within_5_points": False}
    rows = validate.compare({"jct_mean_s": 11.5}, {"jct_mean_s": 10.0, "prefix_hit_rate": 0.5})
    assert validate.goals(rows) == {"jct_within_10pct": False, "hit_rate_within_5_points": None}


def test_live_range_is_the_runs_least_and_greatest_in_any_order() -> None:
    """--repeats: a row's live range is [min, max] of the runs, whichever ran first."""
    runs = [
        {"jct_mean_s": 14.0, "jct_p95_s": 30.0, "ttft_mean_s": 2.0, "prefix_hit_rate": 0.35,
         "preemptions": 2},
        {"jct_mean_s": 9.0, "jct_p95_s": 20.0, "ttft_mean_s": 1.0, "prefix_hit_rate": 0.25,
         "preemptions": 0},
        {"jct_mean_s": 10.0, "jct_p95_s": 25.0, "ttft_mean_s": 3.0, "prefix_hit_rate": 0.30,
         "preemptions": 1},
    ]  # fmt: skip
    spread = validate.merge_runs(runs)["live_range"]
    assert spread["jct_mean_s"] == [9.0, 14.0]
    assert spread["ttft_mean_s"] == [1.0, 3.0]
    assert spread["preemptions"] == [0.0, 2.0]


def test_a_tie_and_a_goal_hold_at_their_bound() -> None:
    """Mean JCTs exactly 2% apart tie (stats.TIE, "within"); a mean JCT off by exactly
    10% meets its goal (docs: within 10%)."""
    assert validate.ranking({"vllm": {"jct_mean_s": 1.02}, "continuum": {"jct_mean_s": 1.0}}) == [
        ["continuum", "vllm"]
    ]
    rows = validate.compare({"jct_mean_s": 11.0}, {"jct_mean_s": 10.0})
    assert validate.goals(rows)["jct_within_10pct"] is True
    rows = validate.compare({"jct_mean_s": 9.0}, {"jct_mean_s": 10.0})
    assert validate.goals(rows)["jct_within_10pct"] is True


def test_a_hit_rate_goal_is_missed_by_a_simulator_too_low_as_by_one_too_high() -> None:
    rows = validate.compare({"prefix_hit_rate": 0.40}, {"prefix_hit_rate": 0.50})
    assert validate.goals(rows)["hit_rate_within_5_points"] is False
