"""vLLM's router (``vllm-router``, PyPI 0.1.17) in front of replicas: its command line.

``pip install vllm-router`` (ttlctl's engine extras bring it) installs a ``vllm-router``
launcher that runs the router's Rust core. ttlctl starts it as it starts a vLLM server
(:class:`~ttlctl.server.owned.OwnedServer`: a session of its own, ready when ``/health``
answers 200, its whole group stopped with the command). The flags are the router's own:
``--worker-urls`` (the replicas), ``--policy`` (one of :data:`POLICIES`, ``cache_aware``
by default), and for Program scheduling ``--enable-program-scheduling`` with
``--program-scheduling-config-json``. ``consistent_hash`` keys on the ``X-Session-ID``
header, which ttlctl's live replay sends with every call of a program.

The router logs in colour even into a file; :func:`plain` strips the escapes. At start
with Program scheduling and any calibration coefficient left to its reference value it
logs :data:`REFERENCE_CALIBRATION_EVENT` (:func:`reference_calibration_warned`).

The router keeps its workers in its own order, not ``--worker-urls``': its registry is a
concurrent hash map keyed by a random id per worker (``src/core/worker_registry.rs``,
``get_all``), so the order is drawn afresh at each start; ``round_robin`` counts over it
and the least-loaded choices break ties by it. It logs that order once it is ready
(``src/server.rs``: ``Router ready | workers: [...]``): :func:`worker_order` reads it.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from ttlctl import router_doc
from ttlctl.server import kv_events
from ttlctl.server.client import ServerError

#: the router's command, as ``pip install vllm-router`` installs it
COMMAND = "vllm-router"
#: the request-level policies of vllm-router 0.1.17 (``--policy``), its default first
POLICIES = router_doc.POLICIES
DEFAULT_POLICY = POLICIES[0]
#: vllm-router's Program scheduling as a live fleet's router is named: not a ``--policy``
#: but ``--enable-program-scheduling`` over one (vllm-router's spelling of ttlctl's
#: ``program-scheduling``)
PROGRAM_SCHEDULING = router_doc.PROGRAM_SCHEDULING.replace("-", "_")
#: what a live fleet runs behind (``validate --router``): a ``--policy``, or Program
#: scheduling. :func:`check_policy` takes only the first: it checks the ``--policy`` the
#: router is started with, once Program scheduling was made its flags
LIVE_ROUTERS = (*POLICIES, PROGRAM_SCHEDULING)
#: the event of the router's start-up warning that Program scheduling runs on
#: reference calibration coefficients
REFERENCE_CALIBRATION_EVENT = "program_scheduling_reference_calibration"
#: flags ttlctl sets on the router itself
OWN_FLAGS = ("--host", "--port", "--worker-urls", "--policy")

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: the line the router logs when it is ready, with its workers in its own order
_READY = re.compile(r"Router ready \| workers: (\[.*?\])\s*$", re.MULTILINE)


class RouterError(ServerError):
    """vllm-router missing, or asked for something it does not take: one line."""


def binary() -> str:
    """The ``vllm-router`` command: on ``PATH``, or beside this Python (a virtual
    environment used without activating it). :class:`RouterError` when missing."""
    found = shutil.which(COMMAND) or shutil.which(COMMAND, path=str(Path(sys.executable).parent))
    if found is None:
        raise RouterError(
            f"{COMMAND} is not installed (pip install vllm-router==0.1.17, or ttlctl's "
            "engine extra)"
        )
    return found


def check_policy(policy: str) -> str:
    """``policy`` if vllm-router's ``--policy`` takes it, else :class:`RouterError` naming
    them (a live fleet's router is checked first, with Program scheduling, by
    :func:`replay.validation.fleet_routers.check_router`)."""
    if policy not in POLICIES:
        raise RouterError(f"--router takes {', '.join(POLICIES)}; not {policy!r}")
    return policy


def check_extra(extra: Sequence[str], *, events: bool = False) -> set[str]:
    """The flags ``extra`` (router flags given verbatim) names; :class:`RouterError` for one
    ttlctl sets itself (:data:`OWN_FLAGS`, and with ``events`` the KV event sources')."""
    given = {a.split("=", 1)[0] for a in extra}
    for flag in (*OWN_FLAGS, *(kv_events.ROUTER_FLAGS if events else ())):
        if flag in given:
            raise RouterError(f"{flag} is set by ttlctl; remove it from the router's flags")
    return given


def router_command(
    worker_urls: Sequence[str],
    *,
    port: int,
    policy: str = DEFAULT_POLICY,
    program_scheduling_json: str | None = None,
    extra: Sequence[str] = (),
    command: str | None = None,
    prometheus_port: int | None = None,
    kv_event_sources: Sequence[str] = (),
) -> list[str]:
    """``vllm-router`` on 127.0.0.1:``port`` in front of ``worker_urls`` with ``policy``;
    Program scheduling on with ``program_scheduling_json`` (its config object), its
    metrics on 127.0.0.1:``prometheus_port`` (None: the router's default, 29000, which a
    second router on the host fails to bind at start; ``extra`` naming
    ``--prometheus-port`` wins), the replicas' KV event sources
    (:func:`ttlctl.server.kv_events.router_args`; ``extra`` may not set them then), then
    ``extra`` router flags verbatim."""
    given = check_extra(extra, events=bool(kv_event_sources))
    cmd = [
        command or binary(),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--policy",
        check_policy(policy),
    ]
    if worker_urls:
        cmd += ["--worker-urls", *worker_urls]
    if program_scheduling_json is not None:
        cmd += [
            "--enable-program-scheduling",
            "--program-scheduling-config-json",
            program_scheduling_json,
        ]
    if prometheus_port is not None and "--prometheus-port" not in given:
        cmd += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(prometheus_port)]
    return cmd + list(kv_event_sources) + list(extra)


def plain(text: str) -> str:
    """The router's log without its colour escapes."""
    return _ANSI.sub("", text)


def reference_calibration_warned(log: str) -> bool:
    """Whether the router's log has its reference-calibration warning."""
    return REFERENCE_CALIBRATION_EVENT in plain(log)


def worker_order(log: str) -> list[str] | None:
    """The workers' URLs in the router's own order, from its log's last ``Router ready``
    line (None: no such line, or one that does not parse)."""
    found = _READY.findall(plain(log))
    if not found:
        return None
    try:
        urls = json.loads(found[-1])
    except ValueError:
        return None
    if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        return None
    return urls
