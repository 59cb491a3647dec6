"""A fleet replay for people: per policy, the router's outcome and each replica's load."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from replay.fleet.records import replica_labels
from ttlctl.cli.render.cells import dash
from ttlctl.nouns import counted

MISS_LABELS = {
    "routed_elsewhere": "routed elsewhere",
    "never_pinned": "never pinned",
    "expired": "expired",
    "released_by_valve": "valve",
    "evicted": "evicted",
}


def router_settings(router: Mapping[str, Any]) -> str:
    """The router's settings in one phrase, and how many replica URLs --worker-urls gave
    (the hashing routers place programs by them); "no settings" when neither."""
    parts = [f"{k}={'off' if v is None else v}" for k, v in router["settings"].items()]
    urls = router.get("worker_urls")
    if urls:
        parts.append(f"{counted(len(urls), 'worker URL')} from --worker-urls")
    return ", ".join(parts) or "no settings"


def fleet_tables(console: Console, results: Sequence[Mapping[str, Any]]) -> None:
    """The router's outcome per policy, then per-replica load."""
    if not results or "router" not in results[0]:
        return
    router = results[0]["router"]
    table = Table(
        title=f"fleet: {counted(router['replicas'], 'replica')} behind {router['name']} "
        f"({router_settings(router)})"
    )
    for col in (
        "policy",
        "load max/mean",
        "returned",
        "pins made",
        "pins wasted",
        *MISS_LABELS.values(),
    ):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for r in results:
        share = r.get("pins_wasted_share")
        misses = r["miss_reasons"]
        table.add_row(
            r["policy"],
            dash(r["load_balance"], ".2f"),
            "—" if r["returned_share"] is None else f"{r['returned_share']:.0%}",
            dash((r.get("pins") or {}).get("made"), ","),
            f"{r['pins_wasted']:,}" + ("" if share is None else f" ({share:.0%})"),
            *(f"{misses[k]:,}" for k in MISS_LABELS),
        )
    console.print(table)
    console.print("misses: follow-up calls whose prefix hit fell short of what they repeat")
    per = Table(title="per replica: calls, engine-busy seconds, prefix hits, preemptions")
    per.add_column("policy")
    for label in replica_labels(results[0]["per_replica"]):  # as-logged: the trace's names
        per.add_column(f"replica {escape(label)}", justify="right")
    for r in results:
        per.add_row(
            r["policy"],
            *(
                f"{p['llm_calls']:,} · {p['engine_busy_s']:,.0f} s · "
                + ("—" if p["prefix_hit_rate"] is None else f"{p['prefix_hit_rate']:.0%}")
                + f" · {p['preemptions']:,}"
                for p in r["per_replica"]
            ),
        )
    console.print(per)
