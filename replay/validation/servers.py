"""The servers validate compares: one per policy, given by URL or started here.

The policy lives in the server process: ``vllm`` is stock vLLM, ``continuum`` vLLM
with the TTL scheduler and its bundle. A server validate starts runs the base
command (``--engine-cmd``, or ``--model`` and vLLM arguments) on 127.0.0.1 and a
free port, with ``--enable-prompt-tokens-details``, ``VLLM_SERVER_DEV_MODE=1`` (so
the prefix cache can be reset) and a fresh ``PROMETHEUS_MULTIPROC_DIR``; the command
and environment are the door's (:mod:`ttlctl.server.command`), the process an
:class:`~ttlctl.server.owned.OwnedServer` (its whole group stopped after its run,
and on Ctrl-C, SIGTERM, errors and timeouts).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ttlctl.server import command
from ttlctl.server.owned import OwnedServer
from ttlctl.server.process import free_port

#: the policies a server can run (the policy lives in the server process)
LIVE_POLICIES = ("vllm", "continuum")


@dataclass
class Sources:
    """Where each policy's server comes from: a URL, or a base command to start."""

    urls: dict[str, str] = field(default_factory=dict)
    base_cmd: list[str] | None = None
    startup_timeout_s: float = 600.0
    env: Mapping[str, str] | None = None


def server_command(base: Sequence[str], policy: str, port: int) -> list[str]:
    """The command of ``policy``'s server: ``base`` plus the TTL scheduler (continuum),
    per-call cached tokens, host and port."""
    command.refuse(
        base,
        ("--scheduler-cls",),
        "validate (stock for vllm, the TTL scheduler for continuum)",
        "the engine command",
    )
    return command.server_command(
        base,
        scheduler_cls=command.SCHEDULER_CLS if policy == "continuum" else None,
        prompt_tokens_details=True,
        host="127.0.0.1",
        port=port,
    )


def server_environment(
    base: Mapping[str, str],
    policy: str,
    bundle: Path | None,
    work_dir: Path,
    tag: str = "",
) -> dict[str, str]:
    """Environment of ``policy``'s server: dev mode, its own metrics folder, the bundle
    and the engine log for continuum (``tag`` names one of several runs' files)."""
    ttl = policy == "continuum" and bundle is not None
    return command.server_environment(
        base,
        bundle=bundle if ttl else None,
        log=work_dir / f"continuum{tag}-engine.jsonl" if ttl else None,
        dev_mode=True,
        metrics_dir=command.fresh_metrics_dir(work_dir / f"{policy}{tag}-prometheus"),
        local=True,
    )


def policy_server(
    sources: Sources, policy: str, bundle: Path | None, work_dir: Path, tag: str
) -> OwnedServer:
    """``policy``'s server, to start (its log ``<policy><tag>-server.log`` in ``work_dir``)."""
    assert sources.base_cmd is not None
    port = free_port()
    return OwnedServer(
        server_command(sources.base_cmd, policy, port),
        server_environment(sources.env or os.environ, policy, bundle, work_dir, tag),
        work_dir / f"{policy}{tag}-server.log",
        f"http://127.0.0.1:{port}",
        startup_timeout_s=sources.startup_timeout_s,
    )
