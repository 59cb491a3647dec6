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

from ttlctl.engine.facts import ENV_REPLICA
from ttlctl.server import command, cpus, gpus, kv_events, router
from ttlctl.server.arrivals import ENV as ARRIVALS_ENV
from ttlctl.server.arrivals import MIDDLEWARE as ARRIVALS
from ttlctl.server.client import ServerError
from ttlctl.server.facts import probe
from ttlctl.server.fleet import OwnedFleet
from ttlctl.server.owned import OwnedServer
from ttlctl.server.process import free_port
from ttlctl.server.router import RouterError

#: the policies a server can run (the policy lives in the server process)
LIVE_POLICIES = ("vllm", "continuum")
#: the option validate sets on the servers it starts (stock vLLM, or the TTL scheduler)
OWN_FLAGS = ("--scheduler-cls",)


@dataclass
class Sources:
    """Where each policy's server comes from: a URL, or a base command to start."""

    urls: dict[str, str] = field(default_factory=dict)
    base_cmd: list[str] | None = None
    startup_timeout_s: float = 600.0
    env: Mapping[str, str] | None = None

    def vllm_args(self) -> list[str] | None:
        """The vLLM arguments of the servers to start
        (:func:`~ttlctl.server.command.vllm_arguments`; None: none to start)."""
        return None if self.base_cmd is None else command.vllm_arguments(self.base_cmd)


def check_base(base: Sequence[str]) -> None:
    """:class:`~ttlctl.server.command.CommandError` when ``base`` sets the option validate
    sets itself (:data:`OWN_FLAGS`), on its command line or in its ``--config`` file, as
    vLLM's parser reads them (abbreviations included)."""
    command.refuse(
        base,
        OWN_FLAGS,
        "validate (stock for vllm, the TTL scheduler for continuum)",
        "the engine command",
    )


def check_events_flag(policies: Sequence[str], args: Sequence[str] | None) -> None:
    """Behind ``kv_aware`` (one of the routers' ``policies``) validate tells each replica
    where to publish its KV events (:mod:`ttlctl.server.kv_events`): a
    :class:`~ttlctl.server.command.CommandError` when the replicas' vLLM ``args`` set
    ``--kv-events-config`` themselves (as vLLM's parser reads them, as :func:`check_base`)."""
    if args is not None and any(kv_events.needs_events(p) for p in policies):
        command.refuse(
            args,
            (kv_events.ENGINE_FLAG,),
            "validate behind kv_aware (each replica publishes its KV events to the router)",
            "the engine command",
        )


def server_command(base: Sequence[str], policy: str, port: int) -> list[str]:
    """The command of ``policy``'s server: ``base`` (:func:`check_base`, on its vLLM
    arguments: :func:`~ttlctl.server.command.vllm_arguments`) plus the TTL scheduler
    (continuum), per-call cached tokens, host and port."""
    check_base(command.vllm_arguments(base))
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


@dataclass
class Fleet:
    """A fleet to start for one policy behind one router, and where its replicas note
    each call's arrival (:mod:`ttlctl.server.arrivals`)."""

    fleet: OwnedFleet
    #: replica name (``r1`` …) → its arrivals file
    arrivals: dict[str, Path]
    #: replica name → its URL
    urls: dict[str, str]


def policy_fleet(
    sources: Sources,
    policy: str,
    bundle: Path | None,
    work_dir: Path,
    tag: str,
    *,
    replicas: int,
    router_policy: str,
    program_scheduling_json: str | None = None,
    router_extra: Sequence[str] = (),
    cpu_sets: Sequence[Sequence[int]] | None = None,
    gpu_sets: Sequence[Sequence[str]] | None = None,
) -> Fleet:
    """``replicas`` servers of ``policy`` (each as :func:`policy_server` starts one, plus
    the arrivals middleware) behind ``vllm-router --policy router_policy``; files named
    ``<policy><tag>-r<i>-…`` and ``<policy><tag>-router.log`` in ``work_dir``.
    ``cpu_sets``: replica ``i`` runs on ``cpu_sets[i]`` only (:mod:`ttlctl.server.cpus`;
    None: every replica may use every CPU); ``gpu_sets``: replica ``i`` sees
    ``gpu_sets[i]`` only (:mod:`ttlctl.server.gpus`; None: the environment's GPUs).
    Behind ``kv_aware`` each replica publishes its KV events and the router reads them
    (:mod:`ttlctl.server.kv_events`; the router is made once the replicas are up).
    :class:`~ttlctl.server.router.RouterError`: no router, or a policy it lacks."""
    assert sources.base_cmd is not None
    if replicas < 1:
        raise RouterError(f"--replicas must be at least 1, not {replicas}")
    if cpu_sets is not None and len(cpu_sets) != replicas:
        raise RouterError(f"{len(cpu_sets)} CPU sets for {replicas} replicas")
    if gpu_sets is not None and len(gpu_sets) != replicas:
        raise RouterError(f"{len(gpu_sets)} GPU sets for {replicas} replicas")
    router.check_policy(router_policy)
    router.check_extra(router_extra, events=kv_events.needs_events(router_policy))
    binary = router.binary()
    servers: list[OwnedServer] = []
    arrivals: dict[str, Path] = {}
    #: replica URL -> the port its KV events are published on (kv_aware reads them)
    event_ports: dict[str, int] = {}
    for i in range(1, replicas + 1):
        name = f"r{i}"
        rtag = f"{tag}-{name}"
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = [*server_command(sources.base_cmd, policy, port), "--middleware", ARRIVALS]
        if kv_events.needs_events(router_policy):
            event_ports[url] = events = free_port()
            cmd += kv_events.engine_args(events)
        env = server_environment(sources.env or os.environ, policy, bundle, work_dir, rtag)
        env[ENV_REPLICA] = name  # its engine log names it, as `ttlctl serve --replica` does
        arrivals[name] = work_dir / f"{policy}{rtag}-arrivals.jsonl"
        arrivals[name].unlink(missing_ok=True)
        env[ARRIVALS_ENV] = str(arrivals[name].resolve())
        if cpu_sets is not None:
            cmd = cpus.pinned_command(cmd, cpu_sets[i - 1])
            env = cpus.pinned_environment(env, cpu_sets[i - 1])
        if gpu_sets is not None:
            env = gpus.placed_environment(env, gpu_sets[i - 1])
        servers.append(
            OwnedServer(
                cmd,
                env,
                work_dir / f"{policy}{rtag}-server.log",
                url,
                startup_timeout_s=sources.startup_timeout_s,
                name=f"replica {name} ({policy})",
            )
        )

    subscribed: list[str] = []  # the router's KV event flags, asked of the replicas once

    def sources_of() -> list[str]:
        if event_ports and not subscribed:
            subscribed.extend(event_sources(event_ports, servers[0].url))
        return subscribed

    def front() -> OwnedServer:  # on ports free now (another try takes new ones)
        port = free_port()
        return OwnedServer(
            router.router_command(
                [s.url for s in servers],
                port=port,
                policy=router_policy,
                program_scheduling_json=program_scheduling_json,
                extra=router_extra,
                command=binary,
                prometheus_port=free_port(),  # its own: another router may hold the default
                kv_event_sources=sources_of(),
            ),
            dict(sources.env or os.environ),
            work_dir / f"{policy}{tag}-router.log",
            f"http://127.0.0.1:{port}",
            startup_timeout_s=sources.startup_timeout_s,
            name=f"vllm-router ({router_policy})",
        )

    urls = {f"r{i}": s.url for i, s in enumerate(servers, 1)}
    # a router reading KV events is made once the replicas say their block size
    first = None if event_ports else front()
    return Fleet(OwnedFleet(servers, first, fresh_router=front), arrivals, urls)


def event_sources(ports: Mapping[str, int], url: str) -> list[str]:
    """vllm-router's flags reading the KV events each replica publishes (``ports``: its
    URL → its port; none: no flags), with the block size and model the replica at ``url``
    says it has (every replica of a fleet runs the same command). A
    :class:`~ttlctl.server.client.ServerError` when it does not say its block size."""
    if not ports:
        return []
    info = probe(url)
    if not info.block_size:
        raise ServerError(
            f"{url}: the replica's /metrics gives no KV block size (vllm:cache_config_info), "
            "which vllm-router's kv_aware needs to read its KV events"
        )
    return kv_events.router_args(ports, info.block_size, info.model)
