"""What a file that should be JSON text is, when its first bytes say it is something else
(a trace in Parquet given as a fit, a compressed file): so that the error names the mix-up
instead of calling the file damaged. Imports nothing (the engine's bundle reader uses it).
"""

from __future__ import annotations

#: leading bytes -> what a file starting with them is
MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"PAR1", "a Parquet file (a trace?)"),
    (b"\x1f\x8b", "a gzip-compressed file"),
    (b"(\xb5/\xfd", "a zstd-compressed file"),
    (b"BZh", "a bzip2-compressed file"),
    (b"PK\x03\x04", "a zip archive"),
    (b"SQLite format 3\x00", "an SQLite database (an Optuna study?)"),
    (b"\x89PNG", "a PNG image"),
)


def binary_kind(head: bytes) -> str | None:
    """What a file starting with ``head`` is, if its leading bytes say (None: they do not)."""
    for magic, kind in MAGIC:
        if head.startswith(magic):
            return kind
    return None
