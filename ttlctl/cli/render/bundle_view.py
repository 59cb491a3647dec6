"""A bundle: its policy, profile and τ* per tool and context."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ttlctl.cli.render.cells import secs, show

if TYPE_CHECKING:
    from fitting.policy import TTLPolicy
    from ttlctl.bundle_doc import Bundle


def bundle_table(
    console: Console,
    doc: Bundle,
    policy: TTLPolicy,
    contexts: tuple[int, ...],
    queue_delay: float,
    offload: bool,
) -> None:
    params = doc["policy"]
    prof = doc["profile"]
    console.print(
        f"bundle sha256 {doc['sha256'][:16]}…  ttlctl {doc['ttlctl_version']}  "
        f"created {doc['created']}"
    )
    cold = params["cold_start_ttl_s"]
    console.print(
        f"profile {prof['name']} ({prof['model']} on {prof['device']}, "
        f"{prof['source'].get('kind', '?')})  η {params['eta']:.3f}  K {params['k']}  "
        f"valve {params['valve']}  pin cap {params['pin_cap']:.0%}  T window {params['t_window']}  "
        f"cold start τ {'ln B' if cold is None else secs(cold)}"
    )
    if not params["pins"]:
        console.print(
            "[bold yellow]pins off:[/] this bundle never pins (τ* 0 for every tool and "
            "context: program FCFS only)"
        )
    miss = "reload" if offload else "prefill"
    table = Table(title=f"τ* by context length (T = {queue_delay:g} s, a miss costs a {miss})")
    table.add_column("tool", overflow="fold")
    table.add_column("samples", justify="right")
    table.add_column("p50", justify="right")
    table.add_column("p90", justify="right")
    for c in contexts:
        table.add_column(f"τ* @{c // 1000}k", justify="right")
    table.add_column("from", justify="left")
    fit = doc["fit"]
    rows = [*sorted(fit["tools"].items(), key=lambda kv: -kv[1]["n"])]
    for name, entry in rows:
        decisions = [
            policy.decide(name, c, offload=offload, queue_delay_s=queue_delay) for c in contexts
        ]
        table.add_row(
            escape(name),
            f"{entry['n']:,}",
            secs(entry.get("p50_s")),
            secs(entry.get("p90_s")),
            *[secs(d.ttl_s) for d in decisions],
            decisions[-1].source,
        )
    g = fit.get("global") or {"n": 0}
    others = [policy.decide(None, c, offload=offload, queue_delay_s=queue_delay) for c in contexts]
    table.add_row(
        "(any other tool)",
        f"{g['n']:,}",
        secs(g.get("p50_s")),
        secs(g.get("p90_s")),
        *[secs(d.ttl_s) for d in others],
        others[-1].source,
        style="italic",
    )
    show(console, table)
    # B as the decisions above price it: T from --queue-delay-seconds, η 1 in cold start
    benefit = ", ".join(
        f"{c // 1000}k: {secs(d.benefit_s)}" for c, d in zip(contexts, others, strict=True)
    )
    console.print(f"benefit B of a kept context (rebuild cost + T·η): {benefit}")
