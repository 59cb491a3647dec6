"""``ttlctl tune``: an Optuna study over the TTL policy's knobs, by replay (replay/tune/):
in the simulator (the fast default) or, with ``--live URL --live-bundle PATH``, against a
vLLM server running the TTL scheduler. The options it alone takes:
:mod:`ttlctl.cli.tune_options`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from ttlctl.cli import render
from ttlctl.cli.kit import (
    check_format,
    check_outputs,
    err,
    given,
    once,
    out,
    print_warning,
    progress_bar,
    refuse_repeats,
    same_path,
    user_errors,
    write_doc,
)
from ttlctl.cli.options import (
    BACKEND,
    BLOCK_SIZE,
    CLIENT_TAGS_DEFAULT,
    KV_TOKENS,
    MAX_MODEL_LEN,
    MAX_NUM_BATCHED_TOKENS,
    MAX_NUM_SEQS,
    OFFLOAD_TOKENS,
    AsyncScheduling,
    Backend,
    ClientTags,
    ConcurrencyLoads,
    FitFile,
    IdleGapCap,
    JpsLoads,
    JsonTo,
    LoggedBlockSize,
    LoggedKvTokens,
    LoggedLongPrefillAdaptive,
    LoggedLongPrefillTokenThreshold,
    LoggedMaxModelLen,
    LoggedMaxNumBatchedTokens,
    LoggedMaxNumSeqs,
    LoggedWatermark,
    OffloadTokens,
    Profile,
    Trace,
    Truncate,
)
from ttlctl.cli.router_options import FleetReplicas, NoPrefixCredit, RouterNames, WorkerUrls
from ttlctl.cli.tune_options import (
    Force,
    Heartbeat,
    HoldoutSeeds,
    Live,
    LiveBundle,
    LiveCheck,
    LivePrograms,
    LiveTimeout,
    MinGain,
    Output,
    P95Max,
    SamplerSeed,
    Seeds,
    StorageUrl,
    Study,
    Trials,
    Workers,
)
from ttlctl.nouns import counted
from ttlctl.summary_name import summary_path

if TYPE_CHECKING:  # types only: the tuner is imported when the command runs
    from replay.tune.session import TuneSession


def tune(
    ctx: typer.Context,
    trace: Trace,
    fit: FitFile,
    profile: Profile,
    output: Output,
    trials: Trials = 40,
    storage: StorageUrl = None,
    study: Study = None,
    workers: Workers = 1,
    seed: SamplerSeed = 0,
    jps: JpsLoads = None,
    concurrency: ConcurrencyLoads = None,
    seeds: Seeds = 2,
    holdout_seeds: HoldoutSeeds = 3,
    p95_max: P95Max = None,
    kv_tokens: LoggedKvTokens = KV_TOKENS,
    block_size: LoggedBlockSize = BLOCK_SIZE,
    max_num_seqs: LoggedMaxNumSeqs = MAX_NUM_SEQS,
    max_num_batched_tokens: LoggedMaxNumBatchedTokens = MAX_NUM_BATCHED_TOKENS,
    max_model_len: LoggedMaxModelLen = MAX_MODEL_LEN,
    long_prefill_token_threshold: LoggedLongPrefillTokenThreshold = 0,
    long_prefill_token_threshold_adaptive: LoggedLongPrefillAdaptive = False,
    watermark: LoggedWatermark = 0.0,
    offload_tokens: OffloadTokens = OFFLOAD_TOKENS,
    truncate: Truncate = False,
    force: Force = False,
    min_gain: MinGain = 1.0,
    summary: JsonTo = None,
    heartbeat: Heartbeat = 60,
    live: Live = None,
    live_bundle: LiveBundle = None,
    live_programs: LivePrograms = 8,
    live_check_s: LiveCheck = 2.0,
    live_timeout: LiveTimeout = 900.0,
    idle_gap_cap: IdleGapCap = None,
    backend: Backend = BACKEND,
    async_scheduling: AsyncScheduling = False,
    client_tags: ClientTags = CLIENT_TAGS_DEFAULT,
    replicas: FleetReplicas = None,
    router: RouterNames = None,
    worker_urls: WorkerUrls = None,
    no_prefix_credit: NoPrefixCredit = False,
) -> None:
    """Tune η, K, the T window, the pressure valve, the pin cap and a cold-start override
    by replay (objective: mean JCT), then write the best bundle.

    Each trial replays every load with every seed; bad trials are pruned early. Without
    --jps or --concurrency the loads are a quarter and a half of the trace's programs (at
    most 64) kept live. The paper's defaults (η from the fit, K = 100) are the first trial,
    the same with the stall-only valve the second. Afterwards the
    best policy, the paper's defaults, a never-pin policy and stock vLLM are replayed on
    held-back seeds; if the best policy does not beat stock vLLM there, the bundle
    written never pins (program FCFS only) unless --force. The study's summary goes to
    tune.json next to -o (NAME.tune.json when -o is not bundle.json; --json PATH: there;
    --json -: next to -o as well, and on stdout instead of the table).

    With --live URL --live-bundle PATH each load × seed of a trial is one live run of
    --live-programs programs against the server, after the trial's bundle was written to
    PATH and reloaded by the plugin; one trial at a time, no pruning. The held-back
    comparison replays the tuned, paper-default and never-pin bundles live on the next
    programs; the never-pin bundle is the baseline there (the server runs the TTL
    scheduler, so stock vLLM is not measured). PATH ends up holding the bundle written.
    Without --jps or --concurrency a live study keeps half of --live-programs live.

    On a trace ingested from the engine log of one server, the simulated engine is sized
    as the log states (KV cache, block size, --max-num-seqs, --max-num-batched-tokens,
    --max-model-len; one line says so); a flag given wins, and one that disagrees with
    the log is reported.

    With --replicas N each replay is a fleet of N engines behind --router (default
    cache-aware); the router's settings that matter for retention (cache-aware's balance
    thresholds, kv-aware's session-affinity TTL, pin-aware's queue bound,
    program-scheduling's TTL cap, admission gates and queue knobs; the router itself when
    --router is repeated) are searched too, the guard compares with stock
    vLLM behind cache-aware (with --router as-logged: on the logged placement), and the
    bundle records the router (`ttlctl bundle query B --as vllm-router` prints its
    flags). --worker-urls gives every replay of the study (trials in worker processes and
    the held-back comparison too) the replicas' URLs as vllm-router is given them: the
    hashing routers place each program by them. tune.json and the bundle's provenance
    record them; the router is given them apart from its flags. --no-prefix-credit
    models clients whose requests kv-aware does not credit with their cached prefix
    (recorded in tune.json and the provenance too, not in the router's flags).
    """
    # imported when the command runs: `ttlctl --help` and the light commands stay light
    import optuna

    from replay.loads import load_list
    from replay.tune import session as tuning
    from replay.tune.request import TuneRequest
    from replay.tune.storage import Storage, default_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with user_errors():
        inputs = (trace, fit, Path(profile))
        study_file = Storage(storage or default_storage(output)).file  # the study's, written
        check_outputs(output, study_file, streams=(summary or summary_path(output),), inputs=inputs)
        check_format(output, "JSON")
        check_format(summary, "JSON", "--json")
        # may be -o (the server then serves the bundle written), no other output
        served = None if live_bundle is None or same_path(live_bundle, output) else live_bundle
        check_outputs(live_bundle, inputs=inputs)
        refuse_repeats((served, summary or summary_path(output), study_file))
        to_stdout = summary is not None and str(summary) == "-"
        request = TuneRequest(
            trace=trace,
            fit=fit,
            profile=profile,
            output=output,
            trials=trials,
            loads=load_list(jps or [], concurrency or []),
            storage=storage,
            study=study,
            workers=workers,
            seed=seed,
            seeds=seeds,
            holdout_seeds=holdout_seeds,
            p95_max_s=p95_max,
            **given(
                ctx,
                kv_tokens=kv_tokens,
                block_size=block_size,
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens,
                max_model_len=max_model_len,
                long_prefill_token_threshold=long_prefill_token_threshold,
                long_prefill_token_threshold_adaptive=long_prefill_token_threshold_adaptive,
                watermark=watermark,
            ),
            offload_tokens=offload_tokens,
            truncate=truncate,
            force=force,
            min_gain=min_gain,
            summary=None if to_stdout else summary,
            heartbeat_s=heartbeat,
            live=live,
            live_bundle=live_bundle,
            # None where not given: the request knows the defaults, and refuses any of them
            # without --live
            **live_given(ctx, live_programs, live_check_s, live_timeout),
            idle_gap_cap_s=idle_gap_cap,
            backend=backend,
            async_scheduling=async_scheduling,
            client_tags=client_tags,
            replicas=replicas,
            routers=tuple(router or ()),
            worker_urls=tuple(worker_urls) if worker_urls else None,
            prefix_credit=not no_prefix_credit,
        )
        session = tuning.prepare(request, warn=once(print_warning))
        _announce(session)
        progress = progress_bar("tuning")
        task = progress.add_task("trials", total=trials)
        with progress:
            outcome = tuning.run(
                session,
                progress=lambda done, total: progress.update(task, completed=done),
                stage=lambda text: progress.update(task, description=text),
            )
    result = outcome.result
    if to_stdout:  # the summary as written to tune.json, and nothing else on stdout
        write_doc(json.loads(outcome.summary_file.read_text(encoding="utf-8")), Path("-"))
    else:
        render.tune_table(out, result)
    sha = outcome.bundle["sha256"][:12]
    err.print(f"wrote {output} (sha256 {sha}…) and {outcome.summary_file}", highlight=False)
    if outcome.previous_kept is not None:
        err.print(
            f"the bundle it replaced is kept in {outcome.previous_kept}: "
            f"`ttlctl bundle rollback {output}` puts it back",
            highlight=False,
            markup=False,
        )
    if live_bundle is not None:
        err.print(
            f"the server's bundle {live_bundle} now holds it too "
            f"({result['shipped']['which']}; loaded from the server's next request on)",
            highlight=False,
        )
    err.print("look at the study with:", highlight=False)
    err.print(f"  {result['commands']['dashboard']}", highlight=False, markup=False)
    err.print(f"  {result['commands']['best_trial']}", highlight=False, markup=False)


def _announce(session: TuneSession) -> None:
    """What is about to run, on stderr."""
    req, ctx = session.request, session.context
    err.print(
        f"study {escape(session.study_name)} in {escape(session.storage.shown())}: "
        f"{counted(req.trials, 'trial')}, {req.workers} worker(s), {len(ctx.loads)} load(s) × "
        f"{req.seeds} seed(s) per trial",
        highlight=False,
    )
    if session.sizing is not None:
        err.print(escape(session.sizing), highlight=False)
    if ctx.live is not None:
        err.print(
            f"live: each replay is one run of {ctx.live.programs} program(s) against "
            f"{escape(req.live or '')}, after its bundle is written to "
            f"{escape(str(req.live_bundle))} (then {ctx.live.wait_s:g} s and one request, so "
            "the plugin has loaded it)",
            highlight=False,
        )


def live_given(
    ctx: typer.Context, programs: int, check_s: float, timeout_s: float
) -> dict[str, Any]:
    """The live study's settings as the request takes them: each as given, None where
    left at its default."""
    shown = given(ctx, live_programs=programs, live_check_s=check_s, live_timeout=timeout_s)
    return {
        "live_programs": shown["live_programs"],
        "live_check_s": shown["live_check_s"],
        "live_timeout_s": shown["live_timeout"],
    }
