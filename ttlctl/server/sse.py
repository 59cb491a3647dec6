"""The chunks of a streamed OpenAI-compatible completion (server-sent events).

vLLM streams one ``data: {json}`` line per chunk and ends with ``data: [DONE]``;
a failure mid-stream is a chunk with an ``error`` key. Used by the engine
profiler (:mod:`profiles.measure_server`) and the live replay (:mod:`replay.live`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any


class StreamError(ValueError):
    """The stream carried something that is not JSON, or an error chunk."""


def chunks(
    lines: Iterable[bytes],
    *,
    error_chars: int = 200,
    clock: Callable[[], float] = time.perf_counter,
) -> Iterator[tuple[float, dict[str, Any]]]:
    """(arrival time, chunk) for each JSON-object chunk, until ``[DONE]`` or the end.

    The time is read when the line arrives, before it is parsed. Raises
    :class:`StreamError` on a payload that is not JSON, or on an error chunk (its
    message, whitespace collapsed, cut to ``error_chars``).
    """
    for raw in lines:
        now = clock()
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            return
        try:
            chunk = json.loads(payload)
        except json.JSONDecodeError:
            raise StreamError("streamed something that is not JSON") from None
        if not isinstance(chunk, dict):
            continue
        if "error" in chunk:
            err = chunk["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise StreamError(f"failed: {' '.join(str(msg).split())[:error_chars]}")
        yield now, chunk
