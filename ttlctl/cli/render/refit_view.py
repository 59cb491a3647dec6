"""A refit's report: what was read, what changed, the replays and the verdict."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from replay.rejected import held_back_line
from ttlctl.cli.render.cells import dash, secs, show
from ttlctl.nouns import counted

#: tools shown in the tables (most pauses first); --json has them all
SHOWN_TOOLS = 20


def refit_report(console: Console, report: dict[str, Any]) -> None:
    """The report for people: what was read, what changed, the replays and the verdict."""
    ing = report["ingest"]
    flight = f", {ing['in_flight']:,} program(s) still in flight" if ing["in_flight"] else ""
    rejected = f", {ing['rejected']:,} record(s) rejected" if ing["rejected"] else ""
    console.print(
        f"log: {counted(ing['records'], 'record')} → {counted(ing['programs'], 'program')}, "
        f"{counted(ing['calls'], 'call')}"
        f"{flight}{rejected}",
        highlight=False,
    )
    for reason, count in sorted(ing["rejected_by_reason"].items(), key=lambda kv: -kv[1]):
        console.print(f"  {count:>8,}  {escape(reason)}", highlight=False)
    for item in ing["rejects_shown"]:
        where = item["file"] + (f": {item['record']}" if item["record"] else "")
        console.print(f"  e.g. {escape(where)}: {escape(item['reason'])}", highlight=False)
    if ing["rejects_path"]:
        console.print(f"  all rejects: {escape(ing['rejects_path'])}", highlight=False)
    fit = report["fit"]
    cfg = fit["config"]
    etas = f"{dash(fit['old']['eta'], '.3f')} → {dash(fit['new']['eta'], '.3f')}"
    console.print(
        f"fit: K {cfg['min_samples']}, abandon after {cfg['abandon_s']:g} s (the served bundle's "
        f"fit settings); η fitted {etas} (the policy keeps η {fit['policy_eta']:.3f})",
        highlight=False,
    )
    rows = report["tools"]
    shown = rows[:SHOWN_TOOLS] + rows[-1:] if len(rows) > SHOWN_TOOLS + 1 else rows
    _pauses(console, shown)
    _taus(console, shown, report["contexts"], report["queue_delay_s"])
    if len(shown) < len(rows):
        console.print(
            f"{len(rows) - len(shown):,} more tool(s) with fewer pauses: --json lists them all",
            highlight=False,
        )
    _jct(console, report)
    _verdict(console, report)


def _pauses(console: Console, rows: list[dict[str, Any]]) -> None:
    table = Table(title="pause after each call, by tool: served bundle → refitted")
    for col in ("tool", "count", "p50", "p90"):
        table.add_column(col, justify="left" if col == "tool" else "right", overflow="fold")
    for row in rows:
        old, new = row["old"], row["new"]
        table.add_row(
            _tool(row),
            _pair(f"{old['n']:,}", f"{new['n']:,}"),
            _pair(secs(old["p50_s"]), secs(new["p50_s"])),
            _pair(secs(old["p90_s"]), secs(new["p90_s"])),
            style="italic" if row["tool"] is None else None,
        )
    show(console, table)


def _taus(
    console: Console, rows: list[dict[str, Any]], contexts: list[int], queue_delay: float
) -> None:
    table = Table(
        title=f"τ* by context length: served → refitted (T = {queue_delay:g} s, a miss costs "
        "a prefill)"
    )
    table.add_column("tool", overflow="fold")
    for c in contexts:
        table.add_column(f"τ* @{c // 1000}k", justify="right")
    table.add_column("from", justify="left")
    for row in rows:
        old, new = row["old"], row["new"]
        table.add_row(
            _tool(row),
            *[_pair(secs(a), secs(b)) for a, b in zip(old["tau_s"], new["tau_s"], strict=True)],
            _pair(old["tau_source"][-1], new["tau_source"][-1]),
            style="italic" if row["tool"] is None else None,
        )
    show(console, table)


def _jct(console: Console, report: dict[str, Any]) -> None:
    rep = report["replay"]
    for line in report["sizing"]["lines"]:
        console.print(escape(line), highlight=False)
    engines = rep["engines"]
    if len(engines) > 1:
        # each replica: the programs whose first call it served, the calls it served; the
        # load is the fleet's (one population over all replicas), said once below
        for e in engines:
            console.print(
                f"  replica {escape(str(e['replica']))}: {counted(e['calls'], 'call')}, "
                f"{counted(e['programs'], 'program')} started there",
                highlight=False,
            )
    console.print(
        f"replay: {counted(rep['programs'], 'program')} ({counted(rep['calls'], 'call')})"
        + (
            ""
            if len(engines) == 1
            # the comma: "the replica that served it at 9 programs at a time" read as one
            else f" on {len(engines)} replicas, each call on the replica that served it,"
        )
        + f" at {_loads(rep['loads'])}"
        + (" over the fleet" if len(engines) > 1 else "")
        + f" ({escape(rep['load_source'])})"
        + f", seeds {rep['seeds']}{', truncate' if rep['truncate'] else ''}",
        highlight=False,
    )
    rejected = report["held_back"].get("rejected_calls")
    if rejected:
        console.print(
            f"[yellow]{escape(held_back_line(rejected, rep['calls']))}[/]",
            highlight=False,
        )
    table = Table(title="replayed JCT on the held-back seeds")
    for col in ("policy", "JCT mean (s)", "JCT p95 (s)", "vs vLLM"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    labels = {"old": "served bundle", "new": "refitted bundle", "vllm": "vllm (stock)"}
    jct = report["jct"]
    for key, label in labels.items():
        mean, p95 = jct[key]["mean_s"], jct[key]["p95_s"]
        table.add_row(
            label, f"{mean:,.2f}", dash(p95, ",.2f"), f"{jct['vllm']['mean_s'] / mean:.3f}x"
        )
    show(console, table)


def _loads(loads: list[dict[str, Any]]) -> str:
    return ", ".join(
        f"{v:g} jps" if k == "jps" else f"{counted(v, 'program')} at a time"
        for load in loads
        for k, v in load.items()
    )


def _verdict(console: Console, report: dict[str, Any]) -> None:
    g = report["guard"]
    action = report["action"]
    style = "green" if g["shipped"] == "new" else "bold yellow"
    console.print(f"[{style}]{escape(g['message'])}[/]", highlight=False)
    sha = report["new_bundle_sha256"][:12]
    target = escape(report["target"])
    said = {
        "replaced": f"replaced {target} (sha256 {sha}…); a server watching it reloads it",
        "written": f"wrote {target} (sha256 {sha}…)",
        "would replace": f"dry run: would replace {target}; nothing written",
        "would write": f"dry run: would write {target}; nothing written",
        "kept": f"kept: {escape(report['bundle']['path'])} is unchanged",
    }[action]
    console.print(f"[bold]{said}[/]", highlight=False)
    if report.get("previous_kept"):
        console.print(
            f"the bundle it replaced is kept in {escape(report['previous_kept'])}: "
            f"`ttlctl bundle rollback {target}` puts it back",
            highlight=False,
        )


def _tool(row: dict[str, Any]) -> str:
    # markup off: tool names come from untrusted logs
    return "(any other tool)" if row["tool"] is None else escape(row["tool"])


def _pair(old: str, new: str) -> str:
    return old if old == new else f"{old} → {new}"
