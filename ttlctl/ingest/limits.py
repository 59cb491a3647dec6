"""The size thresholds of an ingest, read from the environment.

Above the streaming threshold (TTLCTL_STREAMING_BYTES) an ingest's input, measured
decompressed, is scanned and checked out of core by polars' streaming engine, and gzip data
is decompressed to a temporary file (:mod:`ttlctl.ingest.spool`) rather than into memory.
A size variable that is not a whole number is a :class:`~ttlctl.errors.ConfigError`
naming it.
"""

from __future__ import annotations

import os

from ttlctl.errors import ConfigError

#: Above this many input bytes (decompressed), canonical inputs are scanned and checked by
#: polars' streaming engine instead of in memory (override with TTLCTL_STREAMING_BYTES).
DEFAULT_STREAMING_BYTES = 2 * 1024**3


def env_bytes(name: str, default: int, least: int = 0) -> int:
    """A size in bytes from the environment variable ``name`` (else ``default``);
    :class:`~ttlctl.errors.ConfigError` when it is not a whole number of at least
    ``least``."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = least - 1
    if value < least:
        floor = f", at least {least}" if least > 0 else ""
        raise ConfigError(f"{name}={raw!r}: expected a whole number of bytes{floor}")
    return value


def streaming_limit() -> int:
    """The streaming threshold in bytes (TTLCTL_STREAMING_BYTES, else the default)."""
    return env_bytes("TTLCTL_STREAMING_BYTES", DEFAULT_STREAMING_BYTES)


def streaming(size_bytes: int) -> bool:
    """Whether an input of this size (decompressed) is processed out of core."""
    return size_bytes > streaming_limit()
