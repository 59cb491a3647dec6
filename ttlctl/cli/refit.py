"""``ttlctl refit``: an engine log (or any trace) and the bundle in service → the next
bundle, swapped in only when it beats the served one in replay (replay/refit.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from ttlctl.cli.kit import UserError, err, out, user_errors
from ttlctl.cli.render import secs

#: tools shown in the tables (most pauses first); --json has them all
SHOWN_TOOLS = 20


def refit(
    logs: Annotated[
        list[Path],
        typer.Argument(help="Engine log(s) (TTLCTL_LOG), or any logs `ttlctl ingest` reads."),
    ],
    bundle: Annotated[
        Path,
        typer.Option(
            "--bundle",
            help="The bundle in service (the server's TTLCTL_BUNDLE): its policy parameters "
            "and profile are kept, and it is replaced when the refitted bundle beats it.",
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            help="Write the new bundle here instead of over --bundle (still only when it "
            "beats the bundle in service).",
        ),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="Input format, as `ttlctl ingest --format`: auto (detect per file), "
            "engine-log, canonical, claude-code, …",
        ),
    ] = "auto",
    skip_bad: Annotated[
        bool,
        typer.Option(
            "--skip-bad",
            help="Leave bad records out instead of stopping at the first: counted by reason, "
            "the first shown, all in BUNDLE.rejects.jsonl (beside --trace's file with --trace; "
            "none with --dry-run).",
        ),
    ] = False,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            help="Keep the ingested trace here (Parquet), with --skip-bad its rejects beside "
            "it (PATH.rejects.jsonl). Default: a temporary file.",
        ),
    ] = None,
    concurrency: Annotated[
        list[int] | None,
        typer.Option(
            "--concurrency",
            help="A load: programs kept live. Repeat for several. Without any --jps or "
            "--concurrency: the log's mean concurrency.",
        ),
    ] = None,
    jps: Annotated[
        list[float] | None,
        typer.Option(
            "--jps", help="A load: programs started per second (Poisson). Repeat for several."
        ),
    ] = None,
    seeds: Annotated[
        int, typer.Option(help="Held-back seeds (1000, 1001, …) each load is replayed with.")
    ] = 3,
    kv_tokens: Annotated[
        int | None,
        typer.Option(
            help="KV cache size in tokens. Default: as recorded in the bundle (its tuning or "
            "last refit), else 600,000."
        ),
    ] = None,
    offload_tokens: Annotated[
        int | None,
        typer.Option(help="CPU offload tier in tokens. Default: as recorded, else 0."),
    ] = None,
    truncate: Annotated[
        bool | None,
        typer.Option(
            "--truncate/--no-truncate",
            help="Clip prompts that do not fit instead of rejecting the call. Default: as "
            "recorded, else no.",
        ),
    ] = None,
    queue_delay: Annotated[
        float, typer.Option(help="T (s) assumed for the τ* columns (0: a fresh engine's).")
    ] = 0.0,
    force: Annotated[
        bool,
        typer.Option(help="Replace the bundle even when the new one does not beat it."),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Judge and report only: no bundle is written (nor --output)."
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the report as one JSON document on stdout.")
    ] = False,
) -> None:
    """Refit the served bundle from an engine log; replace it only if the new one is faster.

    Ingest the log (any format `ttlctl ingest` reads), fit it with the bundle's fit
    settings, rebuild the bundle with the same policy parameters and profile, replay the
    served bundle, the new one and stock vLLM on the log's programs (held-back seeds 1000,
    1001, …), and replace the bundle atomically only when the new one has the lower mean
    JCT (the guard of `ttlctl tune`; a tie keeps the served bundle). A server watching the
    file reloads it.

    Bad input stops the run (exit 2, naming the file and record) unless --skip-bad. A kept
    bundle is not an error: exit 0, with the reason.
    """
    # imported when the command runs: `ttlctl --help` and the light commands stay light
    from replay.policy_runs import Load
    from replay.refit import refit as run_refit
    from replay.refit_settings import HELD_BACK_FROM, RefitSettings

    with user_errors():
        if seeds < 1:
            raise UserError("--seeds must be >= 1")
        if any(j <= 0 for j in jps or []) or any(c <= 0 for c in concurrency or []):
            raise UserError("--jps and --concurrency must be positive")
        if kv_tokens is not None and kv_tokens <= 0:
            raise UserError("--kv-tokens must be positive")
        if offload_tokens is not None and offload_tokens < 0:
            raise UserError("--offload-tokens must be >= 0")
        if not queue_delay >= 0:
            raise UserError("--queue-delay must be >= 0")
        settings = RefitSettings(
            fmt=fmt,
            skip_bad=skip_bad,
            trace=trace,
            loads=tuple(
                [Load(jps=j) for j in jps or []] + [Load(concurrency=c) for c in concurrency or []]
            ),
            seeds=tuple(range(HELD_BACK_FROM, HELD_BACK_FROM + seeds)),
            kv_tokens=kv_tokens,
            offload_tokens=offload_tokens,
            truncate=truncate,
            queue_delay_s=queue_delay,
            force=force,
        )
        with err.status("refitting…") as status:
            report = run_refit(
                logs,
                bundle,
                settings,
                output=output,
                dry_run=dry_run,
                stage=lambda text: status.update(f"refit: {text}"),
            )
    if as_json:
        sys.stdout.write(json.dumps(report, indent=1) + "\n")
        return
    show(report)


def show(report: dict[str, Any]) -> None:
    """The report for people: what was read, what changed, the replays and the verdict."""
    ing = report["ingest"]
    flight = f", {ing['in_flight']:,} program(s) still in flight" if ing["in_flight"] else ""
    rejected = f", {ing['rejected']:,} record(s) rejected" if ing["rejected"] else ""
    out.print(
        f"log: {ing['records']:,} records → {ing['programs']:,} programs, {ing['calls']:,} calls"
        f"{flight}{rejected}",
        highlight=False,
    )
    for reason, count in sorted(ing["rejected_by_reason"].items(), key=lambda kv: -kv[1]):
        out.print(f"  {count:>8,}  {escape(reason)}", highlight=False)
    for item in ing["rejects_shown"]:
        where = item["file"] + (f": {item['record']}" if item["record"] else "")
        out.print(f"  e.g. {escape(where)}: {escape(item['reason'])}", highlight=False)
    if ing["rejects_path"]:
        out.print(f"  all rejects: {escape(ing['rejects_path'])}", highlight=False)
    fit = report["fit"]
    cfg = fit["config"]
    etas = f"{_num(fit['old']['eta'], '.3f')} → {_num(fit['new']['eta'], '.3f')}"
    out.print(
        f"fit: K {cfg['min_samples']}, abandon after {cfg['abandon_s']:g} s (the served bundle's "
        f"fit settings); η fitted {etas} (the policy keeps η {fit['policy_eta']:.3f})",
        highlight=False,
    )
    rows = report["tools"]
    shown = rows[:SHOWN_TOOLS] + rows[-1:] if len(rows) > SHOWN_TOOLS + 1 else rows
    _pauses(shown)
    _taus(shown, report["contexts"], report["queue_delay_s"])
    if len(shown) < len(rows):
        out.print(
            f"{len(rows) - len(shown):,} more tool(s) with fewer pauses: --json lists them all",
            highlight=False,
        )
    _jct(report)
    _verdict(report)


def _pauses(rows: list[dict[str, Any]]) -> None:
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
    out.print(table)


def _taus(rows: list[dict[str, Any]], contexts: list[int], queue_delay: float) -> None:
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
    out.print(table)


def _jct(report: dict[str, Any]) -> None:
    rep = report["replay"]
    loads = ", ".join(
        f"{v:g} jps" if k == "jps" else f"{v} programs at a time"
        for load in rep["loads"]
        for k, v in load.items()
    )
    out.print(
        f"replay: {rep['programs']:,} programs ({rep['calls']:,} calls) at {loads} "
        f"({escape(rep['load_source'])}), seeds {rep['seeds']}, KV {rep['engine']['kv_tokens']:,} "
        f"tokens{', truncate' if rep['truncate'] else ''} (engine settings: "
        f"{rep['settings_from']})",
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
            label, f"{mean:.2f}", _num(p95, ".2f"), f"{jct['vllm']['mean_s'] / mean:.3f}x"
        )
    out.print(table)


def _verdict(report: dict[str, Any]) -> None:
    g = report["guard"]
    action = report["action"]
    style = "green" if g["shipped"] == "new" else "bold yellow"
    out.print(f"[{style}]{escape(g['message'])}[/]", highlight=False)
    sha = report["new_bundle_sha256"][:12]
    target = escape(report["target"])
    said = {
        "replaced": f"replaced {target} (sha256 {sha}…); a server watching it reloads it",
        "written": f"wrote {target} (sha256 {sha}…)",
        "would replace": f"dry run: would replace {target}; nothing written",
        "would write": f"dry run: would write {target}; nothing written",
        "kept": f"kept: {escape(report['bundle']['path'])} is unchanged",
    }[action]
    out.print(f"[bold]{said}[/]", highlight=False)


def _tool(row: dict[str, Any]) -> str:
    # markup off: tool names come from untrusted logs
    return "(any other tool)" if row["tool"] is None else escape(row["tool"])


def _pair(old: str, new: str) -> str:
    return old if old == new else f"{old} → {new}"


def _num(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)
