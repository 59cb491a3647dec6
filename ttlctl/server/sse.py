"""Streamed OpenAI-compatible completions (server-sent events): the chunks, as they arrive.

vLLM streams one ``data: {json}`` line per chunk and ends with ``data: [DONE]``;
a failure mid-stream is a chunk with an ``error`` key. :func:`chunks` reads them from
any lines; :func:`stream` sends the request and reads its answer, every failure a
one-line :class:`~ttlctl.server.client.ServerError`. Used by the engine profiler
(:mod:`profiles.server_stream`) and the live replay (:mod:`replay.live`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ttlctl.server import client


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


def stream(
    url: str,
    path: str,
    body: dict[str, Any],
    *,
    timeout_s: float,
    headers: dict[str, str] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Iterator[tuple[float, dict[str, Any]]]:
    """POST ``body`` to ``url + path`` and yield (arrival time, chunk) as :func:`chunks` does.

    Raises :class:`~ttlctl.server.client.ServerError` (an HTTP error status:
    :class:`~ttlctl.server.client.HTTPStatusError`) when the request or the stream
    fails. Closing the generator early (``break``, an exception in the caller's
    loop) closes the connection.
    """
    resp = client.open_url(url, path, body, method="POST", timeout_s=timeout_s, headers=headers)
    try:
        with resp:
            yield from chunks(resp, error_chars=client.DETAIL_CHARS, clock=clock)
    except StreamError as exc:
        raise client.ServerError(f"{url}: {path} {exc}") from None
    except client.TRANSPORT_ERRORS as exc:
        raise client.failure(url, path, exc, timeout_s) from None
