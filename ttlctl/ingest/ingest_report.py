"""What an ingest reports: per file, its format and the records read; in all, the rows
written, the records rejected and why, and what the engine logs told (programs in flight,
reused ids, aborted calls, the engines' facts).

The command line prints it (:mod:`ttlctl.cli.render.trace_view`); it holds plain values
only, so that a reader of it needs none of the ingest's packages.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


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
    #: documentation files in a folder read, not read
    skipped: list[str] = field(default_factory=list)
    #: the command's own outputs in a folder read (an earlier run's), not read
    outputs_skipped: list[str] = field(default_factory=list)
    #: entries of a folder read that are not files (a broken link, a link to a folder, a
    #: pipe), not read: ``path (what it is)``
    others_skipped: list[str] = field(default_factory=list)
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
