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
- a prefill on top of a cached prefix (:mod:`profiles.server_cached`): the TTFT of a
  prompt whose prefix was just sent alone, with the cached tokens the server reports;
  what it takes beyond the fit above's price of its new tokens is priced per cached
  token (``prefill.per_cached_token_s``) and per (new, cached) pair
  (``prefill.per_context_pair_s``).
- decode (:mod:`profiles.server_decode`): the time per output token of batches of
  streamed requests (``ignore_eos``, ``output_tokens`` tokens, at least
  :data:`~profiles.server_decode.DECODE_MIN_TOKENS`) at two or three KV lengths, alone
  and a few at a time (threads started together), fitted as ``step + per_seq·seqs +
  per_kv_token·kv`` (:func:`profiles.fitmath.fit_decode`, ``kv`` the batch's KV tokens).
  Each prompt is first sent alone with ``max_tokens=1`` so that its KV is in the prefix
  cache: the batch then prefills only its last partial block, in one step, and decodes
  together. A batch's pace is the server's own mean inter-token
  latency over it (``vllm:inter_token_latency_seconds`` of ``/metrics``, read just before
  and just after: the engine core's step timestamps), which the streams' bursts cannot
  fool; where the server cannot give it (no such series, or its count is not this
  batch's), each stream's pace over the window in which every request of the batch is
  past its second token, so that no peer's prefill is counted as decode time, and a
  warning says so. Both clocks, the choice and why: :mod:`profiles.decode_pace`.
- the wake (:mod:`profiles.server_wake`): a call (a cached prefix, 64 fresh tokens, 8 out)
  timed end to end right after another (itself after the prefix's prefill, untimed) and
  again after an idle gap (0.1 s, 0.3 s, 1 s), pairs taken round robin; the median of
  each gap's extras (idle less busy, never below 0) is ``Profile.wake``, which the
  simulator charges to the first step after an idle spell. It sleeps about
  ``sum(IDLE_GAPS) × max(repeats, 5)`` seconds.
- a new step size (:mod:`profiles.server_new_shape`): a fresh prompt of a length the
  engine has not run, timed (TTFT) against fresh prompts of the same length right after,
  at eight lengths drawn at random between the shortest and the longest context; a line
  through the extras is ``Profile.new_shape``, which the simulator charges to the first
  step of each size on an engine that has not run it.
- reload: NOT measured. A server exposes no host-to-device copy, so the profile
  carries a labelled default (:data:`profiles.engine_fit.DEFAULT_RELOAD`), and ``source`` says so.

KV bytes per token come from the model config (``--model``) when given, else
from the server's ``vllm:cache_config_info`` metric (``kv_cache_memory_bytes /
kv_cache_size_tokens``); with neither,
:class:`~profiles.server_target.ServerMeasureError` asks for ``--model``.

Everything said to the server goes through its door (:mod:`ttlctl.server`): every
failure to talk to it is a :class:`~ttlctl.server.client.ServerError`, a refusal of
what was asked a :class:`~profiles.server_target.ServerMeasureError` (both ``ValueError``),
each one line naming the URL. ``measure_engine`` runs in steps: what the server is and the
contexts to time (:mod:`profiles.server_target`), prefill (:func:`_measure_prefill`, here),
a prefill on a cached prefix (:mod:`profiles.server_cached`), decode
(:mod:`profiles.server_decode`), the wake (:mod:`profiles.server_wake`), each request
streamed and timed by :mod:`profiles.server_stream`: every timing kept (:func:`measure_samples`, a
:class:`~profiles.engine_timings.EngineSamples`), then fitted
(:func:`profiles.engine_fit.fit_samples`, which also pools several measurements of one
server configuration into one profile, and refuses a decode step too cheap to be real).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from profiles.engine_fit import fit_samples
from profiles.engine_timings import EngineSamples
from profiles.schema import Profile
from profiles.server_cached import NEW_TOKENS, cached_plan, measure_cached_prefill
from profiles.server_decode import measure_decode
from profiles.server_new_shape import measure_new_shape
from profiles.server_stream import Sender
from profiles.server_target import ServerMeasureError, contexts_to_time, probe_target
from profiles.server_wake import measure_wake, wake_prefix
from ttlctl.server.client import normalise_url
from ttlctl.server.vocab import token_pool

Progress = Callable[[str, int, int], None]


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
    contexts_to_time(probe_target(url, model_config, timeout_s), None, output_tokens)


def measure_engine(
    url: str,
    *,
    model_config: dict[str, Any] | None = None,
    contexts: Sequence[int] | None = None,
    max_context: int | None = None,
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
    output_tokens − 16`` (and ``max_context``, which also bounds ``contexts``).
    ``progress(phase, done, total)`` is called as measurements finish (phases
    ``"prefill"``, ``"cached prefill"``, ``"decode"``, ``"wake"`` and ``"new sizes"``).
    Raises :class:`ServerMeasureError` or :class:`~ttlctl.server.client.ServerError`, each a
    one-line message naming the URL, when the server cannot be used. The timings
    themselves: :func:`measure_samples`; this is their fit
    (:func:`profiles.engine_fit.fit_samples`).
    """
    return fit_samples(
        [
            measure_samples(
                url,
                model_config=model_config,
                contexts=contexts,
                max_context=max_context,
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
    max_context: int | None = None,
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
    target = probe_target(normalise_url(url), model_config, timeout_s)
    ctxs = contexts_to_time(target, contexts, output_tokens, max_context)
    vocab = int(model_config.get("vocab_size") or 0) if model_config else 0
    pool = token_pool(target.url, target.model, vocab or None, timeout_s)
    sender = Sender(target, pool, timeout_s)
    prefill = _measure_prefill(sender, ctxs, repeats, report)
    cached = measure_cached_prefill(sender, ctxs, repeats, report)
    decode = measure_decode(sender, target, ctxs, output_tokens, repeats, report)
    wake = measure_wake(sender, ctxs, repeats, report)
    # the other phases' prompt lengths (their steps may still take other sizes: rare)
    avoid = [*ctxs, *cached_plan(ctxs), *NEW_TOKENS, wake_prefix(ctxs)]
    new_shape = measure_new_shape(sender, ctxs, avoid, report)
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
        cached_prefill=cached.points,
        cached_prefill_note=cached.note,
        wake=wake.points,
        wake_note=wake.note,
        new_shape=new_shape.points,
        new_shape_note=new_shape.note,
        step_budget=target.step_budget,
    )


@dataclass(frozen=True, slots=True)
class _Prefill:
    """Prefill as measured: the TTFTs at each context, the largest prefix hit seen."""

    ttfts: tuple[tuple[int, tuple[float, ...]], ...]
    cached_max: int


def _measure_prefill(
    sender: Sender, ctxs: Sequence[int], repeats: int, report: Progress
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
