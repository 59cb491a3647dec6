"""Gzip data decompressed for polars, in memory or, when large, to a temporary file.

polars scans a file out of core only from a path; gzip data has to be decompressed first.
During one ingest (:func:`spooled`, entered by :func:`ttlctl.ingest.pipeline.ingest`) a
gzip file that polars reads is decompressed as a stream, a chunk at a time: it stays in
memory while the decompressed gzip data the ingest holds in memory (this file's and the
files' before it) is at most the streaming threshold
(:func:`ttlctl.ingest.limits.streaming`), and once it passes it the rest goes to a
temporary file in a folder next to the output, which polars then scans like a plain file.
So the choice is made on the decompressed size, counted as it decompresses (exact, unlike
the size gzip records, which is modulo 4 GiB and only of the last member), and memory stays
bounded by the threshold, as for plain input. The folder is removed when the ingest ends,
whether it succeeds, fails or is interrupted; a file whose data turns out damaged is removed
at once. Outside :func:`spooled` (no ingest to own a temporary file) gzip data is read in
memory.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from pathlib import Path
from typing import IO

from ttlctl.errors import TtlctlError, os_reason

#: Decompressed bytes read at once.
CHUNK_BYTES = 1024**2
#: The prefix of the temporary folder, next to the output.
FOLDER_PREFIX = ".ttlctl-gunzip-"


class GzipDamage(ValueError):
    """Gzip data that does not decompress whole; the message says why (one line)."""


class SpoolError(TtlctlError):
    """A temporary file for decompressed data that cannot be written (one line naming the
    input and the folder)."""


def chunks(path: Path, size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The decompressed data of the gzip file ``path`` (every member), ``size`` bytes at a
    time; :class:`GzipDamage` when it is truncated or corrupt."""
    with path.open("rb") as raw, gzip.GzipFile(fileobj=raw) as unzipped:
        while True:
            try:
                chunk = unzipped.read(size)
            except EOFError:
                raise GzipDamage("truncated gzip data: the stream ends early") from None
            except (OSError, zlib.error) as exc:
                raise GzipDamage(f"corrupt gzip data: {exc}") from None
            if not chunk:
                return
            yield chunk


class Spool:
    """The gzip files one ingest decompressed: their exact sizes, and those written to a
    temporary file (in a folder under ``directory``, made when first needed)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.folder: Path | None = None
        #: decompressed size of each gzip file read, in bytes
        self.sizes: dict[Path, int] = {}
        #: the temporary file holding each large one's data
        self.files: dict[Path, Path] = {}
        #: decompressed bytes handed to polars in memory so far (the limit bounds them all)
        self.in_memory = 0

    def source(
        self, path: Path, limit: int, data: Callable[[int], Iterable[bytes]] | None = None
    ) -> Path | IO[bytes]:
        """The gzip file's data for polars: in memory while this ingest's gzip data held
        in memory (this file's with the others') stays within ``limit`` bytes, else the
        path of a temporary file holding it (decompressed once per ingest).
        :class:`GzipDamage` when the data is damaged, :class:`SpoolError` when the
        temporary file cannot be written (a full disk). ``data``: given a chunk size, the
        file's data as polars is to read it, in chunks, when not its decompressed bytes as
        they are (a plain file less its byte-order mark: :func:`ttlctl.ingest.rawfile.source`)."""
        if path in self.files:
            return self.files[path]
        held = io.BytesIO()
        total = 0
        target: Path | None = None
        out: IO[bytes] | None = None
        spilling = False
        try:
            for chunk in (data or partial(chunks, path))(CHUNK_BYTES):
                total += len(chunk)
                if out is not None:
                    out.write(chunk)
                    continue
                held.write(chunk)
                if self.in_memory + total > limit:
                    spilling = True
                    target, out = self._new_file()
                    out.write(held.getbuffer())
                    held = io.BytesIO()
        except OSError as exc:
            self._discard(out, target)
            if not spilling:  # the input itself (gzip's own errors are GzipDamage)
                raise
            where = target.parent if target is not None else self.directory
            raise SpoolError(f"{path}: cannot decompress into {where}: {os_reason(exc)}") from None
        except BaseException:
            self._discard(out, target)
            raise
        self.sizes[path] = total
        if out is None:
            self.in_memory += total
            held.seek(0)
            return held
        out.close()
        assert target is not None
        self.files[path] = target
        return target

    @staticmethod
    def _discard(out: IO[bytes] | None, target: Path | None) -> None:
        if out is not None:
            out.close()
        if target is not None:
            target.unlink(missing_ok=True)

    def _new_file(self) -> tuple[Path, IO[bytes]]:
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=self.directory))
        fd, name = tempfile.mkstemp(dir=self.folder)
        return Path(name), os.fdopen(fd, "wb")

    def close(self) -> None:
        """Remove the temporary folder and everything in it."""
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
        self.files.clear()


_ACTIVE: ContextVar[Spool | None] = ContextVar("ttlctl_gunzip_spool", default=None)


def active() -> Spool | None:
    """The spool of the ingest under way, if any."""
    return _ACTIVE.get()


@contextmanager
def spooled(directory: Path) -> Iterator[Spool]:
    """Within the block, large gzip data is decompressed to temporary files under
    ``directory``, removed when the block ends (by an error or an interrupt too)."""
    spool = Spool(directory)
    token = _ACTIVE.set(spool)
    try:
        yield spool
    finally:
        _ACTIVE.reset(token)
        spool.close()
