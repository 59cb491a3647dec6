"""The pause CDFs can be read: the legend hides no curve, τ* markers of one value are one
line that names every context, and the pause axis has ticks to read values by."""

from __future__ import annotations

import copy
from itertools import pairwise
from pathlib import Path
from unittest.mock import patch

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg

from tests.report.pages import rows, section
from ttlctl import bundle
from ttlctl.report.markup import num
from ttlctl.report.pauses import MARKER_CONTEXTS, MAX_ROWS, chart
from ttlctl.report.png import tokens
from ttlctl.report.rundir import MAX_TOOL_PLOTS, load, ranked_tools
from ttlctl.report.tau import section as tau_section


def test_the_pause_charts_hide_nothing_and_read_their_values(sample_run: Path) -> None:
    """Regression: the legend, in the lower right, covered the empirical curve; τ* markers
    of equal values drew one over the other (the 1k and 8k markers showed as one, in the
    8k's colour, the 1k's named in the legend but not seen); the pause axis was labelled
    "0", 10⁻¹ and 10⁰."""
    run = load(sample_run)
    assert run.fit is not None and run.policy is not None
    merged = moved = 0
    delay = run.queue_delay_s
    for name, entry in ranked_tools(run.fit)[:MAX_TOOL_PLOTS]:
        fig = chart(run, name, entry, run.fit.get("global"))
        assert fig is not None
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        renderer = canvas.get_renderer()
        (ax,) = fig.axes
        legend = ax.get_legend().get_window_extent(renderer)
        frame = ax.get_window_extent(renderer)
        # no point of any curve or marker under the legend
        for line in ax.get_lines():
            points = line.get_transform().transform(line.get_xydata())
            inside = points[
                (points[:, 0] >= frame.x0) & (points[:, 0] <= frame.x1)
                & (points[:, 1] >= frame.y0) & (points[:, 1] <= frame.y1)
            ]  # fmt: skip
            covered = (
                (inside[:, 0] >= legend.x0) & (inside[:, 0] <= legend.x1)
                & (inside[:, 1] >= legend.y0) & (inside[:, 1] <= legend.y1)
            )  # fmt: skip
            assert not np.any(covered), f"{name}: the legend covers {line.get_label()}"
        # one line per τ*, each context named once
        taus = [line for line in ax.get_lines() if line.get_label().startswith("τ*")]
        xs = [line.get_xdata()[0] for line in taus]
        assert len(set(xs)) == len(xs), f"{name}: two τ* markers drawn at one place"
        named = [
            c for line in taus for c in line.get_label().split(" @ ")[1].split(" = ")[0].split(", ")
        ]
        assert sorted(named, key=lambda c: float(c.rstrip("k"))) == [
            tokens(c) for c in MARKER_CONTEXTS
        ], name
        merged += len(taus) < len(MARKER_CONTEXTS)
        # each τ* where the policy puts it at its contexts, at T = the replay's queueing delay
        for line in taus:
            at = line.get_label().split(" @ ")[1].split(" = ")[0].split(", ")
            for c in (c for c in MARKER_CONTEXTS if tokens(c) in at):
                assert line.get_xdata()[0] == run.decide(name, c, delay).ttl_s
                moved += run.decide(name, c, 0.0).ttl_s != run.decide(name, c, delay).ttl_s
        # ticks to read pauses by, their labels apart
        low, high = ax.get_xlim()
        shown = [t for t in ax.get_xticklabels() if low <= t.get_position()[0] <= high]
        assert len([t for t in shown if t.get_text() != "0"]) >= 4, (name, shown)
        boxes = [t.get_window_extent(renderer) for t in shown]
        for a, b in pairwise(boxes):
            assert not a.overlaps(b), f"{name}: two tick labels run into each other"
    assert merged, "no tool of the samples has two contexts of one τ*: the test tests nothing"
    assert moved, "no τ* of the samples depends on T: the markers' T is not tested"


def test_the_tools_table_and_the_tau_section_read_the_fit_and_the_bundle(
    sample_run: Path, sample_page: str
) -> None:
    """The tools table: the most frequent tool first, each figure from its own key, τ* at T =
    continuum's queueing delay; the τ* section's η, K and its count of tools on the
    all-tools curve (those with at most K pauses)."""
    run = load(sample_run)
    assert run.fit is not None and run.policy is not None
    ranked = ranked_tools(run.fit)
    t = next(r["queue_mean_s"] for r in run.results() if r["policy"] == "continuum")
    assert t > 0
    want = [
        [
            name,
            num(entry["n"]),
            num(entry["p50_s"]),
            num(entry["p90_s"]),
            num(entry["exponential"]["mean_s"]),
            num(entry["exponential"]["ks"]),
            "yes" if entry["trusted"] else "no",
            *(num(run.policy.decide(name, c, queue_delay_s=t).ttl_s) for c in MARKER_CONTEXTS),
        ]
        for name, entry in ranked[:MAX_ROWS]
    ]
    assert rows(section(sample_page, "cdfs")) == want
    counts = [int(entry["n"]) for _, entry in ranked]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]
    assert f"T (queueing delay) = {t:.3g} s" in section(sample_page, "cdfs")
    eta = run.fit["eta"]
    assert f"η = {num(eta['value'])} (95% interval {num(eta['ci_low'])} … " in sample_page
    k = run.policy.params.k
    shared = sum(int(entry["n"]) <= k for _, entry in ranked)
    assert 0 < shared < len(ranked)
    tau = section(sample_page, "tau")
    assert f"η = {run.policy.params.eta:.3g}, K = {k}. " in tau
    assert f"Tools with at most K pauses use the all-tools curve ({shared} of {len(ranked)})" in tau


def test_the_tau_section_counts_every_tool_on_its_own_curve(sample_run: Path) -> None:
    """Regression: of 30 tools, 15 with more than K pauses, the section said 18 used the
    all-tools curve: it counted the tools drawn (at most 12) as those with their own CDF."""
    run = load(sample_run)
    assert run.bundle is not None and run.fit is not None
    doc = copy.deepcopy(dict(run.bundle))
    tools = doc["fit"]["tools"]
    name, entry = ranked_tools(doc["fit"])[0]
    k = doc["fit"]["k"]
    assert entry["n"] > k
    tools.update({f"{name}-{i}": copy.deepcopy(entry) for i in range(MAX_TOOL_PLOTS + 2)})
    run.policy, run.fit = bundle.policy_from(doc), doc["fit"]
    ranked = ranked_tools(run.fit)
    shared = sum(int(e["n"]) <= k for _, e in ranked)
    assert len(ranked) - shared > MAX_TOOL_PLOTS
    said = f"use the all-tools curve ({shared} of {len(ranked)})"
    assert said in tau_section(run)


def test_the_tau_chart_has_a_panel_at_t_0_and_at_the_queueing_delay(sample_run: Path) -> None:
    run = load(sample_run)
    t = run.queue_delay_s
    assert t > 0
    with patch.object(Axes, "set_title", autospec=True, side_effect=Axes.set_title) as title:
        tau_section(run)
    assert [c.args[1] for c in title.call_args_list] == ["T = 0 s", f"T = {t:.3g} s"]
