"""``ttlctl validate TRACE``: the simulator against real vLLM servers, metric by metric."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated, Any

import typer

from profiles.shipped import resolve
from ttlctl.cli import render
from ttlctl.cli.kit import UserError, err, out, print_warning, user_errors, write_doc
from ttlctl.cli.options import (
    BACKEND,
    AsyncScheduling,
    Backend,
    Concurrency,
    ContinuumBundle,
    IdleGapCap,
    Jps,
    JsonTo,
    Label,
    ResultDir,
    SaveResult,
    Seed,
    Trace,
)

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
    trace: Trace,
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
    bundle: ContinuumBundle = None,
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
    jps: Jps = None,
    concurrency: Concurrency = None,
    seed: Seed = 0,
    idle_gap_cap: IdleGapCap = None,
    timeout: Annotated[float, typer.Option(help="Seconds a live run may take.")] = 1800.0,
    startup_timeout: Annotated[
        float, typer.Option(help="Seconds a started server may take to become healthy.")
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
) -> None:
    """Replay a small trace in the simulator and against real servers; print the errors.

    Each policy runs in its own server (vllm: stock; continuum: the TTL scheduler),
    started here one after the other (--engine-cmd or --model, vLLM arguments after
    `--`) or already running (--url). The simulator is sized like the server and
    priced by a profile measured from it. Goals (reported): mean JCT within 10%,
    prefix-hit rate within 5 points, the same ranking.
    """
    # imported when the command runs: `ttlctl --help` and the light commands stay light
    from replay.loads import one_load
    from replay.validation import Sources
    from replay.validation import validate as run_validate
    from replay.vllmsim.backend import check_request
    from replay.workload import load
    from ttlctl.server.command import base_command

    extra = list(ctx.args)
    with user_errors():
        timing = one_load(jps, concurrency, seed)
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
                timing=timing,
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
        if json_out is not None and write_doc(doc, json_out, as_text=True):
            return
    render.validate_table(out, doc)
    err.print(f"profile: {doc['profile']['source']}; work dir: {doc['work_dir']}", highlight=False)
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
