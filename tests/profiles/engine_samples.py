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


#: (prompt tokens, cached tokens) of the prefills on a cached prefix, as
#: profiles.server_cached's plan makes them for CONTEXTS (prefixes of 192, 384 and 768
#: tokens, all cached: whole blocks of 32; then 64 or 256 new tokens)
CACHED_POINTS = ((256, 192), (448, 192), (448, 384), (640, 384), (832, 768), (1024, 768))


def cached_ttft(prompt: int, cached: int, cost: tuple[float, float]) -> float:
    """The new tokens' own price, and ``cost`` = (per cached token, per (new, cached)
    pair) on top."""
    new = prompt - cached
    per_token, per_pair = cost
    return 0.012 + 2.9e-4 * new + 7e-8 * new * new + per_token * cached + per_pair * cached * new


def samples(seed: int, created: str, *, url: str = "http://127.0.0.1:8101", scale: float = 1.0,
             repeats: int = 2, kv_bytes: int = 12288, spread: float = 0.05,
             cached_cost: tuple[float, float] | None = None) -> EngineSamples:  # fmt: skip
    """One measurement: ``repeats`` TTFTs a context and ``repeats`` × seqs paces a shape,
    each ± ``spread`` around the model times ``scale``; with ``cached_cost``, ``repeats``
    TTFTs of each prefill on a cached prefix too (:data:`CACHED_POINTS`)."""
    rng = random.Random(seed)

    def noise() -> float:
        return scale * (1 + rng.uniform(-spread, spread))

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
        cached_prefill=()
        if cached_cost is None
        else tuple(
            (p, c, tuple(cached_ttft(p, c, cached_cost) * noise() for _ in range(repeats)))
            for p, c in CACHED_POINTS
        ),
    )
