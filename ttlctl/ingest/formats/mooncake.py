"""Placeholder reader (being written)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from ttlctl.ingest.base import Parsed
from ttlctl.ingest.errors import RejectSink


class _Reader:
    name = "mooncake"
    aliases: tuple[str, ...] = ()

    def sniff(self, path: Path, head: bytes) -> bool:
        return False

    def read(self, path: Path, sink: RejectSink) -> Parsed:
        sink.reject(path, None, "not implemented")
        return Parsed(pl.LazyFrame(), records=1)


READER = _Reader()
