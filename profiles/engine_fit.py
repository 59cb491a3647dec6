"""A live server's profile fitted from its timings: one measurement, or several pooled.

:mod:`profiles.measure_server` times a running vLLM server from outside and keeps every
timing it took (:class:`~profiles.engine_timings.EngineSamples`): the TTFTs at each prompt
length, and the decode paces (seconds per output token, one per stream) of each batch
shape. :func:`fit_samples` turns one or several such measurements into a
:class:`~profiles.schema.Profile`:

- at each prefill point (a context length) the median of every TTFT taken there, fitted as
  ``a + b·c + q·c²`` (:func:`profiles.fitmath.fit_quadratic`);
- at each decode point (sequences, KV tokens) the median of every pace taken there, fitted
  as ``step + per_seq·seqs + per_kv_token·kv`` (:func:`profiles.fitmath.fit_decode`). A
  pace is the server's own mean inter-token latency over a batch, or, where the server
  could not give it, a stream's time per token as the client saw it
  (:mod:`profiles.decode_pace`; :class:`~profiles.engine_timings.DecodePoint` keeps both
  and says which);
- a decode fit whose step of one sequence is under :data:`DECODE_FLOOR` of a one-token
  prefill is refused (:func:`check_decode_floor`): decode that was not timed, not free;
- at each prefill on a cached prefix (prompt, cached tokens) the median TTFT; what each
  takes beyond the quadratic's price of its new tokens alone is fitted as
  ``per_cached_token_s·cached + per_context_pair_s·cached·new``
  (:func:`profiles.fitmath.fit_cached_prefill`, both ≥ 0): what a cached token costs
  however many tokens follow it, and each new token's attention over each token already
  in KV, which the fresh-prompt quadratic would price at ``2q``. Without such timings at
  two numbers of new tokens neither is set (the profile prices as before);
- at each idle gap the median of every extra a call after that idle spell took beyond the
  same call on a busy engine (:mod:`profiles.server_wake`), never below 0:
  ``Profile.wake``, idle ascending (empty where nothing was timed);
- through every (length, extra) of a prompt of a length new to the engine
  (:mod:`profiles.server_new_shape`) a Theil–Sen line (medians of slopes: robust to a call
  a neighbour slowed), written at the shortest and the longest length, never below 0:
  ``Profile.new_shape`` (:func:`fitted_new_shape`).

One measurement gives exactly the profile ``measure_engine`` has always written. Several
(of the same server configuration: model, KV bytes per token, context window, tokens
generated) are **pooled**: their timings at each point are put together before the median
and the one fit, so a point timed K times as often weighs as such and the fit keeps its
non-negative terms (averaging K fitted coefficients would not: a term one fit zeroes and
another does not moves the others). The result does not depend on the order the
measurements are given in (they are sorted by when they were taken, the points by their
key, and a median is a multiset's), and ``source`` records each measurement's URL and time.

Pure: no clock read (each measurement carries the time it was taken), no file written.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from profiles.engine_timings import STREAM, EngineFitError, EngineSamples
from profiles.fitmath import (
    DecodeFit,
    QuadraticFit,
    fit_cached_prefill,
    fit_decode,
    fit_quadratic,
)
from profiles.schema import Decode, Prefill, Profile, Reload

#: a point's key: a context, an idle gap, or a tuple of counts (sortable)
K = TypeVar("K", int, float, tuple[int, int])

#: host-to-device reload used when nothing better is known (PCIe 4.0 x16-class link)
DEFAULT_RELOAD = Reload(bandwidth_bytes_per_s=25e9, latency_s=50e-6)

PREFILL_TIMING = (
    "client-side TTFT of streamed /v1/completions (max_tokens=1), median of repeats; "
    "includes the HTTP round trip and the first sampled token"
)
DECODE_TIMING = (
    "batches of streamed requests whose prompts were cached first; at each point the "
    "server's own mean inter-token latency over each batch (vllm:inter_token_latency_seconds "
    "of /metrics, read before and after: engine-core step timestamps, not affected by how "
    "the frontend delivers tokens), or, where the server could not give it (decode_from), "
    "each stream's client-side time per output token over the window in which every "
    "request of the batch is past its second token (each stream's pace after its second "
    "token when the streams never overlap: decode_batches_without_common_window); median "
    "over batches or streams and repeats; kv_tokens = seqs × (context + "
    "decode_output_tokens/2)"
)
CACHED_PREFILL_TIMING = (
    "client-side TTFT of streamed /v1/completions (max_tokens=1) whose prompt is a prefix "
    "sent alone just before (so cached) and fresh tokens, with the cached tokens the server "
    "reported; median of repeats; what each takes beyond the fresh-prompt fit's price of its "
    "new tokens alone fitted as per_cached_token_s·cached + per_context_pair_s·cached·new"
)
WAKE_TIMING = (
    "client-side end to end (sent to the stream's end) of a streamed /v1/completions on a "
    "prefix sent alone just before (so cached) with fresh new tokens, sent at once after one "
    "untimed call of the same shape (which follows the prefix's prefill), then again after "
    "an idle gap; extra = the idle call's less the busy call's, pairs round robin over the "
    "gaps, median per gap, clamped at 0"
)
NEW_SHAPE_TIMING = (
    "client-side TTFT of streamed /v1/completions (max_tokens=1) of a fresh prompt of a "
    "length drawn at random (not a prompt length the other phases send), less the median "
    "TTFT of two more fresh prompts of that length sent right after; a Theil-Sen line "
    "(the median of the pairwise slopes, then the median intercept) through every (length, "
    "extra), at the shortest and the longest length, clamped at 0"
)
#: what a measurement written before a term (a cached prefix's, the wake) was timed says
NOT_TIMED = "not measured (a measurement taken before ttlctl timed it)"
#: the fitted decode step of one sequence must cost at least this share of a one-token
#: prefill (TTFT): both run the model over one new token; the TTFT adds the HTTP round trip
#: and the request's admission, which may be several times a step (a remote server, a tiny
#: model) but not fifty times. Streams timed in bursts gave 11 µs against ~10 ms
DECODE_FLOOR = 0.02


def profile_name(model_id: str) -> str:
    """``engine-<model>``: the model id, or a local path's last component, made safe."""
    ident = model_id.rstrip("/")
    if ident.startswith(("/", ".", "~")):  # a local path: its last component
        ident = ident.rsplit("/", 1)[-1]
    ident = re.sub(r"[^a-z0-9._-]+", "-", ident.lower()).strip("-")
    return f"engine-{ident or 'model'}"


#: what measurements must share to be pooled
_SAME = ("model", "kv_bytes_per_token", "max_model_len", "output_tokens", "decode_output_tokens")


def _in_order(samples: Sequence[EngineSamples]) -> list[EngineSamples]:
    """The measurements by when they were taken (then URL: a total, input-free order),
    checked poolable."""
    if not samples:
        raise EngineFitError("no measurement to fit a profile on")
    ordered = sorted(samples, key=lambda s: (s.created, s.url, repr(s)))
    first = ordered[0]
    for s in ordered[1:]:
        for name in _SAME:
            if getattr(s, name) != getattr(first, name):
                raise EngineFitError(
                    f"cannot pool measurements of different servers: {name} "
                    f"{getattr(first, name)!r} at {first.url} against {getattr(s, name)!r} "
                    f"at {s.url}"
                )
    return ordered


def _medians(timed: Iterable[tuple[K, Sequence[float]]]) -> list[tuple[K, float]]:
    """Each key's timings put together (a key may come several times: one per
    measurement), and their median, sorted by key; a key with no timing is left out."""
    pooled: dict[K, list[float]] = {}
    for key, times in timed:
        pooled.setdefault(key, []).extend(times)
    return [(k, statistics.median(sorted(pooled[k]))) for k in sorted(pooled) if pooled[k]]


def pooled_points(
    samples: Sequence[EngineSamples],
) -> tuple[list[tuple[int, float]], list[tuple[int, int, float]]]:
    """The fit's points: (context, median TTFT) and (sequences, KV tokens, median pace),
    each median over every measurement's timings at that point, sorted by point."""
    prefill = _medians(point for s in samples for point in s.prefill)
    decode = _medians(((seqs, kv), got) for s in samples for seqs, kv, got in s.decode)
    return prefill, [(seqs, kv, pace) for (seqs, kv), pace in decode]


def pooled_cached_points(samples: Sequence[EngineSamples]) -> list[tuple[int, int, float]]:
    """(prompt tokens, cached tokens, median TTFT) of the prefills on a cached prefix,
    each median over every measurement's timings at that point, sorted by point."""
    timed = _medians(((p, c), t) for s in samples for p, c, t in s.cached_prefill)
    return [(p, c, ttft) for (p, c), ttft in timed]


def fitted_new_shape(samples: Sequence[EngineSamples]) -> list[tuple[float, float]]:
    """``Profile.new_shape``: a line through every measurement's (length, extra) of a new
    step size, by Theil and Sen (the median of the slopes between every two lengths, and the
    median of what each point then leaves for the intercept: one call caught by a neighbour's
    burst moves it little, where least squares followed it), written at the shortest and the
    longest length, never below 0 (one length: the median extra; none: no points)."""
    timed = sorted(p for s in samples for p in s.new_shape)
    if not timed:
        return []
    lo, hi = float(timed[0][0]), float(timed[-1][0])
    if hi == lo:
        return [(lo, max(statistics.median(x for _, x in timed), 0.0))]
    slope = statistics.median(
        (y2 - y1) / (x2 - x1)
        for i, (x1, y1) in enumerate(timed)
        for x2, y2 in timed[i + 1 :]
        if x2 != x1
    )
    intercept = statistics.median(y - slope * x for x, y in timed)
    return [(x, max(intercept + slope * x, 0.0)) for x in (lo, hi)]


def pooled_wake(samples: Sequence[EngineSamples]) -> list[tuple[float, float]]:
    """(idle seconds, median extra seconds) of the calls after an idle spell, each median
    over every measurement's extras at that gap, clamped at 0, idle ascending."""
    return [(idle, max(extra, 0.0)) for idle, extra in _medians(p for s in samples for p in s.wake)]


def fit_samples(samples: Sequence[EngineSamples]) -> Profile:
    """The profile of one measurement, or of several pooled (see the module's docstring).

    Raises :class:`EngineFitError` (none given, measurements of different servers, or a
    decode step too cheap to be real: :func:`check_decode_floor`) or
    :class:`~profiles.fitmath.FitMathError` (too few points, a timing not positive).
    """
    ordered = _in_order(samples)
    first, last = ordered[0], ordered[-1]
    prefill_points, decode_points = pooled_points(ordered)
    qfit = fit_quadratic([c for c, _ in prefill_points], [t for _, t in prefill_points])
    dfit = fit_decode(
        [p[0] for p in decode_points], [p[1] for p in decode_points], [p[2] for p in decode_points]
    )
    cached_points = pooled_cached_points(ordered)
    cfit = (
        fit_cached_prefill(
            [c for _, c, _ in cached_points],
            [p - c for p, c, _ in cached_points],
            [t for _, _, t in cached_points],
            qfit,
        )
        if len({p - c for p, c, _ in cached_points}) >= 2
        else None
    )
    wake = pooled_wake(ordered)
    new_shape = fitted_new_shape(ordered)
    urls = list(dict.fromkeys(s.url for s in ordered))
    sources: dict[tuple[int, int], set[str]] = {}
    for s in ordered:
        for key, got in s.decode_from().items():
            sources.setdefault(key, set()).add(got)
    if any(STREAM in got for got in sources.values()):
        # the server's own inter-token latency is the engine core's clock: a fast step
        # behind a slow round trip is real, and only streamed timings are doubted
        check_decode_floor(qfit, dfit, decode_points, urls)
    versions = list(dict.fromkeys(s.version for s in ordered))
    source: dict[str, Any] = {
        "kind": "measured",
        "via": "engine",
        "url": urls[0] if len(urls) == 1 else urls,
        "server_version": versions[0] if len(versions) == 1 else versions,
        "created": last.created,
        "repeats": sum(s.repeats for s in ordered),
        "output_tokens": first.output_tokens,
        "decode_output_tokens": first.decode_output_tokens,
        "decode_batches_without_common_window": sum(
            s.decode_batches_without_common_window for s in ordered
        ),
        "kv_bytes_per_token_from": first.kv_bytes_from,
        "kv_capacity_tokens": first.kv_capacity,
        "prefill_timing": PREFILL_TIMING,
        "cached_prefill_timing": CACHED_PREFILL_TIMING
        if cfit is not None
        else next((s.cached_prefill_note for s in ordered if s.cached_prefill_note), NOT_TIMED),
        "wake_timing": WAKE_TIMING
        if wake
        else next((s.wake_note for s in ordered if s.wake_note), NOT_TIMED),
        "new_shape_timing": NEW_SHAPE_TIMING
        if new_shape
        else next((s.new_shape_note for s in ordered if s.new_shape_note), NOT_TIMED),
        "decode_timing": DECODE_TIMING,
        "decode_from": [
            [sq, kv, " + ".join(sorted(sources[sq, kv]))] for sq, kv, _ in decode_points
        ],
        "prefix_cache_reset": all(s.prefix_cache_reset for s in ordered),
        "max_cached_tokens_seen": max(s.max_cached_tokens_seen for s in ordered),
        "reload": "not measured: default",
        "reload_default": {
            "bandwidth_bytes_per_s": DEFAULT_RELOAD.bandwidth_bytes_per_s,
            "latency_s": DEFAULT_RELOAD.latency_s,
            "why": "a live server exposes no host-to-device copy to time",
        },
        "fit": {
            "prefill": {"rmse_s": qfit.rmse_s, "max_rel_error": qfit.max_rel_error},
            "decode": {
                "max_rel_error": dfit.max_rel_error,
                "points": [list(p) for p in decode_points],
            },
            "cached_prefill": {
                "points": [list(p) for p in cached_points],
                "max_rel_error": None if cfit is None else cfit.max_rel_error,
            },
            "wake": {"points": [list(p) for p in wake]},
            "new_shape": {"points": [list(p) for s in ordered for p in s.new_shape]},
        },
    }
    budgets = {s.step_budget for s in ordered}
    if len(budgets) == 1 and (budget := budgets.pop()) is not None:
        # the step budget the server ran with (Profile.chunk_tokens): one server's, never
        # a guess across servers that told different ones or none
        source["flags"] = {"max_num_batched_tokens": budget}
    if len(ordered) > 1:
        source["pooled"] = {
            "measurements": len(ordered),
            "how": "every measurement's timings at each point put together, the median "
            "taken, then fitted once (repeats: the timings pooled at each point)",
            "taken": [{"url": s.url, "created": s.created} for s in ordered],
        }
    all_contexts = [c for s in ordered for c, _ in s.prefill]
    return Profile(
        name=profile_name(first.model),
        device=f"vllm server at {urls[0]}"
        if len(urls) == 1
        else f"vllm servers at {', '.join(urls)}",
        model=first.model,
        kv_bytes_per_token=first.kv_bytes_per_token,
        max_context=first.max_model_len if first.max_model_len > 0 else max(all_contexts),
        prefill=Prefill(
            qfit.a,
            qfit.b,
            qfit.q,
            tuple(prefill_points),
            qfit.rmse_s,
            includes_step=True,
            per_cached_token_s=0.0 if cfit is None else cfit.per_cached_token_s,
            per_context_pair_s=None if cfit is None else cfit.per_context_pair_s,
        ),
        reload=DEFAULT_RELOAD,
        decode=Decode(dfit.step_s, dfit.per_seq_s, dfit.per_kv_token_s),
        source=source,
        wake=tuple(wake),
        new_shape=tuple(new_shape),
    )


def check_decode_floor(
    prefill: QuadraticFit,
    decode: DecodeFit,
    points: Sequence[tuple[int, int, float]],
    urls: Sequence[str],
) -> None:
    """Refuse a decode fit whose cheapest measured point (one sequence at its shortest KV,
    as fitted) costs under :data:`DECODE_FLOOR` of a one-token prefill: the server's decode
    was not timed (:class:`EngineFitError`, one line naming the server). Applied where a
    point was timed from streamed tokens (:func:`fit_samples`)."""
    seqs, kv = min(((s, k) for s, k, _ in points), key=lambda p: (p[0], p[1]))
    step = decode.step_s + decode.per_seq_s * seqs + decode.per_kv_token_s * kv
    one_token = prefill(1)
    if step > 0 and step >= DECODE_FLOOR * one_token:
        return
    raise EngineFitError(
        f"{', '.join(urls)}: the fitted decode step of {seqs} sequence(s) at {kv} KV tokens "
        f"is {step * 1e3:.4g} ms, under {DECODE_FLOOR:g} × a one-token prefill "
        f"({one_token * 1e3:.4g} ms): decode was not timed (streamed tokens that arrived in "
        "bursts, and no vllm:inter_token_latency_seconds in the server's /metrics to use "
        "instead?); measure again on a quieter machine, with the server's stats logging on"
    )
