"""A fit: η and each tool's pause distribution."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ttlctl.cli.render.cells import secs, show
from ttlctl.nouns import counted

if TYPE_CHECKING:
    from fitting.fit_doc import FitDoc


def fit_table(console: Console, fit: FitDoc) -> None:
    eta = fit["eta"]
    inp = fit["input"]
    ci = (
        # the interval in the value's digits: at .2f a low bound equal to the value (0.9795)
        # printed above it ("η = 0.979 (95% CI 0.98 …")
        f" (95% CI {eta['ci_low']:.3f} … {eta['ci_high']:.3f})"
        if eta.get("ci_low") is not None
        else ""
    )
    value = (
        "undefined (too few distinct program lengths)"
        if eta["value"] is None
        else (f"{eta['value']:.3f}")
    )
    console.print(
        f"{counted(inp['programs'], 'program')}, {counted(inp['calls'], 'call')}, "
        f"{counted(inp['pauses'], 'tool pause')}"
        " (calls naming a tool with a recorded tool_s or gap_s; "
        f"{inp['abandoned_pauses']:,} longer than {fit['config']['abandon_s']:g} s set aside)",
        highlight=False,
    )
    console.print(f"η = {value}{ci} over {counted(eta['programs'], 'program')}; K = {fit['k']}")
    asked, drawn = fit["config"]["bootstrap"], eta["bootstrap"]
    if ci and 0 < drawn < asked:
        console.print(
            f"η's interval from {drawn:,} resamples, not the {asked:,} asked: with "
            f"{eta['programs']:,} programs the bootstrap bounds its draws",
            highlight=False,
        )
    table = Table(title="pause after each call, by tool")
    for col, justify in (
        ("tool", "left"),
        ("n", "right"),
        ("measured", "right"),
        ("p50", "right"),
        ("p90", "right"),
        ("p99", "right"),
        ("Exp mean", "right"),
        ("Exp KS", "right"),
        ("CDF pts", "right"),
        ("policy uses", "left"),
    ):
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    everything = fit["global"]  # None only in a bundle's empty fit
    rows = [
        *([("(all tools)", everything)] if everything is not None else []),
        *sorted(fit["tools"].items(), key=lambda kv: -kv[1]["n"]),
    ]
    for name, entry in rows:
        exp = entry.get("exponential")
        trusted = entry.get("trusted", True)
        style = None if trusted else "dim"
        table.add_row(
            escape(name),
            f"{entry['n']:,}",
            f"{entry['measured']:,}",
            secs(entry["p50_s"]),
            secs(entry["p90_s"]),
            secs(entry["p99_s"]),
            secs(exp["mean_s"] if exp else None),
            f"{exp['ks']:.2f}" if exp else "—",
            f"{len(entry['cdf']['x']):,}",
            "its CDF" if trusted or name == "(all tools)" else "all tools'",
            style=style,
        )
    show(console, table)
    console.print(
        f"policy uses: a tool with at most K = {fit['k']} samples is priced with the all-tools "
        "CDF (dimmed on a terminal)",
        highlight=False,
    )
