"""The "Pause CDFs per tool" section: each frequent tool's pause CDF with its exponential
fit and the all-tools CDF, the τ* the bundle's policy picks at four context lengths, and
a table of every tool."""

from __future__ import annotations

import math

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from fitting.fit_doc import ToolFit
from ttlctl.plots import draw_cdf
from ttlctl.report.files import BUNDLE
from ttlctl.report.markup import absent, e, note, num, table
from ttlctl.report.png import figure, img, label, tokens
from ttlctl.report.rundir import MAX_TOOL_PLOTS, RunInputs, ranked_tools
from ttlctl.report.ticks import log_ticks

#: tools listed in the table (the most frequent)
MAX_ROWS = 50
#: context lengths (tokens) of the τ* markers and columns
MARKER_CONTEXTS = (1_000, 8_000, 32_000, 128_000)
MARKER_COLOURS = ("#2ca02c", "#d62728", "#9467bd", "#8c564b")
#: the figure's height per legend row (the legend is below the axes)
LEGEND_ROW_INCHES = 0.14
#: the pause axis: the linear part's width (below the smallest pause) in decades, and the
#: share of the axis that neighbouring tick labels stay apart
LINSCALE = 0.5
TICK_SHARE = 0.1


def _markers(run: RunInputs, name: str) -> list[tuple[str, float, str, list[int]]]:
    """The τ* markers of ``name``: (colour, τ*, source, contexts) per distinct τ* as the
    legend writes it, in the order of :data:`MARKER_CONTEXTS`. Contexts of one τ* share
    a line, coloured as the first of them: drawn apart, the later line hid the earlier
    (the 1k and the 8k marker at one 0.435 s showed only the 8k's colour)."""
    lines: dict[str, tuple[str, float, str, list[int]]] = {}
    for colour, context in zip(MARKER_COLOURS, MARKER_CONTEXTS, strict=True):
        d = run.decide(name, context, run.queue_delay_s)
        key = f"{d.ttl_s:.3g} s ({d.source})"
        lines.setdefault(key, (colour, d.ttl_s, d.source, []))[3].append(context)
    return list(lines.values())


def _pause_axis(ax: Axes, low: float, upper: float) -> None:
    """The symlog pause axis from 0 to ``upper``, linear below ``low``, ticked at 0 and at
    the values :func:`~ttlctl.report.ticks.log_ticks` picks above ``low``, written as
    plain numbers (matplotlib's own ticks were "0", 10⁻¹ and 10⁰ on most tools)."""
    linthresh = max(low, upper / 1e4, 1e-3)
    ax.set_xscale("symlog", linthresh=linthresh, linscale=LINSCALE)
    end = upper * 1.02
    ax.set_xlim(0, end)
    decades = math.log10(end / linthresh)
    # the linear part takes LINSCALE / (1 - 1/10) decades' width of the axis
    whole = decades + LINSCALE / 0.9
    ticks = log_ticks(linthresh, end, TICK_SHARE * whole / decades) if decades > 0 else []
    ax.xaxis.set_major_locator(FixedLocator([0.0, *ticks]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="x", labelsize=7.5)


def _plot(run: RunInputs, name: str, entry: ToolFit, everything: ToolFit | None) -> str:
    """One tool's CDF as a <figure>; empty when the tool has no pause."""
    fig = chart(run, name, entry, everything)
    if fig is None:
        return ""
    alt = f"pause CDF of tool {name}"
    return f"<figure>{img(fig, alt)}<figcaption>{e(name)}</figcaption></figure>"


def chart(run: RunInputs, name: str, entry: ToolFit, everything: ToolFit | None) -> Figure | None:
    """One tool's CDF with its fit, the all-tools CDF and the τ* markers; None when the
    tool has no pause."""
    cdf = entry["cdf"]
    if not cdf["x"]:
        return None
    markers = _markers(run, name) if run.policy is not None else []
    # the legend goes below the axes (inside, in the lower right, it hid the curves):
    # the figure grows by its rows
    fig = figure(3.8, 2.9 + LEGEND_ROW_INCHES * (3 + len(markers)))
    ax = fig.subplots()
    upper = draw_cdf(ax, entry, everything)
    for colour, ttl_s, source, contexts in markers:
        upper = max(upper, ttl_s)
        at = ", ".join(map(tokens, contexts))
        # above the frame: a τ* of 0 (no pin) lies on the left spine
        ax.axvline(
            ttl_s, color=colour, ls=":", lw=1.6, zorder=3,
            label=f"τ* @ {at} = {ttl_s:.3g} s ({source})",
        )  # fmt: skip
    # the log part starts at the smallest pause or τ*, so a τ* below every pause is read
    # against ticks too
    positive = [v for v in (*map(float, cdf["x"]), *(m[1] for m in markers)) if v > 0]
    _pause_axis(ax, min(positive) if positive else upper, upper)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("pause after the call (s)")
    ax.set_ylabel("P(pause ≤ τ)")
    below = "" if entry.get("trusted", True) else "\n(≤ K pauses: τ* from all tools)"
    ax.set_title(label(name, 40) + below, fontsize=8.5)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.22), frameon=False)
    return fig


def section(run: RunInputs) -> str:
    if run.fit is None:
        return absent(f"fit.json (nor a {run.names[BUNDLE]} with its fit)")
    fit, t_ref = run.fit, run.queue_delay_s
    parts = [f"<p>From {e(run.fit_source)}.</p>"]
    eta = fit.get("eta")
    if isinstance(eta, dict) and eta:
        parts.append(
            f"<p>η = {e(num(eta.get('value')))} (95% interval {e(num(eta.get('ci_low')))} "
            f"… {e(num(eta.get('ci_high')))}); K = {e(num(fit.get('k')))}: a tool needs "
            "more than K pauses before the policy uses its own CDF.</p>"
        )
    if run.policy is None:
        parts.append(absent(f"{run.names[BUNDLE]}: τ* markers not drawn"))
    else:
        parts.append(
            f"<p>Vertical lines: the bundle's τ* at {', '.join(map(tokens, MARKER_CONTEXTS))} "
            f"tokens of context, with T (queueing delay) = {t_ref:.3g} s, no offload (contexts of "
            "one τ* share a line).</p>"
        )
    ranked = ranked_tools(fit)
    everything = fit.get("global")
    figures = [_plot(run, name, entry, everything) for name, entry in ranked[:MAX_TOOL_PLOTS]]
    parts.append(f'<div class="grid">{"".join(figures)}</div>')
    if len(ranked) > MAX_TOOL_PLOTS:
        hidden = len(ranked) - MAX_TOOL_PLOTS
        parts.append(note(f"{hidden} less frequent tool(s) not plotted; see the table."))
    rows = []
    for name, entry in ranked[:MAX_ROWS]:
        exp = entry.get("exponential")
        taus = (
            [run.decide(name, c, t_ref).ttl_s for c in MARKER_CONTEXTS]
            if run.policy is not None
            else [None] * len(MARKER_CONTEXTS)
        )
        rows.append(
            (
                name,
                entry.get("n"),
                entry.get("p50_s"),
                entry.get("p90_s"),
                exp.get("mean_s") if isinstance(exp, dict) else None,
                exp.get("ks") if isinstance(exp, dict) else None,
                entry.get("trusted"),
                *taus,
            )
        )
    headers = ("tool", "n", "p50 s", "p90 s", "exp mean s", "KS", "trusted")
    parts.append(table((*headers, *(f"τ* @ {tokens(c)}" for c in MARKER_CONTEXTS)), rows))
    if len(ranked) > MAX_ROWS:
        parts.append(note(f"{len(ranked) - MAX_ROWS} more tool(s) not listed."))
    return "".join(parts)
