"""A fleet replay for people: per policy, the router's outcome and each replica's load."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from replay.fleet.records import credit_phrase, replica_labels, shown_phrase, shown_replicas
from ttlctl.cli.render.cells import dash, show
from ttlctl.nouns import counted
from ttlctl.percent import share
from ttlctl.router_doc import NOT_MODELLED

MISS_LABELS = {
    "routed_elsewhere": "routed elsewhere",
    "never_pinned": "never pinned",
    "expired": "expired",
    "released_by_valve": "valve",
    "evicted": "evicted",
}


#: a settings phrase longer than this names only the settings that differ from the
#: router's defaults (Program scheduling has two dozen: the title ran to 900 characters)
SETTINGS_PHRASE_MAX = 120
#: settings a shortened phrase names whatever their value: Program scheduling's
#: ``calibration`` is ttlctl's choice of the router's coefficients, and its default
#: (``profile``, the replay's profile) is not the router's own (its reference ones)
NAMED_ALWAYS = frozenset({"calibration"})


def _phrases(settings: Mapping[str, Any]) -> list[str]:
    return [f"{k}={'off' if v is None else v}" for k, v in settings.items()]


def router_settings(router: Mapping[str, Any]) -> str:
    """The router's settings in one phrase (past :data:`SETTINGS_PHRASE_MAX` characters,
    those that differ from the router's defaults, the rest said to be at them), and how
    many replica URLs --worker-urls gave (the hashing routers place programs by them),
    and ``kv-aware``'s credit where it is off; "no settings" when none of them."""
    settings = router["settings"]
    parts = _phrases(settings)
    if len(", ".join(parts)) > SETTINGS_PHRASE_MAX:
        # here, not at the top: the serving install (typer and rich, no polars) imports
        # this package for `bundle` and `serve`, and the router models import the workload
        # (polars); a fleet replay being rendered has them
        from replay.fleet.routers import RouterSettings

        defaults = RouterSettings(router["name"]).resolved()
        changed = {
            k: v
            for k, v in settings.items()
            if k in NAMED_ALWAYS or k not in defaults or defaults[k] != v
        }
        parts = [
            *_phrases(changed),
            f"{'the rest' if changed else 'all'} at the router's defaults; --json has each",
        ]
    urls = router.get("worker_urls")
    if urls:
        parts.append(f"{counted(len(urls), 'worker URL')} from --worker-urls")
    uncredited = credit_phrase(router)
    if uncredited is not None:
        parts.append(uncredited)
    return ", ".join(parts) or "no settings"


def fleet_tables(console: Console, results: Sequence[Mapping[str, Any]]) -> None:
    """The router's outcome per policy, then each replica's load per policy (a row per
    replica: a fleet of any size reads at any width)."""
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
        wasted = r.get("pins_wasted_share")
        misses = r["miss_reasons"]
        table.add_row(
            r["policy"],
            dash(r["load_balance"], ".2f"),
            share(r["returned_share"]),
            dash((r.get("pins") or {}).get("made"), ","),
            f"{r['pins_wasted']:,}" + ("" if wasted is None else f" ({share(wasted)})"),
            *(f"{misses[k]:,}" for k in MISS_LABELS),
        )
    show(console, table)
    console.print("misses: follow-up calls whose prefix hit fell short of what they repeat")
    left_out = NOT_MODELLED.get(router["name"])
    if left_out:
        console.print(
            f"{router['name']}: not modelled: {', '.join(left_out)} (the real router "
            "runs them as its settings say; docs/replay.md)"
        )
    shown = [shown_replicas(r["per_replica"]) for r in results]
    per = Table(title="per replica")
    for col in ("policy", "replica", "calls", "engine busy (s)", "prefix hits", "preemptions"):
        per.add_column(col, justify="right" if col not in ("policy", "replica") else "left")
    labels = replica_labels(results[0]["per_replica"])  # as-logged: the trace's names
    for r, rows in zip(results, shown, strict=True):
        replicas = r["per_replica"]
        for n, row in enumerate(rows):
            last = n == len(rows) - 1
            policy = r["policy"] if n == 0 else ""
            if isinstance(row, str):  # the replicas left out
                per.add_row(policy, row, "", "", "", "", end_section=last)
                continue
            p = replicas[row]
            per.add_row(
                policy,
                escape(labels[row]),
                f"{p['llm_calls']:,}",
                f"{p['engine_busy_s']:,.1f}",
                share(p["prefix_hit_rate"]),
                f"{p['preemptions']:,}",
                end_section=last,
            )
    show(console, per)
    # under the table, as the misses' line (a title wraps at its width); said once when
    # every policy's rows are chosen alike, else per policy (one cut to the busiest and
    # least busy, another listed whole: a line for all would misstate one of them)
    phrases = [shown_phrase(r["per_replica"]) for r in results]
    if any(phrases):
        each = (
            phrases[0]
            if len(set(phrases)) == 1
            else "; ".join(
                f"{r['policy']}: {p or 'every replica, in order'}"
                for r, p in zip(results, phrases, strict=True)
            )
        )
        console.print(f"per replica: {each} (--json has each one)")
