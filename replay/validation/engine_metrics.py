"""What validate reads from a replica's own ``/metrics`` around a live run.

:func:`scrape` reads, before and after the run, the series below; :func:`engine_delta` is
the run's share. What each is, in vLLM 0.32 (``vllm/v1/metrics/``):

- ``vllm:iteration_tokens_total`` is observed once per engine step **that returned an
  output** (a new token or a finish): the frontend records a step's stats only when the
  step has outputs. A step that only advanced a chunked prefill (a prompt longer than
  ``max_num_batched_tokens`` with nothing else producing a token) is not counted; with
  every prompt within the step budget every step is.
- ``vllm:time_to_first_token_seconds``: from the request's arrival at the replica's API
  server to the moment its first token reached the API server's output handler, both on
  the API server's clock: the router and the client are not in it; the wait for a step in
  progress, the queue, the prefill and the hand-over from the engine core are.
- ``vllm:request_queue_time_seconds`` and ``vllm:request_prefill_time_seconds``: per
  finished request, from the engine core's own timestamps: queued to first scheduled, and
  first scheduled to first token. They split the TTFT into queueing and the price of the
  steps, and are compared with the same spans of the simulated calls
  (:mod:`~replay.validation.engine_side`).
- ``vllm:request_decode_time_seconds``: per finished request, from its first token to its
  last, on the engine core's clock: the rest of a call's time at the replica.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from replay.validation.error import ValidateError
from ttlctl.server import client, prom

STEPS = "vllm:iteration_tokens_total_count"
TTFT_SUM = "vllm:time_to_first_token_seconds_sum"
TTFT_COUNT = "vllm:time_to_first_token_seconds_count"
QUEUE_SUM = "vllm:request_queue_time_seconds_sum"
QUEUE_COUNT = "vllm:request_queue_time_seconds_count"
PREFILL_SUM = "vllm:request_prefill_time_seconds_sum"
PREFILL_COUNT = "vllm:request_prefill_time_seconds_count"
DECODE_SUM = "vllm:request_decode_time_seconds_sum"
DECODE_COUNT = "vllm:request_decode_time_seconds_count"
#: needed for a comparison; the others are kept where the server has them
REQUIRED = (STEPS, TTFT_SUM, TTFT_COUNT)
OPTIONAL = (QUEUE_SUM, QUEUE_COUNT, PREFILL_SUM, PREFILL_COUNT, DECODE_SUM, DECODE_COUNT)


class ScrapeFailed(ValidateError):
    """A replica's /metrics could not be read or lacks the series (the message says which)."""


def scrape(url: str) -> dict[str, float]:
    """The series :func:`engine_delta` reads from the replica at ``url``;
    :class:`ScrapeFailed` (one line naming it) when they cannot be read."""
    try:
        values = prom.parse_metrics(client.text(url, "/metrics"))
    except client.ServerError as exc:
        raise ScrapeFailed(str(exc)) from None
    missing = [k for k in REQUIRED if k not in values]
    if missing:
        raise ScrapeFailed(f"{url}/metrics has no {', '.join(missing)}")
    return {k: values[k] for k in (*REQUIRED, *OPTIONAL) if k in values}


def _mean(
    before: Mapping[str, float], after: Mapping[str, float], total: str, count: str
) -> float | None:
    if total not in before or total not in after:
        return None
    n = after[count] - before[count]
    return (after[total] - before[total]) / n if n > 0 else None


def engine_delta(
    before: Mapping[str, float] | None, after: Mapping[str, float] | None
) -> dict[str, Any] | None:
    """A replica's steps, requests, mean TTFT, queue, prefill and decode times over a run
    (None: a side not read)."""
    if before is None or after is None:
        return None
    return {
        "engine_steps": round(after[STEPS] - before[STEPS]),
        "requests": round(after[TTFT_COUNT] - before[TTFT_COUNT]),
        "ttft_sum_s": after[TTFT_SUM] - before[TTFT_SUM],
        "ttft_mean_s": _mean(before, after, TTFT_SUM, TTFT_COUNT),
        "queue_mean_s": _mean(before, after, QUEUE_SUM, QUEUE_COUNT),
        "prefill_mean_s": _mean(before, after, PREFILL_SUM, PREFILL_COUNT),
        "decode_mean_s": _mean(before, after, DECODE_SUM, DECODE_COUNT),
    }
