"""Rich rendering of command results for people (machines get ``--json``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:  # types only: rendering needs no polars
    from fitting.fit_doc import FitDoc
    from fitting.policy import TTLPolicy
    from ttlctl.bundle import Bundle
    from ttlctl.ingest.pipeline import IngestReport


def _num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def _pct_row(table: Table, label: str, stats: dict[str, Any]) -> None:
    table.add_row(
        label,
        _num(stats["count"]),
        _num(stats["p50"]),
        _num(stats["p90"]),
        _num(stats["p99"]),
        _num(stats["mean"]),
    )


def trace_summary(console: Console, summary: dict[str, Any], title: str = "trace") -> None:
    head = Table(title=f"{title}: {summary['programs']:,} programs, {summary['calls']:,} calls")
    head.add_column("quantity")
    for col in ("count", "p50", "p90", "p99", "mean"):
        head.add_column(col, justify="right")
    _pct_row(head, "calls per program", summary["calls_per_program"])
    _pct_row(head, "input tokens per call", summary["tokens"]["input_per_call"])
    _pct_row(head, "output tokens per call", summary["tokens"]["output_per_call"])
    _pct_row(head, "tool_s (measured tool time)", summary["tool_s"])
    _pct_row(head, "gap_s (idle before next call)", summary["gap_s"])
    _pct_row(head, "llm_s (call latency)", summary["llm_s"])
    console.print(head)
    tok = summary["tokens"]
    unknown = tok.get("reused_unknown_calls", 0)
    reused = f"reused {tok['reused']:,}" + (
        f" (not recorded for {unknown:,} calls: previous input + output assumed)" if unknown else ""
    )
    console.print(f"tokens: input {tok['input']:,}  output {tok['output']:,}  {reused}")
    tools = summary["tools"]
    if tools["distinct"]:
        table = Table(
            title=f"tools: {tools['distinct']} distinct, {tools['calls_with_tool']:,} calls"
        )
        table.add_column("tool", overflow="fold")
        table.add_column("calls", justify="right")
        table.add_column("timed", justify="right")
        table.add_column("tool_s p50", justify="right")
        table.add_column("gap_s p50", justify="right")
        for row in tools["top"]:
            table.add_row(
                # markup off: tool names come from untrusted logs
                _escape(row["tool"]),
                _num(row["calls"]),
                _num(row["timed"]),
                _num(row["tool_s_p50"]),
                _num(row["gap_s_p50"]),
            )
        console.print(table)
    else:
        console.print("tools: none named in this trace")


def _escape(text: str) -> str:
    return escape(text)


def ingest_report(console: Console, report: IngestReport) -> None:
    formats = ", ".join(f"{name} ×{n}" for name, n in sorted(report.formats().items()))
    console.print(f"read {len(report.files)} file(s): {formats}")
    if report.skipped:
        names = ", ".join(report.skipped[:5]) + (" …" if len(report.skipped) > 5 else "")
        console.print(f"skipped {len(report.skipped)} documentation file(s): {names}")
    mode = " (streaming)" if report.streamed else ""
    console.print(
        f"{report.records:,} records → {report.rows:,} calls written to {report.output}{mode}"
    )
    if report.in_flight:
        console.print(
            f"{report.in_flight:,} program(s) still in flight when the log was read: kept up to "
            "their last logged call (its tool and pause unknown)"
        )
    if report.rejects_path is not None:
        console.print(
            f"[bold yellow]{report.rejected:,} record(s) rejected[/] → {report.rejects_path}"
            if report.rejected
            else f"0 records rejected ({report.rejects_path} is empty)"
        )
        for reason, count in sorted(report.rejected_by_reason.items(), key=lambda kv: -kv[1]):
            console.print(f"  {count:>8,}  {_escape(reason)}")


def secs(value: float | None) -> str:
    if value is None:
        return "—"
    if value == 0:
        return "0"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s" if value < 100 else f"{value:,.0f} s"


def fit_table(console: Console, fit: FitDoc) -> None:
    eta = fit["eta"]
    inp = fit["input"]
    ci = (
        f" (95% CI {eta['ci_low']:.2f} … {eta['ci_high']:.2f})"
        if eta.get("ci_low") is not None
        else ""
    )
    value = (
        "undefined (too few distinct program lengths)"
        if eta["value"] is None
        else (f"{eta['value']:.3f}")
    )
    console.print(
        f"{inp['programs']:,} programs, {inp['calls']:,} calls, {inp['pauses']:,} tool pauses"
        f" ({inp['abandoned_pauses']:,} longer than {fit['config']['abandon_s']:g} s set aside)"
    )
    console.print(f"η = {value}{ci} over {eta['programs']:,} programs; K = {fit['k']}")
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
    ):
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    everything = fit["global"]  # None only in a bundle's empty fit
    rows = [
        *([("(all tools)", everything)] if everything is not None else []),
        *sorted(fit["tools"].items(), key=lambda kv: -kv[1]["n"]),
    ]
    for name, entry in rows:
        exp = entry.get("exponential")
        style = None if entry.get("trusted", True) else "dim"
        table.add_row(
            _escape(name),
            f"{entry['n']:,}",
            f"{entry['measured']:,}",
            secs(entry["p50_s"]),
            secs(entry["p90_s"]),
            secs(entry["p99_s"]),
            secs(exp["mean_s"] if exp else None),
            f"{exp['ks']:.2f}" if exp else "—",
            f"{len(entry['cdf']['x']):,}",
            style=style,
        )
    console.print(table)
    console.print("[dim]dim rows: at most K samples, the policy uses the all-tools CDF for them[/]")


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
    console.print(
        f"profile {prof['name']} ({prof['model']} on {prof['device']}, "
        f"{prof['source'].get('kind', '?')})  η {params['eta']:.3f}  K {params['k']}  "
        f"valve {params['valve']}  pin cap {params['pin_cap']:.0%}  T window {params['t_window']}"
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
            _escape(name),
            f"{entry['n']:,}",
            secs(entry.get("p50_s")),
            secs(entry.get("p90_s")),
            *[secs(d.ttl_s) for d in decisions],
            decisions[-1].source,
        )
    g = fit.get("global") or {"n": 0}
    decisions = [
        policy.decide(None, c, offload=offload, queue_delay_s=queue_delay) for c in contexts
    ]
    table.add_row(
        "(any other tool)",
        f"{g['n']:,}",
        secs(g.get("p50_s")),
        secs(g.get("p90_s")),
        *[secs(d.ttl_s) for d in decisions],
        decisions[-1].source,
        style="italic",
    )
    console.print(table)
    benefit = ", ".join(
        f"{c // 1000}k: {secs(policy.benefit(c, offload, policy.eta) + queue_delay * 0)}"
        for c in contexts
    )
    console.print(f"benefit B of a kept context (rebuild cost + T·η): {benefit}")
