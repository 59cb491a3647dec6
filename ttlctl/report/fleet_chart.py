"""The "Fleet" section's chart, two panels side by side (one above the other where side
by side would pass the page's width), each legend beside its panel:

- each replica's engine-busy seconds, a bar per policy beside the others (an even fleet
  has bars of one height; the busiest replica sets load max/mean); past
  :data:`~replay.fleet.records.MAX_REPLICA_ROWS` replicas, a line per policy over the
  replicas ranked busiest first (a fleet of any size in a figure of one width: a bar per
  replica made a 1,000-replica fleet's figure 50,700 pixels wide, and matplotlib refuses
  one past 65,535);
- why follow-up calls missed the cache, a stacked bar per policy: routed elsewhere,
  never pinned, expired, released by the valve, evicted (the round-robin row of a pinning
  policy shows its waste as the "routed elsewhere" part).

Read defensively, as the section is: a missing or non-numeric figure counts as nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib import rcParams
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath
from matplotlib.ticker import MaxNLocator

from replay.fleet.records import MAX_REPLICA_ROWS, replica_labels
from ttlctl.report.markup import is_num
from ttlctl.report.png import PAGE_INCHES, figure, label

#: (miss_reasons key, legend) in the stacking order, bottom up
MISSES = (
    ("routed_elsewhere", "routed elsewhere"),
    ("never_pinned", "never pinned"),
    ("expired", "expired"),
    ("released_by_valve", "released by the valve"),
    ("evicted", "evicted"),
)
#: the reasons' fills: greys from dark to white, each with its own hatch, so that no
#: reason takes a colour of the policies (the left panel colours a policy by the palette's
#: C0, C1, …: with ten policies every palette colour is one)
MISS_COLOURS = ("#404040", "#808080", "#b0b0b0", "#dcdcdc", "#ffffff")
MISS_HATCHES = ("", "//", "..", "xx", "\\\\")
#: the bars of one replica take this much of its slot
GROUP_WIDTH = 0.8
#: the load panel: inches per bar (a policy's at one replica) and for the rest (its
#: axis labels and the legend beside it)
BAR_INCHES = 0.12
LOAD_FRAME_INCHES = 3.0
#: the misses panel: inches per policy's stack and for the rest (the legend beside it)
STACK_INCHES = 0.35
MISS_FRAME_INCHES = 2.6
#: replica names stand upright where each has this much room beside its width
LABEL_GAP_INCHES = 0.1


def number(value: Any) -> float:
    """A figure as the chart draws it: 0 when absent or not a number."""
    return float(value) if is_num(value) else 0.0


def replicas_of(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The result's per-replica records (those that are records)."""
    reps = result.get("per_replica")
    return [p for p in reps if isinstance(p, Mapping)] if isinstance(reps, list) else []


def record(value: Any) -> Mapping[str, Any]:
    """A sub-record of a result (``miss_reasons``, ``pins``): empty when it is not one."""
    return value if isinstance(value, Mapping) else {}


def upright(labels: Sequence[str], axis_inches: float) -> bool:
    """Whether ``labels``, one per slot of an axis ``axis_inches`` wide, fit upright: the
    widest, at the tick labels' size, with :data:`LABEL_GAP_INCHES` to spare. (A count
    alone stood 16 replica numbers on end on a panel of the page's width.)"""
    if not labels:
        return True
    size = FontProperties(size=rcParams["xtick.labelsize"])
    paths = TextToPath()
    widest = max(paths.get_text_width_height_descent(t, size, ismath=False)[0] for t in labels)
    return widest / 72 + LABEL_GAP_INCHES <= axis_inches / len(labels)


def _busy(ax: Axes, results: Sequence[Mapping[str, Any]], panel_inches: float) -> None:
    reps = replicas_of(results[0])
    if len(reps) > MAX_REPLICA_ROWS:
        _ranked(ax, results)
        return
    labels = [label(name, 12) for name in replica_labels(reps)]
    width = GROUP_WIDTH / len(results)
    for k, result in enumerate(results):
        busy = [number(p.get("engine_busy_s")) for p in replicas_of(result)]
        xs = [i - GROUP_WIDTH / 2 + (k + 0.5) * width for i in range(len(busy))]
        ax.bar(xs, busy, width, label=label(result.get("policy", "?"), 20), color=f"C{k % 10}")
    stand = not upright(labels, panel_inches - LOAD_FRAME_INCHES)
    ax.set_xticks(range(len(labels)), labels, rotation=90 if stand else 0)
    ax.set_xlabel("replica")
    ax.set_ylabel("engine busy (s)")
    ax.set_title("each replica's load")
    ax.margins(y=0.05)
    _legend_beside(ax)


def _legend_beside(ax: Axes) -> None:
    """The legend right of the panel, not in it: inside, it hid the tallest bars (of a
    fleet of one replica, or of the last replicas of sixteen)."""
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))


#: the load lines' dashes, one per policy in turn
LINE_STYLES = ("-", "--", ":", "-.")


def _ranked(ax: Axes, results: Sequence[Mapping[str, Any]]) -> None:
    """Each policy's replicas' engine-busy seconds, busiest first, as a line."""
    for k, result in enumerate(results):
        busy = sorted((number(p.get("engine_busy_s")) for p in replicas_of(result)), reverse=True)
        ranks = range(1, len(busy) + 1)
        ax.step(
            ranks,
            busy,
            where="mid",
            label=label(result.get("policy", "?"), 20),
            color=f"C{k % 10}",
            # policies of equal loads draw one line over another: each its own dash, so
            # the one beneath shows through
            linestyle=LINE_STYLES[k % len(LINE_STYLES)],
        )
    ax.set_xlabel("replicas, busiest first")
    ax.set_ylabel("engine busy (s)")
    ax.set_title("each replica's load")
    ax.set_ylim(bottom=0)
    ax.margins(y=0.05)
    _legend_beside(ax)


def _names(results: Sequence[Mapping[str, Any]]) -> list[str]:
    return [label(r.get("policy", "?"), 20) for r in results]


def _misses(ax: Axes, results: Sequence[Mapping[str, Any]], stand: bool) -> None:
    names = _names(results)
    bottoms = [0.0] * len(results)
    for j, (key, legend) in enumerate(MISSES):
        counts = [number(record(r.get("miss_reasons")).get(key)) for r in results]
        ax.bar(
            range(len(results)),
            counts,
            0.6,
            bottom=bottoms,
            label=legend,
            color=MISS_COLOURS[j],
            hatch=MISS_HATCHES[j],
            edgecolor="black",
            linewidth=0.5,
        )
        bottoms = [b + c for b, c in zip(bottoms, counts, strict=True)]
    ax.set_xticks(range(len(names)), names, rotation=90 if stand else 0)
    ax.set_ylabel("follow-up calls that missed")
    # set, not margins: the stacked bars' bottoms are sticky edges, so the tallest stack
    # would touch the frame, and a fleet with no misses would get an axis below 0
    tallest = max(bottoms, default=0.0)
    ax.set_ylim(0.0, 1.1 * tallest if tallest > 0 else 1.0)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: no 0.2 of a call
    ax.set_title("why follow-up calls missed the cache")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))


def chart(results: Sequence[Mapping[str, Any]]) -> Figure:
    """The fleet chart (see the module docstring) of results that share one fleet: the
    panels side by side where they fit the page's width, else one above the other, each
    of the page's width (a wider figure is shrunk to the page, its text with it: 16
    replicas of 8 policies drew 4,060 pixels, shown at 30%)."""
    replicas = len(replicas_of(results[0]))
    bars = replicas * len(results) if replicas <= MAX_REPLICA_ROWS else 0  # else lines
    left = max(6.0, BAR_INCHES * bars + LOAD_FRAME_INCHES)
    right = max(4.5, STACK_INCHES * len(results) + MISS_FRAME_INCHES)
    side = left + right <= PAGE_INCHES
    stand = not upright(_names(results), (right if side else PAGE_INCHES) - MISS_FRAME_INCHES)
    tall = 5.0 if stand else 4.0  # room for names on end
    if side:
        fig = figure(left + right, tall)
        busy, misses = fig.subplots(1, 2, gridspec_kw={"width_ratios": [left, right]})
    else:
        fig = figure(PAGE_INCHES, 4.0 + tall)
        busy, misses = fig.subplots(2, 1, gridspec_kw={"height_ratios": [4.0, tall]})
    _busy(busy, results, left if side else PAGE_INCHES)
    _misses(misses, results, stand)
    return fig
