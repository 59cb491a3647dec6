"""KV events from vLLM replicas to vllm-router's ``kv_aware`` policy, on one machine.

``kv_aware`` scores each replica by the prompt tokens it would have to prefill there, less
the blocks that replica's KV cache holds of the prompt. It learns what each cache holds
only from the replica's own KV events (``BlockStored``, ``BlockRemoved``,
``AllBlocksCleared``), which vLLM publishes over ZeroMQ when started with
``--kv-events-config``. Without them the router sees no cached block anywhere, and picks by
load and prompt size alone: not the router ttlctl simulates (whose ``kv-aware`` reads each
replica's block pool).

Three facts of the two programs, read in their sources, shape the wiring:

- vLLM's publisher (``vllm.distributed.kv_events.ZmqEventPublisher``) binds its endpoint
  only when it holds a wildcard (``*``), ``::`` or is an ``ipc://``/``inproc://`` one, and
  connects to any other;
- vllm-router 0.1.17 subscribes (connects) to ``--kv-event-source WORKER_URL=ENDPOINT``,
  which must be ``tcp://HOST:PORT``;
- vLLM 0.32 serves ``/kv_event_sources`` but no ``/get_server_info``, from which the router
  would read the KV block size, so a static source needs ``--kv-event-block-size`` and
  ``--kv-event-model`` (the router refuses to start without the model).

So each replica's publisher binds ``tcp://[::ffff:127.0.0.1]:PORT``: IPv4's loopback
written as an IPv4-mapped IPv6 address, which vLLM binds (it has ``::``) and ZeroMQ listens
on as 127.0.0.1 only (a wildcard would publish every prompt's token ids on every
interface); the router connects to ``tcp://127.0.0.1:PORT``. Not covered: a replica with
``--data-parallel-size`` above 1 publishes its other ranks on the ports after its own, which
the router is not given; and an event port, picked free when the fleet is made, is bound a
minute later (once the model is loaded), so another process may take it meanwhile, as it may
a replica's own HTTP port (the replica then fails to start, said as such).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

#: vllm-router's ``--policy`` that reads KV events
POLICY = "kv_aware"
#: IPv4's loopback in the spelling vLLM binds (it has ``::``) and ZeroMQ listens on as 127.0.0.1
LOOPBACK = "[::ffff:127.0.0.1]"
#: vLLM's option that turns its KV events on
ENGINE_FLAG = "--kv-events-config"
#: vllm-router's options for static KV event sources
SOURCE_FLAG = "--kv-event-source"
BLOCK_SIZE_FLAG = "--kv-event-block-size"
MODEL_FLAG = "--kv-event-model"
ROUTER_FLAGS = (SOURCE_FLAG, BLOCK_SIZE_FLAG, MODEL_FLAG)


def needs_events(policy: str) -> bool:
    """Whether a router started with ``--policy policy`` reads the replicas' KV events."""
    return policy == POLICY


def bind_endpoint(port: int) -> str:
    """Where a replica's publisher binds: 127.0.0.1 only, in a spelling vLLM binds."""
    return f"tcp://{LOOPBACK}:{port}"


def engine_args(port: int) -> list[str]:
    """vLLM's ``--kv-events-config`` publishing the block pool's events on ``port``."""
    config = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": bind_endpoint(port),
        "topic": "",
    }
    return [ENGINE_FLAG, json.dumps(config, separators=(",", ":"))]


def router_args(ports: Mapping[str, int], block_size: int, model: str) -> list[str]:
    """vllm-router's flags subscribing to each replica's events: ``ports`` maps a worker URL
    to its publisher's port; ``block_size``: the replicas' KV block size; ``model``: the
    model they serve (the router's cache identity for them)."""
    if block_size < 1:
        raise ValueError(f"a KV block size is a positive number of tokens, not {block_size}")
    out: list[str] = []
    for url, port in ports.items():
        out += [SOURCE_FLAG, f"{url}=tcp://127.0.0.1:{port}"]
    return [*out, BLOCK_SIZE_FLAG, str(block_size), MODEL_FLAG, model]


def deploy_note(tuned_credit: bool | None = None) -> str:
    """What a router started with ``--policy kv_aware`` needs beside its policy's flags;
    ``tuned_credit``: whether the bundle's study credited every call with its cached prefix
    (None: no study behind ``kv-aware`` recorded), said at the end."""
    tail = {
        None: "",
        True: "; this bundle was tuned with every call credited: for clients the router does "
        "not credit, tune with --no-prefix-credit",
        False: "; this bundle was tuned with no call credited (tune --no-prefix-credit): for "
        "clients the router credits, tune without it",
    }[tuned_credit]
    return (
        f"kv_aware sees no cached block without each replica's KV events: start each replica "
        f"with {ENGINE_FLAG} publishing on a bound endpoint (tcp://*:PORT, or "
        f"tcp://{LOOPBACK}:PORT on one host) and give the router "
        f"{SOURCE_FLAG} URL=tcp://HOST:PORT per replica, {BLOCK_SIZE_FLAG} and {MODEL_FLAG}; "
        "and it credits a chat request only where the replica renders it (vLLM's "
        "--enable-scale-out), a /v1/completions one only when it models every field of its "
        "body (one with vllm_xargs gets none: tag by the X-Session-ID header alone to keep "
        "it; docs/deploy.md)" + tail
    )
