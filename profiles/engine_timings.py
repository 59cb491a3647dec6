"""One measurement of a live server, every timing it took before any fit
(:class:`EngineSamples`), and how it is written and read back as JSON.

:mod:`profiles.measure_server` takes them: what the server is (model, limits, KV bytes per
token, version), the TTFTs at each prompt length, and the decode paces (seconds per output
token) of each batch shape, with both timings of each decode point (:class:`DecodePoint`:
the server's inter-token latency, the streams' pace, and which one the fit takes), and the
TTFTs of prefills on top of a cached prefix, and what a call after an idle spell took
beyond the same call on a busy engine (a measurement written before either was timed reads
back with none).
:mod:`profiles.engine_fit` fits one or several into a profile. A document that cannot be
read back, or measurements that cannot be fitted together, are an :class:`EngineFitError`.

Pure: no clock read, no file written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ttlctl.errors import TtlctlError

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
    #: (prompt tokens, cached tokens, the TTFTs in seconds) per prefill on a cached prefix
    #: (:mod:`profiles.server_cached`; empty: not timed, and why in the note)
    cached_prefill: tuple[tuple[int, int, tuple[float, ...]], ...] = ()
    cached_prefill_note: str = ""
    #: (idle seconds, each pair's extra seconds) of a call after an idle spell beyond the
    #: same call on a busy engine (:mod:`profiles.server_wake`; empty: not timed, and why in
    #: the note)
    wake: tuple[tuple[float, tuple[float, ...]], ...] = ()
    wake_note: str = ""
    #: (prompt length, extra seconds) of a fresh prompt of a length the engine had not run
    #: beyond the same length again (:mod:`profiles.server_new_shape`; empty: not timed, and
    #: why in the note)
    new_shape: tuple[tuple[int, float], ...] = ()
    new_shape_note: str = ""
    #: the server's ``max_num_batched_tokens`` (None: it did not say)
    step_budget: int | None = None

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
            "cached_prefill": [[p, c, list(t)] for p, c, t in self.cached_prefill],
            "cached_prefill_note": self.cached_prefill_note,
            "wake": [[idle, list(extras)] for idle, extras in self.wake],
            "wake_note": self.wake_note,
            "new_shape": [[n, extra] for n, extra in self.new_shape],
            "new_shape_note": self.new_shape_note,
            "step_budget": self.step_budget,
        }


def samples_from_json(data: Mapping[str, Any], where: str = "measurement") -> EngineSamples:
    """:meth:`EngineSamples.to_json` read back (:class:`EngineFitError` names the field that
    is missing or does not parse, and why)."""

    def read(name: str, parse: Callable[[Any], Any], default: Any = _REQUIRED) -> Any:
        try:
            return parse(data[name] if default is _REQUIRED else data.get(name, default))
        except (KeyError, TypeError, ValueError) as exc:
            why = "absent" if isinstance(exc, KeyError) else str(exc)
            raise EngineFitError(f"{where}: missing or invalid field {name!r} ({why})") from None

    def timings(t: Any) -> tuple[float, ...]:
        return tuple(float(x) for x in t)

    return EngineSamples(
        url=read("url", str),
        model=read("model", str),
        max_model_len=read("max_model_len", int),
        kv_capacity=read("kv_capacity", _optional_int, None),
        version=read("version", lambda v: None if v is None else str(v), None),
        kv_bytes_per_token=read("kv_bytes_per_token", int),
        kv_bytes_from=read("kv_bytes_from", str),
        created=read("created", str),
        repeats=read("repeats", int),
        output_tokens=read("output_tokens", int),
        decode_output_tokens=read("decode_output_tokens", int),
        prefill=read("prefill", lambda v: tuple((int(c), timings(t)) for c, t in v)),
        decode=read("decode", lambda v: tuple((int(s), int(k), timings(p)) for s, k, p in v)),
        decode_batches_without_common_window=read("decode_batches_without_common_window", int, 0),
        prefix_cache_reset=read("prefix_cache_reset", bool, True),
        max_cached_tokens_seen=read("max_cached_tokens_seen", int, 0),
        decode_points=read("decode_points", lambda v: tuple(_point_from_json(p) for p in v), ()),
        cached_prefill=read(
            "cached_prefill", lambda v: tuple((int(p), int(c), timings(t)) for p, c, t in v), ()
        ),
        cached_prefill_note=read("cached_prefill_note", str, ""),
        wake=read("wake", lambda v: tuple((float(idle), timings(x)) for idle, x in v), ()),
        wake_note=read("wake_note", str, ""),
        new_shape=read("new_shape", lambda v: tuple((int(n), float(x)) for n, x in v), ()),
        new_shape_note=read("new_shape_note", str, ""),
        step_budget=read("step_budget", _optional_int, None),
    )


#: :func:`samples_from_json`'s mark of a field without a default
_REQUIRED = object()


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)
