"""Which replica each call reached: a vLLM server middleware that writes one line per call.

Behind a router the client cannot tell which replica served a call, and the router's own
log names the chosen worker only for some policies. So each replica ttlctl starts in a
fleet runs vLLM's server with ``--middleware ttlctl.server.arrivals.record`` and
``TTLCTL_ARRIVALS`` naming a file of its own: every completion request that reaches it
appends ``{"t": <unix seconds>, "session": <X-Session-ID or null>, "path": ...}``.
Reading the files of all replicas gives each program's calls in order and the replica of
each (:func:`read`, :func:`returned_share`): the share of calls that went back to the
replica their program's previous call ran on. Standard library only (it runs inside the
vLLM server).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

#: the environment variable naming a replica's arrivals file
ENV = "TTLCTL_ARRIVALS"
#: vLLM's ``--middleware`` value
MIDDLEWARE = "ttlctl.server.arrivals.record"
#: the requests that are calls (the router's own requests, e.g. /tokenize, are not)
CALL_PATHS = ("/v1/completions", "/v1/chat/completions")


async def record(request: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
    """vLLM's ``@app.middleware("http")``: note a call's arrival, then serve it."""
    path = os.environ.get(ENV)
    if path and request.method == "POST" and request.url.path in CALL_PATHS:
        line = {
            "t": time.time(),
            "session": request.headers.get("x-session-id"),
            "path": request.url.path,
        }
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
    return await call_next(request)


def read(files: Mapping[str, Path]) -> dict[str, list[str]]:
    """{session: [replica of each call, in arrival order]} from each replica's file
    (a missing file: no calls reached it). Calls without a session are left out."""
    seen: list[tuple[float, str, str]] = []
    for replica, path in files.items():
        if not path.exists():
            continue
        for raw in path.read_text(encoding="utf-8").splitlines():
            if not raw.strip():
                continue
            doc = json.loads(raw)
            if doc.get("session"):
                seen.append((float(doc["t"]), str(doc["session"]), replica))
    order: dict[str, list[str]] = {}
    for _, session, replica in sorted(seen):
        order.setdefault(session, []).append(replica)
    return order


def returned_share(order: Mapping[str, Iterable[str]]) -> float | None:
    """Of the calls that had a previous call in their program, the share that reached the
    previous call's replica (None: no program had two calls)."""
    returned = later = 0
    for replicas in order.values():
        seq = list(replicas)
        later += max(0, len(seq) - 1)
        returned += sum(1 for a, b in itertools.pairwise(seq) if a == b)
    return returned / later if later else None


def per_replica(order: Mapping[str, Iterable[str]]) -> dict[str, int]:
    """Calls per replica."""
    counts: dict[str, int] = {}
    for replicas in order.values():
        for replica in replicas:
            counts[replica] = counts.get(replica, 0) + 1
    return counts
