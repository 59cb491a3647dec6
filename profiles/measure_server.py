"""Profile a running vLLM server through its OpenAI-compatible HTTP API (`ttlctl profile --engine`).

What a live server can tell from outside, timed on the client:

- prefill: time to first token (TTFT) of a streamed ``/v1/completions`` request
  whose prompt is ``c`` fresh random token ids (no prefix-cache hit possible;
  ``POST /reset_prefix_cache`` is also called between measurements when the
  server has it, i.e. ``VLLM_SERVER_DEV_MODE=1``), ``max_tokens=1``; the median
  of ``repeats`` per context, fitted as ``a + b·c + q·c²``
  (:func:`profiles.fitmath.fit_quadratic`). TTFT includes the HTTP round trip
  and the step that samples the first token: what a user waits for when a
  context is rebuilt.
- decode: the time per output token of batches of streamed requests (``ignore_eos``,
  ``output_tokens`` tokens, at least :data:`DECODE_MIN_TOKENS`) at two or three KV
  lengths, alone and a few at a time (threads started together), fitted as ``step +
  per_seq·seqs + per_kv_token·kv`` (:func:`profiles.fitmath.fit_decode`, ``kv`` the
  batch's KV tokens). Each prompt is first sent alone with ``max_tokens=1`` so that its
  KV is in the prefix cache: the batch then prefills only its last partial block, in
  one step, and decodes together. A batch's pace is the server's own mean inter-token
  latency over it (``vllm:inter_token_latency_seconds`` of ``/metrics``, read just before
  and just after: the engine core's step timestamps), which the streams' bursts cannot
  fool; where the server cannot give it (no such series, or its count is not this
  batch's), each stream's pace over the window in which every request of the batch is
  past its second token, so that no peer's prefill is counted as decode time, and a
  warning says so. Both clocks, the choice and why: :mod:`profiles.decode_pace`.
- reload: NOT measured. A server exposes no host-to-device copy, so the profile
  carries a labelled default (:data:`profiles.engine_fit.DEFAULT_RELOAD`), and ``source`` says so.

KV bytes per token come from the model config (``--model``) when given, else
from the server's ``vllm:cache_config_info`` metric (``kv_cache_memory_bytes /
kv_cache_size_tokens``); with neither, :class:`ServerMeasureError` asks for ``--model``.

Everything said to the server goes through its door (:mod:`ttlctl.server`): every
failure to talk to it is a :class:`~ttlctl.server.client.ServerError`, a refusal of
what was asked a :class:`ServerMeasureError` (both ``ValueError``), each one line
naming the URL. ``measure_engine`` runs in steps: what the server is
(:func:`_target`), the contexts to time (:func:`_contexts`), prefill
(:func:`_measure_prefill`), decode (:func:`_measure_decode`): every timing kept
(:func:`measure_samples`, a :class:`~profiles.engine_fit.EngineSamples`), then fitted
(:func:`profiles.engine_fit.fit_samples`, which also pools several measurements of one
server configuration into one profile, and refuses a decode step too cheap to be real).
"""

from __future__ import annotations

import random
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from profiles.decode_pace import FROM_SERVER, BatchPace, Stream, batch_pace, itl_delta
from profiles.engine_fit import STREAM, DecodePoint, EngineSamples, fit_samples
from profiles.grid import engine_contexts
from profiles.models import kv_bytes_per_token as config_kv_bytes_per_token
from profiles.schema import Profile
from ttlctl.errors import TtlctlError
from ttlctl.server import sse
from ttlctl.server.cache import reset_prefix_cache
from ttlctl.server.client import HTTPStatusError, normalise_url, text
from ttlctl.server.facts import probe
from ttlctl.server.prom import parse_metrics
from ttlctl.server.vocab import token_pool

#: tokens kept free below ``max_model_len`` beside the generated ones
CONTEXT_MARGIN = 16
#: concurrent sequences of the batched decode measurements
DECODE_CONCURRENCY = (1, 4, 8)
#: fewest tokens a decode measurement generates: enough for a window in which a
#: whole batch decodes (its streams reach the client a few milliseconds apart)
DECODE_MIN_TOKENS = 16
#: share of the server's KV capacity a decode batch may fill
KV_FILL = 0.9
#: the route every measurement goes to
COMPLETIONS = "/v1/completions"

Progress = Callable[[str, int, int], None]


class ServerMeasureError(TtlctlError, ValueError):
    """The server cannot be measured as asked: one line naming the URL."""


@dataclass(frozen=True, slots=True)
class _Target:
    """The server as measured: what it serves, how long a request may be, its KV cache."""

    url: str
    model: str
    #: longest request (0: unknown)
    max_model_len: int
    #: KV cache capacity in tokens (None: unknown)
    kv_capacity: int | None
    version: str | None
    kv_bytes: int
    kv_from: str


def _target(url: str, model_config: dict[str, Any] | None, timeout_s: float) -> _Target:
    """Probe the server; its KV bytes per token from the model config or its metrics
    (fails before any time is spent measuring)."""
    info = probe(url, timeout_s)
    if info.max_model_len:
        max_model_len = info.max_model_len
    elif model_config is not None:
        max_model_len = int(model_config.get("max_position_embeddings") or 0)
    else:
        max_model_len = 0
    if model_config is not None:
        kv_bytes = config_kv_bytes_per_token(model_config)
        kv_from = "model config"
    else:
        memory, capacity = info.kv_cache_memory_bytes, info.kv_tokens
        if memory is None or capacity is None:
            raise ServerMeasureError(
                f"{url}: the server does not tell its KV bytes per token; "
                "pass the model's config with --model"
            )
        kv_bytes = memory // capacity
        kv_from = "server metrics: kv_cache_memory_bytes / kv_cache_size_tokens"
    return _Target(url, info.model, max_model_len, info.kv_tokens, info.version, kv_bytes, kv_from)


def check_measurable(
    url: str,
    model_config: dict[str, Any] | None,
    *,
    output_tokens: int,
    timeout_s: float = 30.0,
) -> None:
    """What :func:`measure_samples` checks before it times anything (the server answers,
    its KV bytes per token and the prompt lengths to time are known), on its own: a caller
    that measures only after minutes of other work asks first (:class:`ServerMeasureError`
    or a :class:`~ttlctl.server.client.ServerError`, one line naming the URL)."""
    _contexts(_target(url, model_config, timeout_s), None, output_tokens)


def _contexts(target: _Target, contexts: Sequence[int] | None, output_tokens: int) -> list[int]:
    """The prompt lengths prefill is timed at: ``contexts``, checked against the server,
    or the default grid up to what the server takes."""
    url, max_model_len, kv_capacity = target.url, target.max_model_len, target.kv_capacity
    limit = (max_model_len or 0) - output_tokens - CONTEXT_MARGIN
    if kv_capacity is not None:
        limit = min(limit, kv_capacity - output_tokens - CONTEXT_MARGIN)
    if contexts is None:
        if max_model_len <= 0:
            raise ServerMeasureError(
                f"{url}: the server does not report max_model_len; pass contexts or --model"
            )
        ctxs = engine_contexts(limit)
    else:
        ctxs = sorted({int(c) for c in contexts})
        for c in ctxs:
            if c < 1:
                raise ServerMeasureError(f"{url}: context lengths must be positive, got {c}")
            if max_model_len > 0 and c + output_tokens > max_model_len:
                raise ServerMeasureError(
                    f"{url}: context {c} + {output_tokens} output tokens does not fit "
                    f"max_model_len {max_model_len}"
                )
            if kv_capacity is not None and c + output_tokens > kv_capacity:
                raise ServerMeasureError(
                    f"{url}: context {c} + {output_tokens} output tokens does not fit "
                    f"the server's KV cache ({kv_capacity} tokens)"
                )
    if len(ctxs) < 3:
        raise ServerMeasureError(
            f"{url}: need at least 3 context lengths to fit prefill, got {ctxs} "
            f"(max_model_len {max_model_len})"
        )
    return ctxs


class _Sender:
    """Streamed completions of fresh random prompts to one server, timed chunk by chunk,
    and the prefix cache emptied between measurements when the server allows it."""

    def __init__(self, target: _Target, pool: list[int], timeout_s: float) -> None:
        self.url = target.url
        self.model = target.model
        self.pool = pool
        self.timeout_s = timeout_s
        self.rng = random.Random()
        self.reset_ok = True

    def body(self, n: int, max_tokens: int) -> dict[str, Any]:
        """A request of ``n`` fresh prompt tokens generating exactly ``max_tokens``."""
        return {
            "model": self.model,
            "prompt": [self.rng.choice(self.pool) for _ in range(n)],
            "max_tokens": max_tokens,
            "min_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }

    def reset(self) -> None:
        """Empty the prefix cache (warn once, and stop trying, when the server cannot)."""
        if not self.reset_ok:
            return
        if not reset_prefix_cache(self.url, self.timeout_s):
            self.reset_ok = False
            warnings.warn(
                f"{self.url}: POST /reset_prefix_cache is not available (start the server "
                "with VLLM_SERVER_DEV_MODE=1); relying on fresh random prompts alone to "
                "avoid prefix-cache hits",
                RuntimeWarning,
                stacklevel=4,
            )

    def stream(self, body: dict[str, Any]) -> Stream:
        """POST a streamed /v1/completions and time each chunk that carries tokens."""
        start = time.perf_counter()
        arrivals: list[tuple[float, int]] = []
        cached: int | None = None
        count = 0
        for now, chunk in sse.stream(self.url, COMPLETIONS, body, timeout_s=self.timeout_s):
            usage = chunk.get("usage") or {}
            details = usage.get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                cached = int(details["cached_tokens"])
            if not chunk.get("choices"):
                continue
            # continuous usage stats count tokens exactly; else one token a chunk
            seen = usage.get("completion_tokens")
            new = int(seen) if isinstance(seen, int) else count + 1
            if new > count:
                count = new
                arrivals.append((now, count))
        if not arrivals:
            n = len(body.get("prompt") or ())
            raise ServerMeasureError(
                f"{self.url}: the server returned no tokens for a {n}-token prompt"
            )
        return Stream(start, tuple(arrivals), cached)


def measure_engine(
    url: str,
    *,
    model_config: dict[str, Any] | None = None,
    contexts: Sequence[int] | None = None,
    repeats: int = 3,
    output_tokens: int = 32,
    timeout_s: float = 60.0,
    progress: Progress | None = None,
) -> Profile:
    """Measure a running vLLM server's prefill and decode costs into a :class:`Profile`.

    ``url`` is the server's base URL (``http://host:port``, a trailing ``/v1`` is
    accepted). ``model_config`` (a Hugging Face ``config.json`` as a dict) gives
    KV bytes per token and the vocabulary for random prompts. ``contexts``
    default to :func:`profiles.grid.engine_contexts` up to ``max_model_len −
    output_tokens − 16``. ``progress(phase, done, total)`` is called as measurements finish
    (phases ``"prefill"`` and ``"decode"``). Raises :class:`ServerMeasureError` or
    :class:`~ttlctl.server.client.ServerError`, each a one-line message naming the URL,
    when the server cannot be used. The timings themselves: :func:`measure_samples`;
    this is their fit (:func:`profiles.engine_fit.fit_samples`).
    """
    return fit_samples(
        [
            measure_samples(
                url,
                model_config=model_config,
                contexts=contexts,
                repeats=repeats,
                output_tokens=output_tokens,
                timeout_s=timeout_s,
                progress=progress,
            )
        ]
    )


def measure_samples(
    url: str,
    *,
    model_config: dict[str, Any] | None = None,
    contexts: Sequence[int] | None = None,
    repeats: int = 3,
    output_tokens: int = 32,
    timeout_s: float = 60.0,
    progress: Progress | None = None,
) -> EngineSamples:
    """Every timing :func:`measure_engine` fits, unfitted (the arguments are its own):
    what several measurements of one server pool (:func:`profiles.engine_fit.fit_samples`)."""
    if repeats < 1:
        raise ServerMeasureError("repeats must be at least 1")
    if output_tokens < 4:
        raise ServerMeasureError("output_tokens must be at least 4 (decode needs token gaps)")
    report: Progress = progress or (lambda phase, done, total: None)
    target = _target(normalise_url(url), model_config, timeout_s)
    ctxs = _contexts(target, contexts, output_tokens)
    vocab = int(model_config.get("vocab_size") or 0) if model_config else 0
    pool = token_pool(target.url, target.model, vocab or None, timeout_s)
    sender = _Sender(target, pool, timeout_s)
    prefill = _measure_prefill(sender, ctxs, repeats, report)
    decode = _measure_decode(sender, target, ctxs, output_tokens, repeats, report)
    return EngineSamples(
        url=target.url,
        model=target.model,
        max_model_len=target.max_model_len,
        kv_capacity=target.kv_capacity,
        version=target.version,
        kv_bytes_per_token=target.kv_bytes,
        kv_bytes_from=target.kv_from,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        repeats=repeats,
        output_tokens=output_tokens,
        decode_output_tokens=decode.output_tokens,
        prefill=prefill.ttfts,
        decode=decode.paces,
        decode_batches_without_common_window=decode.no_window,
        prefix_cache_reset=sender.reset_ok,
        max_cached_tokens_seen=prefill.cached_max,
        decode_points=decode.points,
    )


@dataclass(frozen=True, slots=True)
class _Prefill:
    """Prefill as measured: the TTFTs at each context, the largest prefix hit seen."""

    ttfts: tuple[tuple[int, tuple[float, ...]], ...]
    cached_max: int


def _measure_prefill(
    sender: _Sender, ctxs: Sequence[int], repeats: int, report: Progress
) -> _Prefill:
    """TTFT of each context (``max_tokens=1``, the cache emptied first), ``repeats``
    times, taken round robin."""
    sender.stream(sender.body(min(ctxs), 2))  # warm-up: first requests pay one-off costs
    sender.stream(sender.body(max(ctxs), 2))
    ttfts: dict[int, list[float]] = {c: [] for c in ctxs}
    cached_max = 0
    total = len(ctxs) * repeats
    done = 0
    for _ in range(repeats):  # round robin: drift spreads over all contexts alike
        for c in ctxs:
            sender.reset()
            s = sender.stream(sender.body(c, 1))
            ttfts[c].append(s.ttft_s)
            cached_max = max(cached_max, s.cached_tokens or 0)
            done += 1
            report("prefill", done, total)
    return _Prefill(tuple((c, tuple(ttfts[c])) for c in ctxs), cached_max)


@dataclass(frozen=True, slots=True)
class _Decode:
    """Decode as measured: (seqs, KV tokens, the paces the fit takes) per batch shape, both
    timings of each, the tokens each stream generated, batches read without a common window."""

    paces: tuple[tuple[int, int, tuple[float, ...]], ...]
    points: tuple[DecodePoint, ...]
    output_tokens: int
    no_window: int


def _measure_decode(
    sender: _Sender,
    target: _Target,
    ctxs: Sequence[int],
    output_tokens: int,
    repeats: int,
    report: Progress,
) -> _Decode:
    """The decode paces of batches of cached prompts (:func:`_decode_plan`), ``repeats``
    batches a shape: the server's inter-token latency of each batch, or, at a shape where
    one batch lacks it, every stream's pace (:mod:`profiles.decode_pace`), which a
    warning names."""
    dec_out = max(output_tokens, DECODE_MIN_TOKENS)
    plan = _decode_plan(ctxs, dec_out, target.max_model_len, target.kv_capacity)
    paces: list[tuple[int, int, tuple[float, ...]]] = []
    points: list[DecodePoint] = []
    total = len(plan) * repeats
    done = 0
    no_window = 0
    for seqs, kv_len in plan:
        batches: list[BatchPace] = []
        for _ in range(repeats):
            sender.reset()
            batch = [sender.body(kv_len, dec_out) for _ in range(seqs)]
            for b in batch:  # cache each prompt: the batch then prefills one step only
                sender.stream({**b, "max_tokens": 1, "min_tokens": 1})
            timed = _decode_batch(sender, batch)
            batches.append(timed)
            no_window += not timed.windowed
            done += 1
            report("decode", done, total)
        point = _decode_point(seqs, seqs * (kv_len + dec_out // 2), batches)
        chosen = point.itl if point.source == FROM_SERVER else point.stream
        if not chosen:
            raise ServerMeasureError(f"{target.url}: too few tokens streamed to time decode steps")
        points.append(point)
        paces.append((point.seqs, point.kv_tokens, chosen))
    _warn_streamed(target.url, points)
    return _Decode(tuple(paces), tuple(points), dec_out, no_window)


def _decode_point(seqs: int, kv_tokens: int, batches: Sequence[BatchPace]) -> DecodePoint:
    """A shape's batches as one point: the server's figures if every batch has one, else
    the streams' (and why)."""
    stream = tuple(p for b in batches for p in b.stream)
    itl = tuple(b.itl_s for b in batches if b.itl_s is not None)
    if len(itl) == len(batches):
        return DecodePoint(seqs, kv_tokens, FROM_SERVER, stream, itl)
    note = next(b.note for b in batches if b.itl_s is None)
    bursty = sum(b.bursty for b in batches)
    if bursty:
        note += f"; {bursty} of {len(batches)} batches streamed in bursts"
    return DecodePoint(seqs, kv_tokens, STREAM, stream, itl, note)


def _warn_streamed(url: str, points: Sequence[DecodePoint]) -> None:
    """Warn (once) when decode points are timed from the streams alone."""
    streamed = [p for p in points if p.source == STREAM]
    if streamed:
        warnings.warn(
            f"{url}: {len(streamed)} of {len(points)} decode points timed from the streamed "
            f"tokens' arrival, not the server's inter-token latency: {streamed[0].note}",
            RuntimeWarning,
            stacklevel=4,
        )


def _decode_plan(
    ctxs: Sequence[int], output_tokens: int, max_model_len: int, kv_capacity: int | None
) -> list[tuple[int, int]]:
    """(concurrent sequences, context tokens each) of the decode measurements."""
    short, long = min(ctxs), max(ctxs)
    mid = (short + long) // 2
    lengths = sorted({short, mid, long})
    per_seq_cap = max_model_len - output_tokens if max_model_len > 0 else long
    plan: list[tuple[int, int]] = []
    for seqs in DECODE_CONCURRENCY:
        chosen = lengths if seqs == 1 else [short, long]
        for length in chosen:
            kv_len = min(length, per_seq_cap)
            if kv_capacity is not None:
                kv_len = min(kv_len, int(kv_capacity * KV_FILL) // seqs - output_tokens)
            if kv_len >= 16 and (seqs, kv_len) not in plan:
                plan.append((seqs, kv_len))
    return plan


def _decode_batch(sender: _Sender, bodies: list[dict[str, Any]]) -> BatchPace:
    """Start the requests together; their paces both ways (:func:`profiles.decode_pace.batch_pace`):
    the server's ``/metrics`` read just before and just after."""
    barrier = threading.Barrier(len(bodies))

    def one(body: dict[str, Any]) -> Stream:
        barrier.wait(timeout=sender.timeout_s)
        return sender.stream(body)

    before = _metrics(sender)
    if len(bodies) == 1:
        streams = [sender.stream(bodies[0])]
    else:
        with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
            streams = list(pool.map(one, bodies))
    after = _metrics(sender)
    itl = itl_delta(before, after) if before is not None and after is not None else None
    return batch_pace(streams, itl)


def _metrics(sender: _Sender) -> dict[str, float] | None:
    """The server's ``/metrics``, parsed (None: it has none)."""
    try:
        return parse_metrics(text(sender.url, "/metrics", timeout_s=sender.timeout_s))
    except HTTPStatusError:
        return None
