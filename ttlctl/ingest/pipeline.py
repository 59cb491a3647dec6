"""``ttlctl ingest``: files in native formats -> one canonical trace (Parquet).

The run: the files to read (:mod:`ttlctl.ingest.inputs`), each read by its format's reader
(:mod:`ttlctl.ingest.lookup`; an engine log's files together, as one log), every reader held
to account for the records it saw, then all rows checked and written
(:mod:`ttlctl.ingest.validate`); what happened is an
:class:`~ttlctl.ingest.ingest_report.IngestReport`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from pathlib import Path

import polars as pl

from ttlctl.filekind import document_kind, not_utf8, wide_text
from ttlctl.ingest import lookup
from ttlctl.ingest.ingest_report import FileReport, IngestReport
from ttlctl.ingest.inputs import expand
from ttlctl.ingest.limits import env_bytes, streaming, streaming_limit
from ttlctl.ingest.rawfile import head_bytes, is_blank, is_gzip, read_bytes, size
from ttlctl.ingest.reader import GroupReader, Parsed, Reader
from ttlctl.ingest.rejects import IngestError, RejectSink
from ttlctl.ingest.spool import GzipDamage, spooled
from ttlctl.ingest.validate import DEFAULT_BUCKET_BYTES, has_rows, validate_and_write
from ttlctl.jsonio import replacing

#: A file of nothing but whitespace: the format it is reported as, its reject reason (as
#: every reader names it).
EMPTY_FORMAT = "empty"
EMPTY_FILE = "empty file"

ProgressFn = Callable[[Path, int, int], None]


def rejects_path_for(output: Path) -> Path:
    return output.with_name(output.name + ".rejects.jsonl")


def ingest(
    paths: Iterable[Path],
    output: Path,
    fmt: str = "auto",
    skip_bad: bool = False,
    progress: ProgressFn | None = None,
    allow_empty: bool = False,
    also_written: Iterable[Path] = (),
) -> IngestReport:
    """Read every file, validate, write the canonical trace to ``output``.

    Without ``skip_bad`` the first bad record raises :class:`IngestError` and
    nothing is written. With it, bad records go to ``<output>.rejects.jsonl``.
    Nothing to write (no calls, or every record rejected) is an :class:`IngestError`
    too, and nothing is written, unless ``allow_empty``; so is an empty file (nothing but
    whitespace), which ``allow_empty`` reads as no calls (format "empty"). The trace and the rejects
    file each appear whole, and only when the run succeeds. Large gzip data is
    decompressed to temporary files next to ``output`` (:mod:`ttlctl.ingest.spool`),
    removed before this returns or raises. A folder walked is read less this run's outputs
    (``output``, its rejects file, and ``also_written``: the caller's, such as ``--json``):
    an earlier run's, left in the folder, are skipped and listed, not read as logs.
    """
    paths = list(paths)
    fixed = None if fmt == "auto" else lookup.get(fmt)  # a wrong --format before any file
    streaming_limit()  # and a wrong size variable: its own error, not a file's
    env_bytes("TTLCTL_BUCKET_BYTES", DEFAULT_BUCKET_BYTES, least=1)
    rejects_path = rejects_path_for(output)
    files, docs, ours, others = expand(paths, outputs=(output, rejects_path, *also_written))
    report = IngestReport(
        output=str(output),
        skipped=[str(p) for p in docs],
        outputs_skipped=[str(p) for p in ours],
        others_skipped=[f"{p} ({what})" for p, what in others],
    )
    if not files and not allow_empty:  # allowed: an empty trace, as for a file with no calls
        where = ", ".join(str(p) for p in paths) or "."
        also = " (only this command's own outputs, skipped)" if ours else ""
        if others:  # a folder of links, say: what is there and why it was not read
            also += "; not files, not read: " + ", ".join(report.others_skipped)
        raise IngestError(where, None, f"no log files to ingest{also}")

    output.parent.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        stack.enter_context(spooled(output.parent))  # left last: the frames scan its files
        stream = None
        if skip_bad:
            stream = stack.enter_context(replacing(rejects_path)).open("w", encoding="utf-8")
            stack.callback(stream.close)  # closed before replacing() renames it
        sink = RejectSink(skip_bad=skip_bad, stream=stream)
        parsed: list[tuple[Parsed, bool]] = []
        recognised: list[Path] = []
        groups: dict[str, tuple[GroupReader, list[FileReport]]] = {}
        for index, path in enumerate(files):
            if progress is not None:
                progress(path, index, len(files))
            if is_blank(path):  # no record: read as no calls when allowed, else a bad file
                report.files.append(FileReport(str(path), EMPTY_FORMAT, 0 if allow_empty else 1))
                if not allow_empty:
                    sink.reject(path, None, EMPTY_FILE)
                continue
            reader = fixed or lookup.detect(path)
            if reader is None:
                sink.reject(path, *_unrecognised(path))
                report.files.append(FileReport(str(path), "unrecognised", 1))
                continue
            recognised.append(path)
            if isinstance(reader, GroupReader):  # read with the others of its format, below
                entry = FileReport(str(path), reader.name, None)
                groups.setdefault(reader.name, (reader, []))[1].append(entry)
                report.files.append(entry)
                continue
            before = sink.count
            one = _read_one(reader, path, sink)
            _check_accounting(reader, path, one, sink.count - before)
            report.files.append(FileReport(str(path), reader.name, one.records, one.in_flight))
            parsed.append((one, one.absolute_time))
        for group_reader, entries in groups.values():
            before = sink.count
            one = _read_group(group_reader, entries, sink)
            _check_accounting(group_reader, Path(entries[0].path), one, sink.count - before)
            parsed.append((one, one.absolute_time))
            report.reused_ids += one.reused
            report.aborted += one.aborted
            report.engines.extend(one.engines)
        report.in_flight = sum(f.in_flight for f in report.files)
        if progress is not None and files:
            progress(files[-1], len(files), len(files))

        # decompressed: exact for the gzip files read by now, which counted their data
        report.streamed = streaming(sum(size(path) for path in recognised))
        read_rejects = sink.count
        refuse = None if allow_empty else _refuse_empty(paths, sink)
        rows, rejected_rows = validate_and_write(
            parsed,
            output,
            sink,
            streaming=report.streamed,
            engines=report.engines,
            refuse_empty=refuse,
        )
        report.rows = rows
        # every record is a row written, a row rejected, or a record rejected on reading
        report.records = rows + rejected_rows + read_rejects
    report.rejected = sink.count
    report.rejected_by_reason = dict(sink.by_reason)
    report.rejects_path = str(rejects_path) if skip_bad else None
    return report


def _unrecognised(path: Path) -> tuple[str | None, str]:
    """Why no reader took ``path`` (a file with more than whitespace in it), and where if
    somewhere (the record): damaged gzip data, UTF-16 or UTF-32 text (its byte-order mark),
    text that is not UTF-8 (the line), or an unknown format."""
    if is_gzip(path):
        try:
            read_bytes(path)
        except GzipDamage as exc:
            return None, str(exc)
    head = head_bytes(path)
    wide = wide_text(head)
    if wide is not None:
        return None, wide
    if not head.startswith(b"PAR1"):
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.end < len(head):  # not a character cut by the end of the head
                return not_utf8(head, exc.start)
    kind = _own_document(path)
    if kind is not None:
        return None, f"not agent or engine logs but {kind}"
    return None, "unrecognised format: not a log ttlctl can read (name one with --format)"


#: the largest file :func:`_own_document` parses to say which of ttlctl's documents it is
#: (ttlctl's own JSON documents are far smaller; a larger file is called unrecognised)
OWN_DOCUMENT_BYTES = 64 * 2**20


def _own_document(path: Path) -> str | None:
    """Which of ttlctl's own JSON documents (a fit, a bundle, a replay's results…) the
    file at ``path`` is, when it is one (:func:`~ttlctl.filekind.document_kind`), so that
    the error names the mix-up; None otherwise."""
    if size(path) > OWN_DOCUMENT_BYTES:
        return None
    try:
        doc = json.loads(read_bytes(path))
    except (ValueError, OSError, GzipDamage, RecursionError):  # nesting too deep: none of them
        return None
    return document_kind(doc)


def _refuse_empty(paths: list[Path], sink: RejectSink) -> Callable[[int], None]:
    """What stops a run with nothing to write, before the write (unless allowed)."""

    def refuse(rejected_rows: int) -> None:  # (the rows' rejects are in sink.count)
        where = ", ".join(str(p) for p in paths)
        if not sink.count:
            raise IngestError(where, None, "no LLM calls in the input; nothing written")
        raise IngestError(
            where,
            None,
            f"every record was rejected ({sink.count:,}; the first: {sink.first or '?'}); "
            "nothing written (--allow-empty writes an empty trace and the rejects)",
        )

    return refuse


def _read_one(reader: Reader, path: Path, sink: RejectSink) -> Parsed:
    try:
        return reader.read(path, sink)
    except IngestError:
        raise
    except (OSError, pl.exceptions.PolarsError, ValueError) as exc:
        # A reader that could not make sense of the file as a whole.
        sink.reject(path, None, f"unreadable as {reader.name}: {_one_line(exc)}")
        return Parsed(frame=pl.LazyFrame(), records=1)


def _read_group(reader: GroupReader, entries: list[FileReport], sink: RejectSink) -> Parsed:
    """Read one format's files together (their programs may span files); fills each file's
    report (records, programs in flight)."""
    paths = [Path(e.path) for e in entries]
    try:
        group = reader.read_group(paths, sink)
    except IngestError:
        raise
    except (OSError, pl.exceptions.PolarsError, ValueError) as exc:
        for path in paths:
            sink.reject(path, None, f"unreadable as {reader.name}: {_one_line(exc)}")
        for entry in entries:
            entry.records = 1
        return Parsed(frame=pl.LazyFrame(), records=len(paths))
    for entry, records, in_flight in zip(entries, group.records, group.in_flight, strict=True):
        entry.records, entry.in_flight = records, in_flight
    return group.parsed


def _check_accounting(reader: Reader, path: Path, one: Parsed, rejected: int) -> None:
    """A reader must account for every record it saw: as a row or as a reject."""
    if one.records is None:
        return
    rows = one.frame.select(pl.len()).collect().item() if has_rows(one) else 0
    if one.records != rows + rejected:
        raise RuntimeError(
            f"ttlctl bug: the {reader.name} reader saw {one.records} records in {path} "
            f"but produced {rows} rows and {rejected} rejects; please report this"
        )


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
