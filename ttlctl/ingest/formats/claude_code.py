"""Claude Code sessions captured by the kv-cache-tester ("Weka") proxy, one JSON file each.

Format (github.com/callanjfox/kv-cache-tester ``traces/``): one document
``{"id", "block_size", "requests": [...], ...}``; each request carries ``t``
(seconds from the session start), ``type`` (``"n"`` non-streaming, ``"s"``
streaming, or ``"subagent"``), ``in``, ``out``, ``hash_ids`` (chained blocks of
``block_size`` tokens, 64 by default), ``api_time``, ``ttft``, ``think_time``
(idle time *before* this call), ``stop`` and ``input_types``/``output_types``.
Numbers may also be numeric strings.

A ``"subagent"`` entry is not a call: it holds the sub-agent's own calls in its
own ``requests`` list (nested sub-agents are handled recursively).

Canonical columns, per call:

- ``program_id``: the top-level ``id`` (else the file stem). A sub-agent is its
  own program ``<parent>/sub<k>`` (k = 1, 2, ... in the order the parent lists
  them) with ``parent_program_id`` set to the parent's id.
- ``turn``: position of the call in its program's ``requests`` (sub-agent
  entries are skipped: they are not calls of the parent).
- ``arrival_s``: ``t``, a relative clock (seconds from the session start; the
  pipeline does not rebase it). For a sub-agent's calls: the sub-agent entry's
  ``t`` plus the nested ``t`` (kv-cache-tester's own replayer reads nested ``t``
  as relative to the sub-agent's start), unless the nested times are already on
  the parent's clock (its first call's ``t`` is not earlier than the entry's
  ``t``), in which case they are used as they are.
- ``input_tokens`` / ``output_tokens``: ``in`` / ``out``.
- ``reused_tokens``: number of leading ``hash_ids`` this call shares with the
  previous call of its program, times ``block_size``, capped at ``in``; 0 on
  turn 0; null when either call has no ``hash_ids``.
- ``tool``: ``"subagent"`` when a sub-agent entry comes between this call and
  the program's next call (Claude Code's Task tool); else ``"unknown"`` when
  ``stop == "tool_use"`` (the proxy does not record tool names); else null
  (``end_turn``, ``""``: the pause is a human's). Null on the last call.
- ``tool_s``: null (the tool's own duration is not measured).
- ``gap_s``: the next call's ``think_time``: the idle time between this call's
  end and the next call's start, whatever filled it (tool, sub-agent or human).
  Null on the last call, and where the next call has no ``think_time`` (some
  real records have none).
- ``llm_s``: ``api_time`` (null when absent).
- ``is_last``: left to validation (true on each program's last call).
- ``prefix_hashes`` / ``prefix_block_tokens``: Claude Code sends its tool definitions
  first (the Messages API renders tools, then the system prompt, then the messages),
  the same for every session of one Claude Code set-up: the document's ``tool_tokens``
  (≈ 12.5k) are a prefix other sessions share. Each top-level call gets chained hashes
  of the ``tool_tokens`` // ``block_size`` full blocks (at most ``in`` // ``block_size``)
  that name the tool set by its size (``claude-code/tools/<tool_tokens>/<block>``):
  sessions with the same ``tool_tokens`` share them, others do not. The system prompt
  (``system_tokens``) is not taken as shared: it embeds the session's environment (the
  directory, the date, git status), so equal lengths do not mean equal tokens. The
  trace's own ``hash_ids`` say nothing across sessions (``hash_id_scope: local``: each
  file numbers its blocks from 1) and stay in ``reused_tokens``. Sub-agents run with a
  tool set of their own, which the trace does not size: none. Null without
  ``tool_tokens``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ttlctl.ingest.fields import RecordError, duration, integer, number, tokens
from ttlctl.ingest.jsontext import load_json_object
from ttlctl.ingest.rawfile import logical
from ttlctl.ingest.reader import Parsed, frame_from_rows
from ttlctl.ingest.rejects import RejectSink

DEFAULT_BLOCK_SIZE = 64
SUBAGENT = "subagent"

_REQUESTS_KEY = re.compile(rb'"requests"\s*:\s*\[')
_CALL_KEYS = (b'"hash_ids"', b'"block_size"', b'"think_time"', b'"api_time"')


class ClaudeCodeReader:
    name = "claude-code"
    aliases: Sequence[str] = ("weka",)

    def sniff(self, path: Path, head: bytes) -> bool:
        # The head may cut a multi-MB document: look for the keys as text only.
        if not head.lstrip().startswith(b"{"):
            return False
        if _REQUESTS_KEY.search(head) is None:
            return False
        return any(key in head for key in _CALL_KEYS)

    def read(self, path: Path, sink: RejectSink) -> Parsed:
        doc = load_json_object(path, sink, "claude-code trace")
        if doc is None:
            return Parsed(pl.LazyFrame(), records=1)
        requests = doc.get("requests")
        if not isinstance(requests, list):
            sink.reject(path, None, 'not a claude-code trace: no "requests" list')
            return Parsed(pl.LazyFrame(), records=1)
        try:
            block_size = integer(doc.get("block_size", DEFAULT_BLOCK_SIZE), "block_size")
        except RecordError as exc:
            sink.reject(path, "block_size", str(exc))
            return Parsed(pl.LazyFrame(), records=1)
        if block_size is None or block_size <= 0:
            sink.reject(path, "block_size", f"invalid block_size: {block_size!r}")
            return Parsed(pl.LazyFrame(), records=1)

        program = _program_id(doc.get("id"), path)
        walker = _Walker(path, sink, block_size)
        walker.program(requests, program, parent=None, offset=0.0, where="requests")
        rows = walker.rows
        try:
            tools = integer(doc.get("tool_tokens"), "tool_tokens", required=False)
        except RecordError:
            tools = None  # an optional hint: without it, nothing is known to be shared
        if tools is not None and tools >= block_size:
            _tool_prefix(rows, program, tools, block_size)
        return Parsed(frame_from_rows(rows, path), records=len(rows) + walker.rejected)


def tool_hashes(tool_tokens: int, block_size: int) -> list[int]:
    """Chained hashes of the tool definitions' full blocks, named by their size."""
    out = []
    for i in range(tool_tokens // block_size):
        text = f"claude-code/tools/{tool_tokens}/{block_size}/{i}".encode()
        digest = hashlib.blake2b(text, digest_size=8).digest()
        out.append(int.from_bytes(digest, "little", signed=True))
    return out


def _tool_prefix(rows: list[dict[str, Any]], program: str, tools: int, block_size: int) -> None:
    """The shared tool definitions on each top-level call (module docstring)."""
    hashes = tool_hashes(tools, block_size)
    for row in rows:
        if row["program_id"] != program or "_reason" in row:
            continue
        n = min(len(hashes), int(row.get("input_tokens") or 0) // block_size)
        if n:
            row["prefix_hashes"] = hashes[:n]
            row["prefix_block_tokens"] = block_size


def _program_id(value: Any, path: Path) -> str:
    stem = logical(path).stem
    if isinstance(value, bool) or value is None:
        return stem
    if isinstance(value, (str, int, float)):
        text = str(value).strip()
        return text or stem
    return stem


class _Walker:
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
            value = json.loads(value)
        except json.JSONDecodeError:
            raise RecordError(f"invalid hash_ids: {value[:40]!r}") from None
    if not isinstance(value, list):
        raise RecordError(f"invalid hash_ids: a {type(value).__name__}, not a list")
    for item in value:
        if isinstance(item, (dict, list, bool)):
            raise RecordError(f"invalid hash_ids: element {item!r}")
    return value


READER = ClaudeCodeReader()
