"""The JCT chart keeps the means readable when the tail is long: p99 twenty times the mean."""

from __future__ import annotations

import json
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.patches import Rectangle

from tests.report.pages import check_png, parse, png_bytes
from tests.report.runs import skewed_replay
from ttlctl.report import build_report
from ttlctl.report.jct import chart


def _bars(ax: Axes) -> list[Rectangle]:
    """The filled bars (the hatching drawn over the bounds is unfilled)."""
    return [p for p in ax.patches if isinstance(p, Rectangle) and p.get_facecolor()[3] > 0]


def test_means_fill_their_own_axis_and_the_tail_has_a_log_axis() -> None:
    results = skewed_replay()["results"]
    means = [r["jct_mean_s"] for r in results]
    assert all(r["jct_p99_s"] == 20 * r["jct_mean_s"] for r in results)
    fig = chart(results)
    top, tail = fig.axes[:2]
    assert len(fig.axes) == 2
    # the means' axis is scaled to the means (and medians), not to the tail
    assert top.get_yscale() == "linear"
    low, high = top.get_ylim()
    assert low == 0 and max(means) <= high <= 1.25 * max(means)
    heights = [b.get_height() for b in _bars(top)]
    assert sorted(heights) == sorted(means)
    # the smallest bar stands above half the axis; vLLM vs continuum differ by > 10% of it
    assert min(means) / high > 0.5
    by = {r["policy"]: r["jct_mean_s"] for r in results}
    assert (by["vllm"] - by["continuum"]) / high > 0.1
    # every mean is written above its bar
    written = {t.get_text() for t in top.texts}
    assert {f"{m:,.3g}" for m in means} <= written
    # the tail: a log axis that holds every p50 and every p99
    assert tail.get_yscale() == "log"
    low, high = tail.get_ylim()
    assert low <= min(r["jct_p50_s"] for r in results)
    assert high >= max(r["jct_p99_s"] for r in results)


def test_a_replay_without_jct_figures_draws_the_means_alone() -> None:
    results = skewed_replay()["results"][:3]
    for r in results:
        for key in ("jct_mean_s", "jct_p50_s", "jct_p95_s", "jct_p99_s"):
            r[key] = None
    fig = chart(results)
    assert len(fig.axes) == 1
    assert {t.get_text() for t in fig.axes[0].texts} == {"—"}


def test_the_page_shows_the_skewed_replay(tmp_path: Path) -> None:
    (tmp_path / "replay.json").write_text(json.dumps(skewed_replay()), encoding="utf-8")
    text = build_report(tmp_path)
    assert "could not be drawn" not in text
    section = text.split('id="jct"')[1].split("</section>")[0]
    (image,) = parse(section).all("img")
    _, height = check_png(png_bytes(image["src"]))
    assert height > 600  # two panels, one above the other


def test_the_tails_legend_names_only_what_is_drawn() -> None:
    """Regression: a replay of 80 programs (no p99: too few) had p99 in the tail panel's
    legend and title, with no p99 marker anywhere."""
    results = skewed_replay()["results"]
    for r in results:
        r["jct_p99_s"] = None
    tail = chart(results).axes[1]
    assert [t.get_text() for t in tail.get_legend().get_texts()] == ["p95", "mean", "p50"]
    assert tail.get_title() == "the tail: p50, mean and p95"
