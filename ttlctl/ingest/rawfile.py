"""A log file's bytes, gzip or not: what every reader reads its file through.

Compressed logs: every reader reads its file's bytes through this module
(:func:`read_bytes`, :func:`head_bytes`, :func:`ttlctl.ingest.jsontext.read_text` and what
builds on it, :func:`source` for polars), which decompress gzip data (known by its magic
bytes, whatever the file's name), so any format reads ``NAME.gz`` as it reads ``NAME``. What
a reader takes from the file's name (a suffix, a program id from the stem) it takes from
:func:`logical`, the name less ``.gz``; the rows and rejects name the file as given.
Damaged gzip data (a truncated or corrupt file) is a bad file, named with why
(:class:`~ttlctl.ingest.spool.GzipDamage`). During an ingest, gzip data that decompresses
to more than the streaming threshold (:mod:`ttlctl.ingest.limits`) is decompressed to a
temporary file that polars scans out of core (:mod:`ttlctl.ingest.spool`).

A UTF-8 byte-order mark (:data:`ttlctl.filekind.UTF8_BOM`) that opens a file's data, as
Windows tools write one, is not part of the text (as for every JSON document ttlctl reads):
every function here leaves it out, so each format detects and reads a file with one as it
does the same file without. A UTF-16 or UTF-32 mark is kept: such a file is not UTF-8 text,
and the readers name it by its mark (:func:`ttlctl.filekind.wide_text`).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from ttlctl.filekind import UTF8_BOM, unmarked
from ttlctl.ingest.limits import streaming_limit
from ttlctl.ingest.spool import GzipDamage, active, chunks

#: Bytes read from the start of a file to detect its format.
SNIFF_BYTES = 64 * 1024
#: The first bytes of gzip data (RFC 1952), by which a compressed log is known.
GZIP_MAGIC = b"\x1f\x8b"
#: The suffix of a gzip file's name that :func:`logical` drops.
GZIP_SUFFIX = ".gz"


def is_gzip(path: Path) -> bool:
    """Whether the file holds gzip data (its magic bytes), whatever its name."""
    with path.open("rb") as fh:
        return fh.read(len(GZIP_MAGIC)) == GZIP_MAGIC


def logical(path: Path) -> Path:
    """The path a file's contents go by: ``x.traj`` for gzip data named ``x.traj.gz``,
    else ``path``. Readers take names (suffixes, program ids) from it."""
    name = path.name
    if name.lower().endswith(GZIP_SUFFIX) and len(name) > len(GZIP_SUFFIX) and is_gzip(path):
        return path.with_name(name[: -len(GZIP_SUFFIX)])
    return path


def _unmarked_chunks(data: Iterable[bytes]) -> Iterator[bytes]:
    """Chunks of a file's data, less the byte-order mark that opens the first, if one does."""
    first = True
    for chunk in data:
        yield unmarked(chunk) if first else chunk
        first = False


def _plain_chunks(path: Path, size: int = SNIFF_BYTES) -> Iterator[bytes]:
    with path.open("rb") as fh:
        yield from iter(lambda: fh.read(size), b"")


def read_bytes(path: Path) -> bytes:
    """The file's bytes, decompressed when it holds gzip data, less a byte-order mark that
    opens them; :class:`GzipDamage` when gzip data is truncated or corrupt."""
    if not is_gzip(path):
        return unmarked(path.read_bytes())
    data = b"".join(chunks(path))
    spool = active()
    if spool is not None:
        spool.sizes[path] = len(data)
    return unmarked(data)


def source(path: Path) -> Path | IO[bytes]:
    """What polars reads the file from: its path; for gzip data, or a file a byte-order mark
    opens, its bytes (decompressed, less the mark), or during an ingest, when they are more
    than the streaming threshold, the path of a temporary file holding them
    (:mod:`ttlctl.ingest.spool`). :class:`GzipDamage` when gzip data is damaged."""
    gzipped = is_gzip(path)
    if not gzipped:
        with path.open("rb") as fh:
            if fh.read(len(UTF8_BOM)) != UTF8_BOM:
                return path
    spool = active()
    if spool is None:
        return io.BytesIO(read_bytes(path))

    def data(size: int) -> Iterator[bytes]:
        return _unmarked_chunks(chunks(path, size) if gzipped else _plain_chunks(path, size))

    return spool.source(path, streaming_limit(), data)


def size(path: Path) -> int:
    """The file's size in bytes once decompressed: exact for gzip data this ingest has
    decompressed (:func:`read_bytes`, :func:`source`); else, for gzip data, the size it
    records (modulo 2**32, and the last member's only), at least its compressed size."""
    stored = path.stat().st_size
    if stored < 18 or not is_gzip(path):  # 18: the smallest gzip member
        return stored
    spool = active()
    if spool is not None and path in spool.sizes:
        return spool.sizes[path]
    with path.open("rb") as fh:
        fh.seek(-4, os.SEEK_END)
        return max(stored, int.from_bytes(fh.read(4), "little"))


def head_bytes(path: Path) -> bytes:
    """The file's first :data:`SNIFF_BYTES` (decompressed for gzip data: as much of them as
    decompresses, none when the data is damaged there; reading it whole says why)."""
    with path.open("rb") as fh:
        head = fh.read(SNIFF_BYTES)
    if not head.startswith(GZIP_MAGIC):
        return unmarked(head)
    out = bytearray()
    try:
        for chunk in chunks(path, SNIFF_BYTES):
            out += chunk
            if len(out) >= SNIFF_BYTES:
                break
    except GzipDamage:
        pass  # damaged: what decompressed so far is the head
    return unmarked(bytes(out[:SNIFF_BYTES]))


def is_blank(path: Path) -> bool:
    """Whether the file holds nothing but whitespace (after a byte-order mark), once
    decompressed: an empty log (no records, not a bad one). Read up to its first other byte.
    Damaged gzip data is not blank: reading it says why."""
    try:
        data = chunks(path, SNIFF_BYTES) if is_gzip(path) else _plain_chunks(path)
        return not any(chunk.strip() for chunk in _unmarked_chunks(data))
    except GzipDamage:
        return False
