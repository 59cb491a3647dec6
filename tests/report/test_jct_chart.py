"""The JCT chart keeps the means readable when the tail is long: p99 twenty times the mean."""

from __future__ import annotations

import json
import math
from itertools import pairwise
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.patches import Rectangle

from tests.report.pages import check_png, parse, png_bytes, rows, section
from tests.report.runs import skewed_replay
from ttlctl import gap
from ttlctl.report import build_report
from ttlctl.report.jct import chart
from ttlctl.report.markup import num, pct
from ttlctl.report.ticks import log_ticks


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
    # each policy's bar and median dot at its own place, from its own figures
    assert [b.get_height() for b in sorted(_bars(top), key=Rectangle.get_x)] == means
    (dots,) = top.collections
    medians = [(i, r["jct_p50_s"]) for i, r in enumerate(results)]
    assert [tuple(p) for p in dots.get_offsets()] == medians
    # the tail's marks, each from its own key: p50, mean, p95, p99
    keys = ("jct_p50_s", "jct_mean_s", "jct_p95_s", "jct_p99_s")
    want = [[(i, r[k]) for i, r in enumerate(results)] for k in keys]
    assert [[tuple(p) for p in c.get_offsets()] for c in tail.collections] == want


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
    jct = section(text, "jct")
    (image,) = parse(jct).all("img")
    _, height = check_png(png_bytes(image["src"]))
    assert height > 600  # two panels, one above the other
    # the table: each figure in its column, the gap closed as a percent, no no-gap note
    assert rows(jct.split("Replay configuration")[0]) == _table(skewed_replay()["results"])
    assert "No gap closed" not in jct


def test_the_tails_legend_names_only_what_is_drawn() -> None:
    """Regression: a replay of 80 programs (no p99: too few) had p99 in the tail panel's
    legend and title, with no p99 marker anywhere."""
    results = skewed_replay()["results"]
    for r in results:
        r["jct_p99_s"] = None
    tail = chart(results).axes[1]
    assert [t.get_text() for t in tail.get_legend().get_texts()] == ["p95", "mean", "p50"]
    assert tail.get_title() == "the tail: p50, mean and p95"


def _four_replicas() -> list[dict[str, object]]:
    """A replay of four replicas as the report drew it: medians above, at and below the
    means (continuum's 249 over 234), the tails within one decade (200 to 610 s)."""
    rows = (
        ("vllm", 447.0, 445.0, 610.0),
        ("program-fcfs", 326.0, 330.0, 435.0),
        ("continuum", 234.0, 249.0, 311.0),
        ("oracle", 214.0, 219.0, 281.0),
        ("unlimited-kv", 201.0, 203.0, 262.0),
    )
    return [
        {"policy": p, "jct_mean_s": mean, "jct_p50_s": p50, "jct_p95_s": p95}
        for p, mean, p50, p95 in rows
    ]


def test_a_means_label_clears_its_median_dot() -> None:
    """Regression: the label stood 2 points above the bar, so a median above the mean (or
    a hair below it) drew its dot on the label ("234" under continuum's dot at 249)."""
    fig = chart(_four_replicas())
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    top = fig.axes[0]
    (dots,) = top.collections
    radius = math.sqrt(dots.get_sizes()[0]) / 2 * fig.dpi / 72
    centres = top.transData.transform(dots.get_offsets())
    labels = sorted(top.texts, key=lambda t: t.get_window_extent(renderer).x0)
    assert len(labels) == len(centres)
    for text, (x, y) in zip(labels, centres, strict=True):
        box = text.get_window_extent(renderer)
        assert box.x0 < x < box.x1, text.get_text()
        assert box.y0 >= y + radius, f"{text.get_text()} lies under its median's dot"
        assert box.y1 <= top.get_window_extent(renderer).y1, "a label passes the frame"


def test_the_tail_axis_has_ticks_to_read_values_by() -> None:
    """Regression: a tail within one decade (200 to 610 s) was labelled 200 and 500 only."""
    fig = chart(_four_replicas())
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    tail = fig.axes[1]
    low, high = tail.get_ylim()
    shown = [t for t in tail.get_yticklabels() if low <= t.get_position()[1] <= high]
    assert len(shown) >= 4, [t.get_text() for t in shown]
    assert all(t.get_text() for t in shown)
    boxes = sorted((t.get_window_extent(renderer) for t in shown), key=lambda b: b.y0)
    for a, b in pairwise(boxes):
        assert not a.overlaps(b), "two tick labels are drawn over each other"


def test_the_tail_axis_survives_figures_at_the_ends_of_the_floats() -> None:
    """Regression: an edited replay.json's p50 of 1e-300 under a mean of 1e300 overflowed
    the ratio of the two (log_ticks raised OverflowError), and a p95 of 1.7e308 padded by
    5% was inf ("Axis limits cannot be NaN or Inf"): the JCT section was a note."""
    assert all(1e-300 <= t <= 1e300 for t in log_ticks(1e-300, 1e300, 0.1))
    assert len(log_ticks(1e-300, 1e300, 0.1)) >= 4
    for extreme in ({"jct_p50_s": 1e-300, "jct_mean_s": 1e300}, {"jct_p95_s": 1.7e308}):
        results = [{**r, **extreme} if i == 0 else r for i, r in enumerate(_four_replicas())]
        fig = chart(results)
        FigureCanvasAgg(fig).draw()
        low, high = fig.axes[1].get_ylim()
        assert low > 0 and math.isfinite(high)
        shown = [v for r in results for v in r.values() if isinstance(v, float)]
        assert low <= min(shown) and max(shown) <= high


def test_a_huge_means_label_stays_short() -> None:
    """Regression: a mean of 1e300 (an edited replay.json) was labelled in 301 digits,
    wider than the page: the figure's layout collapsed."""
    results = [{**r, "jct_mean_s": 1e300} if i == 0 else r for i, r in enumerate(_four_replicas())]
    labels = [t.get_text() for t in chart(results).axes[0].texts]
    assert labels[0] == "1e+300"
    assert labels[1:] == ["326", "234", "214", "201"]  # the others as before


def _table(results: list[dict[str, Any]]) -> list[list[str]]:
    """The JCT table's rows as they should read: a row per result, in its order, each
    figure from its own key (seconds as they are, the hit rate and gap closed as percents)."""
    return [
        [
            r["policy"],
            "bound" if r.get("evaluation_only") else "",
            *(num(r.get(k)) for k in ("jct_mean_s", "jct_p50_s", "jct_p95_s", "jct_p99_s")),
            pct(r.get("prefix_hit_rate")),
            num(r.get("preemptions")),
            num(r.get("pinned_token_seconds")),
            pct(r.get("gap_closed")),
        ]
        for r in results
    ]


def test_each_policys_row_reads_its_own_figures(sample_run: Path, sample_page: str) -> None:
    """The samples' replay: no gap to close (unlimited KV is not faster), which a note says."""
    replay = json.loads((sample_run / "replay.json").read_text(encoding="utf-8"))
    results = replay["results"]
    jct = section(sample_page, "jct")
    assert rows(jct.split("Replay configuration")[0]) == _table(results)
    assert any(r.get("evaluation_only") for r in results)
    assert gap.no_gap(results) and "No gap closed: unlimited KV is not " in jct
    # and the settings it was replayed with
    shown = rows(jct.split("<p>Replay configuration:</p>")[1])
    assert shown == [[key, num(value)] for key, value in replay["config"].items()]
