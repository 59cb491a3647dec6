"""The hash vllm-router's ``consistent_hash`` and ``sticky_least_loaded`` place keys with:
mcrouter's MurmurHash64A and FurcHash (``fbi/hash.c``), as vllm-router 0.1.17 carries
them in ``src/policies/consistent_hash.rs`` (``fbi_hash``: FurcHash of the key into 2²³−1
buckets, widened to 64 bits by MurmurHash64A of the bucket's little-endian bytes)."""

from __future__ import annotations

from functools import lru_cache

_M = 0xC6A4A7935BD1E995
_R = 47
_MASK = (1 << 64) - 1
_SEED = 4193360111
_FURC_SHIFT = 23
_MAX_TRIES = 32
_LARGE_MODULUS = (1 << 23) - 1


def murmur64a(key: bytes, seed: int) -> int:
    h = (seed ^ (len(key) * _M)) & _MASK
    whole = len(key) - len(key) % 8
    for i in range(0, whole, 8):
        k = int.from_bytes(key[i : i + 8], "little")
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h ^= k
        h = (h * _M) & _MASK
    tail = key[whole:]
    if tail:
        for j in range(len(tail) - 1, -1, -1):
            h ^= tail[j] << (8 * j)
        h = (h * _M) & _MASK
    h ^= h >> _R
    h = (h * _M) & _MASK
    h ^= h >> _R
    return h


def _rehash(k: int) -> int:
    h = (_SEED ^ (8 * _M)) & _MASK
    k = (k * _M) & _MASK
    k ^= k >> _R
    k = (k * _M) & _MASK
    h ^= k
    h = (h * _M) & _MASK
    h ^= h >> _R
    h = (h * _M) & _MASK
    h ^= h >> _R
    return h


def furc(key: bytes, m: int) -> int:
    """FurcHash: ``key``'s bucket among ``m``."""
    if m <= 1:
        return 0
    cache: list[int] = []

    def bit(idx: int) -> int:
        ord_ = idx >> 6
        while len(cache) <= ord_:
            cache.append(murmur64a(key, _SEED) if not cache else _rehash(cache[-1]))
        return (cache[ord_] >> (idx & 0x3F)) & 1

    d = 0
    while m > (1 << d):
        d += 1
    a = d
    for _ in range(_MAX_TRIES):
        while not bit(a):
            if d == 0:
                return 0
            d -= 1
            a = d
        a += _FURC_SHIFT
        num = 1
        for _ in range(max(0, d - 1)):
            num = (num << 1) | bit(a)
            a += _FURC_SHIFT
        if num < m:
            return num
    return 0


@lru_cache(maxsize=65536)
def fbi_hash(key: str) -> int:
    """vllm-router's ``ConsistentHashPolicy::fbi_hash``."""
    bucket = furc(key.encode(), _LARGE_MODULUS)
    return murmur64a(bucket.to_bytes(4, "little"), _SEED)
