"""A trace's summary and an ingest's report."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ttlctl.cli.render.cells import num, show
from ttlctl.nouns import counted

if TYPE_CHECKING:  # types only: rendering needs no polars
    from ttlctl.ingest.ingest_report import IngestReport


def _pct_row(table: Table, label: str, stats: dict[str, Any]) -> None:
    table.add_row(
        label,
        num(stats["count"]),
        num(stats["p50"]),
        num(stats["p90"]),
        num(stats["p99"]),
        num(stats["mean"]),
    )


def trace_summary(console: Console, summary: dict[str, Any], title: str = "trace") -> None:
    head = Table(
        title=f"{title}: {counted(summary['programs'], 'program')}, "
        f"{counted(summary['calls'], 'call')}"
    )
    head.add_column("quantity")
    for col in ("count", "p50", "p90", "p99", "mean"):
        head.add_column(col, justify="right")
    _pct_row(head, "calls per program", summary["calls_per_program"])
    _pct_row(head, "input tokens per call", summary["tokens"]["input_per_call"])
    _pct_row(head, "output tokens per call", summary["tokens"]["output_per_call"])
    _pct_row(head, "tool_s, s (measured tool time)", summary["tool_s"])
    _pct_row(head, "gap_s, s (idle before next call)", summary["gap_s"])
    _pct_row(head, "llm_s, s (call latency)", summary["llm_s"])
    show(console, head)
    tok = summary["tokens"]
    unknown = tok.get("reused_unknown_calls", 0)
    assumed = tok.get("reused_assumed")
    # an unrecorded reuse is no 0: say what the replay assumes for those calls
    guess = (
        f"{assumed:,} assumed for {counted(unknown, 'call')} that record"
        f"{'s' if unknown == 1 else ''} none (previous input + output)"
        if assumed is not None
        else f"not recorded for {counted(unknown, 'call')} (previous input + output assumed)"
    )
    if not unknown:
        reused = f"reused {tok['reused']:,}"
    elif unknown == summary["calls"]:
        reused = f"reused: {guess}"
    else:
        reused = f"reused {tok['reused']:,} recorded, {guess}"
    console.print(f"tokens: input {tok['input']:,}  output {tok['output']:,}  {reused}")
    tools = summary["tools"]
    if tools["distinct"]:
        paused = tools.get("calls_with_pause")
        fitted = (
            ""
            if paused is None
            else f"; {paused:,} of the calls, of {counted(tools['distinct_with_pause'], 'tool')}, "
            "with a pause (tool_s, else gap_s): what fit fits"
        )
        shown = len(tools["top"])
        table = Table(
            title=f"tools: {tools['distinct']} distinct, "
            f"{counted(tools['calls_with_tool'], 'call')}{fitted}",
            # the summary keeps the most called: say so, or the rows read as every tool
            caption=(
                f"the {shown} most called of {tools['distinct']} tools; `ttlctl fit` lists "
                "every tool with a pause"
                if shown < tools["distinct"]
                else None
            ),
        )
        table.add_column("tool", overflow="fold")
        table.add_column("calls", justify="right")
        table.add_column("timed", justify="right")
        table.add_column("paused", justify="right")
        table.add_column("tool_s p50 (s)", justify="right")
        table.add_column("gap_s p50 (s)", justify="right")
        for row in tools["top"]:
            table.add_row(
                # markup off: tool names come from untrusted logs
                escape(row["tool"]),
                num(row["calls"]),
                num(row["timed"]),
                num(row.get("paused")),
                num(row["tool_s_p50"]),
                num(row["gap_s_p50"]),
            )
        show(console, table)
    else:
        console.print("tools: none named in this trace")


def ingest_report(console: Console, report: IngestReport) -> None:
    formats = ", ".join(f"{name} ×{n}" for name, n in sorted(report.formats().items()))
    read = f"read {counted(len(report.files), 'file')}"
    console.print(read + (f": {formats}" if formats else ""))
    if report.skipped:
        names = ", ".join(report.skipped[:5]) + (" …" if len(report.skipped) > 5 else "")
        console.print(f"skipped {counted(len(report.skipped), 'documentation file')}: {names}")
    if report.outputs_skipped:
        names = ", ".join(report.outputs_skipped)
        files = counted(len(report.outputs_skipped), "file")
        console.print(f"skipped {files} this command writes (not read as logs): {names}")
    if report.others_skipped:
        names = ", ".join(report.others_skipped)
        entries = counted(len(report.others_skipped), "entry", "entries")
        console.print(f"skipped {entries} that are not files (not read): {names}")
    mode = " (streaming)" if report.streamed else ""
    console.print(
        f"{counted(report.records, 'record')} → {counted(report.rows, 'call')} written to "
        f"{report.output}{mode}"
    )
    if report.in_flight:
        console.print(
            f"{report.in_flight:,} program(s) still in flight when the log was read: kept up to "
            "their last logged call (its tool and pause unknown)"
        )
    if report.aborted:
        console.print(
            f"{report.aborted:,} call(s) aborted by the engine (the client went away): kept "
            "with the tokens they produced"
        )
    if report.reused_ids:
        console.print(
            f"{report.reused_ids:,} program id(s) used again after their program ended: read as "
            "new programs (<id>#2 …)"
        )
    if report.engines:
        replicas = sorted({str(e.get("replica")) for e in report.engines if e.get("replica")})
        named = f" of {len(replicas)} replica(s) ({escape(', '.join(replicas[:5]))}" + (
            " …)" if len(replicas) > 5 else ")"
        )
        console.print(
            f"the log states its engines' facts ({len(report.engines)} record(s)"
            f"{named if replicas else ''}): kept in the trace's metadata"
        )
    if report.rejects_path is not None:
        console.print(
            f"[bold yellow]{report.rejected:,} record(s) rejected[/] → {report.rejects_path}"
            if report.rejected
            else f"0 records rejected ({report.rejects_path} is empty)"
        )
        for reason, count in sorted(report.rejected_by_reason.items(), key=lambda kv: -kv[1]):
            console.print(f"  {count:>8,}  {escape(reason)}")
