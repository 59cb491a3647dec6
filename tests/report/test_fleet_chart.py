"""The fleet chart draws what the replay's JSON says: each replica's engine-busy seconds
per policy, and the miss reasons stacked per policy; an edited document draws, not fails."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.patches import Rectangle

from ttlctl.report import build_report
from ttlctl.report.fleet_chart import MISSES, chart


def result(policy: str, busy: list[float], misses: dict[str, Any]) -> dict[str, Any]:
    return {
        "policy": policy,
        "per_replica": [
            {"replica": i, "engine_busy_s": b, "llm_calls": 1} for i, b in enumerate(busy)
        ],
        "miss_reasons": misses,
    }


def bars(ax: Any) -> list[tuple[float, float, float]]:
    """(x centre, bottom, height) of each bar, in drawing order."""
    return [
        (p.get_x() + p.get_width() / 2, p.get_y(), p.get_height())
        for p in ax.patches
        if isinstance(p, Rectangle)
    ]


def test_each_bar_is_a_figure_of_the_document() -> None:
    results = [
        result("vllm", [620.0, 590.0, 530.0], {"routed_elsewhere": 446, "never_pinned": 134}),
        result(
            "continuum",
            [570.0, 494.0, 545.0],
            {"routed_elsewhere": 448, "never_pinned": 18, "expired": 14, "evicted": 3},
        ),
    ]
    busy, misses = chart(results).axes
    drawn = bars(busy)
    # the policies in turn, replica by replica, the first policy left of the second
    assert [h for _, _, h in drawn] == [620.0, 590.0, 530.0, 570.0, 494.0, 545.0]
    assert all(drawn[i][0] < drawn[i + 3][0] < drawn[i + 1][0] for i in range(2))
    assert [t.get_text() for t in busy.get_xticklabels()] == ["0", "1", "2"]
    # a stack per policy, the reasons in MISSES' order from the bottom
    stacks = bars(misses)
    assert len(stacks) == len(MISSES) * len(results)
    for k, r in enumerate(results):
        mine = [(b, h) for x, b, h in stacks if round(x) == k]
        counts = [float(r["miss_reasons"].get(key, 0)) for key, _ in MISSES]
        assert [h for _, h in mine] == counts
        assert [b for b, _ in mine] == [sum(counts[:j]) for j in range(len(counts))]
    assert [t.get_text() for t in misses.get_legend().get_texts()] == [m for _, m in MISSES]


def test_the_misses_axis_starts_at_0_and_clears_the_tallest_stack() -> None:
    """Regression: the stacked bars' bottoms are sticky edges, which defeat the axis
    margin: the tallest stack (167 calls) touched the frame, and a fleet without a miss
    drew an axis from -0.06 to 0.06."""
    tall = {"never_pinned": 160, "routed_elsewhere": 7}
    _, misses = chart([result("vllm", [1.0], tall), result("b", [1.0], {"expired": 1})]).axes
    bottom, top = misses.get_ylim()
    assert bottom == 0 and top > 167 * 1.05
    _, none = chart([result("vllm", [1.0], {}), result("b", [1.0], {})]).axes
    assert none.get_ylim() == (0.0, 1.0)


def test_the_misses_axis_ticks_whole_calls() -> None:
    """A count axis: a fleet whose one miss is its tallest stack was ticked 0.0, 0.2 … 1.0."""
    for tallest in ({"expired": 1}, {}, {"routed_elsewhere": 3}):
        _, misses = chart([result("vllm", [1.0], tallest)]).axes
        FigureCanvasAgg(misses.figure).draw()
        ticks = [t for t in misses.get_yticks() if 0 <= t <= misses.get_ylim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), (tallest, ticks)


def test_an_edited_document_draws_what_it_can() -> None:
    results: list[dict[str, Any]] = [
        {"policy": "vllm", "per_replica": [{"engine_busy_s": "x"}, None, {}], "miss_reasons": 3},
        {"policy": None, "miss_reasons": {"expired": True, "evicted": 2}},
    ]
    busy, misses = chart(results).axes
    assert [h for _, _, h in bars(busy)] == [0.0, 0.0]
    assert [h for _, _, h in bars(misses)][-2:] == [0.0, 2.0]


def test_the_fleet_section_of_an_edited_replay_is_drawn(tmp_path: Path) -> None:
    router = {"name": "round-robin", "settings": {}, "replicas": 2}
    doc = {
        "results": [
            {"policy": "vllm", "router": router, "per_replica": 5, "miss_reasons": 3, "pins": 1},
            {"policy": "continuum", "router": router, "per_replica": [{"engine_busy_s": 2.0}]},
        ]
    }
    (tmp_path / "replay.json").write_text(json.dumps(doc))
    page = build_report(tmp_path)
    assert "behind <code>round-robin</code>" in page
    assert 'alt="each replica&#x27;s load' in page and "continuum: per replica" in page


def test_many_policies_keep_their_names_apart_and_their_colours_their_own() -> None:
    policies = [
        "vllm",
        "continuum",
        "static-ttl",
        "autellix",
        "infercept",
        "unlimited-kv",
        "oracle",
        "continuum-no-valve",
    ]
    results = [
        result(p, [500.0 + k, 480.0, 470.0, 460.0], {"routed_elsewhere": 40, "evicted": 3})
        for k, p in enumerate(policies)
    ]
    fig = chart(results)
    busy, misses = fig.axes
    policy_colours = {tuple(p.get_facecolor()) for p in busy.patches}
    reason_colours = {tuple(p.get_facecolor()) for p in misses.patches}
    assert len(policy_colours) == len(policies)
    assert not policy_colours & reason_colours  # a reason never looks like a policy
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in misses.get_xticklabels()]
    assert [t.get_text() for t in misses.get_xticklabels()] == policies
    for a, b in pairwise(boxes):
        assert not a.overlaps(b), "two policy names are drawn over each other"


def test_a_large_fleet_draws_a_line_per_policy_at_one_width(tmp_path: Path) -> None:
    """Past MAX_REPLICA_ROWS replicas the load panel is a line per policy over the replicas
    ranked busiest first, and the page's tables show the busiest and the least busy of the
    replicas that served calls. Regression: a bar per replica made a 1,000-replica fleet's
    figure 50,700 pixels wide (matplotlib refuses one past 65,535: 1,300 replicas of two
    policies failed the section), and the tables held a row per replica."""
    busy = [float(i % 97) for i in range(5000)]  # 52 replicas idle (busy 0)
    results = [
        result("vllm", busy, {"routed_elsewhere": 3}),
        result("continuum", busy[::-1], {"expired": 2}),
    ]
    for r in results:
        for p in r["per_replica"]:
            p["llm_calls"] = 1 if p["engine_busy_s"] else 0
    fig = chart(results)
    assert fig.get_size_inches()[0] < 15
    load = fig.axes[0]
    assert not bars(load)
    lines = load.get_lines()
    assert [list(line.get_ydata()) for line in lines] == [sorted(busy, reverse=True)] * 2
    # equal loads, one line over the other: their dashes differ, so both show
    assert lines[0].get_linestyle() != lines[1].get_linestyle()
    assert list(lines[0].get_xdata()) == list(range(1, 5001))
    assert load.get_xlabel() == "replicas, busiest first"
    (tmp_path / "replay.json").write_text(
        json.dumps({"results": [{**r, "router": {"name": "round-robin", "replicas": 5000}}
                                for r in results]})
    )  # fmt: skip
    page = build_report(tmp_path)
    assert (
        "vllm: per replica: of 5,000, the 12 busiest and the 12 least busy of those that "
        "served calls, the rest counted"
    ) in page
    assert page.count("… 5,000 more") == 0 and page.count("… 4,924 more") == 2
    assert page.count("… 52 served no call") == 2
    section = page[page.index("vllm: per replica") :]
    assert section.count("<tr>") == 2 * (24 + 2 + 1)  # rows, the two counts and the header


EIGHT = ("vllm", "program-fcfs", "static-ttl", "continuum", "infercept", "autellix", "oracle",
         "unlimited-kv")  # fmt: skip


def test_the_chart_fits_the_page_and_its_legends_hide_no_bar(tmp_path: Path) -> None:
    """Regression: the chart grew a quarter inch per bar, so 4 replicas of `--policy all`
    drew 1,660 pixels and 16 drew 4,060, which the page (1,240 pixels wide) showed shrunk
    to 30%, text and all; and the load panel's legend, inside it, hid the tallest bars (the
    one replica of a fleet of one, the last replicas of sixteen)."""
    for replicas in (1, 4, 16):
        results = [
            result(p, [900.0 - 10 * k] * replicas, {"never_pinned": 40 + k})
            for k, p in enumerate(EIGHT)
        ]
        fig = chart(results)
        assert fig.get_size_inches()[0] * fig.dpi <= 1240, replicas
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        renderer = canvas.get_renderer()
        for ax in fig.axes:  # each legend beside its panel, over no bar
            legend = ax.get_legend().get_window_extent(renderer)
            assert legend.x0 >= ax.get_window_extent(renderer).x1 - 1, replicas
            for patch in ax.patches:
                assert not legend.overlaps(patch.get_window_extent(renderer)), replicas
    router = {"name": "cache-aware", "settings": {}, "replicas": 16}
    doc = {"results": [{**r, "router": router} for r in results]}
    (tmp_path / "replay.json").write_text(json.dumps(doc))
    page = build_report(tmp_path)
    fleet = page[page.index('id="fleet"') :]
    width = int(fleet[fleet.index(' width="') + 8 :].split('"')[0])
    assert width <= 1240


def test_several_policies_fold_their_per_replica_tables(tmp_path: Path) -> None:
    """Up to two policies, each per-replica table stands open under its name; with more,
    each folds (eight policies of sixteen replicas were 128 rows between the sections) and
    a note says how to open them; every row is still in the page."""
    for count in (2, 3):
        results = [result(p, [10.0 + k, 20.0, 30.0], {"expired": 1}) for k, p in
                   enumerate(EIGHT[:count])]  # fmt: skip
        router = {"name": "round-robin", "settings": {}, "replicas": 3}
        (tmp_path / "replay.json").write_text(
            json.dumps({"results": [{**r, "router": router} for r in results]})
        )
        page = build_report(tmp_path)
        opened = page.count("<details open><summary>")
        folded = page.count("<details><summary>")
        assert (opened, folded) == ((2, 0) if count == 2 else (0, 3))
        assert ("click a policy to open its table" in page) == (count == 3)
        for p in EIGHT[:count]:
            assert f"<summary>{p}: per replica</summary><table>" in page
        section = page[page.index("<h3>Per replica</h3>") :]
        assert section.count("<tr>") == count * (3 + 1)  # every replica's row, and a header


def _labels_apart(fig: Any, ax: Any) -> None:
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels()]
    for a, b in pairwise(boxes):
        assert not a.overlaps(b), "two tick labels are drawn over each other"


def test_names_that_fit_upright_stand_upright() -> None:
    """Regression: past 12 replicas the load panel stood the replica numbers on end, and
    past 3 policies the misses panel its policy names, though 16 numbers and 8 names fit
    upright on a panel of the page's width."""
    results = [
        result(p, [900.0 - 10 * k] * 16, {"never_pinned": 40 + k}) for k, p in enumerate(EIGHT)
    ]
    fig = chart(results)
    busy, misses = fig.axes
    assert [t.get_text() for t in busy.get_xticklabels()] == [str(i) for i in range(16)]
    for ax in (busy, misses):
        assert {t.get_rotation() for t in ax.get_xticklabels()} == {0.0}
        _labels_apart(fig, ax)
    # names too wide for their slots still stand on end, apart
    for r in results:
        for p in r["per_replica"]:
            p["name"] = f"gpu-node-{p['replica']:02d}.rack"
    fig = chart(results)
    busy, misses = fig.axes
    assert {t.get_rotation() for t in busy.get_xticklabels()} == {90.0}
    _labels_apart(fig, busy)
    # side by side, eight names share a narrow panel: on end
    fig = chart([result(p, [1.0], {}) for p in EIGHT])
    assert {t.get_rotation() for t in fig.axes[1].get_xticklabels()} == {90.0}


def test_each_per_replica_column_reads_at_one_precision(tmp_path: Path) -> None:
    """Regression: the TTFT column read 0.53 beside 0.553 (three significant digits, the
    trailing zero dropped); each column now has the command line's precision."""
    r = result("vllm", [1234.5, 20.0, 3.25], {})
    values = zip(r["per_replica"], (0.53, 0.553, 1.5), (99.5, 1500.25, 0.5), strict=True)
    for rep, ttft, jct in values:
        rep.update(ttft_mean_s=ttft, jct_mean_s=jct, pins_made=1200, preemptions=0)
    router = {"name": "round-robin", "settings": {}, "replicas": 3}
    (tmp_path / "replay.json").write_text(json.dumps({"results": [{**r, "router": router}]}))
    section = build_report(tmp_path)
    section = section[section.index("<h3>Per replica</h3>") :]
    cells = [row.split('<td class="n">')[1:] for row in section.split("<tr>")[2:5]]
    got = [[c.split("</td>")[0] for c in row] for row in cells]
    assert [row[1:4] for row in got] == [
        ["1,234.5", "99.50", "0.530"],
        ["20.0", "1,500.25", "0.553"],
        ["3.2", "0.50", "1.500"],
    ]
    assert [row[-1] for row in got] == ["1,200"] * 3
