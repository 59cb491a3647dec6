"""``ttlctl tune``: an Optuna study over the TTL policy's knobs, by replay (replay/tune/):
in the simulator (the fast default) or, with ``--live URL --live-bundle PATH``, against a
vLLM server running the TTL scheduler."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from fitting.eta import fitted as eta_fitted
from fitting.policy import PolicyParams
from profiles.shipped import resolve
from ttlctl import __version__
from ttlctl import bundle as bundle_mod
from ttlctl.cli.kit import (
    UserError,
    err,
    out,
    print_warning,
    progress_bar,
    user_errors,
)
from ttlctl.jsonio import file_sha256, write_json

#: held-back seeds start here (tuning seeds are 0 … --seeds − 1)
HOLDOUT_BASE = 1000
#: the plugin's TTLCTL_BUNDLE_CHECK_S default (ttlctl/engine/watch.py)
DEFAULT_CHECK_S = 2.0


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
    live: Annotated[
        str | None,
        typer.Option(
            help="Run each trial as a short live replay against the vLLM server at this URL "
            "(`ttlctl serve`: the TTL scheduler) instead of the simulator. Needs --live-bundle.",
            rich_help_panel="Live tuning",
        ),
    ] = None,
    live_bundle: Annotated[
        Path | None,
        typer.Option(
            help="With --live: the bundle file the server was started with (TTLCTL_BUNDLE, "
            "`ttlctl serve --bundle`). Each trial's bundle is written over it (the plugin "
            "reloads it); at the end it holds the bundle written to -o.",
            rich_help_panel="Live tuning",
        ),
    ] = None,
    live_programs: Annotated[
        int,
        typer.Option(
            help="With --live: programs of each live run (the trace's first N); the held-back "
            "comparison replays the next N.",
            rich_help_panel="Live tuning",
        ),
    ] = 8,
    live_check_s: Annotated[
        float,
        typer.Option(
            help="With --live: the server's TTLCTL_BUNDLE_CHECK_S. After writing a bundle the "
            "tuner waits max(2 × this, 2 s) and sends one request, whose arrival makes the "
            "plugin load it.",
            rich_help_panel="Live tuning",
        ),
    ] = DEFAULT_CHECK_S,
    live_timeout: Annotated[
        float,
        typer.Option(
            help="With --live: seconds one live run may take (then it counts as failed).",
            rich_help_panel="Live tuning",
        ),
    ] = 900.0,
    idle_gap_cap: Annotated[
        float | None,
        typer.Option(
            "--trace-idle-gap-cap-seconds",
            help="Cap every recorded pause (AIPerf's flag), as `ttlctl replay` does.",
        ),
    ] = None,
    backend: Annotated[
        str,
        typer.Option(help="Simulator: fast (ttlctl's) or vllm (vLLM's scheduler, in process)."),
    ] = "fast",
    async_scheduling: Annotated[
        bool,
        typer.Option("--async-scheduling", help="With --backend vllm: vLLM's async scheduling."),
    ] = False,
) -> None:
    """Tune η, K, the T window, the pressure valve, the pin cap and a cold-start override
    by replay (objective: mean JCT), then write the best bundle.

    Each trial replays every load with every seed; bad trials are pruned early. The
    paper's defaults (η from the fit, K = 100) are the first trial, the same with the
    stall-only valve the second. Afterwards the
    best policy, the defaults, a never-pin policy and stock vLLM are replayed on
    held-back seeds; if the best policy does not beat stock vLLM there, the bundle
    written never pins (program FCFS only) unless --force.

    With --live URL --live-bundle PATH each load × seed of a trial is one live run of
    --live-programs programs against the server, after the trial's bundle was written to
    PATH and reloaded by the plugin; one trial at a time, no pruning. The held-back
    comparison replays the tuned, default and never-pin bundles live on the next
    programs; the never-pin bundle is the baseline there (the server runs the TTL
    scheduler, so stock vLLM is not measured). PATH ends up holding the bundle written.
    """
    # imported when the command runs: `ttlctl --help` and the light commands stay light
    import optuna

    from replay import tune as tuner
    from replay.live import cap_pauses
    from replay.policy_runs import Load
    from replay.scheduler import SimSchedulerConfig
    from replay.sim import ReplayConfig
    from replay.vllmsim.backend import check_request
    from replay.workload import load

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with user_errors():
        if trials < 1 or workers < 1 or seeds < 1 or holdout_seeds < 1:
            raise UserError("--trials, --workers, --seeds and --holdout-seeds must be >= 1")
        if heartbeat < 1:
            raise UserError("--heartbeat must be >= 1")
        if any(j <= 0 for j in jps or []) or any(c <= 0 for c in concurrency or []):
            raise UserError("--jps and --concurrency must be positive")
        check_live(live, live_bundle, workers, live_programs, live_check_s, live_timeout)
        if idle_gap_cap is not None and idle_gap_cap < 0:
            raise UserError("--trace-idle-gap-cap-seconds must be >= 0")
        check_request(
            backend,
            ("vllm", "program-fcfs", "continuum"),
            async_scheduling=async_scheduling,
            offload_tokens=offload_tokens,
            fast_only={"--live": live is not None},
        )
        fit_doc = bundle_mod.read_fit(fit)
        prof, prof_path = resolve(profile)
        workload = cap_pauses(load(trace), idle_gap_cap)
        if not workload.programs:
            raise UserError(f"{trace}: no programs to replay")
        loads = [Load(jps=j) for j in jps or []] + [
            Load(concurrency=c) for c in concurrency or []
        ]
        if not loads and live is not None:
            # one live load: half the programs of a run kept live
            loads = [Load(concurrency=max(1, min(live_programs, len(workload.programs)) // 2))]
        if not loads:
            n = len(workload.programs)
            levels = sorted({max(1, min(64, n // 4)), max(1, min(64, n // 2))})
            loads = [Load(concurrency=c) for c in levels]
        target = None
        if live is not None:
            assert live_bundle is not None
            target = tuner.LiveTarget(
                url=live,
                bundle=live_bundle,
                programs=live_programs,
                check_s=live_check_s,
                timeout_s=live_timeout,
                warn=once(print_warning),
            )
        ctx = tuner.TuneContext(
            workload=workload,
            fit=fit_doc,
            profile=prof.to_json(),
            config=ReplayConfig(
                engine=SimSchedulerConfig(kv_tokens=kv_tokens),
                offload_tokens=offload_tokens,
                truncate=truncate,
            ),
            loads=tuple(loads),
            seeds=tuple(range(seeds)),
            p95_max_s=p95_max,
            live=target,
            idle_gap_cap_s=idle_gap_cap,
            backend=backend,
            async_scheduling=async_scheduling,
        )
        inputs = {
            "trace": file_sha256(trace),
            "fit": file_sha256(fit),
            "profile": file_sha256(prof_path),
        }
        name = study or tuner.default_study_name(ctx, inputs)
        store = tuner.Storage(storage or tuner.default_storage(output), heartbeat_s=heartbeat)
        sources: bundle_mod.Provenance = {
            "trace": {"path": str(trace), "sha256": inputs["trace"]},
            "fit": {"path": str(fit), "sha256": inputs["fit"]},
            "profile": {"path": str(prof_path), "sha256": inputs["profile"]},
        }
        err.print(
            f"study {escape(name)} in {escape(store.shown())}: {trials} trials, "
            f"{workers} worker(s), {len(loads)} load(s) × {seeds} seed(s) per trial",
            highlight=False,
        )
        if target is not None:
            err.print(
                f"live: each replay is one run of {live_programs} program(s) against "
                f"{escape(live or '')}, after its bundle is written to {escape(str(live_bundle))} "
                f"(then {target.wait_s:g} s and one request, so the plugin has loaded it)",
                highlight=False,
            )
        progress = progress_bar("tuning")
        task = progress.add_task("trials", total=trials)
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
        doc = bundle_mod.assemble(
            fit_doc,
            prof.to_json(),
            PolicyParams.from_json(result["shipped"]["policy"]),
            {
                **sources,
                "trace_fitted": fit_doc.get("input", {}),
                "eta_fitted": eta_fitted(fit_doc),
                "tuning": tuner.provenance_of(result),
            },
        )
        bundle_mod.write(doc, output)
        if live_bundle is not None and live_bundle.resolve() != output.resolve():
            bundle_mod.write(doc, live_bundle)  # the server serves it from its next request on
        summary_file = summary or tuner.summary_path(output)
        write_json(
            {**result, "bundle": {"path": str(output), "sha256": doc["sha256"]}, "inputs": sources},
            summary_file,
        )
    show(result)
    err.print(f"wrote {output} (sha256 {doc['sha256'][:12]}…) and {summary_file}", highlight=False)
    if live_bundle is not None:
        err.print(
            f"the server's bundle {live_bundle} now holds it too "
            f"({result['shipped']['which']}; loaded from the server's next request on)",
            highlight=False,
        )
    err.print("look at the study with:", highlight=False)
    err.print(f"  {result['commands']['dashboard']}", highlight=False, markup=False)
    err.print(f"  {result['commands']['best_trial']}", highlight=False, markup=False)


def show(result: dict[str, Any]) -> None:
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
    for col in ("policy", "JCT mean (s)", "JCT p95 (s)", base_col):
        table.add_column(col, justify="left" if col == "policy" else "right")
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
        table.add_row(
            label, f"{mean:.2f}", "—" if p95 is None else f"{p95:.2f}", f"{reference / mean:.2f}x"
        )
    out.print(table)
    if is_live:
        out.print(escape(result["live"]["baseline_note"]), highlight=False)
        values = ", ".join(
            f"#{t['number']} {t['value']:.2f} s" if t["value"] is not None else f"#{t['number']} —"
            for t in result["trials"]
        )
        out.print(f"live trials (mean JCT): {values}", highlight=False)
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
    style = "green" if g.get("beats_baseline", g["beats_vllm"]) else "bold yellow"
    out.print(f"[{style}]{escape(g['message'])}[/]", highlight=False)


def check_live(
    live: str | None,
    bundle: Path | None,
    workers: int,
    programs: int,
    check_s: float,
    timeout_s: float,
) -> None:
    """The live options' rules, each refusal one line."""
    if live is None:
        if bundle is not None:
            raise UserError("--live-bundle goes with --live URL (the server that reloads it)")
        return
    if bundle is None:
        raise UserError(
            "--live needs --live-bundle PATH: the bundle file the server was started with "
            "(TTLCTL_BUNDLE, `ttlctl serve --bundle`), which each trial overwrites"
        )
    if not bundle.is_file():
        raise UserError(
            f"{bundle}: no such file: --live-bundle is the bundle the server was started with"
        )
    if workers != 1:
        raise UserError("--live runs one trial at a time (one server): --workers must be 1")
    if programs < 1:
        raise UserError("--live-programs must be >= 1")
    if not check_s >= 0 or not timeout_s > 0:
        raise UserError("--live-check-s must be >= 0 and --live-timeout positive")


def once(say: Callable[[str], None]) -> Callable[[str], None]:
    """``say`` each distinct message once (a live study repeats the same server warnings)."""
    seen: set[str] = set()

    def emit(message: str) -> None:
        if message not in seen:
            seen.add(message)
            say(message)

    return emit

