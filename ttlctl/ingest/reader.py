"""What every log-format reader is: its interface, what it returns, and its rows as a frame.

A reader (one module per format in :mod:`ttlctl.ingest.formats`) turns one file
into canonical rows plus the two bookkeeping columns ``_file`` and ``_record``
(where the row came from, for error messages). Records it cannot turn into a row
go to the :class:`~ttlctl.ingest.rejects.RejectSink` with a reason; the common
validation (:mod:`ttlctl.trace.rules`) checks the rows it did produce.

What readers build on lives beside this module: a file's bytes, gzip or not
(:mod:`ttlctl.ingest.rawfile`), its text and JSON (:mod:`ttlctl.ingest.jsontext`), a
record's fields coerced to a row's values (:mod:`ttlctl.ingest.fields`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import polars as pl

from ttlctl.ingest.rejects import RejectSink
from ttlctl.trace.columns import REASON, SOURCE_FILE, SOURCE_RECORD, all_columns


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
