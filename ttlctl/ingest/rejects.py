"""Bad input: one clear error, or a reject file that accounts for every record."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ttlctl.errors import TtlctlError


class IngestError(TtlctlError):
    """A user-facing input error: one line naming the file and the record."""

    def __init__(self, file: str | Path, record: str | None, reason: str) -> None:
        self.file = str(file)
        self.record = record
        self.reason = reason
        where = self.file if record is None else f"{self.file}: {record}"
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True, slots=True)
class Reject:
    file: str
    record: str | None
    reason: str
    #: how many input records this reject stands for (a whole unreadable file is one)
    records: int = 1
    raw: Any = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "file": self.file,
            "record": self.record,
            "reason": self.reason,
            "records": self.records,
        }
        if self.raw is not None:
            out["raw"] = self.raw
        return out


@dataclass
class RejectSink:
    """Collects rejected records.

    In strict mode the first reject raises :class:`IngestError`; with ``skip_bad``
    each reject is appended to an open JSONL stream (memory stays bounded) and
    counted by reason.
    """

    skip_bad: bool
    stream: IO[str] | None = None
    count: int = 0
    by_reason: Counter[str] = field(default_factory=Counter)
    #: the first reject that is not a whole program's echo of another, as an error reads
    first: str | None = None

    def reject(
        self,
        file: str | Path,
        record: str | None,
        reason: str,
        *,
        records: int = 1,
        raw: Any = None,
    ) -> None:
        if not self.skip_bad:
            raise IngestError(file, record, reason)
        item = Reject(str(file), record, reason, records, _clip(raw))
        if self.first is None and not reason.startswith("rejected with its program"):
            self.first = str(IngestError(file, record, reason))
        self.count += records
        self.by_reason[_reason_key(reason)] += records
        if self.stream is not None:
            self.stream.write(json.dumps(item.to_json(), default=str) + "\n")


def _reason_key(reason: str) -> str:
    """Group reasons for the report: the text before the first colon."""
    return reason.split(":", 1)[0].strip()


def _clip(raw: Any, limit: int = 2000) -> Any:
    if raw is None:
        return None
    if isinstance(raw, (bytes, bytearray)):
        raw = bytes(raw[:limit]).decode("utf-8", "replace")
    if isinstance(raw, str):
        return raw if len(raw) <= limit else raw[:limit] + "…"
    text = json.dumps(raw, default=str)
    return raw if len(text) <= limit else text[:limit] + "…"
