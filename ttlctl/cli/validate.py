"""``ttlctl validate TRACE``: the simulator against real vLLM servers, metric by metric."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ttlctl.cli import render
from ttlctl.cli.kit import (
    check_format,
    check_outputs,
    err,
    fail,
    out,
    print_warning,
    user_errors,
    write_doc,
)
from ttlctl.cli.options import (
    BACKEND,
    CLIENT_TAGS_DEFAULT,
    MAX_NUM_BATCHED_TOKENS,
    MAX_NUM_SEQS,
    AsyncScheduling,
    Backend,
    ClientTags,
    Concurrency,
    ContinuumBundle,
    IdleGapCap,
    Jps,
    JsonTo,
    Label,
    LongPrefillAdaptive,
    LongPrefillTokenThreshold,
    MaxNumBatchedTokens,
    MaxNumSeqs,
    Resimulate,
    ResultDir,
    SaveResult,
    Seed,
    ValidateTrace,
    Watermark,
)
from ttlctl.cli.router_options import Replicas, Routers
from ttlctl.cli.stage_bar import StageBar
from ttlctl.nouns import counted

#: register with ``app.command("validate", context_settings=CONTEXT_SETTINGS)``: the
#: arguments after ``--`` go to the servers validate starts
CONTEXT_SETTINGS: dict[str, Any] = {"allow_extra_args": True}


def validate(
    ctx: typer.Context,
    trace: ValidateTrace = None,
    resimulate: Resimulate = None,
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
            "for continuum, --scheduler-cls ttlctl.engine.TTLScheduler. Its vLLM part "
            "(after `vllm serve` or the module; without either, all but one-letter flags, "
            "a wrapper's such as docker's -t, and after a `docker run`'s image) is read as "
            "vLLM reads it.",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="Shorthand for --engine-cmd 'python -m vllm.entrypoints.openai.api_server "
            "--model MODEL', with the arguments after `--`."
        ),
    ] = None,
    bundle: ContinuumBundle = None,
    policy: Annotated[
        list[str] | None,
        typer.Option("--policy", help="vllm and/or continuum (default: both)."),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            help="Profile for the simulator (default: measured here, in each of --repeats K "
            "repeats after its live run, on the first policy's server or with --replicas on "
            "the repeat's last fleet; pooled over the K, or with --replicas each repeat's "
            "own, the pooled one beside it)."
        ),
    ] = None,
    programs: Annotated[int, typer.Option(help="Replay the trace's first N programs.")] = 8,
    repeats: Annotated[
        int,
        typer.Option(
            help="Live runs per policy (with --replicas: per policy and router), each in a "
            "fresh server or fleet; the simulator is compared with their mean, and the "
            "table shows their range."
        ),
    ] = 1,
    kv_tokens: Annotated[
        int | None,
        typer.Option(min=1, help="Simulated KV tokens (default: the server's, from /metrics)."),
    ] = None,
    max_num_seqs: MaxNumSeqs = MAX_NUM_SEQS,
    max_num_batched_tokens: MaxNumBatchedTokens = MAX_NUM_BATCHED_TOKENS,
    long_prefill_token_threshold: LongPrefillTokenThreshold = 0,
    long_prefill_token_threshold_adaptive: LongPrefillAdaptive = False,
    watermark: Watermark = 0.0,
    jps: Jps = None,
    concurrency: Concurrency = None,
    seed: Seed = 0,
    idle_gap_cap: IdleGapCap = None,
    timeout: Annotated[
        float, typer.Option("--timeout-seconds", help="Seconds a live run may take.")
    ] = 1800.0,
    startup_timeout: Annotated[
        float,
        typer.Option(
            "--startup-timeout-seconds", help="Seconds a started server may take to become healthy."
        ),
    ] = 600.0,
    work_dir: Annotated[
        Path | None, typer.Option(help="Server logs, bundle and results (default: a temp dir).")
    ] = None,
    save_result: SaveResult = False,
    result_dir: ResultDir = None,
    label: Label = None,
    json_out: JsonTo = None,
    backend: Backend = BACKEND,
    async_scheduling: AsyncScheduling = False,
    client_tags: ClientTags = CLIENT_TAGS_DEFAULT,
    replicas: Replicas = None,
    router: Routers = None,
    timing_draws: Annotated[
        int | None,
        typer.Option(
            "--timing-draws",
            min=0,
            help="With --replicas: each live run's simulated figures are their mean over "
            "this many seeded perturbations of the trace's arrival timing (each pause × 1 ± "
            "2%, each program's start + 0–10 ms; default: 32); 0: the one simulation on the "
            "trace's own timing.",
        ),
    ] = None,
    cpus_per_replica: Annotated[
        int | None,
        typer.Option(
            "--cpus-per-replica",
            help="With --replicas: run each replica on K CPUs of its own (taskset, and "
            "vLLM's VLLM_CPU_OMP_THREADS_BIND), as each simulated replica has its own "
            "device; needs replicas × K CPUs. A profile measured here is then measured "
            "on a pinned replica while the others serve a steady load. K: at least 1.",
        ),
    ] = None,
    gpus_per_replica: Annotated[
        int | None,
        typer.Option(
            "--gpus-per-replica",
            help="With --replicas: run each replica on K GPUs of its own "
            "(CUDA_VISIBLE_DEVICES: replica i gets the i-th K of the GPUs this process may "
            "use), as in a fleet of one server per GPU; needs replicas × K GPUs, and vLLM's "
            "tensor × pipeline × prefill context parallel sizes (after -- or in its --config file) "
            "equal to K, "
            "without data parallelism (a replica is one engine); GPUs in MIG mode: "
            "their MIG devices' UUIDs in CUDA_VISIBLE_DEVICES, K = 1. A "
            "profile measured here is then measured while the others serve a steady load. "
            "K: at least 1.",
        ),
    ] = None,
) -> None:
    """Replay a small trace in the simulator and against real servers; print the errors.

    Each policy runs in its own server (vllm: stock; continuum: the TTL scheduler),
    started here one after the other (--engine-cmd or --model, vLLM arguments after
    `--`) or already running (--url). The simulator is sized like the server and
    priced by a profile measured from it (with --repeats K: after each of the first
    policy's K runs, pooled over the K). --max-num-seqs and --max-num-batched-tokens
    size the simulator and the servers validate starts (give them here, not after
    `--`), and --async-scheduling sets the scheduling of both (without it, synchronous on
    both); with --url, give the running servers' values. Goals (reported): mean JCT within 10%,
    prefix-hit rate within 5 points, the same ranking.

    With --replicas N and --router R (repeatable): each policy runs live on N replicas
    behind vLLM's router (vllm-router, pip install vllm-router), a fresh fleet per
    router, and the table shows mean JCT, TTFT, hit rate and the share of calls that
    returned to their program's previous replica. --repeats K runs each router K times
    (run k of every router before run k + 1 of any) and judges the goal (every router
    within 10%, the same ranking) on the means and on each run; a profile measured here
    is then measured in each repeat: with --replicas each repeat's runs are priced by
    that repeat's measurement (the K pooled into one beside it), else the K pooled
    into one price every run. A fleet whose replica or router fails in a later repeat
    stops the validation there: the whole repeats before it are shown and written (the
    JSON's `stopped` says what stopped it), then the error (exit 2).

    --resimulate RECORDED.json re-prices a validation's recorded live runs (a single
    server's or, with --replicas, a fleet's) with this ttlctl's simulator, starting
    nothing: the trace, its programs and pause cap, the load, the engine's sizes, the
    bundle, a fleet's routers, their replicas' URLs and arrivals files, and the profile's
    measurements are read from the document; --profile prices every run by that profile
    instead. The same table and --json document, marked re-simulated.
    """
    # imported when the command runs: `ttlctl --help` and the light commands stay light
    from replay.validation.setup import validation_doc
    from replay.validation.validate_request import ValidateRequest

    req = ValidateRequest(
        trace=trace,
        urls=url or [],
        engine_cmd=engine_cmd,
        model=model,
        extra=list(ctx.args),
        bundle=bundle,
        policies=policy or [],
        profile=profile,
        programs=programs,
        repeats=repeats,
        kv_tokens=kv_tokens,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        long_prefill_token_threshold=long_prefill_token_threshold,
        long_prefill_token_threshold_adaptive=long_prefill_token_threshold_adaptive,
        watermark=watermark,
        jps=jps,
        concurrency=concurrency,
        seed=seed,
        idle_gap_cap_s=idle_gap_cap,
        timeout_s=timeout,
        startup_timeout_s=startup_timeout,
        work_dir=work_dir,
        save_result=save_result,
        result_dir=result_dir,
        label=label,
        backend=backend,
        async_scheduling=async_scheduling,
        client_tags=client_tags,
        replicas=replicas,
        routers=router or [],
        cpus_per_replica=cpus_per_replica,
        gpus_per_replica=gpus_per_replica,
        timing_draws=timing_draws,
        resimulate=resimulate,
    )
    given = (trace, bundle, resimulate, Path(profile) if profile else None)
    with user_errors():
        check_outputs(
            streams=(json_out,),
            folders=(work_dir, result_dir if save_result else None),
            inputs=given,
        )
        check_format(json_out, "JSON", "--json")
        shown = StageBar.make("re-simulating" if resimulate else "validating")
        with shown.bar:
            doc = validation_doc(
                req, progress=shown.stage, runs_done=shown.runs, warn=print_warning
            )
        # the trace read: with --resimulate, the one the document names, unless TRACE
        read = doc["resimulated"]["trace"] if "resimulated" in doc else doc["trace"]
        check_outputs(streams=(json_out,), inputs=(Path(read),))
        if json_out is not None and write_doc(doc, json_out, as_text=True):
            _stopped(doc, "on stdout")
            return
    if "replicas" in doc:
        render.fleet_table(out, doc)
    else:
        render.validate_table(out, doc)
    if "resimulated" in doc:
        again = doc["resimulated"]
        err.print(f"re-simulated from {again['from']}: {again['pricing']}", highlight=False)
    elif "replicas" in doc:
        err.print(f"work dir: {doc['work_dir']}", highlight=False)
    else:
        err.print(
            f"profile: {doc['profile']['source']}; work dir: {doc['work_dir']}", highlight=False
        )
    if json_out is not None:
        err.print(f"wrote {json_out}")
    _stopped(doc, "above" if json_out is None else f"above and in {json_out}")


def _stopped(doc: dict[str, Any], where: str) -> None:
    """A fleet validation that a failed fleet stopped after whole repeats: its one-line
    error (exit 2), once what it kept is out. A re-simulation of such a document keeps the
    record and succeeds."""
    stopped = doc.get("stopped")
    if stopped and "resimulated" not in doc:
        kept = counted(int(doc["repeats"]), "whole repeat")
        fail(
            f"{stopped['run']}: {stopped['error']}; kept {kept} of "
            f"{stopped['repeats_asked']} ({where})"
        )
