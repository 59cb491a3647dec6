"""The engine log: one ``ttlctl.engine-log/1`` JSON line per finished request.

Written when ``TTLCTL_LOG`` names a file (appended to, line-buffered and flushed
after every line) so that ``ttlctl ingest --format engine-log`` can refit the
policy on production traffic. The schema is documented in
:mod:`ttlctl.ingest.formats.engine_log`. An I/O error never reaches the engine:
it is reported once and the writer tries again (reopening the file) on the next
line.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

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
        }


class EngineLog:
    def __init__(self, path: str, warn: Callable[[str], None]) -> None:
        self.path = path
        self._warn = warn
        self._fh: IO[str] | None = None
        self._warned = False
        self.lines = 0
        self.errors = 0

    def write(self, record: Record) -> None:
        try:
            line = json.dumps(record.to_json(), ensure_ascii=False, allow_nan=False)
            if self._fh is None:
                self._fh = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
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

    def _close_quietly(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            with contextlib.suppress(OSError, ValueError):
                fh.close()

    def close(self) -> None:
        self._close_quietly()
