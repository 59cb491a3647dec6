"""The "JCT per policy" section: the chart, the table of every policy's figures, and the
replay's settings.

The chart has two panels, because a JCT distribution's tail can be many times its mean
(a few programs run for an hour while most take minutes) and one linear axis then
flattens the means that the policies are compared by:

- above, on a linear axis from 0 scaled to the means and medians only: the mean JCT of
  each policy as a bar (its value written above it) and the median as a dot;
- below, on a log axis, policy under policy: the median, mean, p95 and p99 of each,
  joined by a line, so the tails can be read at any spread.

Evaluation-only bounds (they read what no engine can know) are hatched grey bars.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from replay.figures import PolicyResult
from ttlctl import gap
from ttlctl.nouns import listed
from ttlctl.report.markup import absent, kv, note, pct, table
from ttlctl.report.png import figure, img, label
from ttlctl.report.rundir import RunInputs
from ttlctl.report.ticks import log_ticks

#: the linear panel's top: this much above the largest mean or median
HEADROOM = 1.15
#: (key, legend, marker, colour) of the tail panel, bottom to top
TAIL_MARKS = (
    ("jct_p50_s", "p50", "o", "C0"),
    ("jct_mean_s", "mean", "D", "k"),
    ("jct_p95_s", "p95", "v", "C1"),
    ("jct_p99_s", "p99", "^", "C3"),
)
BOUND_GREY = "#cfcfcf"
#: the median dot's area (points²), and how far (points) a mean's label stands above
#: the bar or the dot, whichever is higher: the dot's radius and 2 points more
DOT_AREA = 18.0
LABEL_LIFT = math.sqrt(DOT_AREA) / 2 + 2.0
#: the tail's log axis: neighbouring ticks at least this share of it apart
TICKS_APART = 0.1


def _value(result: PolicyResult, key: str) -> float | None:
    """A positive, finite figure of ``result`` (None: absent, null or not a number)."""
    value = result.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _means(ax: Axes, results: Sequence[PolicyResult], names: list[str]) -> None:
    xs = list(range(len(results)))
    means = [_value(r, "jct_mean_s") for r in results]
    medians = [_value(r, "jct_p50_s") for r in results]
    bound = [bool(r.get("evaluation_only")) for r in results]
    heights = [m or 0.0 for m in means]
    ax.bar(xs, heights, color=[BOUND_GREY if b else "C0" for b in bound])
    hatched = [(x, h) for x, h, b in zip(xs, heights, bound, strict=True) if b]
    if hatched:
        ax.bar(*zip(*hatched, strict=True), color="none", hatch="//", edgecolor="0.3")
    dots = [(x, m) for x, m in zip(xs, medians, strict=True) if m is not None]
    if dots:
        px, py = [x for x, _ in dots], [m for _, m in dots]
        ax.scatter(px, py, marker="o", color="k", s=DOT_AREA, zorder=3)
    for x, mean, median in zip(xs, means, medians, strict=True):
        # whole seconds up to millions; past that as 1.2e+09 (an edited 1e300 was written
        # out in 301 digits, wider than the page, and the layout collapsed)
        text = (
            "—" if mean is None
            else f"{mean:,.3g}" if mean < 1000 or mean >= 1e7
            else f"{mean:,.0f}"
        )  # fmt: skip
        # above the bar and above its dot: a median above the mean (continuum's 249 over
        # 234) or just below it put the dot on the label
        ax.annotate(
            text, (x, max(mean or 0.0, median or 0.0)), xytext=(0, LABEL_LIFT),
            textcoords="offset points", ha="center", va="bottom", fontsize=7,
        )  # fmt: skip
    top = max([v for v in (*means, *medians) if v is not None], default=1.0)
    ax.set_ylim(0, top * HEADROOM)
    ax.set_xticks(xs, names, rotation=30, ha="right")
    ax.set_ylabel("JCT (s)")
    ax.set_title("mean (bars) and median (dots)", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    handles = [Patch(facecolor="C0", label="mean"), _marker("o", "k", "median (p50)")]
    if hatched:
        handles.append(
            Patch(facecolor=BOUND_GREY, hatch="//", edgecolor="0.3", label="evaluation-only")
        )
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _tails(ax: Axes, results: Sequence[PolicyResult], names: list[str]) -> None:
    xs = list(range(len(results)))
    for x, r in zip(xs, results, strict=True):
        values = [v for key, *_ in TAIL_MARKS if (v := _value(r, key)) is not None]
        if len(values) > 1:
            ax.plot([x, x], [min(values), max(values)], color="0.75", lw=1.2, zorder=1)
    # the marks some policy has (a replay of under 100 programs has no p99)
    drawn: list[tuple[str, str, str, str]] = []
    for mark in TAIL_MARKS:
        key, _, marker, colour = mark
        pts = [(x, v) for x, r in zip(xs, results, strict=True) if (v := _value(r, key))]
        if pts:
            px, py = [x for x, _ in pts], [v for _, v in pts]
            ax.scatter(px, py, marker=marker, color=colour, s=22, zorder=3)
            drawn.append(mark)
    ax.set_yscale("log")
    values = [v for r in results for key, *_ in TAIL_MARKS if (v := _value(r, key))]
    if values:
        # a span of under a decade had two labels (200 and 500): ticks to read values by
        low, high = min(values), max(values)
        # in decades, and the limits kept finite and positive: of an edited replay.json's
        # 1e-300 and 1e300 the ratio overflowed, and 1.7e308 padded was inf (no chart)
        span = math.log10(high) - math.log10(low)
        pad = 10 ** max(0.05 * span, math.log10(1.05))
        bottom, top = low / pad or low, min(high * pad, sys.float_info.max)
        ax.set_ylim(bottom, top)
        ax.yaxis.set_major_locator(FixedLocator(log_ticks(bottom, top, TICKS_APART)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.6g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(-0.5, len(results) - 0.5)
    ax.set_xticks(xs, names, rotation=30, ha="right")
    ax.set_ylabel("JCT (s), log scale")
    ax.set_title(f"the tail: {listed([mark for _, mark, *_ in drawn])}", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    handles = [_marker(m, c, name) for _, name, m, c in reversed(drawn)]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _marker(marker: str, colour: str, name: str) -> Line2D:
    return Line2D([], [], marker=marker, color=colour, ls="none", label=name)


def chart(results: Sequence[PolicyResult]) -> Figure:
    """The JCT chart of the replay's results (see the module docstring): the means above
    the tails, policy over policy; only the means when no result has a JCT figure."""
    names = [label(r.get("policy", "?"), 20) for r in results]
    tails = any(_value(r, key) for r in results for key, *_ in TAIL_MARKS)
    width = max(6.0, 0.9 * len(results) + 2)
    fig = figure(width, 6.8 if tails else 4.0)
    axes = fig.subplots(2 if tails else 1, 1, squeeze=False, sharex=True)[:, 0]
    _means(axes[0], results, names)
    if tails:
        _tails(axes[1], results, names)
        axes[0].tick_params(labelbottom=False)
    return fig


def section(run: RunInputs) -> str:
    if run.replay is None:
        return absent("replay.json")
    results = run.results()
    if not results:
        return note("replay.json holds no results.")
    rows = [
        (
            r.get("policy"),
            "bound" if r.get("evaluation_only") else "",
            r.get("jct_mean_s"),
            r.get("jct_p50_s"),
            r.get("jct_p95_s"),
            r.get("jct_p99_s"),
            pct(r.get("prefix_hit_rate")),
            r.get("preemptions"),
            r.get("pinned_token_seconds"),
            pct(r.get("gap_closed")),
        )
        for r in results
    ]
    headers = ("policy", "eval-only", "JCT mean", "p50", "p95", "p99")
    caveat = run.caveats.get("replay.json")
    parts = [note(f"replay.json {caveat}")] if caveat is not None else []
    parts += [
        "<p>Above: mean JCT per policy (bars, on a scale of the means) and the median "
        "(dots); below: the median, mean, p95 and p99 on a log scale. Hatched grey bars "
        "are evaluation-only bounds (they read what no engine can know). Gap closed: "
        "share of the vLLM → unlimited-KV mean-JCT gap.</p>",
        img(chart(results), "JCT per policy"),
        table(
            (*headers, "prefix hits", "preemptions", "pinned tok·s", "gap closed"),
            rows,
        ),
    ]
    if gap.no_gap(results):
        parts.append(note(gap.NO_GAP[0].upper() + gap.NO_GAP[1:] + "."))
    config = run.replay.get("config")
    if isinstance(config, dict):
        parts.append("<p>Replay configuration:</p>" + kv(config))
    return "".join(parts)
