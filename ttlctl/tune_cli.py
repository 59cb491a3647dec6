"""``ttlctl tune``: an Optuna study over the TTL policy's knobs, by replay (replay/tune.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ttlctl.clikit import UserError, err, fail, out, user_errors

#: held-back seeds start here (tuning seeds are 0 … --seeds − 1)
HOLDOUT_BASE = 1000


def tune(
    trace: Annotated[Path, typer.Argument(help="Canonical trace (Parquet) to tune on.")],
    fit: Annotated[Path, typer.Option("--fit", help="fit.json from `ttlctl fit` (η, CDFs).")],
    profile: Annotated[
        str, typer.Option("--profile", help="profile.json, or a shipped profile name.")
    ],
    output: Annotated[Path, typer.Option("-o", "--output", help="Bundle to write.")],
    trials: Annotated[
        int,
        typer.Option(
            help="Finished trials the study should have (a resumed study runs only the rest)."
        ),
    ] = 40,
    storage: Annotated[
        str | None,
        typer.Option(
            help="Optuna storage: any URL (sqlite:///f.db, postgresql+psycopg2://u:p@host/db) "
            "or a journal-file path (created if new). Default: a SQLite file next to -o."
        ),
    ] = None,
    study: Annotated[
        str | None,
        typer.Option(
            help="Study name (resumed if it exists). Default: derived from the inputs' hashes "
            "and the settings, so rerunning the same command resumes the same study."
        ),
    ] = None,
    workers: Annotated[
        int, typer.Option(help="Worker processes on this machine, all on one study.")
    ] = 1,
    seed: Annotated[
        int,
        typer.Option(
            help="Seed of the TPE sampler (each worker derives its own from it; give each "
            "machine sharing a study a different one)."
        ),
    ] = 0,
    jps: Annotated[
        list[float] | None,
        typer.Option(
            "--jps",
            help="A load: programs started per second (Poisson; not vLLM's per-request rate). "
            "Repeat for several.",
        ),
    ] = None,
    concurrency: Annotated[
        list[int] | None,
        typer.Option(
            "--concurrency",
            help="A load: programs kept live. Repeat for several. Without any --jps or "
            "--concurrency: a quarter and a half of the trace's programs (at most 64).",
        ),
    ] = None,
    seeds: Annotated[
        int, typer.Option(help="Seeds (program order, arrivals) each trial replays per load.")
    ] = 2,
    holdout_seeds: Annotated[
        int,
        typer.Option(help="Held-back seeds (never tuned on) for the final comparison and guard."),
    ] = 3,
    p95_max: Annotated[
        float | None,
        typer.Option(help="Constraint: the replays' mean p95 JCT (s) must stay at or under this."),
    ] = None,
    kv_tokens: Annotated[int, typer.Option(help="KV cache size in tokens.")] = 600_000,
    offload_tokens: Annotated[int, typer.Option(help="CPU offload tier in tokens (0: none).")] = 0,
    truncate: Annotated[
        bool, typer.Option(help="Clip prompts that do not fit instead of rejecting the call.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            help="Ship the tuned policy even if it does not beat stock vLLM on the held-back "
            "seeds (default: ship a bundle that never pins)."
        ),
    ] = False,
    summary: Annotated[
        Path | None,
        typer.Option(help="Study summary JSON for reports. Default: tune.json next to -o."),
    ] = None,
    heartbeat: Annotated[
        int,
        typer.Option(
            help="Seconds between a running trial's heartbeats (URL storages); a trial whose "
            "worker died is failed after twice that and retried."
        ),
    ] = 60,
) -> None:
    """Tune η, K, the T window, the pressure valve, the pin cap and a cold-start override
    by replay (objective: mean JCT), then write the best bundle.

    Each trial replays every load with every seed; bad trials are pruned early. The
    paper's defaults (η from the fit, K = 100) are the first trial, the same with the
    stall-only valve the second. Afterwards the
    best policy, the defaults, a never-pin policy and stock vLLM are replayed on
    held-back seeds; if the best policy does not beat stock vLLM there, the bundle
    written never pins (program FCFS only) unless --force.
    """
    import optuna

    from fitting.fit import file_sha256
    from profiles.shipped import resolve
    from replay import tune as tuner
    from replay.engine import EngineConfig
    from replay.run import Timing
    from replay.sim import ReplayConfig
    from replay.workload import load
    from ttlctl import __version__
    from ttlctl import bundle as bundle_mod
    from ttlctl.jsonio import write_atomic

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with user_errors():
        if trials < 1 or workers < 1 or seeds < 1 or holdout_seeds < 1:
            raise UserError("--trials, --workers, --seeds and --holdout-seeds must be >= 1")
        if heartbeat < 1:
            raise UserError("--heartbeat must be >= 1")
        if any(j <= 0 for j in jps or []) or any(c <= 0 for c in concurrency or []):
            raise UserError("--jps and --concurrency must be positive")
        fit_doc = _read_json(fit)
        prof, prof_path = resolve(profile)
        workload = load(trace)
        if not workload.programs:
            raise UserError(f"{trace}: no programs to replay")
        loads = [Timing(jps=j) for j in jps or []] + [
            Timing(concurrency=c) for c in concurrency or []
        ]
        if not loads:
            n = len(workload.programs)
            levels = sorted({max(1, min(64, n // 4)), max(1, min(64, n // 2))})
            loads = [Timing(concurrency=c) for c in levels]
        try:
            ctx = tuner.TuneContext(
                workload=workload,
                fit=fit_doc,
                profile=prof.to_json(),
                config=ReplayConfig(
                    engine=EngineConfig(kv_tokens=kv_tokens),
                    offload_tokens=offload_tokens,
                    truncate=truncate,
                ),
                loads=tuple(loads),
                seeds=tuple(range(seeds)),
                p95_max_s=p95_max,
            )
        except ValueError as exc:
            raise UserError(str(exc)) from None
        inputs = {
            "trace": file_sha256(trace),
            "fit": file_sha256(fit),
            "profile": file_sha256(prof_path),
        }
        name = study or tuner.default_study_name(ctx, inputs)
        store = tuner.Storage(storage or tuner.default_storage(output), heartbeat_s=heartbeat)
        sources = {
            "trace": {"path": str(trace), "sha256": inputs["trace"]},
            "fit": {"path": str(fit), "sha256": inputs["fit"]},
            "profile": {"path": str(prof_path), "sha256": inputs["profile"]},
        }
        err.print(
            f"study {escape(name)} in {escape(store.shown())}: {trials} trials, "
            f"{workers} worker(s), {len(loads)} load(s) × {seeds} seed(s) per trial",
            highlight=False,
        )
        progress = Progress(
            TextColumn("[bold]tuning"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=err,
            transient=True,
        )
        task = progress.add_task("trials", total=trials)
        try:
            with progress:
                result = tuner.tune(
                    ctx,
                    storage=store,
                    study_name=name,
                    trials=trials,
                    workers=workers,
                    seed=seed,
                    holdout_seeds=tuple(range(HOLDOUT_BASE, HOLDOUT_BASE + holdout_seeds)),
                    force=force,
                    inputs=inputs,
                    provenance={"inputs": sources, "ttlctl_version": __version__},
                    progress=lambda done, total: progress.update(task, completed=done),
                    stage=lambda text: progress.update(task, description=text),
                )
        except tuner.TuneError as exc:
            raise UserError(str(exc)) from None
        from fitting.policy import PolicyParams

        doc = bundle_mod.build(
            fit_doc,
            prof.to_json(),
            PolicyParams.from_json(result["shipped"]["policy"]),
            created=datetime.now(UTC).isoformat(timespec="seconds"),
            ttlctl_version=__version__,
            provenance={
                **sources,
                "trace_fitted": fit_doc.get("input", {}),
                "eta_fitted": (fit_doc.get("eta") or {}).get("value"),
                "tuning": tuner.provenance_of(result),
            },
        )
        bundle_mod.write(doc, output)
        summary_file = summary or tuner.summary_path(output)
        write_atomic(
            {**result, "bundle": {"path": str(output), "sha256": doc["sha256"]}, "inputs": sources},
            summary_file,
        )
    show(result)
    err.print(f"wrote {output} (sha256 {doc['sha256'][:12]}…) and {summary_file}", highlight=False)
    err.print("look at the study with:", highlight=False)
    err.print(f"  {result['commands']['dashboard']}", highlight=False, markup=False)
    err.print(f"  {result['commands']['best_trial']}", highlight=False, markup=False)


def show(result: dict[str, Any]) -> None:
    held = result["held_back"]
    counts = result["counts"]
    table = Table(title=f"held-back seeds {held['seeds']}: mean JCT (never used in tuning)")
    for col in ("policy", "JCT mean (s)", "JCT p95 (s)", "vs vLLM"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    vllm = held["vllm_jct_mean_s"]
    labels = {
        "vllm": "vllm (stock)",
        "default": "paper default",
        "never_pin": "never pin (program FCFS)",
        "tuned": f"tuned (trial {result['best']['number']})",
    }
    for key, label in labels.items():
        mean, p95 = held[f"{key}_jct_mean_s"], held[f"{key}_jct_p95_s"]
        table.add_row(
            label, f"{mean:.2f}", "—" if p95 is None else f"{p95:.2f}", f"{vllm / mean:.2f}x"
        )
    out.print(table)
    sem = held["diff_sem_vs_default_s"]
    noise = "" if sem is None else f" ± {sem:.2f}"
    out.print(
        f"tuned vs paper default: {held['gain_vs_default']:.3f}x "
        f"(Δ {held['diff_vs_default_s']:+.2f}{noise} s per replay)",
        highlight=False,
    )
    out.print(
        f"trials: {counts['complete']} complete, {counts['pruned']} pruned, "
        f"{counts['fail']} failed; best {json.dumps(result['best']['params'])}",
        highlight=False,
        markup=False,
    )
    if result["importance"]:
        top = ", ".join(f"{k} {v:.2f}" for k, v in list(result["importance"].items())[:4])
        out.print(f"importance: {top}", highlight=False)
    g = result["guard"]
    style = "green" if g["beats_vllm"] else "bold yellow"
    out.print(f"[{style}]{escape(g['message'])}[/]", highlight=False)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        fail(f"{path}: no such file")
    except json.JSONDecodeError as exc:
        fail(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})")
    if not isinstance(data, dict):
        fail(f"{path}: not a JSON object")
    return data
