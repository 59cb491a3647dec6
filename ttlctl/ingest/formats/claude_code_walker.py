"""A Claude Code session's ``requests`` as rows: its calls, its sub-agents' as programs.

The walk follows the column mapping in :mod:`ttlctl.ingest.formats.claude_code`: per call
its arrival (on the parent's clock for a sub-agent's), tokens, the tokens reused from the
program's previous call (shared leading ``hash_ids`` × ``block_size``), and, but on the last
call, the next call's ``think_time`` as ``gap_s`` and ``"subagent"`` or ``"unknown"`` as
``tool``. A ``"subagent"`` entry becomes the program ``<parent>/sub<k>``, walked in turn.
A broken call record becomes a row with ``_reason``; a broken sub-agent entry is rejected.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ttlctl.ingest.fields import RecordError, duration, number, tokens
from ttlctl.ingest.jsontext import loads
from ttlctl.ingest.rejects import RejectSink

SUBAGENT = "subagent"


class Walker:
    """Turns one program's ``requests`` (and, recursively, its sub-agents') into rows."""

    def __init__(self, path: Path, sink: RejectSink, block_size: int) -> None:
        self.path = path
        self.sink = sink
        self.block_size = block_size
        self.rows: list[dict[str, Any]] = []
        self.rejected = 0

    def program(
        self,
        requests: list[Any],
        program: str,
        parent: str | None,
        offset: float,
        where: str,
    ) -> None:
        calls: list[dict[str, Any]] = []
        #: per call: parsed hash_ids, think_time, and whether a sub-agent follows it
        hashes: list[list[Any] | None] = []
        thinks: list[float | None] = []
        subagent_after: list[bool] = []
        stops: list[str] = []
        subagents: list[tuple[int, dict[str, Any]]] = []

        for index, req in enumerate(requests):
            record = f"{where}[{index}]"
            if isinstance(req, dict) and req.get("type") == SUBAGENT:
                if calls:
                    subagent_after[-1] = True
                subagents.append((index, req))
                continue
            row: dict[str, Any] = {
                "program_id": program,
                "turn": len(calls),
                "parent_program_id": parent,
                "_record": record,
            }
            try:
                hash_ids, think, stop = self._call(req, row, offset)
            except RecordError as exc:
                row["_reason"] = str(exc)
                hash_ids, think, stop = None, None, ""
            calls.append(row)
            hashes.append(hash_ids)
            thinks.append(think)
            stops.append(stop)
            subagent_after.append(False)

        last = len(calls) - 1
        for i, row in enumerate(calls):
            if i == 0:
                row["reused_tokens"] = 0 if "_reason" not in row else None
            else:
                row["reused_tokens"] = self._reused(hashes[i - 1], hashes[i], row)
            if i == last:
                continue
            row["gap_s"] = thinks[i + 1]
            if subagent_after[i]:
                row["tool"] = SUBAGENT
            elif stops[i] == "tool_use":
                row["tool"] = "unknown"
        self.rows.extend(calls)

        for k, (index, entry) in enumerate(subagents, start=1):
            record = f"{where}[{index}]"
            nested = entry.get("requests")
            if not isinstance(nested, list):
                self.sink.reject(self.path, record, 'invalid subagent: no "requests" list')
                self.rejected += 1
                continue
            try:
                start = number(entry.get("t"), "t", required=False)
            except RecordError as exc:
                self.sink.reject(self.path, record, f"invalid subagent: {exc}")
                self.rejected += 1
                continue
            start = 0.0 if start is None else start
            child_offset = offset + start
            first = _first_t(nested)
            if first is not None and start > 0 and first >= start:
                child_offset = offset  # nested times already on the parent's clock
            self.program(
                nested,
                f"{program}/sub{k}",
                parent=program,
                offset=child_offset,
                where=f"{record}.requests",
            )

    def _call(
        self, req: Any, row: dict[str, Any], offset: float
    ) -> tuple[list[Any] | None, float | None, str]:
        """Fill ``row`` from one call record; RecordError for a broken record."""
        if not isinstance(req, dict):
            raise RecordError(f"not a JSON object: {type(req).__name__}")
        t = number(req.get("t"), "t")
        assert t is not None
        row["arrival_s"] = offset + t
        row["input_tokens"] = tokens(req.get("in"), "in")
        row["output_tokens"] = tokens(req.get("out"), "out")
        row["llm_s"] = duration(req.get("api_time"), "api_time")
        think = duration(req.get("think_time"), "think_time")
        hash_ids = _hash_ids(req.get("hash_ids"))
        stop = req.get("stop")
        return hash_ids, think, "" if stop is None else str(stop)

    def _reused(
        self, prev: list[Any] | None, this: list[Any] | None, row: dict[str, Any]
    ) -> int | None:
        if prev is None or this is None or row.get("input_tokens") is None:
            return None
        shared = 0
        for a, b in zip(prev, this, strict=False):
            if a != b:
                break
            shared += 1
        return min(shared * self.block_size, int(row["input_tokens"]))


def _first_t(requests: list[Any]) -> float | None:
    for req in requests:
        if isinstance(req, dict) and req.get("type") != SUBAGENT:
            try:
                return number(req.get("t"), "t", required=False)
            except RecordError:
                return None
    return None


def _hash_ids(value: Any) -> list[Any] | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = loads(value)
        except json.JSONDecodeError:
            raise RecordError(f"invalid hash_ids: {value[:40]!r}") from None
    if not isinstance(value, list):
        raise RecordError(f"invalid hash_ids: a {type(value).__name__}, not a list")
    for item in value:
        if isinstance(item, (dict, list, bool)):
            raise RecordError(f"invalid hash_ids: element {item!r}")
    return value
