"""The engine log: one ``ttlctl.engine-log/1`` JSON line per finished request.

Written when ``TTLCTL_LOG`` names a file (appended to, line-buffered and flushed
after every line) so that ``ttlctl ingest --format engine-log`` can refit the
policy on production traffic. The engine's facts (:mod:`ttlctl.engine.facts`) go in
as a line of kind ``engine`` when they are first given and when they change, and
again before the next request line when the file was found empty (new, or
truncated by a ``copytruncate`` rotation), so every file says which engine wrote
it. A file renamed or removed (logrotate's default rotation) is noticed before the
next line, as Python's ``logging.handlers.WatchedFileHandler`` notices it (the path
no longer names the open file's device and inode), and the path is opened anew. The
schema is documented in :mod:`ttlctl.ingest.formats.engine_log`. An I/O error never
reaches the engine: it is reported once and the writer tries again (reopening the
file) on the next line.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from ttlctl.engine.facts import EngineFacts

SCHEMA = "ttlctl.engine-log/1"  # ttlctl.ingest.formats.engine_log.SCHEMA (not imported: polars)
ENV_LOG = "TTLCTL_LOG"


@dataclass(frozen=True, slots=True)
class Record:
    request_id: str
    program_id: str | None
    tool: str | None
    is_last: bool | None
    arrival_unix_s: float
    first_token_unix_s: float | None
    finish_unix_s: float
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int | None
    finish_reason: str
    ttl_s: float | None
    #: a pin the policy chose but did not make: ``refused`` (pin cap), ``deferred`` (vLLM
    #: defers freeing the blocks); None otherwise
    pin_skipped: str | None = None

    def to_json(self) -> dict[str, Any]:
        def num(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else float(x)

        return {
            "schema": SCHEMA,
            "request_id": self.request_id,
            "program_id": self.program_id,
            "tool": self.tool,
            "is_last": self.is_last,
            "arrival_unix_s": num(self.arrival_unix_s),
            "first_token_unix_s": num(self.first_token_unix_s),
            "finish_unix_s": num(self.finish_unix_s),
            "prompt_tokens": int(self.prompt_tokens),
            "output_tokens": int(self.output_tokens),
            "cached_tokens": None if self.cached_tokens is None else int(self.cached_tokens),
            "finish_reason": self.finish_reason,
            "ttl_s": num(self.ttl_s),
            "pin_skipped": self.pin_skipped,
        }


class EngineLog:
    def __init__(self, path: str, warn: Callable[[str], None]) -> None:
        self.path = path
        self._warn = warn
        self._fh: IO[str] | None = None
        #: (device, inode) of the open file: the path naming another one (or none) means
        #: the file was rotated away
        self._identity: tuple[int, int] = (-1, -1)
        self._warned = False
        self.lines = 0
        self.errors = 0
        #: the engine's facts as last given (written at the top of an empty file)
        self.facts: EngineFacts | None = None

    def write_facts(self, facts: EngineFacts) -> None:
        """Record the engine's facts: a line now unless they are the ones last written."""
        if facts == self.facts:
            return
        self.facts = facts
        self._append(self._facts_line(), facts=True)

    def write(self, record: Record) -> None:
        self._append(json.dumps(record.to_json(), ensure_ascii=False, allow_nan=False))

    def _facts_line(self) -> str:
        assert self.facts is not None
        doc = self.facts.to_json(SCHEMA, round(time.time(), 3))
        return json.dumps(doc, ensure_ascii=False, allow_nan=False)

    def _append(self, line: str, facts: bool = False) -> None:
        try:
            if self._fh is not None and self._moved():
                self._close_quietly()
            if self._fh is None:
                self._fh = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
                opened = os.fstat(self._fh.fileno())
                self._identity = (opened.st_dev, opened.st_ino)
            if not facts and self.facts is not None and os.fstat(self._fh.fileno()).st_size == 0:
                self._fh.write(self._facts_line() + "\n")  # an empty file: which engine writes
            self._fh.write(line + "\n")
            self._fh.flush()
            self.lines += 1
        except (OSError, ValueError, TypeError) as exc:
            self.errors += 1
            self._close_quietly()
            if not self._warned:
                self._warned = True
                self._warn(
                    f"ttlctl: cannot write the engine log {self.path} ({exc}); serving goes on "
                    "(further errors are not reported)"
                )

    def _moved(self) -> bool:
        """Whether the path no longer names the open file (renamed or removed)."""
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return True
        return (now.st_dev, now.st_ino) != self._identity

    def _close_quietly(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            with contextlib.suppress(OSError, ValueError):
                fh.close()

    def close(self) -> None:
        self._close_quietly()
