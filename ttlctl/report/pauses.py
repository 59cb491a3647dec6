"""The "Pause CDFs per tool" section: each frequent tool's pause CDF with its exponential
fit and the all-tools CDF, the τ* the bundle's policy picks at four context lengths, and
a table of every tool."""

from __future__ import annotations

from fitting.fit_doc import ToolFit
from ttlctl.plots import draw_cdf
from ttlctl.report.files import BUNDLE
from ttlctl.report.markup import absent, e, note, num, table
from ttlctl.report.png import figure, img, label, tokens
from ttlctl.report.rundir import MAX_TOOL_PLOTS, RunInputs, ranked_tools

#: tools listed in the table (the most frequent)
MAX_ROWS = 50
#: context lengths (tokens) of the τ* markers and columns
MARKER_CONTEXTS = (1_000, 8_000, 32_000, 128_000)
MARKER_COLOURS = ("#2ca02c", "#d62728", "#9467bd", "#8c564b")


def _plot(run: RunInputs, name: str, entry: ToolFit, everything: ToolFit | None) -> str:
    """One tool's CDF as a <figure>; empty when the tool has no pause."""
    cdf = entry["cdf"]
    if not cdf["x"]:
        return ""
    t_ref = run.queue_delay_s
    fig = figure(3.8, 2.9)
    ax = fig.subplots()
    upper = draw_cdf(ax, entry, everything)
    if run.policy is not None:
        for colour, context in zip(MARKER_COLOURS, MARKER_CONTEXTS, strict=True):
            d = run.decide(name, context, t_ref)
            upper = max(upper, d.ttl_s)
            ax.axvline(
                d.ttl_s,
                color=colour,
                ls=":",
                lw=1.6,
                label=f"τ* @ {tokens(context)} = {d.ttl_s:.3g} s ({d.source})",
            )
    positive = [float(v) for v in cdf["x"] if v > 0]
    low = min(positive) if positive else upper
    ax.set_xscale("symlog", linthresh=max(low, upper / 1e4, 1e-3))
    ax.set_xlim(0, upper * 1.02)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("pause after the call (s)")
    ax.set_ylabel("P(pause ≤ τ)")
    below = "" if entry.get("trusted", True) else "\n(≤ K pauses: τ* from all tools)"
    ax.set_title(label(name, 40) + below, fontsize=8.5)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=5.5, loc="lower right")
    alt = f"pause CDF of tool {name}"
    return f"<figure>{img(fig, alt)}<figcaption>{e(name)}</figcaption></figure>"


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
            f"tokens of context, with T (queueing delay) = {t_ref:.3g} s, no offload.</p>"
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
