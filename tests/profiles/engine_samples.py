"""Hand-made engine measurements (:class:`profiles.engine_timings.EngineSamples`): TTFTs and
decode paces drawn around a known cost model, as ``profiles.measure_server`` would take them."""

from __future__ import annotations

import random

from profiles.engine_timings import EngineSamples

CONTEXTS = (128, 256, 512, 1024)
#: (sequences, KV tokens of the batch), as profiles.server_decode's plan makes them
SHAPES = ((1, 136), (1, 584), (1, 1032), (4, 544), (4, 3652), (8, 1088), (8, 3616))


def ttft(c: int) -> float:
    return 0.012 + 2.9e-4 * c + 7e-8 * c * c


def pace(seqs: int, kv: int) -> float:
    return 0.0093 + 7e-4 * seqs + 1.4e-6 * kv


def samples(seed: int, created: str, *, url: str = "http://127.0.0.1:8101", scale: float = 1.0,
             repeats: int = 2, kv_bytes: int = 12288) -> EngineSamples:  # fmt: skip
    """One measurement: ``repeats`` TTFTs a context and ``repeats`` × seqs paces a shape,
    each ±5% around the model times ``scale``."""
    rng = random.Random(seed)

    def noise() -> float:
        return scale * (1 + rng.uniform(-0.05, 0.05))

    return EngineSamples(
        url=url,
        model="/tmp/tiny55m",
        max_model_len=2048,
        kv_capacity=4064,
        version="0.32.0",
        kv_bytes_per_token=kv_bytes,
        kv_bytes_from="server metrics",
        created=created,
        repeats=repeats,
        output_tokens=16,
        decode_output_tokens=16,
        prefill=tuple((c, tuple(ttft(c) * noise() for _ in range(repeats))) for c in CONTEXTS),
        decode=tuple(
            (s, k, tuple(pace(s, k) * noise() for _ in range(repeats * s))) for s, k in SHAPES
        ),
        max_cached_tokens_seen=seed,
    )
