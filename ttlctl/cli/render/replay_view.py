"""A replay: mean JCT per policy and the share of the vLLM → unlimited-KV gap closed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from replay.rejected import rejected_line
from ttlctl import gap
from ttlctl.cli.render.cells import dash, show
from ttlctl.percent import share

if TYPE_CHECKING:
    from replay.figures import PolicyResult


def replay_table(console: Console, results: list[PolicyResult], calls: int) -> None:
    table = Table(title="replay: mean JCT and the share of the vLLM → unlimited-KV gap closed")
    for col in (
        "policy",
        "programs",
        "calls",
        "JCT mean (s)",
        "JCT p50 (s)",
        "JCT p95 (s)",
        "TTFT mean (s)",
        "prefix hits",
        "preempt",
        "pinned tok·s",
        "gap closed",
        "sim calls/s",
    ):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for r in results:
        name = r["policy"] + (" *" if r.get("evaluation_only") else "")
        table.add_row(
            name,
            f"{r['programs']:,}",
            f"{r['llm_calls']:,}",
            dash(r["jct_mean_s"], ",.2f"),
            dash(r["jct_p50_s"], ",.2f"),
            dash(r["jct_p95_s"], ",.2f"),
            dash(r["ttft_mean_s"], ",.3f"),
            share(r["prefix_hit_rate"]),  # as the fleet's per-replica table shows it
            dash(r["preemptions"], ","),
            dash(r["pinned_token_seconds"], ",.0f"),
            share(r.get("gap_closed")),
            dash(r.get("sim_calls_per_s"), ",.0f"),
        )
    show(console, table)
    if gap.no_gap(results):
        console.print(gap.NO_GAP)
    if any(r.get("evaluation_only") for r in results):
        console.print(
            "* evaluation only: reads what no engine can know, or has memory no engine has"
        )
    # a live run's failed calls were told as it ended (with the server's first error)
    rejected = max((r["rejected_calls"] for r in results if not r.get("live")), default=0)
    if rejected:
        console.print(f"[yellow]{rejected_line(rejected, calls)}[/]")
