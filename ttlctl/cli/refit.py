"""``ttlctl refit``: an engine log (or any trace) and the bundle in service → the next
bundle, swapped in only when it beats the served one in replay (replay/refit.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ttlctl.cli import render
from ttlctl.cli.kit import (
    check_format,
    check_outputs,
    given,
    out,
    print_warning,
    user_errors,
    write_doc,
)
from ttlctl.cli.options import (
    BLOCK_SIZE,
    MAX_MODEL_LEN,
    MAX_NUM_BATCHED_TOKENS,
    MAX_NUM_SEQS,
    ConcurrencyLoads,
    InputFormat,
    JpsLoads,
    JsonTo,
    LoggedBlockSize,
    LoggedLongPrefillAdaptive,
    LoggedLongPrefillTokenThreshold,
    LoggedMaxModelLen,
    LoggedMaxNumBatchedTokens,
    LoggedMaxNumSeqs,
    LoggedWatermark,
    QueueDelay,
)
from ttlctl.cli.stage_bar import StageBar


def refit(
    ctx: typer.Context,
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
    fmt: InputFormat = "auto",
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
    concurrency: ConcurrencyLoads = None,
    jps: JpsLoads = None,
    seeds: Annotated[
        int, typer.Option(help="Held-back seeds (1000, 1001, …) each load is replayed with.")
    ] = 3,
    kv_tokens: Annotated[
        int | None,
        typer.Option(
            help="KV cache size in tokens (each replica's, with several replicas' logs). "
            "Default: as the engine log states it, else as recorded in the bundle (its tuning "
            "or last refit), else 600,000."
        ),
    ] = None,
    block_size: LoggedBlockSize = BLOCK_SIZE,
    max_num_seqs: LoggedMaxNumSeqs = MAX_NUM_SEQS,
    max_num_batched_tokens: LoggedMaxNumBatchedTokens = MAX_NUM_BATCHED_TOKENS,
    max_model_len: LoggedMaxModelLen = MAX_MODEL_LEN,
    long_prefill_token_threshold: LoggedLongPrefillTokenThreshold = 0,
    long_prefill_token_threshold_adaptive: LoggedLongPrefillAdaptive = False,
    watermark: LoggedWatermark = 0.0,
    offload_tokens: Annotated[
        int | None,
        typer.Option(help="CPU offload tier in tokens. Default: as recorded, else 0."),
    ] = None,
    truncate: Annotated[
        bool | None,
        typer.Option(
            "--truncate/--no-truncate",
            help="Clip a call that does not fit, as a live run's client does (without: as "
            "vLLM, a prompt that reaches --max-model-len refused, an output past it cut). "
            "Default: as recorded, else no.",
        ),
    ] = None,
    queue_delay: QueueDelay = 0.0,
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
    json_out: JsonTo = None,
) -> None:
    """Refit the served bundle from an engine log; replace it only if the new one is faster.

    Ingest the log (any format `ttlctl ingest` reads), fit it with the bundle's fit
    settings, rebuild the bundle with the same policy parameters and profile, replay the
    served bundle, the new one and stock vLLM on the log's programs (held-back seeds 1000,
    1001, …; without --jps or --concurrency at the log's mean concurrency), and replace the
    bundle atomically only when the new one has the lower mean
    JCT (the guard of `ttlctl tune`; a tie keeps the served bundle). A server watching the
    file reloads it.

    The replay's engine is sized like the server that wrote the log: its KV cache, block
    size, --max-num-seqs, --max-num-batched-tokens and --max-model-len as the log states
    them (the plugin records them), each replica's programs at its own size for the logs
    of several replicas; a flag given wins (one that disagrees with the log is reported).
    A log without them (an older plugin) takes them from the bundle's record, else the
    defaults, with a warning naming the flags to give.

    Bad input stops the run (exit 2, naming the file and record) unless --skip-bad. A kept
    bundle is not an error: exit 0, with the reason.
    """
    # imported when the command runs: `ttlctl --help` and the light commands stay light
    from replay.refit import refit as run_refit
    from replay.refit_settings import checked_settings

    with user_errors():
        # the bundle is read and replaced by design; a log given as an output is refused
        check_outputs(
            None if dry_run else (output or bundle),
            trace,
            streams=(json_out,),
            inputs=tuple(logs),
        )
        # ... but only by the new bundle: --json or --trace over it is refused (with
        # --dry-run it was written over the bundle said to be kept)
        check_outputs(trace, streams=(json_out,), inputs=(bundle,))
        check_format(output, "JSON")
        check_format(trace, "Parquet", "--trace")
        check_format(json_out, "JSON", "--json")
        settings = checked_settings(
            fmt=fmt,
            skip_bad=skip_bad,
            trace=trace,
            jps=jps or [],
            concurrency=concurrency or [],
            seeds=seeds,
            kv_tokens=kv_tokens,
            **given(
                ctx,
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
            queue_delay_s=queue_delay,
            force=force,
        )
        shown = StageBar.make("refitting")
        with shown.bar:
            report = run_refit(
                logs,
                bundle,
                settings,
                output=output,
                dry_run=dry_run,
                stage=shown.stage,
                replays_done=shown.runs,
            )
    for note in report["sizing"]["notes"]:
        print_warning(note)
    if json_out is not None:
        with user_errors():
            if write_doc(report, json_out):
                return
    render.refit_report(out, report)
