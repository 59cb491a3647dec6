"""``ttlctl ingest``: files in native formats -> one canonical trace (Parquet)."""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ttlctl.ingest import lookup, rules
from ttlctl.ingest.limits import env_bytes, streaming, streaming_limit
from ttlctl.ingest.rawfile import GZIP_SUFFIX, head_bytes, is_blank, is_gzip, read_bytes, size
from ttlctl.ingest.reader import GroupReader, Parsed, Reader
from ttlctl.ingest.rejects import IngestError, RejectSink
from ttlctl.ingest.spool import GzipDamage, spooled
from ttlctl.jsonio import replacing
from ttlctl.trace import io as trace_io
from ttlctl.trace.columns import SOURCE_COLUMNS, SOURCE_FILE, SOURCE_RECORD, conform

#: Rows of input checked in memory at once when streaming (override TTLCTL_BUCKET_BYTES).
DEFAULT_BUCKET_BYTES = 256 * 1024**2
#: Rough in-memory size of a row over its compressed Parquet size.
PARQUET_EXPANSION = 6

#: Files in a directory that are documentation, not logs: listed as skipped, never read.
NOT_LOGS = ("license", "licence", "readme", "notice", "copying", "authors")
NOT_LOG_SUFFIXES = (".md", ".rst", ".txt", ".html", ".py", ".sh")

#: A file of nothing but whitespace: the format it is reported as, its reject reason (as
#: every reader names it).
EMPTY_FORMAT = "empty"
EMPTY_FILE = "empty file"

ProgressFn = Callable[[Path, int, int], None]


@dataclass
class FileReport:
    path: str
    format: str
    #: input records seen; None where the reader counts one per row (canonical)
    records: int | None
    #: programs still running when the log was read, ended at their last logged call
    in_flight: int = 0


@dataclass
class IngestReport:
    output: str
    files: list[FileReport] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    records: int = 0
    rows: int = 0
    rejected: int = 0
    rejects_path: str | None = None
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    streamed: bool = False
    #: programs still running when the log was read (engine logs), kept up to their
    #: last logged call; counted here, not rejected
    in_flight: int = 0
    #: programs made from a program id used again after its program ended (engine logs:
    #: ``<id>#2`` …); counted here, not rejected
    reused_ids: int = 0
    #: calls the engine aborted (engine logs), kept as calls with the tokens they produced
    aborted: int = 0
    #: the engines' facts the logs state (engine logs), as kept in the trace's metadata
    engines: list[dict[str, Any]] = field(default_factory=list)

    def formats(self) -> dict[str, int]:
        return dict(Counter(f.format for f in self.files))


def expand(paths: Iterable[Path]) -> tuple[list[Path], list[Path]]:
    """(files to read, documentation files skipped) for the given files and directories;
    a file reached twice (a folder and a file or folder inside it) is read once."""
    files: list[Path] = []
    skipped: list[Path] = []
    seen: set[Path] = set()

    def add(file: Path, to: list[Path]) -> None:
        real = file.resolve()
        if real not in seen:
            seen.add(real)
            to.append(file)

    for path in paths:
        if path.is_dir():
            for child in sorted(p for p in path.rglob("*") if p.is_file()):
                rel_parts = child.relative_to(path).parts
                if any(part.startswith(".") for part in rel_parts):
                    continue
                add(child, skipped if _is_doc(child) else files)
        elif path.exists():
            add(path, files)
        else:
            raise IngestError(path, None, "no such file or directory")
    return files, skipped


def _is_doc(path: Path) -> bool:
    name = path.name.lower().removesuffix(GZIP_SUFFIX)  # README.md.gz is documentation too
    return name.startswith(NOT_LOGS) or name.endswith(NOT_LOG_SUFFIXES)


def rejects_path_for(output: Path) -> Path:
    return output.with_name(output.name + ".rejects.jsonl")


def ingest(
    paths: Iterable[Path],
    output: Path,
    fmt: str = "auto",
    skip_bad: bool = False,
    progress: ProgressFn | None = None,
    allow_empty: bool = False,
) -> IngestReport:
    """Read every file, validate, write the canonical trace to ``output``.

    Without ``skip_bad`` the first bad record raises :class:`IngestError` and
    nothing is written. With it, bad records go to ``<output>.rejects.jsonl``.
    Nothing to write (no calls, or every record rejected) is an :class:`IngestError`
    too, and nothing is written, unless ``allow_empty``; so is an empty file (nothing but
    whitespace), which ``allow_empty`` reads as no calls (format "empty"). The trace and the rejects
    file each appear whole, and only when the run succeeds. Large gzip data is
    decompressed to temporary files next to ``output`` (:mod:`ttlctl.ingest.spool`),
    removed before this returns or raises.
    """
    paths = list(paths)
    fixed = None if fmt == "auto" else lookup.get(fmt)  # a wrong --format before any file
    streaming_limit()  # and a wrong size variable: its own error, not a file's
    env_bytes("TTLCTL_BUCKET_BYTES", DEFAULT_BUCKET_BYTES, least=1)
    files, skipped = expand(paths)
    report = IngestReport(output=str(output), skipped=[str(p) for p in skipped])
    if not files and not allow_empty:  # allowed: an empty trace, as for a file with no calls
        raise IngestError(", ".join(str(p) for p in paths) or ".", None, "no log files to ingest")

    rejects_path = rejects_path_for(output)
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
                sink.reject(path, None, _unrecognised(path))
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
        rows, rejected_rows = _validate_and_write(
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


def _unrecognised(path: Path) -> str:
    """Why no reader took ``path`` (a file with more than whitespace in it): damaged gzip
    data, text that is not UTF-8, or an unknown format."""
    if is_gzip(path):
        try:
            read_bytes(path)
        except GzipDamage as exc:
            return str(exc)
    head = head_bytes(path)
    if not head.startswith(b"PAR1"):
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.end < len(head):  # not a character cut by the end of the head
                return f"byte {exc.start}: not UTF-8 text"
    return "unrecognised format: not a log ttlctl can read (name one with --format)"


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
    rows = one.frame.select(pl.len()).collect().item() if _has_rows(one) else 0
    if one.records != rows + rejected:
        raise RuntimeError(
            f"ttlctl bug: the {reader.name} reader saw {one.records} records in {path} "
            f"but produced {rows} rows and {rejected} rejects; please report this"
        )


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _combine(parsed: list[tuple[Parsed, bool]]) -> pl.LazyFrame:
    """All files' rows in one frame, wall clocks rebased to the earliest absolute arrival."""
    relative = [conform(p.frame) for p, absolute in parsed if not absolute and _has_rows(p)]
    absolute = [conform(p.frame) for p, absolute in parsed if absolute and _has_rows(p)]
    if absolute:
        origin = pl.concat([f.select(pl.col("arrival_s").min()) for f in absolute]).min()
        start = origin.collect().item()
        shift = pl.col("arrival_s") - (start if start is not None else 0.0)
        absolute = [f.with_columns(shift.alias("arrival_s")) for f in absolute]
    frames = relative + absolute
    if not frames:
        return conform(pl.LazyFrame()).clear()
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical")


def _has_rows(one: Parsed) -> bool:
    return bool(one.frame.collect_schema().names())


def _validate_and_write(
    parsed: list[tuple[Parsed, bool]],
    output: Path,
    sink: RejectSink,
    *,
    streaming: bool,
    engines: list[dict[str, Any]],
    refuse_empty: Callable[[int], None] | None = None,
) -> tuple[int, int]:
    """Check all rows, send the bad ones to ``sink``, write the rest: (written, rejected).
    With no row to write, ``refuse_empty`` (if given) is called before anything is."""
    frame = _combine(parsed)
    if streaming:
        return _validate_in_buckets(frame, output, sink, engines, refuse_empty)
    good, bad = rules.split(rules.check(frame.collect()).collect().lazy())
    _report(bad, sink)
    if refuse_empty is not None and not good.select(pl.len()).collect().item():
        refuse_empty(bad.height)
    written = trace_io.write(good.drop(*SOURCE_COLUMNS), output, engines=engines)
    return written, bad.height


def _report(bad: pl.DataFrame, sink: RejectSink) -> None:
    """Strict: raise on the bad row closest to the root cause. Lenient: reject each."""
    if not bad.height:
        return
    head = bad.sort(rules.RANK, maintain_order=True).row(0, named=True)
    if not sink.skip_bad:
        raise IngestError(head[SOURCE_FILE], head[SOURCE_RECORD], head["reason"])
    for row in bad.iter_rows(named=True):
        sink.reject(row[SOURCE_FILE], row[SOURCE_RECORD], row["reason"])


def _validate_in_buckets(
    frame: pl.LazyFrame,
    output: Path,
    sink: RejectSink,
    engines: list[dict[str, Any]],
    refuse_empty: Callable[[int], None] | None = None,
) -> tuple[int, int]:
    """Out-of-core check: hash-partition rows by program, check each bucket in memory.

    Every program lands whole in one bucket, so the program rules hold per bucket;
    memory is bounded by the largest bucket, not by the input.
    """
    budget = env_bytes("TTLCTL_BUCKET_BYTES", DEFAULT_BUCKET_BYTES, least=1)
    with tempfile.TemporaryDirectory(prefix=".ttlctl-ingest-", dir=output.parent) as tmp:
        root = Path(tmp)
        spilled = root / "rows.parquet"
        frame.sink_parquet(spilled, engine="streaming")
        size = spilled.stat().st_size * PARQUET_EXPANSION
        buckets = max(1, -(-size // budget))
        parts = root / "parts"
        parts.mkdir()
        rejected = 0
        source = pl.scan_parquet(spilled)
        key = pl.col("program_id").hash(seed=0) % buckets
        for bucket in range(buckets):
            rows = source.filter(key == bucket).collect(engine="streaming")
            good, bad = rules.split(rules.check(rows).collect().lazy())
            _report(bad, sink)
            rejected += bad.height
            good.drop(*SOURCE_COLUMNS).collect().write_parquet(parts / f"{bucket:05d}.parquet")
        every = pl.scan_parquet(parts / "*.parquet")
        if refuse_empty is not None and not every.select(pl.len()).collect().item():
            refuse_empty(rejected)
        written = trace_io.write(every, output, streaming=True, engines=engines)
    return written, rejected
