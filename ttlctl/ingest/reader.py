"""What every log-format reader shares: its interface and the helpers to read raw records.

A reader (one module per format in :mod:`ttlctl.ingest.formats`) turns one file
into canonical rows plus the two bookkeeping columns ``_file`` and ``_record``
(where the row came from, for error messages). Records it cannot turn into a row
go to the :class:`~ttlctl.ingest.rejects.RejectSink` with a reason; the common
validation (:mod:`ttlctl.ingest.rules`) checks the rows it did produce.

Compressed logs: every reader reads its file's bytes through this module
(:func:`read_bytes`, :func:`head_bytes`, :func:`read_text` and what builds on it,
:func:`source` for polars), which decompress gzip data (known by its magic bytes,
whatever the file's name), so any format reads ``NAME.gz`` as it reads ``NAME``. What
a reader takes from the file's name (a suffix, a program id from the stem) it takes from
:func:`logical`, the name less ``.gz``; the rows and rejects name the file as given.
Damaged gzip data (a truncated or corrupt file) is a bad file, named with why. During an
ingest, gzip data that decompresses to more than the streaming threshold is decompressed
to a temporary file that polars scans out of core (:mod:`ttlctl.ingest.spool`).
"""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable

import polars as pl

from ttlctl.errors import ConfigError
from ttlctl.ingest.rejects import RejectSink
from ttlctl.ingest.spool import GzipDamage as GzipDamage  # raised by the readers' helpers
from ttlctl.ingest.spool import active, chunks
from ttlctl.trace.columns import REASON, SOURCE_FILE, SOURCE_RECORD, all_columns

#: Bytes read from the start of a file to detect its format.
SNIFF_BYTES = 64 * 1024
#: The first bytes of gzip data (RFC 1952), by which a compressed log is known.
GZIP_MAGIC = b"\x1f\x8b"
#: The suffix of a gzip file's name that :func:`logical` drops.
GZIP_SUFFIX = ".gz"

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


@dataclass(frozen=True, slots=True)
class Parsed:
    """One file's rows.

    ``records`` counts the input records the reader saw (rows produced plus
    records it rejected), so that ``rows + rejects == records`` can be checked;
    None means "one per row of ``frame``" (counted when the frame is collected).
    ``absolute_time`` says that ``arrival_s`` is a wall clock (epoch seconds) to be
    rebased to the trace's start; otherwise it is already relative. ``in_flight``
    counts programs the log cut short, ended at their last logged call (engine logs).
    """

    frame: pl.LazyFrame
    records: int | None
    absolute_time: bool = False
    in_flight: int = 0
    #: the facts of the engines that served the calls (engine logs), kept in the trace's
    #: metadata (:func:`ttlctl.trace.io.engines`)
    engines: tuple[dict[str, Any], ...] = ()
    #: programs made from a program id used again after its program ended (engine logs)
    reused: int = 0
    #: calls the engine aborted (engine logs: the client went away), kept as calls with the
    #: tokens they produced
    aborted: int = 0


@dataclass(frozen=True, slots=True)
class GroupParsed:
    """Several files read as one log (:class:`GroupReader`): the rows, and per file (in the
    order given) the records seen and the programs in flight whose last call it holds."""

    parsed: Parsed
    records: list[int]
    in_flight: list[int]


class Reader(Protocol):
    #: the ``--format`` name
    name: str
    #: other names accepted for ``--format``
    aliases: Sequence[str]

    def sniff(self, path: Path, head: bytes) -> bool:
        """True when ``head`` (the file's first bytes) looks like this format."""
        ...

    def read(self, path: Path, sink: RejectSink) -> Parsed:
        """Read ``path``; send records that cannot become rows to ``sink``."""
        ...


@runtime_checkable
class GroupReader(Reader, Protocol):
    """A reader whose programs may span files (engine logs of several replicas): ingest
    hands it all its files at once."""

    def read_group(self, paths: Sequence[Path], sink: RejectSink) -> GroupParsed:
        """Read ``paths`` as one log; send records that cannot become rows to ``sink``."""
        ...


class RecordError(ValueError):
    """A record that cannot become a row; the message is the reject reason."""


# ---------------------------------------------------------------- raw input


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


def read_bytes(path: Path) -> bytes:
    """The file's bytes, decompressed when it holds gzip data; :class:`GzipDamage` when
    that data is truncated or corrupt."""
    if not is_gzip(path):
        return path.read_bytes()
    data = b"".join(chunks(path))
    spool = active()
    if spool is not None:
        spool.sizes[path] = len(data)
    return data


def source(path: Path) -> Path | IO[bytes]:
    """What polars reads the file from: its path; for gzip data, its decompressed bytes,
    or during an ingest, when they are more than the streaming threshold, the path of a
    temporary file holding them (:mod:`ttlctl.ingest.spool`). :class:`GzipDamage` when
    the data is damaged."""
    if not is_gzip(path):
        return path
    spool = active()
    if spool is None:
        return io.BytesIO(read_bytes(path))
    return spool.source(path, streaming_limit())


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


def read_text(path: Path, sink: RejectSink) -> str | None:
    """The file's text, or None after rejecting an empty, binary or damaged gzip file."""
    try:
        data = read_bytes(path)
    except GzipDamage as exc:
        sink.reject(path, None, str(exc), records=1)
        return None
    if not data.strip():
        sink.reject(path, None, "empty file", records=1)
        return None
    if b"\x00" in data[:SNIFF_BYTES]:
        sink.reject(path, None, "binary data, not a text log", records=1, raw=data[:200])
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        sink.reject(path, f"byte {exc.start}", "not UTF-8 text", records=1)
        return None


def load_json(path: Path, sink: RejectSink) -> Any | None:
    """Parse a whole-file JSON document, or reject the file with where it broke."""
    text = read_text(path, sink)
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # a complete document ends with its closing bracket; one cut short does not
        tail = text.rstrip()[-1:]
        what = "malformed JSON" if tail in ("}", "]") else "truncated JSON"
        sink.reject(path, f"line {exc.lineno} column {exc.colno}", f"{what}: {exc.msg}")
        return None
    except RecursionError:
        sink.reject(path, None, "malformed JSON: nesting too deep")
        return None


def load_json_object(path: Path, sink: RejectSink, what: str) -> dict[str, Any] | None:
    """Like :func:`load_json` for a document that must be an object; a file holding
    anything else is rejected as "not a ``what``"."""
    doc = load_json(path, sink)
    if doc is None:
        return None
    if not isinstance(doc, dict):
        sink.reject(path, None, f"not a {what}: top level is a {type(doc).__name__}, not an object")
        return None
    return doc


def cut_line(text: str) -> int | None:
    """The number of the text's last line when the text does not end with a newline (a
    JSONL file cut short mid-record ends so), else None."""
    if not text or text.endswith(("\n", "\r")):
        return None
    return len(text.splitlines())


def bad_json_line(exc: json.JSONDecodeError, *, cut: bool) -> str:
    """Why a JSONL line did not parse: truncated when it is the line a file ends in
    without a newline (``cut``), else malformed."""
    if cut:
        return f"truncated JSON: the last line looks cut short (no newline ends it): {exc.msg}"
    return f"malformed JSON: {exc.msg}"


def iter_jsonl(path: Path, sink: RejectSink) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each JSON-object line; reject the others.

    Blank lines are not records and are passed over.
    """
    text = read_text(path, sink)
    if text is None:
        return
    cut = cut_line(text)
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            reason = bad_json_line(exc, cut=lineno == cut)
            sink.reject(path, f"line {lineno}", reason, raw=line)
            continue
        except RecursionError:
            sink.reject(path, f"line {lineno}", "malformed JSON: nesting too deep")
            continue
        if not isinstance(obj, dict):
            sink.reject(path, f"line {lineno}", "not a JSON object", raw=line)
            continue
        yield lineno, obj


def head_bytes(path: Path) -> bytes:
    """The file's first :data:`SNIFF_BYTES` (decompressed for gzip data: as much of them as
    decompresses, none when the data is damaged there; reading it whole says why)."""
    with path.open("rb") as fh:
        head = fh.read(SNIFF_BYTES)
    if not head.startswith(GZIP_MAGIC):
        return head
    out = bytearray()
    try:
        for chunk in chunks(path, SNIFF_BYTES):
            out += chunk
            if len(out) >= SNIFF_BYTES:
                break
    except GzipDamage:
        pass  # damaged: what decompressed so far is the head
    return bytes(out[:SNIFF_BYTES])


def is_blank(path: Path) -> bool:
    """Whether the file holds nothing but whitespace, once decompressed: an empty log (no
    records, not a bad one). Read up to its first other byte. Damaged gzip data is not
    blank: reading it says why."""
    try:
        if is_gzip(path):
            return not any(chunk.strip() for chunk in chunks(path, SNIFF_BYTES))
        with path.open("rb") as fh:
            return not any(chunk.strip() for chunk in iter(lambda: fh.read(SNIFF_BYTES), b""))
    except GzipDamage:
        return False


# ---------------------------------------------------------------- field coercion


def first_object_line(head: bytes) -> bytes | None:
    """The first line of a file's head when it opens a JSON object (JSONL sniffing),
    else None."""
    text = head.lstrip()
    if not text.startswith(b"{"):
        return None
    return text.split(b"\n", 1)[0]


def number(value: Any, field: str, *, required: bool = True) -> float | None:
    """A finite float from a number or numeric string; RecordError otherwise."""
    if value is None or (isinstance(value, str) and value.strip() == ""):
        if required:
            raise RecordError(f"missing {field}")
        return None
    if isinstance(value, bool):
        raise RecordError(f"non-numeric {field}: {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise RecordError(f"non-numeric {field}: {_short(value)}") from None
    if not math.isfinite(out):
        raise RecordError(f"non-finite {field}: {_short(value)}")
    return out


def integer(value: Any, field: str, *, required: bool = True) -> int | None:
    """A whole number from an int, integral float or numeric string."""
    out = number(value, field, required=required)
    if out is None:
        return None
    if out != int(out):
        raise RecordError(f"non-integer {field}: {_short(value)}")
    return int(out)


def duration(value: Any, field: str, *, required: bool = False) -> float | None:
    """A non-negative number of seconds."""
    out = number(value, field, required=required)
    if out is not None and out < 0:
        raise RecordError(f"negative {field}: {_short(value)}")
    return out


def tokens(value: Any, field: str, *, required: bool = True) -> int | None:
    out = integer(value, field, required=required)
    if out is not None and out < 0:
        raise RecordError(f"negative {field}: {_short(value)}")
    return out


def epoch(value: Any, field: str) -> float:
    """Epoch seconds from an ISO 8601 string (naive: UTC) or a number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str):
        raise RecordError(f"bad {field}: {value!r}"[:120])
    try:
        stamp = datetime.fromisoformat(value.strip())
    except ValueError:
        raise RecordError(f"bad {field}: {value!r}"[:120]) from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


# ---------------------------------------------------------------- rows -> frame


def frame_from_rows(rows: list[dict[str, Any]], path: Path | None) -> pl.LazyFrame:
    """Canonical frame from python rows (each may carry ``_record`` and ``_reason``).

    Columns a row leaves out are null. ``_file`` is set to ``path`` (None: each row's own
    ``_file``, for rows read from several files). A row whose
    record was bad but whose program is known carries ``_reason`` (and at least
    ``program_id`` and ``turn``): validation then rejects its whole program, so no
    program comes out with a hole in it.
    """
    schema: dict[str, pl.DataType] = {
        **all_columns(),
        SOURCE_RECORD: pl.String(),
        REASON: pl.String(),
    }
    if path is None:
        schema[SOURCE_FILE] = pl.String()
    columns: dict[str, list[Any]] = {name: [] for name in schema}
    for row in rows:
        for name in schema:
            columns[name].append(row.get(name))
    frame = pl.DataFrame(columns, schema=schema)
    if path is None:
        return frame.lazy()
    return frame.lazy().with_columns(pl.lit(str(path)).alias(SOURCE_FILE))
