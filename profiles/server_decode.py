"""Decode as :mod:`profiles.measure_server` times it: batches of streamed requests on a
running server (:func:`measure_decode`).

The batch shapes (:func:`decode_plan`): two or three KV lengths alone, two a few at a time
(:data:`DECODE_CONCURRENCY`), each within the server's limits and :data:`KV_FILL` of its KV
cache. Each prompt is first sent alone with ``max_tokens=1`` so that its KV is in the prefix
cache: the batch then prefills only its last partial block, in one step, and decodes
together (:func:`decode_batch`, the threads started together). A batch's pace is the
server's own mean inter-token latency over it (``/metrics`` read just before and just
after), or where the server cannot give it each stream's pace over the batch's common
window (:mod:`profiles.decode_pace`: both clocks, the choice and why); a shape is one
:class:`~profiles.engine_timings.DecodePoint` (:func:`decode_point`), and a warning names the
points timed from the streams alone (:func:`warn_streamed`).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from profiles.decode_pace import FROM_SERVER, BatchPace, Stream, batch_pace, itl_delta
from profiles.engine_timings import STREAM, DecodePoint
from profiles.server_stream import Sender
from profiles.server_target import ServerMeasureError, Target
from ttlctl.server.client import HTTPStatusError, text
from ttlctl.server.prom import parse_metrics

#: concurrent sequences of the batched decode measurements
DECODE_CONCURRENCY = (1, 4, 8)
#: fewest tokens a decode measurement generates: enough for a window in which a
#: whole batch decodes (its streams reach the client a few milliseconds apart)
DECODE_MIN_TOKENS = 16
#: share of the server's KV capacity a decode batch may fill
KV_FILL = 0.9


@dataclass(frozen=True, slots=True)
class MeasuredDecode:
    """Decode as measured: (seqs, KV tokens, the paces the fit takes) per batch shape, both
    timings of each, the tokens each stream generated, batches read without a common window."""

    paces: tuple[tuple[int, int, tuple[float, ...]], ...]
    points: tuple[DecodePoint, ...]
    output_tokens: int
    no_window: int


def measure_decode(
    sender: Sender,
    target: Target,
    ctxs: Sequence[int],
    output_tokens: int,
    repeats: int,
    report: Callable[[str, int, int], None],
) -> MeasuredDecode:
    """The decode paces of batches of cached prompts (:func:`decode_plan`), ``repeats``
    batches a shape: the server's inter-token latency of each batch, or, at a shape where
    one batch lacks it, every stream's pace (:mod:`profiles.decode_pace`), which a
    warning names."""
    dec_out = max(output_tokens, DECODE_MIN_TOKENS)
    plan = decode_plan(ctxs, dec_out, target.max_model_len, target.kv_capacity)
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
            timed = decode_batch(sender, batch)
            batches.append(timed)
            no_window += not timed.windowed
            done += 1
            report("decode", done, total)
        point = decode_point(seqs, seqs * (kv_len + dec_out // 2), batches)
        chosen = point.itl if point.source == FROM_SERVER else point.stream
        if not chosen:
            raise ServerMeasureError(f"{target.url}: too few tokens streamed to time decode steps")
        points.append(point)
        paces.append((point.seqs, point.kv_tokens, chosen))
    warn_streamed(target.url, points)
    return MeasuredDecode(tuple(paces), tuple(points), dec_out, no_window)


def decode_point(seqs: int, kv_tokens: int, batches: Sequence[BatchPace]) -> DecodePoint:
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


def warn_streamed(url: str, points: Sequence[DecodePoint]) -> None:
    """Warn (once) when decode points are timed from the streams alone."""
    streamed = [p for p in points if p.source == STREAM]
    if streamed:
        warnings.warn(
            f"{url}: {len(streamed)} of {len(points)} decode points timed from the streamed "
            f"tokens' arrival, not the server's inter-token latency: {streamed[0].note}",
            RuntimeWarning,
            stacklevel=4,
        )


def decode_plan(
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


def decode_batch(sender: Sender, bodies: list[dict[str, Any]]) -> BatchPace:
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


def _metrics(sender: Sender) -> dict[str, float] | None:
    """The server's ``/metrics``, parsed (None: it has none)."""
    try:
        return parse_metrics(text(sender.url, "/metrics", timeout_s=sender.timeout_s))
    except HTTPStatusError:
        return None
