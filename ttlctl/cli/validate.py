"""``ttlctl validate TRACE``: the simulator against real vLLM servers, metric by metric."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from profiles.shipped import resolve
from ttlctl.cli.kit import UserError, err, out, print_warning, user_errors
from ttlctl.jsonio import write_json

#: register with ``app.command("validate", context_settings=CONTEXT_SETTINGS)``: the
#: arguments after ``--`` go to the servers validate starts
CONTEXT_SETTINGS: dict[str, Any] = {"allow_extra_args": True}


def _urls(items: list[str]) -> dict[str, str]:
    urls: dict[str, str] = {}
    for item in items:
        name, sep, url = item.partition("=")
        if not sep or not name.strip() or not url.strip():
            raise UserError(
                f"--url takes POLICY=URL (e.g. vllm=http://127.0.0.1:8000), got {item!r}"
            )
        urls[name.strip()] = url.strip()
    return urls


def validate(
    ctx: typer.Context,
    trace: Annotated[Path, typer.Argument(help="Canonical trace (Parquet); keep it small.")],
    url: Annotated[
        list[str] | None,
        typer.Option(
            "--url",
            help="A running server per policy: vllm=URL (stock vLLM), continuum=URL "
            "(TTLScheduler with the bundle). Repeat it.",
        ),
    ] = None,
    engine_cmd: Annotated[
        str | None,
        typer.Option(
            help='Command that starts a vLLM OpenAI server (e.g. "python -m '
            'vllm.entrypoints.openai.api_server --model M --kv-cache-memory-bytes 8M"): '
            "validate starts it once per policy on 127.0.0.1, adding --host/--port and, "
            "for continuum, --scheduler-cls ttlctl.engine.TTLScheduler.",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="Shorthand for --engine-cmd 'python -m vllm.entrypoints.openai.api_server "
            "--model MODEL', with the arguments after `--`."
        ),
    ] = None,
    bundle: Annotated[
        Path | None,
        typer.Option(help="Bundle of continuum (default: a cold-start bundle, no fit)."),
    ] = None,
    policy: Annotated[
        list[str] | None,
        typer.Option("--policy", help="vllm and/or continuum (default: both)."),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(help="Profile for the simulator (default: measured from the first server)."),
    ] = None,
    programs: Annotated[int, typer.Option(help="Replay the trace's first N programs.")] = 8,
    repeats: Annotated[
        int,
        typer.Option(
            help="Live runs per policy, each in a fresh server; the simulator is compared "
            "with their mean, and the table shows their range."
        ),
    ] = 1,
    kv_tokens: Annotated[
        int | None,
        typer.Option(help="Simulated KV tokens (default: the server's, from /metrics)."),
    ] = None,
    max_num_seqs: Annotated[
        int, typer.Option(help="The servers' --max-num-seqs (vLLM's CPU default: 128).")
    ] = 128,
    max_num_batched_tokens: Annotated[
        int,
        typer.Option(help="The servers' --max-num-batched-tokens (vLLM's CPU default: 2048)."),
    ] = 2048,
    jps: Annotated[
        float | None,
        typer.Option(help="Programs started per second (Poisson) — not vLLM's per-request rate."),
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(help="Keep this many programs live (a new one when one ends).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of arrivals and fresh prompt tokens.")] = 0,
    idle_gap_cap: Annotated[
        float | None,
        typer.Option(
            "--trace-idle-gap-cap-seconds", help="Cap every recorded pause (AIPerf's flag)."
        ),
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds a live run may take.")] = 1800.0,
    startup_timeout: Annotated[
        float, typer.Option(help="Seconds a started server may take to become healthy.")
    ] = 600.0,
    work_dir: Annotated[
        Path | None, typer.Option(help="Server logs, bundle and results (default: a temp dir).")
    ] = None,
    save_result: Annotated[
        bool,
        typer.Option(
            "--save-result", help="Write vLLM's benchmark result JSON per live run (+ records)."
        ),
    ] = False,
    result_dir: Annotated[
        Path | None, typer.Option(help="Folder of --save-result (default: the work dir).")
    ] = None,
    label: Annotated[str | None, typer.Option(help="Prefix of the result files.")] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the comparison as JSON here ('-': stdout).")
    ] = None,
    backend: Annotated[
        str,
        typer.Option(help="Simulated side: fast (ttlctl's) or vllm (vLLM's scheduler in process)."),
    ] = "fast",
    async_scheduling: Annotated[
        bool,
        typer.Option("--async-scheduling", help="With --backend vllm: vLLM's async scheduling."),
    ] = False,
) -> None:
    """Replay a small trace in the simulator and against real servers; print the errors.

    Each policy runs in its own server (vllm: stock; continuum: the TTL scheduler),
    started here one after the other (--engine-cmd or --model, vLLM arguments after
    `--`) or already running (--url). The simulator is sized like the server and
    priced by a profile measured from it. Goals (reported): mean JCT within 10%,
    prefix-hit rate within 5 points, the same ranking.
    """
    # imported when the command runs: `ttlctl --help` and the light commands stay light
    from replay.policy_runs import Load
    from replay.validation import Sources
    from replay.validation import validate as run_validate
    from replay.vllmsim.backend import check_request
    from replay.workload import load
    from ttlctl.server.command import base_command

    extra = list(ctx.args)
    with user_errors():
        if jps is not None and concurrency is not None:
            raise UserError("give --jps or --concurrency, not both")
        if jps is not None and jps <= 0:
            raise UserError("--jps must be positive")
        if concurrency is not None and concurrency <= 0:
            raise UserError("--concurrency must be positive")
        if programs < 1:
            raise UserError("--programs must be at least 1")
        if repeats < 1:
            raise UserError("--repeats must be at least 1")
        if engine_cmd is not None and model is not None:
            raise UserError("give --engine-cmd or --model, not both")
        if extra and engine_cmd is None and model is None:
            raise UserError(
                f"unexpected arguments {shlex.join(extra)}: vLLM arguments after `--` need "
                "--model or --engine-cmd"
            )
        base: list[str] | None = None
        model_config: dict[str, Any] | None = None
        if model is not None:
            base = base_command(model, extra)
            model_config = _local_config(model)
        elif engine_cmd is not None:
            base = shlex.split(engine_cmd) + extra
            if not base:
                raise UserError("--engine-cmd is empty")
        names = [n.strip() for p in (policy or ["vllm,continuum"]) for n in p.split(",")]
        names = [n for n in names if n]
        check_request(backend, names, async_scheduling=async_scheduling)
        prof = resolve(profile)[0] if profile is not None else None
        workload = load(trace)
        if not workload.programs:
            raise UserError(f"{trace}: no programs to replay")
        sources = Sources(urls=_urls(url or []), base_cmd=base, startup_timeout_s=startup_timeout)
        with err.status("validating…") as status:
            doc = run_validate(
                workload,
                sources,
                policies=names,
                bundle=bundle,
                profile=prof,
                kv_tokens=kv_tokens,
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens,
                timing=Load(jps=jps, concurrency=concurrency, seed=seed),
                seed=seed,
                max_programs=programs,
                repeats=repeats,
                model_config=model_config,
                idle_gap_cap_s=idle_gap_cap,
                timeout_s=timeout,
                work_dir=work_dir,
                save_result=save_result,
                result_dir=result_dir,
                label=label,
                progress=lambda message: status.update(f"validating: {message}"),
                warn=print_warning,
                backend=backend,
                async_scheduling=async_scheduling,
            )
        doc["trace"] = str(trace)
        if json_out is not None:
            if str(json_out) == "-":
                sys.stdout.write(json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n")
                return
            write_json(json.loads(json.dumps(doc, default=str)), json_out)
    show(doc)
    if json_out is not None:
        err.print(f"wrote {json_out}")


def _local_config(model: str) -> dict[str, Any] | None:
    """The config.json of a model given as a local folder (None: a hub name, or none)."""
    path = Path(model) / "config.json"
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a readable JSON config ({exc})") from None
    return doc if isinstance(doc, dict) else None


def _value(kind: str, metric: str, v: Any) -> str:
    if v is None:
        return "—"
    if metric == "prefix_hit_rate":
        return f"{v:.1%}"
    if metric == "preemptions":
        return f"{v:,.0f}"
    return f"{v:.3f} s"


def _error(kind: str, e: Any) -> str:
    if e is None:
        return "—"
    if kind == "relative":
        return f"{e:+.1%}"
    if kind == "points":
        return f"{e:+.1f} pt"
    return f"{e:+,.0f}"


def _range(kind: str, metric: str, span: Any) -> str:
    if not span:
        return "—"
    return f"{_value(kind, metric, span[0])} – {_value(kind, metric, span[1])}"


def show(doc: dict[str, Any]) -> None:
    # imported when the table is shown: `ttlctl --help` and the light commands stay light
    from replay.validation import COMPARED

    repeats = int(doc.get("config", {}).get("repeats") or 1)
    runs = f", {repeats} live runs per policy" if repeats > 1 else ""
    table = Table(
        title=f"validate: simulator vs live, {doc['programs']} programs, {doc['calls']} calls"
        + runs
    )
    live_col = "live (mean)" if repeats > 1 else "live"
    cols = ["metric", "policy", "simulated", live_col, "error (sim − live)"]
    if repeats > 1:
        cols.append("live range")
    for col in cols:
        table.add_column(col, justify="left" if col in ("metric", "policy") else "right")
    for i, (key, label, kind) in enumerate(COMPARED):
        for name in doc["policies"]:
            row = next(r for r in doc["rows"][name] if r["metric"] == key)
            cells = [
                label if name == doc["policies"][0] else "",
                name,
                _value(kind, key, row["sim"]),
                _value(kind, key, row["live"]),
                _error(kind, row["error"]),
            ]
            if repeats > 1:
                cells.append(_range(kind, key, row.get("live_range")))
            table.add_row(
                *cells,
                end_section=name == doc["policies"][-1] and i < len(COMPARED) - 1,
            )
    out.print(table)
    rank = doc["ranking"]
    if len(doc["policies"]) > 1:
        same = {True: "the same", False: "DIFFERENT", None: "unknown"}[rank["same"]]
        out.print(
            f"ranking by mean JCT (≈: within {rank['tie_within']:.0%}): simulator "
            f"{_order(rank['sim'])}, live {_order(rank['live'])}: {same}",
            highlight=False,
        )
    for name, goal in doc["goals"].items():
        jct = {True: "yes", False: "no", None: "—"}[goal["jct_within_10pct"]]
        hit = {True: "yes", False: "no", None: "—"}[goal["hit_rate_within_5_points"]]
        out.print(
            f"{name}: mean JCT within 10%: {jct}; prefix-hit rate within 5 points: {hit}",
            highlight=False,
        )
    p95 = [r for rows in doc["rows"].values() for r in rows if r["metric"] == "jct_p95_s"]
    if any(r["sim"] is None or r["live"] is None for r in p95):
        out.print("p95 JCT needs at least 20 finished programs", highlight=False)
    err.print(f"profile: {doc['profile']['source']}; work dir: {doc['work_dir']}", highlight=False)


def _order(groups: list[list[str]] | None) -> str:
    return "?" if groups is None else " < ".join(" ≈ ".join(g) for g in groups)
