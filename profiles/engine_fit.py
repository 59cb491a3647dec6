"""A live server's profile fitted from its timings: one measurement, or several pooled.

:mod:`profiles.measure_server` times a running vLLM server from outside and keeps every
timing it took (:class:`EngineSamples`): the TTFTs at each prompt length, and the decode
paces (seconds per output token, one per stream) of each batch shape. :func:`fit_samples`
turns one or several such measurements into a :class:`~profiles.schema.Profile`:

- at each prefill point (a context length) the median of every TTFT taken there, fitted as
  ``a + b·c + q·c²`` (:func:`profiles.fitmath.fit_quadratic`);
- at each decode point (sequences, KV tokens) the median of every pace taken there, fitted
  as ``step + per_seq·seqs + per_kv_token·kv`` (:func:`profiles.fitmath.fit_decode`). A
  pace is the server's own mean inter-token latency over a batch, or, where the server
  could not give it, a stream's time per token as the client saw it
  (:mod:`profiles.decode_pace`; :class:`DecodePoint` keeps both and says which);
- a decode fit whose step of one sequence is under :data:`DECODE_FLOOR` of a one-token
  prefill is refused (:func:`check_decode_floor`): decode that was not timed, not free.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from profiles.fitmath import DecodeFit, QuadraticFit, fit_decode, fit_quadratic
from profiles.schema import Decode, Prefill, Profile, Reload
from ttlctl.errors import TtlctlError

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
#: the fitted decode step of one sequence must cost at least this share of a one-token
#: prefill (TTFT): both run the model over one new token; the TTFT adds the HTTP round trip
#: and the request's admission, which may be several times a step (a remote server, a tiny
#: model) but not fifty times. Streams timed in bursts gave 11 µs against ~10 ms
DECODE_FLOOR = 0.02
#: what a decode point recorded before the server's inter-token latency was read: streams
STREAM = "stream"


class EngineFitError(TtlctlError, ValueError):
    """Measurements that cannot be fitted together: one line saying why."""


@dataclass(frozen=True, slots=True)
class DecodePoint:
    """Both timings of one decode point, and which one :attr:`EngineSamples.decode` holds."""

    seqs: int
    kv_tokens: int
    #: where the point's paces come from (``profiles.decode_pace.FROM_SERVER`` or ``STREAM``)
    source: str
    #: each stream's client-side seconds a token, every repeat
    stream: tuple[float, ...]
    #: the server's mean inter-token latency of each batch it could give (seconds)
    itl: tuple[float, ...]
    #: why the stream is used ("" when it is not)
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "seqs": self.seqs,
            "kv_tokens": self.kv_tokens,
            "source": self.source,
            "stream": list(self.stream),
            "itl": list(self.itl),
            "note": self.note,
        }


def _point_from_json(data: Mapping[str, Any]) -> DecodePoint:
    return DecodePoint(
        seqs=int(data["seqs"]),
        kv_tokens=int(data["kv_tokens"]),
        source=str(data["source"]),
        stream=tuple(float(x) for x in data["stream"]),
        itl=tuple(float(x) for x in data["itl"]),
        note=str(data.get("note", "")),
    )


@dataclass(frozen=True, slots=True)
class EngineSamples:
    """One measurement of a server: what it is, and every timing taken, before any fit."""

    url: str
    model: str
    #: longest request (0: unknown)
    max_model_len: int
    #: KV cache capacity in tokens (None: unknown)
    kv_capacity: int | None
    version: str | None
    kv_bytes_per_token: int
    kv_bytes_from: str
    #: when the measurement ended (ISO 8601, UTC)
    created: str
    #: timings taken at each prefill point and of each decode batch shape
    repeats: int
    output_tokens: int
    decode_output_tokens: int
    #: (context tokens, the TTFTs in seconds) per prefill point
    prefill: tuple[tuple[int, tuple[float, ...]], ...]
    #: (sequences, KV tokens of the batch, the paces in seconds a token) per decode point
    decode: tuple[tuple[int, int, tuple[float, ...]], ...]
    decode_batches_without_common_window: int = 0
    prefix_cache_reset: bool = True
    max_cached_tokens_seen: int = 0
    #: both timings of each decode point (empty: a measurement that timed streams alone)
    decode_points: tuple[DecodePoint, ...] = ()

    def decode_from(self) -> dict[tuple[int, int], str]:
        """Where each decode point's paces come from."""
        given = {(p.seqs, p.kv_tokens): p.source for p in self.decode_points}
        return {(s, k): given.get((s, k), STREAM) for s, k, _ in self.decode}

    def to_json(self) -> dict[str, Any]:
        """The measurement as JSON (:func:`samples_from_json` reads it back)."""
        return {
            "url": self.url,
            "model": self.model,
            "max_model_len": self.max_model_len,
            "kv_capacity": self.kv_capacity,
            "version": self.version,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_bytes_from": self.kv_bytes_from,
            "created": self.created,
            "repeats": self.repeats,
            "output_tokens": self.output_tokens,
            "decode_output_tokens": self.decode_output_tokens,
            "prefill": [[c, list(t)] for c, t in self.prefill],
            "decode": [[s, k, list(p)] for s, k, p in self.decode],
            "decode_batches_without_common_window": self.decode_batches_without_common_window,
            "prefix_cache_reset": self.prefix_cache_reset,
            "max_cached_tokens_seen": self.max_cached_tokens_seen,
            "decode_points": [p.to_json() for p in self.decode_points],
        }


def samples_from_json(data: Mapping[str, Any], where: str = "measurement") -> EngineSamples:
    """:meth:`EngineSamples.to_json` read back (:class:`EngineFitError` names a bad field)."""
    try:
        return EngineSamples(
            url=str(data["url"]),
            model=str(data["model"]),
            max_model_len=int(data["max_model_len"]),
            kv_capacity=None if data.get("kv_capacity") is None else int(data["kv_capacity"]),
            version=None if data.get("version") is None else str(data["version"]),
            kv_bytes_per_token=int(data["kv_bytes_per_token"]),
            kv_bytes_from=str(data["kv_bytes_from"]),
            created=str(data["created"]),
            repeats=int(data["repeats"]),
            output_tokens=int(data["output_tokens"]),
            decode_output_tokens=int(data["decode_output_tokens"]),
            prefill=tuple((int(c), tuple(float(x) for x in t)) for c, t in data["prefill"]),
            decode=tuple(
                (int(s), int(k), tuple(float(x) for x in p)) for s, k, p in data["decode"]
            ),
            decode_batches_without_common_window=int(
                data.get("decode_batches_without_common_window", 0)
            ),
            prefix_cache_reset=bool(data.get("prefix_cache_reset", True)),
            max_cached_tokens_seen=int(data.get("max_cached_tokens_seen", 0)),
            decode_points=tuple(_point_from_json(p) for p in data.get("decode_points", ())),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise EngineFitError(f"{where}: missing or invalid field {exc}") from None


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


def pooled_points(
    samples: Sequence[EngineSamples],
) -> tuple[list[tuple[int, float]], list[tuple[int, int, float]]]:
    """The fit's points: (context, median TTFT) and (sequences, KV tokens, median pace),
    each median over every measurement's timings at that point, sorted by point."""
    ttfts: dict[int, list[float]] = {}
    paces: dict[tuple[int, int], list[float]] = {}
    for s in samples:
        for c, times in s.prefill:
            ttfts.setdefault(c, []).extend(times)
        for seqs, kv, got in s.decode:
            paces.setdefault((seqs, kv), []).extend(got)
    prefill = [(c, statistics.median(sorted(ttfts[c]))) for c in sorted(ttfts) if ttfts[c]]
    decode = [(k[0], k[1], statistics.median(sorted(paces[k]))) for k in sorted(paces) if paces[k]]
    return prefill, decode


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
        },
    }
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
            qfit.a, qfit.b, qfit.q, tuple(prefill_points), qfit.rmse_s, includes_step=True
        ),
        reload=DEFAULT_RELOAD,
        decode=Decode(dfit.step_s, dfit.per_seq_s, dfit.per_kv_token_s),
        source=source,
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
