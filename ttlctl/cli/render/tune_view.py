"""A study: the held-back comparison, the trials and the guard's verdict."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ttlctl.cli.render.cells import show


def tune_table(console: Console, result: dict[str, Any]) -> None:
    held = result["held_back"]
    counts = result["counts"]
    is_live = result.get("mode") == "live"
    if is_live:
        title = (
            f"live, held-back programs ({len(held.get('programs', []))}), seeds "
            f"{held['seeds']}: mean JCT (never used in tuning)"
        )
        base, base_col = "never_pin", "vs never pin"
    else:
        title = f"held-back seeds {held['seeds']}: mean JCT (never used in tuning)"
        base, base_col = "vllm", "vs vLLM"
    table = Table(title=title)
    # a fleet: each policy's router (the stock stack's may not be the one tuned behind)
    routers = held.get("routers") or {}
    for col in (
        "policy",
        *(("router",) if routers else ()),
        "JCT mean (s)",
        "JCT p95 (s)",
        base_col,
    ):
        table.add_column(col, justify="left" if col in ("policy", "router") else "right")
    reference = held[f"{base}_jct_mean_s"]
    labels = {
        "vllm": "vllm (stock)",
        "default": "paper default",
        "never_pin": "never pin (program FCFS)" + (": the live baseline" if is_live else ""),
        "tuned": f"tuned (trial {result['best']['number']})",
    }
    for key, label in labels.items():
        if f"{key}_jct_mean_s" not in held:
            continue
        mean, p95 = held[f"{key}_jct_mean_s"], held[f"{key}_jct_p95_s"]
        router = routers.get(key.replace("_", "-"))
        table.add_row(
            label,
            *((escape(router["name"]) if router else "—",) if routers else ()),
            f"{mean:,.2f}",
            "—" if p95 is None else f"{p95:,.2f}",
            f"{reference / mean:.2f}x",
        )
    show(console, table)
    if is_live:
        console.print(escape(result["live"]["baseline_note"]), highlight=False)
        values = ", ".join(
            f"#{t['number']} {t['value']:,.2f} s" if t["value"] is not None else f"#{t['number']} —"
            for t in result["trials"]
        )
        console.print(f"live trials (mean JCT): {values}", highlight=False)
    sem = held["diff_sem_vs_default_s"]
    noise = "" if sem is None else f" ± {sem:.2f}"
    console.print(
        f"tuned vs paper default: {held['gain_vs_default']:.3f}x "
        f"(Δ {held['diff_vs_default_s']:+.2f}{noise} s per replay)",
        highlight=False,
    )
    console.print(
        f"trials: {counts['complete']} complete, {counts['pruned']} pruned, "
        f"{counts['fail']} failed; best {json.dumps(result['best']['params'])}",
        highlight=False,
        markup=False,
    )
    if result["importance"]:
        top = ", ".join(f"{k} {v:.2f}" for k, v in list(result["importance"].items())[:4])
        quantile = result.get("importance_quantile")
        among = (
            ""
            if quantile is None
            else f" (what the top {quantile * 100:.3g}% of {counts['complete']} completed "
            "trials share)"
        )
        console.print(f"importance{among}: {top}", highlight=False)
    elif result.get("importance_note"):
        console.print(f"importance: {escape(result['importance_note'])}", highlight=False)
    g = result["guard"]
    style = "green" if g.get("beats_baseline", g["beats_vllm"]) else "bold yellow"
    console.print(f"[{style}]{escape(g['message'])}[/]", highlight=False)
    for caveat in g.get("caveats", []):
        console.print(f"[bold yellow]note:[/] {escape(caveat)}", highlight=False)
